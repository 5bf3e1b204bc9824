//! Custom WindowFns, which the runner cannot evaluate itself, are asked of
//! the SDK, as Beam's portable runners do (Python's `GenericMergingWindowFn`):
//!
//! - **merging**: a merging WindowFn other than Sessions merges in the SDK,
//!   through `beam:transform:merge_windows:v1` running the WindowFn of the
//!   pipeline in a bundle of its own;
//! - **the end of a window the runner cannot read**: the runner needs each
//!   window's last timestamp to fire and expire it. It maps the window through
//!   `beam:transform:map_windows:v1` with Beam's own `default_window_mapping_fn`
//!   onto 1 ms fixed windows: the one containing the window's last timestamp,
//!   which the runner reads.
//!
//! This module builds those helper descriptors and writes and reads their
//! data; `actors::window_fns` runs them. Windows travel in their wire form
//! (opaque ones length-prefixed), as in the pipeline's data.
use std::collections::HashMap;

use beam_kafka_proto::fn_execution as fn_pb;
use prost::Message;

use crate::codec::coder::{length_prefixed, Coder};
use crate::codec::coders::{decode_varint, encode_global_windowed_value, encode_nested_bytes};
use crate::codec::timestamp::Millis;
use crate::codec::windowed::{self, Window};
use crate::pb;
use crate::urns;

/// The SDK's pickled WindowFn, as Python's runner API writes it.
pub const PICKLED_WINDOW_FN: &str = "beam:window_fn:pickled_python:v1";
/// A window mapping function as Python's `map_windows` reads it.
pub const PICKLED_WINDOW_MAPPING_FN: &str = "beam:window_mapping_fn:pickled_python:v1";

/// What of a windowing strategy the SDK has to do for the runner.
#[derive(Clone, Debug, PartialEq)]
pub struct SdkWindowFn {
    /// The WindowFn as the pipeline gives it.
    pub window_fn: pb::FunctionSpec,
    /// The environment it runs in.
    pub environment_id: String,
    /// The window coder's id in the pipeline.
    pub window_coder_id: String,
    /// Merging happens in the SDK (a merging WindowFn but Sessions).
    pub merges: bool,
    /// The runner cannot read its windows: their ends come from the SDK.
    pub opaque: bool,
}

impl SdkWindowFn {
    /// What the SDK must do for `ws`, if anything.
    pub fn of(components: &pb::Components, ws: &pb::WindowingStrategy) -> Option<SdkWindowFn> {
        let window_fn = ws.window_fn.clone().unwrap_or_default();
        let merging = ws.merge_status == pb::merge_status::Enum::NeedsMerge as i32;
        let merges = merging && window_fn.urn != crate::urns::SESSIONS;
        let opaque = !Coder::from_components(components, &ws.window_coder_id).is_readable();
        (merges || opaque).then(|| SdkWindowFn {
            window_fn,
            environment_id: ws.environment_id.clone(),
            window_coder_id: ws.window_coder_id.clone(),
            merges,
            opaque,
        })
    }
}

/// Transform ids of a helper descriptor's data source and sink.
pub const HELPER_SOURCE: &str = "window_fn/read";
pub const HELPER_SINK: &str = "window_fn/write";

/// The descriptor running the WindowFn's merge: in, KV<nonce, windows>; out,
/// KV<nonce, KV<windows left alone, [KV<merge result, windows merged>]>>.
pub fn merge_descriptor(components: &pb::Components, sdk: &SdkWindowFn, id: &str, data_url: &str) -> fn_pb::ProcessBundleDescriptor {
    let mut b = Helper::new(components, &sdk.environment_id, &sdk.window_coder_id);
    let windows = b.coder("windows", crate::codec::coder::ITERABLE, &[&b.window.clone()]);
    let input = b.coder("merge-in", crate::codec::coder::KV, &[&b.bytes.clone(), &windows]);
    let merged = b.coder("merged", crate::codec::coder::KV, &[&b.window.clone(), &windows]);
    let all_merged = b.coder("all-merged", crate::codec::coder::ITERABLE, &[&merged]);
    let result = b.coder("result", crate::codec::coder::KV, &[&windows, &all_merged]);
    let output = b.coder("merge-out", crate::codec::coder::KV, &[&b.bytes.clone(), &result]);
    b.build(id, data_url, (urns::MERGE_WINDOWS, sdk.window_fn.encode_to_vec()), &input, &output)
}

/// The descriptor mapping each window onto the 1 ms interval window holding
/// its last timestamp: in, KV<nonce, window>; out, KV<nonce, interval window>.
/// `window_coder_id` is the windows' coder in the pipeline; `environment`
/// the SDK's.
pub fn end_descriptor(
    components: &pb::Components,
    environment: &str,
    window_coder_id: &str,
    id: &str,
    data_url: &str,
) -> fn_pb::ProcessBundleDescriptor {
    let mut b = Helper::new(components, environment, window_coder_id);
    let input = b.coder("end-in", crate::codec::coder::KV, &[&b.bytes.clone(), &b.window.clone()]);
    let interval = b.coder("interval", crate::codec::coder::INTERVAL_WINDOW, &[]);
    let output = b.coder("end-out", crate::codec::coder::KV, &[&b.bytes.clone(), &interval]);
    let mapping = pb::FunctionSpec { urn: PICKLED_WINDOW_MAPPING_FN.into(), payload: crate::codec::pickle::window_end_mapping_fn() };
    b.build(id, data_url, (urns::MAP_WINDOWS, mapping.encode_to_vec()), &input, &output)
}

/// The descriptor mapping main-input windows onto the side input's windows
/// with the side input's own window mapping function (as the SDK does when
/// it reads the side input): in, KV<nonce, main window>; out, KV<nonce,
/// side window>. Windows in their wire form.
pub fn side_mapping_descriptor(
    components: &pb::Components,
    environment: &str,
    mapping: &pb::FunctionSpec,
    (main_window_coder_id, side_window_coder_id): (&str, &str),
    id: &str,
    data_url: &str,
) -> fn_pb::ProcessBundleDescriptor {
    let mut b = Helper::new(components, environment, main_window_coder_id);
    let side = b.wire_window(side_window_coder_id);
    let input = b.coder("map-in", crate::codec::coder::KV, &[&b.bytes.clone(), &b.window.clone()]);
    let output = b.coder("map-out", crate::codec::coder::KV, &[&b.bytes.clone(), &side]);
    b.build(id, data_url, (urns::MAP_WINDOWS, mapping.encode_to_vec()), &input, &output)
}

/// Builds one helper descriptor: data source → the SDK transform → data sink.
struct Helper<'a> {
    environment: &'a str,
    coders: HashMap<String, pb::Coder>,
    bytes: String,
    /// The window coder in its wire form.
    window: String,
}

impl<'a> Helper<'a> {
    fn new(components: &pb::Components, environment: &'a str, window_coder_id: &str) -> Helper<'a> {
        let mut h = Helper { environment, coders: components.coders.clone(), bytes: String::new(), window: String::new() };
        h.window = h.wire_window(window_coder_id);
        h.bytes = h.coder("bytes", urns::CODER_BYTES, &[]);
        h
    }

    /// A window coder in its wire form (length-prefixed if unreadable).
    fn wire_window(&mut self, window_coder_id: &str) -> String {
        let mut scratch = pb::Components { coders: std::mem::take(&mut self.coders), ..Default::default() };
        let id = length_prefixed(&mut scratch, window_coder_id);
        self.coders = scratch.coders;
        id
    }

    fn coder(&mut self, name: &str, urn: &str, parts: &[&String]) -> String {
        let id = format!("window_fn/{name}");
        self.coders.insert(
            id.clone(),
            pb::Coder {
                spec: Some(pb::FunctionSpec { urn: urn.into(), payload: vec![] }),
                component_coder_ids: parts.iter().map(|p| p.to_string()).collect(),
            },
        );
        id
    }

    fn build(
        mut self,
        id: &str,
        data_url: &str,
        (urn, payload): (&str, Vec<u8>),
        input: &str,
        output: &str,
    ) -> fn_pb::ProcessBundleDescriptor {
        let global = self.coder("global-window", urns::CODER_GLOBAL_WINDOW, &[]);
        let wv_in = self.coder("wv-in", urns::CODER_WINDOWED_VALUE, &[&input.to_string(), &global]);
        let wv_out = self.coder("wv-out", urns::CODER_WINDOWED_VALUE, &[&output.to_string(), &global]);
        let windowing = "window_fn/global".to_string();
        let port = |coder_id: String| {
            let endpoint = pb::ApiServiceDescriptor { url: data_url.to_string(), ..Default::default() };
            fn_pb::RemoteGrpcPort { api_service_descriptor: Some(endpoint), coder_id }.encode_to_vec()
        };
        let ends = |name: &str| HashMap::from([("0".to_string(), name.to_string())]);
        let transform = |name: &str, urn: &str, payload: Vec<u8>, inputs, outputs| pb::PTransform {
            unique_name: format!("WindowFn/{name}"),
            spec: Some(pb::FunctionSpec { urn: urn.into(), payload }),
            inputs,
            outputs,
            environment_id: if urn.starts_with("beam:runner:") { String::new() } else { self.environment.to_string() },
            ..Default::default()
        };
        let pcollection = |coder_id: &str| pb::PCollection {
            unique_name: coder_id.to_string(),
            coder_id: coder_id.to_string(),
            is_bounded: pb::is_bounded::Enum::Bounded as i32,
            windowing_strategy_id: windowing.clone(),
            ..Default::default()
        };
        fn_pb::ProcessBundleDescriptor {
            id: id.to_string(),
            transforms: HashMap::from([
                (HELPER_SOURCE.to_string(), transform("Read", urns::DATA_INPUT, port(wv_in), HashMap::new(), ends("in"))),
                ("window_fn/apply".to_string(), transform("Apply", urn, payload, ends("in"), ends("out"))),
                (HELPER_SINK.to_string(), transform("Write", urns::DATA_OUTPUT, port(wv_out), ends("out"), HashMap::new())),
            ]),
            pcollections: HashMap::from([("in".to_string(), pcollection(input)), ("out".to_string(), pcollection(output))]),
            windowing_strategies: HashMap::from([(windowing.clone(), crate::plan::expansion::global_windowing(&global))]),
            coders: self.coders,
            // Never used by these bundles, but a Python harness opens a State
            // stream for every descriptor; without an endpoint it dials ''
            // and a thread of it dies with an error in the harness log.
            state_api_service_descriptor: Some(pb::ApiServiceDescriptor { url: data_url.to_string(), ..Default::default() }),
            ..Default::default()
        }
    }
}

/// One merge request per key: the key's index as its nonce and every window
/// of the key (those it has and those its new elements bring).
pub fn encode_merge_requests<'w>(requests: impl IntoIterator<Item = Vec<&'w Window>>) -> Vec<u8> {
    let mut out = Vec::new();
    for (nonce, windows) in requests.into_iter().enumerate() {
        let mut kv = Vec::new();
        encode_nested_bytes(&(nonce as u64).to_be_bytes(), &mut kv);
        kv.extend_from_slice(&(windows.len() as u32).to_be_bytes());
        for w in windows {
            w.encode(&mut kv);
        }
        encode_global_windowed_value(0, &kv, &mut out);
    }
    out
}

/// One merge the WindowFn made: `originals` become `result`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Merge {
    pub result: Window,
    pub originals: Vec<Window>,
}

/// Reads the merge answers, per request index; `window_coder` is the wire
/// window coder (opaque windows come back with `UNRESOLVED_MAX`).
pub fn decode_merge_results(data: &[u8], window_coder: &Coder) -> Result<HashMap<usize, Vec<Merge>>, String> {
    let mut out: HashMap<usize, Vec<Merge>> = HashMap::new();
    let mut at = 0;
    while at < data.len() {
        let (nonce, v) = read_nonce_value(&data[at..])?;
        let rest = v.rest;
        // First the windows left alone: nothing to do with them.
        let (_, mut used) = read_windows(rest, window_coder)?;
        let count = read_count(&rest[used..])?;
        used += 4;
        for _ in 0..count {
            let n = window_coder.skip(&rest[used..])?;
            let result = Window::decode(&rest[used..used + n], window_coder)?;
            used += n;
            let (originals, n) = read_windows(&rest[used..], window_coder)?;
            used += n;
            out.entry(nonce).or_default().push(Merge { result, originals });
        }
        at += v.consumed_before_rest + used;
    }
    Ok(out)
}

/// Requests about windows (their ends, or the side windows they map to):
/// the window's index as nonce.
pub fn encode_window_requests<'w>(windows: impl IntoIterator<Item = &'w Window>) -> Vec<u8> {
    let mut out = Vec::new();
    for (nonce, w) in windows.into_iter().enumerate() {
        let mut kv = Vec::new();
        encode_nested_bytes(&(nonce as u64).to_be_bytes(), &mut kv);
        w.encode(&mut kv);
        encode_global_windowed_value(0, &kv, &mut out);
    }
    out
}

/// Reads the side windows main windows map to, by request index.
pub fn decode_mapped(data: &[u8], side_window_coder: &Coder) -> Result<HashMap<usize, Window>, String> {
    let mut out = HashMap::new();
    let mut at = 0;
    while at < data.len() {
        let (nonce, r) = read_nonce_value(&data[at..])?;
        let n = side_window_coder.skip(r.rest)?;
        out.insert(nonce, Window::decode(&r.rest[..n], side_window_coder)?);
        at += r.consumed_before_rest + n;
    }
    Ok(out)
}

/// Reads the answers to `encode_window_requests` on an end descriptor: each window's last timestamp
/// by request index (the 1 ms window's, which holds it).
pub fn decode_ends(data: &[u8]) -> Result<HashMap<usize, Millis>, String> {
    let mut out = HashMap::new();
    let mut at = 0;
    while at < data.len() {
        let (nonce, r) = read_nonce_value(&data[at..])?;
        let n = Coder::IntervalWindow.skip(r.rest)?;
        let window = Window::decode(&r.rest[..n], &Coder::IntervalWindow)?;
        out.insert(nonce, window.max_timestamp());
        at += r.consumed_before_rest + n;
    }
    Ok(out)
}

struct Value<'a> {
    /// Bytes of the windowed value before `rest` (header and nonce).
    consumed_before_rest: usize,
    rest: &'a [u8],
}

/// Splits one answer: the windowed value's header, then the nonce.
fn read_nonce_value(buf: &[u8]) -> Result<(usize, Value<'_>), String> {
    let h = windowed::split(buf, &Coder::GlobalWindow)?;
    let body = &buf[h.value_offset..];
    let (len, n) = decode_varint(body).ok_or("truncated nonce")?;
    let nonce = body.get(n..n + len as usize).ok_or("truncated nonce")?;
    let nonce = u64::from_be_bytes(nonce.try_into().map_err(|_| "a nonce of another size than the runner wrote")?) as usize;
    let start = h.value_offset + n + len as usize;
    Ok((nonce, Value { consumed_before_rest: start, rest: &buf[start..] }))
}

fn read_count(buf: &[u8]) -> Result<usize, String> {
    let raw: [u8; 4] = buf.get(..4).ok_or("truncated count")?.try_into().expect("4 bytes");
    usize::try_from(i32::from_be_bytes(raw)).map_err(|_| "an iterable of unknown length (the runner does not read those here)".to_string())
}

/// An iterable of windows; how many bytes it took.
fn read_windows(buf: &[u8], window_coder: &Coder) -> Result<(Vec<Window>, usize), String> {
    let count = read_count(buf)?;
    crate::codec::coder::check_count(window_coder, count as u64, buf.len() - 4)?;
    let (mut windows, mut at) = (Vec::with_capacity(count), 4);
    for _ in 0..count {
        let n = window_coder.skip(&buf[at..])?;
        windows.push(Window::decode(&buf[at..at + n], window_coder)?);
        at += n;
    }
    Ok((windows, at))
}

#[cfg(test)]
#[path = "window_fns_tests.rs"]
mod tests;
