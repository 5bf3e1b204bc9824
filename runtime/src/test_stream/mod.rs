//! TestStream (`beam:transform:teststream:v1`) as a runner primitive: its
//! events read from the payload, and the steps its driver replays.
//!
//! Each event is one step, released only once the pipeline is quiescent
//! after the previous one (Beam's TestStream contract): elements go to their
//! output's topic, a watermark event moves one output's watermark, a
//! processing-time event moves the test clock every task runs on. Every
//! step ends with a watermark report on every partition of every output
//! topic carrying the step's number (its *epoch*) and the clock; tasks pass
//! an epoch on in their own reports once they are idle, so the driver knows
//! the step was fully processed when every terminal task downstream passed
//! it on. After the last event, the outputs' watermarks go to +∞. Several
//! TestStreams take turns, one event a step, on one clock.

pub mod progress;
use prost::Message;

use crate::codec::coder::{length_prefixed, Coder};
use crate::codec::coders::{encode_global_windowed_value, encode_varint};
use crate::codec::timestamp::{Millis, Watermark};
use crate::pb;
use pb::test_stream_payload::event::Event as E;

/// One TestStream transform, read from its payload.
#[derive(Clone, Debug, PartialEq)]
pub struct TestStreamSpec {
    pub transform: String,
    /// Output PCollections, in tag order.
    pub outputs: Vec<String>,
    pub events: Vec<TestEvent>,
}

#[derive(Clone, Debug, PartialEq)]
pub enum TestEvent {
    /// Elements of output `output` (an index into `outputs`): windowed
    /// values (global window, their timestamp) of the payload's coder as
    /// the runner writes it (unreadable parts length-prefixed).
    Elements {
        output: usize,
        elements: Vec<Vec<u8>>,
    },
    Watermark {
        output: usize,
        watermark: Watermark,
    },
    ProcessingTime {
        advance: i64,
    },
}

/// The elements' coding: the SDK encodes each with the payload's coder in
/// the outer context; the wire coding is nested, with parts the runner
/// cannot read length-prefixed.
fn nested_from_outer(wire: &Coder, outer: &[u8]) -> Result<Vec<u8>, String> {
    let mut out = Vec::with_capacity(outer.len() + 4);
    match wire {
        // An unreadable element, or one the SDK length-prefixed itself.
        Coder::LengthPrefix(_) | Coder::Bytes | Coder::StringUtf8 => {
            encode_varint(outer.len() as u64, &mut out);
            out.extend_from_slice(outer);
        }
        Coder::Varint | Coder::Bool | Coder::Double | Coder::Iterable(_) => out.extend_from_slice(outer),
        Coder::Kv(k, v) => {
            if matches!(**k, Coder::LengthPrefix(_)) {
                return Err("TestStream elements of a KV coder whose key coder the runner cannot read are not supported".into());
            }
            let n = k.skip(outer)?;
            out.extend_from_slice(&outer[..n]);
            out.extend(nested_from_outer(v, &outer[n..])?);
        }
        Coder::Nullable(inner) => match outer.split_first() {
            Some((&0, _)) => out.push(0),
            Some((&1, rest)) => {
                out.push(1);
                out.extend(nested_from_outer(inner, rest)?);
            }
            _ => return Err("a malformed nullable TestStream element".into()),
        },
        other => return Err(format!("TestStream elements coded with {other:?} are not supported")),
    }
    Ok(out)
}

/// Go's custom coders: its SDK writes their values length-prefixed.
const GO_CUSTOM_CODER: &str = "beam:go:coder:custom:v1";

/// A nested element as the runner's wire form has it: length-prefixed once
/// more where the runner prefixes a coder the SDK does not (Go's schema
/// rows); Go's custom coders come prefixed already.
fn nested_as_wire(wire: &Coder, runner_prefixed: bool, nested: &[u8]) -> Vec<u8> {
    if !runner_prefixed || !matches!(wire, Coder::LengthPrefix(_)) {
        return nested.to_vec();
    }
    let mut out = Vec::with_capacity(nested.len() + 4);
    encode_varint(nested.len() as u64, &mut out);
    out.extend_from_slice(nested);
    out
}

/// Whether Go's SDK wrote the TestStream: it encodes elements nested (Go
/// has no outer context; bytes, strings and its custom coders come
/// length-prefixed), as the runner's wire form has them; Python's and
/// Java's encode in the outer context.
fn written_nested(t: &pb::PTransform, components: &pb::Components) -> bool {
    use crate::plan::sdk_version::sdk_of;
    match components.environments.get(&t.environment_id) {
        Some(env) => sdk_of(env).as_deref() == Some("Go"),
        None => {
            let envs = &components.environments;
            !envs.is_empty() && envs.values().all(|e| sdk_of(e).as_deref() == Some("Go"))
        }
    }
}

/// The output local name an event tag names ("None" or "" for the one
/// untagged output).
fn output_index(outputs: &[(String, String)], tag: &str) -> Result<usize, String> {
    let tag = if tag.is_empty() { "None" } else { tag };
    outputs
        .iter()
        .position(|(local, _)| local == tag)
        .or_else(|| (outputs.len() == 1).then_some(0))
        .ok_or_else(|| format!("a TestStream event names output '{tag}', which the transform does not have"))
}

/// The coder of a TestStream's elements, as its payload names it.
pub fn payload_coder(t: &pb::PTransform) -> Result<String, String> {
    let payload = t.spec.as_ref().map(|s| s.payload.as_slice()).unwrap_or_default();
    let payload =
        pb::TestStreamPayload::decode(payload).map_err(|e| format!("TestStream '{}': a malformed payload: {e}", t.unique_name))?;
    Ok(payload.coder_id)
}

/// The coding of a TestStream's elements on its topic: its payload coder,
/// with parts the runner cannot read length-prefixed (the recoding stage
/// reads them with the same coder).
pub fn element_wire_coder(components: &pb::Components, coder_id: &str) -> Result<Coder, String> {
    if !components.coders.contains_key(coder_id) {
        return Err(format!("the TestStream's coder '{coder_id}' is missing"));
    }
    let mut scratch = pb::Components { coders: components.coders.clone(), ..Default::default() };
    let id = length_prefixed(&mut scratch, coder_id);
    Ok(Coder::from_components(&scratch, &id))
}

impl TestStreamSpec {
    pub fn read(id: &str, t: &pb::PTransform, components: &pb::Components) -> Result<TestStreamSpec, String> {
        let name = if t.unique_name.is_empty() { id } else { &t.unique_name };
        let payload = t.spec.as_ref().map(|s| s.payload.as_slice()).unwrap_or_default();
        let payload = pb::TestStreamPayload::decode(payload).map_err(|e| format!("TestStream '{name}': a malformed payload: {e}"))?;
        if payload.endpoint.as_ref().is_some_and(|e| !e.url.is_empty()) {
            return Err(format!(
                "TestStream '{name}' reads its events from a service (interactive Beam), which this runner does not support"
            ));
        }
        let mut outputs: Vec<(String, String)> = t.outputs.iter().map(|(k, v)| (k.clone(), v.clone())).collect();
        outputs.sort();
        if outputs.is_empty() {
            return Err(format!("TestStream '{name}' has no output"));
        }
        let wire = element_wire_coder(components, &payload.coder_id).map_err(|e| format!("TestStream '{name}': {e}"))?;
        let nested = written_nested(t, components);
        // The runner wrapped the whole element in a length prefix (a coder
        // it cannot read that the SDK did not prefix itself).
        let runner_prefixed = matches!(wire, Coder::LengthPrefix(_))
            && components
                .coders
                .get(&payload.coder_id)
                .and_then(|c| c.spec.as_ref())
                .is_none_or(|s| s.urn != crate::urns::CODER_LENGTH_PREFIX && s.urn != GO_CUSTOM_CODER);
        let mut events = Vec::with_capacity(payload.events.len());
        for e in payload.events {
            events.push(match e.event {
                Some(E::ElementEvent(add)) => {
                    let output = output_index(&outputs, &add.tag)?;
                    let mut elements = Vec::with_capacity(add.elements.len());
                    for el in &add.elements {
                        let value = if nested {
                            nested_as_wire(&wire, runner_prefixed, &el.encoded_element)
                        } else {
                            nested_from_outer(&wire, &el.encoded_element).map_err(|e| format!("TestStream '{name}': {e}"))?
                        };
                        let mut windowed = Vec::with_capacity(value.len() + 16);
                        encode_global_windowed_value(el.timestamp, &value, &mut windowed);
                        elements.push(windowed);
                    }
                    TestEvent::Elements { output, elements }
                }
                Some(E::WatermarkEvent(w)) => {
                    TestEvent::Watermark { output: output_index(&outputs, &w.tag)?, watermark: Watermark::from_millis(w.new_watermark) }
                }
                Some(E::ProcessingTimeEvent(p)) => TestEvent::ProcessingTime { advance: p.advance_duration.max(0) },
                None => return Err(format!("TestStream '{name}' has an empty event")),
            });
        }
        Ok(TestStreamSpec { transform: id.to_string(), outputs: outputs.into_iter().map(|(_, pc)| pc).collect(), events })
    }
}

/// What the driver writes for one step: elements to outputs, then a
/// report on every output of every TestStream (its watermark, the step's
/// epoch and the clock).
#[derive(Clone, Debug, PartialEq)]
pub struct Step {
    pub epoch: u64,
    /// (TestStream, output, elements).
    pub elements: Vec<(usize, usize, Vec<Vec<u8>>)>,
    /// Per TestStream, per output.
    pub watermarks: Vec<Vec<Watermark>>,
    pub clock: Millis,
}

/// Replays the pipeline's TestStreams as steps: one event a step, taking
/// the streams in turn (each in its own order; Beam leaves the order across
/// streams open), all on one test clock; then every output goes to +∞.
/// Pure, so a restart could replay it to the last epoch written.
#[derive(Clone, Debug)]
pub struct Driver {
    events: Vec<Vec<TestEvent>>,
    next: Vec<usize>,
    watermarks: Vec<Vec<Watermark>>,
    clock: Millis,
    /// Steps taken (the epoch of the last one).
    taken: u64,
    ended: bool,
}

impl Driver {
    /// A driver whose test clock starts at `clock` (the wall clock when the
    /// job first ran).
    pub fn new(specs: &[TestStreamSpec], clock: Millis) -> Driver {
        Driver {
            events: specs.iter().map(|s| s.events.clone()).collect(),
            next: vec![0; specs.len()],
            watermarks: specs.iter().map(|s| vec![Watermark::NegInf; s.outputs.len()]).collect(),
            clock,
            taken: 0,
            ended: false,
        }
    }

    /// The next step, or None once the final one (every output to +∞) was
    /// taken.
    pub fn next_step(&mut self) -> Option<Step> {
        if self.ended {
            return None;
        }
        let streams = self.events.len();
        // The stream whose turn it is: after the last one that moved.
        let turn = (0..streams).map(|i| (self.taken as usize + i) % streams.max(1)).find(|&s| self.next[s] < self.events[s].len());
        let mut elements = Vec::new();
        match turn {
            Some(s) => {
                match &self.events[s][self.next[s]] {
                    TestEvent::Elements { output, elements: e } => elements.push((s, *output, e.clone())),
                    TestEvent::Watermark { output, watermark } => {
                        let w = &mut self.watermarks[s][*output];
                        *w = (*w).max(*watermark);
                    }
                    TestEvent::ProcessingTime { advance } => self.clock = self.clock.saturating_add(*advance),
                }
                self.next[s] += 1;
            }
            None => {
                self.watermarks.iter_mut().flatten().for_each(|w| *w = Watermark::PosInf);
                self.ended = true;
            }
        }
        self.taken += 1;
        Some(Step { epoch: self.taken, elements, watermarks: self.watermarks.clone(), clock: self.clock })
    }
}

#[cfg(test)]
mod tests;
