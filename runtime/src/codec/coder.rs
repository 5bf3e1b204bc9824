//! The runner's view of Beam coders: enough to find where one encoded value
//! ends (nested context) so it can split element streams and pick out keys.
//! Coders it cannot read are wrapped in length prefixes in the descriptors it
//! sends to the SDK (see [`length_prefixed`]), so every wire coder is readable.
use crate::codec::coders::decode_varint;
use crate::pb;
use crate::urns;

pub mod windowed_header;

/// Coders nested deeper than this are refused (`crate::plan::structure`
/// checks every submitted coder against it first).
pub const MAX_CODER_NESTING: usize = 64;

#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Coder {
    Bytes,
    StringUtf8,
    Varint,
    Bool,
    Double,
    Kv(Box<Coder>, Box<Coder>),
    Iterable(Box<Coder>),
    LengthPrefix(Box<Coder>),
    Nullable(Box<Coder>),
    GlobalWindow,
    IntervalWindow,
    WindowedValue(Box<Coder>, Box<Coder>),
    /// A coder the runner cannot read (e.g. pickled Python).
    Opaque(String),
}

pub const KV: &str = "beam:coder:kv:v1";
pub const ITERABLE: &str = "beam:coder:iterable:v1";
pub const STRING_UTF8: &str = "beam:coder:string_utf8:v1";
pub const VARINT: &str = "beam:coder:varint:v1";
pub const BOOL: &str = "beam:coder:bool:v1";
pub const DOUBLE: &str = "beam:coder:double:v1";
pub const NULLABLE: &str = "beam:coder:nullable:v1";
pub const INTERVAL_WINDOW: &str = "beam:coder:interval_window:v1";

/// Ends the ids of coders the runner derives (length-prefixed versions);
/// Prepare refuses client coders whose ids contain it, so a client cannot
/// plant a coder the runner would take for its own.
pub const RUNNER_CODER_SUFFIX: &str = "/beam-kafka-lp";

/// The most coders one coder tree may hold, counting shared parts once per
/// use: far beyond any real element type.
const MAX_CODER_PARTS: usize = 10_000;

impl Coder {
    /// Reads coder `id` from the pipeline's components.
    pub fn from_components(components: &pb::Components, id: &str) -> Coder {
        Coder::read(components, id, 0, &mut MAX_CODER_PARTS.clone())
    }

    /// `depth` and `budget` (coders left to read) bound the work should a
    /// coder contain itself, or share parts many times over (Prepare
    /// refuses such pipelines; this keeps every other caller safe too).
    fn read(components: &pb::Components, id: &str, depth: usize, budget: &mut usize) -> Coder {
        if depth > MAX_CODER_NESTING || *budget == 0 {
            return Coder::Opaque(format!("coder {id} nested too deeply"));
        }
        *budget -= 1;
        let Some(c) = components.coders.get(id) else { return Coder::Opaque(format!("missing coder {id}")) };
        let urn = c.spec.as_ref().map(|s| s.urn.as_str()).unwrap_or("");
        let mut comp = |i: usize| -> Box<Coder> {
            Box::new(
                c.component_coder_ids
                    .get(i)
                    .map_or(Coder::Opaque("missing component".into()), |cid| Coder::read(components, cid, depth + 1, budget)),
            )
        };
        match (urn, c.component_coder_ids.len()) {
            (urns::CODER_BYTES, _) => Coder::Bytes,
            (STRING_UTF8, _) => Coder::StringUtf8,
            (VARINT, _) => Coder::Varint,
            (BOOL, _) => Coder::Bool,
            (DOUBLE, _) => Coder::Double,
            (KV, 2) => Coder::Kv(comp(0), comp(1)),
            (ITERABLE, 1) => Coder::Iterable(comp(0)),
            (urns::CODER_LENGTH_PREFIX, 1) => Coder::LengthPrefix(comp(0)),
            (NULLABLE, 1) => Coder::Nullable(comp(0)),
            (urns::CODER_GLOBAL_WINDOW, _) => Coder::GlobalWindow,
            (INTERVAL_WINDOW, _) => Coder::IntervalWindow,
            (urns::CODER_WINDOWED_VALUE, 2) => Coder::WindowedValue(comp(0), comp(1)),
            (other, _) => Coder::Opaque(other.to_string()),
        }
    }

    /// Whether the runner can find the end of a value of this coder.
    pub fn is_readable(&self) -> bool {
        match self {
            Coder::Opaque(_) => false,
            Coder::Kv(a, b) | Coder::WindowedValue(a, b) => a.is_readable() && b.is_readable(),
            Coder::Iterable(c) | Coder::Nullable(c) => c.is_readable(),
            _ => true,
        }
    }

    /// The fewest bytes a value of this coder takes.
    pub fn min_bytes(&self) -> usize {
        match self {
            Coder::GlobalWindow | Coder::Opaque(_) => 0,
            Coder::Bytes | Coder::StringUtf8 | Coder::LengthPrefix(_) | Coder::Varint | Coder::Bool | Coder::Nullable(_) => 1,
            Coder::Double => 8,
            Coder::IntervalWindow => 9,
            Coder::Iterable(_) => 4,
            Coder::Kv(a, b) => a.min_bytes() + b.min_bytes(),
            // Timestamp, window count, pane.
            Coder::WindowedValue(v, _) => 13 + v.min_bytes(),
        }
    }

    /// Length of the nested-context value at the start of `buf`.
    pub fn skip(&self, buf: &[u8]) -> Result<usize, String> {
        let need = |n: usize| if buf.len() >= n { Ok(n) } else { Err(truncated()) };
        match self {
            Coder::Bytes | Coder::StringUtf8 | Coder::LengthPrefix(_) => {
                let (len, n) = decode_varint(buf).ok_or_else(truncated)?;
                need(usize::try_from(len).ok().and_then(|l| l.checked_add(n)).ok_or_else(truncated)?)
            }
            Coder::Varint => decode_varint(buf).map(|(_, n)| n).ok_or_else(truncated),
            Coder::Bool => need(1),
            Coder::Double => need(8),
            Coder::GlobalWindow => Ok(0),
            Coder::IntervalWindow => {
                need(8)?;
                let (_, n) = decode_varint(&buf[8..]).ok_or_else(truncated)?;
                Ok(8 + n)
            }
            Coder::Kv(a, b) => {
                let n = a.skip(buf)?;
                Ok(n + b.skip(&buf[n..])?)
            }
            Coder::Nullable(c) => match buf.first() {
                Some(0) => Ok(1),
                Some(1) => Ok(1 + c.skip(&buf[1..])?),
                Some(b) => Err(format!("bad nullable marker {b}")),
                None => Err(truncated()),
            },
            Coder::Iterable(c) => skip_iterable(c, buf),
            Coder::WindowedValue(value, window) => {
                let header = windowed_header::split(buf, window)?;
                Ok(header.value_offset + value.skip(&buf[header.value_offset..])?)
            }
            Coder::Opaque(urn) => Err(format!("the runner cannot read values of coder {urn}")),
        }
    }
}

fn truncated() -> String {
    "truncated value".to_string()
}

fn skip_iterable(c: &Coder, buf: &[u8]) -> Result<usize, String> {
    if buf.len() < 4 {
        return Err(truncated());
    }
    let count = i32::from_be_bytes(buf[..4].try_into().expect("4 bytes"));
    let mut at = 4;
    if count >= 0 {
        check_count(c, count as u64, buf.len() - at)?;
        for _ in 0..count {
            at += c.skip(&buf[at..])?;
        }
        return Ok(at);
    }
    // Unknown length: blocks of (varint count, elements), ended by a 0 count.
    loop {
        let (n, len) = decode_varint(&buf[at..]).ok_or_else(truncated)?;
        at += len;
        if n == 0 {
            return Ok(at);
        }
        check_count(c, n, buf.len() - at)?;
        for _ in 0..n {
            at += c.skip(&buf[at..])?;
        }
    }
}

/// A count of values that cannot fit in the bytes left is refused before
/// any of them is read: a claimed 2^31 values of a coder that takes no
/// bytes (the global window) would otherwise take minutes of looping.
pub(crate) fn check_count(c: &Coder, count: u64, remaining: usize) -> Result<(), String> {
    if count <= 1 {
        // Nothing to pre-allocate (nearly every value: one window); a value
        // too short fails when it is read.
        return Ok(());
    }
    let fits = match c.min_bytes() {
        // Values that take no bytes (the global window): a value is in it
        // once at most, else each copy of a value would cost nothing to claim.
        0 => count <= 1,
        w => count.checked_mul(w as u64).is_some_and(|need| need <= remaining as u64),
    };
    if fits {
        Ok(())
    } else {
        Err(format!("a value claims {count} elements in {remaining} byte(s)"))
    }
}

/// Returns the id of a coder like `id` in which every part the runner cannot
/// read is wrapped in a length prefix, adding coders to `components` as needed.
pub fn length_prefixed(components: &mut pb::Components, id: &str) -> String {
    length_prefixed_at(components, id, 0, &mut MAX_CODER_PARTS.clone())
}

fn length_prefixed_at(components: &mut pb::Components, id: &str, depth: usize, budget: &mut usize) -> String {
    let Some(c) = components.coders.get(id).cloned() else { return id.to_string() };
    if depth > MAX_CODER_NESTING || *budget == 0 {
        return id.to_string();
    }
    *budget -= 1;
    let urn = c.spec.as_ref().map(|s| s.urn.clone()).unwrap_or_default();
    if Coder::from_components(components, id).is_readable() {
        return id.to_string();
    }
    // Coders the runner reads the structure of, with their part counts; one
    // with another count is unreadable as a whole.
    let structural = [(KV, 2), (ITERABLE, 1), (NULLABLE, 1), (urns::CODER_WINDOWED_VALUE, 2)];
    let new_id = format!("{id}{RUNNER_CODER_SUFFIX}");
    if components.coders.contains_key(&new_id) {
        return new_id;
    }
    let new = if structural.contains(&(urn.as_str(), c.component_coder_ids.len())) {
        let parts = c.component_coder_ids.iter().map(|cid| length_prefixed_at(components, cid, depth + 1, budget)).collect();
        pb::Coder { spec: c.spec.clone(), component_coder_ids: parts }
    } else {
        pb::Coder {
            spec: Some(pb::FunctionSpec { urn: urns::CODER_LENGTH_PREFIX.into(), payload: vec![] }),
            component_coder_ids: vec![id.to_string()],
        }
    };
    components.coders.insert(new_id.clone(), new);
    new_id
}

/// The element and window coders of `pcollection` as they travel between the
/// runner and the SDK: unreadable parts length-prefixed (matching what
/// [`crate::plan::descriptor::build`] tells the SDK).
pub fn wire_coders(components: &pb::Components, pcollection: &str) -> Result<(Coder, Coder), String> {
    let pc = components.pcollections.get(pcollection).ok_or_else(|| format!("missing PCollection {pcollection}"))?;
    let ws = components
        .windowing_strategies
        .get(&pc.windowing_strategy_id)
        .ok_or_else(|| format!("missing windowing strategy of {pcollection}"))?;
    let mut scratch = pb::Components { coders: components.coders.clone(), ..Default::default() };
    let element = length_prefixed(&mut scratch, &pc.coder_id);
    // Windows of custom WindowFns travel length-prefixed too.
    let window = length_prefixed(&mut scratch, &ws.window_coder_id);
    Ok((Coder::from_components(&scratch, &element), Coder::from_components(&scratch, &window)))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::codec::coders::{encode_nested_bytes, encode_varint};

    fn components(coders: &[(&str, &str, &[&str])]) -> pb::Components {
        let mut c = pb::Components::default();
        for (id, urn, parts) in coders {
            c.coders.insert(
                id.to_string(),
                pb::Coder {
                    spec: Some(pb::FunctionSpec { urn: urn.to_string(), payload: vec![] }),
                    component_coder_ids: parts.iter().map(|p| p.to_string()).collect(),
                },
            );
        }
        c
    }

    #[test]
    fn known_coders_are_skipped_exactly() {
        let mut buf = Vec::new();
        encode_nested_bytes(b"key", &mut buf); // string
        encode_varint(300, &mut buf); // varint
        buf.extend_from_slice(b"rest");
        let kv = Coder::Kv(Box::new(Coder::StringUtf8), Box::new(Coder::Varint));
        assert_eq!(kv.skip(&buf), Ok(4 + 2));
        let mut it = 2i32.to_be_bytes().to_vec();
        encode_varint(1, &mut it);
        encode_varint(2, &mut it);
        assert_eq!(Coder::Iterable(Box::new(Coder::Varint)).skip(&it), Ok(6));
        assert!(Coder::Varint.skip(&[0x80]).is_err());
        assert!(Coder::Opaque("x".into()).skip(&buf).is_err());
    }

    #[test]
    fn unreadable_parts_get_length_prefixes() {
        let mut c =
            components(&[("pickle", "beam:coder:pickled_python:v1", &[]), ("str", STRING_UTF8, &[]), ("kv", KV, &["pickle", "str"])]);
        assert!(!Coder::from_components(&c, "kv").is_readable());
        let id = length_prefixed(&mut c, "kv");
        assert_eq!(id, "kv/beam-kafka-lp");
        let coder = Coder::from_components(&c, &id);
        assert_eq!(
            coder,
            Coder::Kv(
                Box::new(Coder::LengthPrefix(Box::new(Coder::Opaque("beam:coder:pickled_python:v1".into())))),
                Box::new(Coder::StringUtf8)
            )
        );
        assert!(coder.is_readable());
        // Readable coders are used as they are.
        assert_eq!(length_prefixed(&mut c, "str"), "str");
    }

    #[test]
    fn a_structural_coder_with_the_wrong_part_count_is_prefixed_whole() {
        // Found by the coder fuzz target: a KV of three parts stayed unreadable.
        let mut c = components(&[("str", STRING_UTF8, &[]), ("kv3", KV, &["str", "str", "str"])]);
        let id = length_prefixed(&mut c, "kv3");
        let coder = Coder::from_components(&c, &id);
        assert!(coder.is_readable(), "{coder:?}");
        assert_eq!(coder, Coder::LengthPrefix(Box::new(Coder::Opaque(KV.into()))));
    }

    #[test]
    fn counts_that_cannot_fit_are_refused_before_looping() {
        let mut buf = i32::MAX.to_be_bytes().to_vec();
        buf.push(0);
        assert!(Coder::Iterable(Box::new(Coder::GlobalWindow)).skip(&buf).unwrap_err().contains("claims"));
        assert!(Coder::Iterable(Box::new(Coder::Varint)).skip(&buf).unwrap_err().contains("claims"));
        let mut huge = Vec::new();
        encode_varint(u64::MAX, &mut huge);
        assert!(Coder::Bytes.skip(&huge).is_err());
    }

    #[test]
    fn a_coder_containing_itself_twice_is_read_in_bounded_work() {
        // Found by the coder fuzz target: kv(loop, loop) unfolded 2^64 times.
        let mut c = components(&[("loop", KV, &["loop", "loop"])]);
        assert!(!Coder::from_components(&c, "loop").is_readable());
        let _ = length_prefixed(&mut c, "loop");
    }
}
