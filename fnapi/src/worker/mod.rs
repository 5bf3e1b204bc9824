//! A connected SDK harness and the bundles it runs.
//!
//! A bundle is finished when its `ProcessBundleResponse` and the `is_last` of
//! every output stream have arrived.
use std::collections::{HashMap, HashSet};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use beam_kafka_proto::fn_execution as fn_pb;
use beam_kafka_proto::pipeline::MonitoringInfo;
use dashmap::DashMap;
use tokio::sync::{mpsc, oneshot, watch};
use tonic::Status;

use crate::state::StateHandler;

mod split_bundle;

/// Largest data chunk sent in one `Elements` message.
const CHUNK_BYTES: usize = 4 << 20;
/// How long a bundle waits for the harness to open its data stream.
const DATA_CONNECT_TIMEOUT: Duration = Duration::from_secs(60);

pub(crate) type Outbound<T> = mpsc::UnboundedSender<Result<T, Status>>;

/// The harness's data stream, as bundles wait for it.
#[derive(Clone)]
pub(crate) enum DataStream {
    NotYetOpen,
    Open(Outbound<fn_pb::Elements>),
    Closed,
}

pub(crate) enum DataEvent {
    Data { transform_id: String, data: Vec<u8>, is_last: bool },
    Timers { transform_id: String, family: String, timers: Vec<u8>, is_last: bool },
}

/// A ParDo's timer family, as a bundle's timer stream.
pub type TimerFamily = (String, String);

/// One input of a bundle: encoded elements for a data source transform.
#[derive(Clone, Debug)]
pub struct BundleInput {
    pub transform_id: String,
    /// Encoded elements, one after another.
    pub data: Vec<u8>,
    /// Where each element ends in `data`: a data message never splits one
    /// (the Python SDK decodes each message on its own).
    pub ends: Vec<usize>,
}

/// `data` in pieces of at most `max` bytes that end on element boundaries
/// (`ends`); an element longer than `max` is a piece of its own. Without
/// boundaries the data is one piece.
pub fn element_chunks<'a>(data: &'a [u8], ends: &[usize], max: usize) -> Vec<&'a [u8]> {
    if ends.is_empty() {
        return if data.is_empty() { Vec::new() } else { vec![data] };
    }
    let mut out = Vec::new();
    let (mut start, mut last) = (0, 0);
    for &end in ends {
        if end - start > max && last > start {
            out.push(&data[start..last]);
            start = last;
        }
        last = end;
    }
    if last > start {
        out.push(&data[start..last]);
    }
    out
}

#[derive(Debug, Default)]
pub struct BundleResult {
    /// Encoded elements per data sink transform.
    pub outputs: HashMap<String, Vec<u8>>,
    /// Timers the bundle set or cleared, encoded, per timer family.
    pub timers: HashMap<TimerFamily, Vec<u8>>,
    pub monitoring_infos: Vec<MonitoringInfo>,
    /// Work the bundle left of splittable DoFn restrictions (checkpoints).
    pub residuals: Vec<crate::split::Residual>,
    /// The bundle registered finalization callbacks: send `FinalizeBundle`
    /// once its outputs are committed.
    pub requires_finalization: bool,
}

/// Outputs handed over while the bundle runs: whenever what a sink of
/// `transforms` collected reaches `min_bytes`, it goes to `tx` (in arrival
/// order, possibly ending mid-element) and is not in the result. If `tx`
/// is closed, the bytes stay in the result.
pub struct EarlyOutputs {
    pub transforms: HashSet<String>,
    pub min_bytes: usize,
    pub tx: mpsc::UnboundedSender<(String, Vec<u8>)>,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub enum BundleError {
    /// User code failed; the text is the SDK's error, traceback included.
    User(String),
    /// The harness went away or broke the protocol.
    Worker(String),
}

impl std::fmt::Display for BundleError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            BundleError::User(m) => write!(f, "{m}"),
            BundleError::Worker(m) => write!(f, "SDK harness failure: {m}"),
        }
    }
}

pub struct SdkWorker {
    pub id: String,
    /// The id without its secret part: for logs and messages.
    pub name: String,
    /// A state stream is open (one per harness; another is refused).
    pub(crate) state_connected: std::sync::atomic::AtomicBool,
    /// Dropped on disconnect, which ends the harness's control stream cleanly.
    control: Mutex<Option<Outbound<fn_pb::InstructionRequest>>>,
    pub(crate) pending: DashMap<String, oneshot::Sender<fn_pb::InstructionResponse>>,
    data_out: watch::Sender<DataStream>,
    routes: DashMap<String, mpsc::UnboundedSender<DataEvent>>,
    descriptors: DashMap<String, fn_pb::ProcessBundleDescriptor>,
    next_instruction: AtomicU64,
    closed: Mutex<Option<String>>,
    /// Who answers the state requests of each running bundle.
    state_handlers: DashMap<String, Arc<dyn StateHandler>>,
}

impl SdkWorker {
    pub(crate) fn new(id: String, control: Outbound<fn_pb::InstructionRequest>) -> SdkWorker {
        SdkWorker {
            name: crate::public_name(&id).to_string(),
            id,
            state_connected: false.into(),
            control: Mutex::new(Some(control)),
            pending: DashMap::new(),
            data_out: watch::channel(DataStream::NotYetOpen).0,
            routes: DashMap::new(),
            descriptors: DashMap::new(),
            next_instruction: AtomicU64::new(1),
            closed: Mutex::new(None),
            state_handlers: DashMap::new(),
        }
    }

    /// A fresh instruction id, e.g. for a bundle to run (`kind` "bundle").
    pub fn next_instruction_id(&self, kind: &str) -> String {
        format!("{kind}-{}", self.next_instruction.fetch_add(1, Ordering::Relaxed))
    }

    /// Sends an instruction on the control stream; whether it was sent.
    pub(crate) fn send_instruction(&self, request: fn_pb::InstructionRequest) -> bool {
        match self.control.lock().expect("lock").as_ref() {
            Some(control) => control.send(Ok(request)).is_ok(),
            None => false,
        }
    }

    pub fn register_descriptor(&self, d: fn_pb::ProcessBundleDescriptor) {
        self.descriptors.insert(d.id.clone(), d);
    }

    pub(crate) fn state_handler(&self, instruction_id: &str) -> Option<Arc<dyn StateHandler>> {
        self.state_handlers.get(instruction_id).map(|h| h.clone())
    }

    pub(crate) fn descriptor(&self, id: &str) -> Option<fn_pb::ProcessBundleDescriptor> {
        self.descriptors.get(id).map(|d| d.clone())
    }

    pub(crate) fn on_response(&self, r: fn_pb::InstructionResponse) {
        match self.pending.remove(&r.instruction_id) {
            Some((_, tx)) => {
                let _ = tx.send(r);
            }
            None => tracing::debug!(worker = %self.name, "response to unknown instruction {}", r.instruction_id),
        }
    }

    /// Opens the data stream; false if one was opened before (a second
    /// caller claiming this worker is refused, the first keeps it).
    pub(crate) fn set_data_stream(&self, out: Outbound<fn_pb::Elements>) -> bool {
        self.data_out.send_if_modified(|current| match current {
            DataStream::NotYetOpen => {
                *current = DataStream::Open(out);
                true
            }
            _ => false,
        })
    }

    pub(crate) fn on_data(&self, elements: fn_pb::Elements) {
        for d in elements.data {
            match self.routes.get(&d.instruction_id) {
                Some(route) => {
                    let _ = route.send(DataEvent::Data { transform_id: d.transform_id, data: d.data, is_last: d.is_last });
                }
                None => tracing::warn!(worker = %self.name, "data for unknown instruction {}", d.instruction_id),
            }
        }
        for t in elements.timers {
            match self.routes.get(&t.instruction_id) {
                Some(route) => {
                    let _ = route.send(DataEvent::Timers {
                        transform_id: t.transform_id,
                        family: t.timer_family_id,
                        timers: t.timers,
                        is_last: t.is_last,
                    });
                }
                None => tracing::warn!(worker = %self.name, "timers for unknown instruction {}", t.instruction_id),
            }
        }
    }

    /// Marks the worker gone: every in-flight bundle fails with `reason`.
    pub fn disconnect(&self, reason: &str) {
        let mut closed = self.closed.lock().expect("lock");
        if closed.is_none() {
            *closed = Some(reason.to_string());
        }
        drop(closed);
        self.control.lock().expect("lock").take();
        self.pending.clear();
        self.routes.clear();
        self.data_out.send_replace(DataStream::Closed);
    }

    fn closed_reason(&self) -> Option<String> {
        self.closed.lock().expect("lock").clone()
    }

    async fn data_stream(&self) -> Result<Outbound<fn_pb::Elements>, BundleError> {
        let mut rx = self.data_out.subscribe();
        let waited = tokio::time::timeout(DATA_CONNECT_TIMEOUT, rx.wait_for(|s| !matches!(s, DataStream::NotYetOpen))).await;
        let found = match waited {
            Ok(Ok(s)) => match &*s {
                DataStream::Open(out) => Some(out.clone()),
                _ => None,
            },
            _ => None,
        };
        found.ok_or_else(|| BundleError::Worker(self.closed_reason().unwrap_or_else(|| "the harness did not open its data stream".into())))
    }

    /// Runs one bundle of `descriptor_id` over `inputs` (and `timers` to
    /// fire, per family of `families`: every family of the stage gets its
    /// end-of-stream in and is awaited out), collecting the data of `outputs`
    /// (sink transform ids); `state` answers its state requests. The bundle
    /// runs as instruction `instruction_id` (`next_instruction_id`), the id a
    /// split of it names. `early`, if given, takes large outputs as they come.
    #[allow(clippy::too_many_arguments)]
    pub async fn process_bundle(
        &self,
        instruction_id: &str,
        descriptor_id: &str,
        inputs: &[BundleInput],
        timers: HashMap<TimerFamily, Vec<u8>>,
        families: &[TimerFamily],
        outputs: &[String],
        state: Option<Arc<dyn StateHandler>>,
        early: Option<EarlyOutputs>,
    ) -> Result<BundleResult, BundleError> {
        if let Some(reason) = self.closed_reason() {
            return Err(BundleError::Worker(reason));
        }
        let cache_tokens = state.as_ref().map(|h| h.cache_tokens()).unwrap_or_default();
        let (route_tx, mut route_rx) = mpsc::unbounded_channel();
        self.routes.insert(instruction_id.to_string(), route_tx);
        let (resp_tx, resp_rx) = oneshot::channel();
        self.pending.insert(instruction_id.to_string(), resp_tx);
        if let Some(h) = state {
            self.state_handlers.insert(instruction_id.to_string(), h);
        }
        let result = self
            .run_bundle(instruction_id, descriptor_id, cache_tokens, inputs, timers, families, outputs, early, &mut route_rx, resp_rx)
            .await;
        self.routes.remove(instruction_id);
        self.pending.remove(instruction_id);
        self.state_handlers.remove(instruction_id);
        result
    }

    #[allow(clippy::too_many_arguments)]
    async fn run_bundle(
        &self,
        instruction_id: &str,
        descriptor_id: &str,
        cache_tokens: Vec<fn_pb::process_bundle_request::CacheToken>,
        inputs: &[BundleInput],
        mut timers: HashMap<TimerFamily, Vec<u8>>,
        families: &[TimerFamily],
        outputs: &[String],
        mut early: Option<EarlyOutputs>,
        route_rx: &mut mpsc::UnboundedReceiver<DataEvent>,
        mut resp_rx: oneshot::Receiver<fn_pb::InstructionResponse>,
    ) -> Result<BundleResult, BundleError> {
        let lost = |what: &str| BundleError::Worker(self.closed_reason().unwrap_or_else(|| what.to_string()));
        let request = fn_pb::InstructionRequest {
            instruction_id: instruction_id.to_string(),
            request: Some(fn_pb::instruction_request::Request::ProcessBundle(fn_pb::ProcessBundleRequest {
                process_bundle_descriptor_id: descriptor_id.to_string(),
                cache_tokens,
                ..Default::default()
            })),
        };
        if !self.send_instruction(request) {
            return Err(lost("control stream closed"));
        }
        // The harness opens its data stream when it first needs it, i.e. after
        // it received a bundle request. One that fails the bundle before it
        // reads any input (a DoFn it cannot unpickle) answers without it.
        let data = tokio::select! {
            biased;
            data = self.data_stream() => data?,
            r = &mut resp_rx => {
                let r = r.map_err(|_| lost("the harness disconnected during the bundle"))?;
                if !r.error.is_empty() {
                    return Err(BundleError::User(r.error));
                }
                return Err(lost("the harness finished the bundle without opening its data stream"));
            }
        };
        let send = |e: fn_pb::Elements| data.send(Ok(e)).map_err(|_| lost("data stream closed"));
        let data_msg = |transform_id: &str, bytes: &[u8], is_last: bool| fn_pb::Elements {
            data: vec![fn_pb::elements::Data {
                instruction_id: instruction_id.to_string(),
                transform_id: transform_id.to_string(),
                data: bytes.to_vec(),
                is_last,
            }],
            ..Default::default()
        };
        let timer_msg = |(transform_id, family): &TimerFamily, bytes: Vec<u8>, is_last: bool| fn_pb::Elements {
            timers: vec![fn_pb::elements::Timers {
                instruction_id: instruction_id.to_string(),
                transform_id: transform_id.clone(),
                timer_family_id: family.clone(),
                timers: bytes,
                is_last,
            }],
            ..Default::default()
        };
        // Data first, then timers (data before timers at equal timestamps),
        // then every input's end: the harness handles them in arrival order.
        for input in inputs {
            for c in element_chunks(&input.data, &input.ends, CHUNK_BYTES) {
                send(data_msg(&input.transform_id, c, false))?;
            }
        }
        for family in families {
            if let Some(bytes) = timers.remove(family).filter(|b| !b.is_empty()) {
                send(timer_msg(family, bytes, false))?;
            }
            send(timer_msg(family, Vec::new(), true))?;
        }
        for input in inputs {
            send(data_msg(&input.transform_id, &[], true))?;
        }
        let mut result = BundleResult::default();
        let mut open: HashSet<&String> = outputs.iter().collect();
        let mut open_timers: HashSet<&TimerFamily> = families.iter().collect();
        let mut response: Option<fn_pb::InstructionResponse> = None;
        while response.is_none() || !open.is_empty() || !open_timers.is_empty() {
            tokio::select! {
                r = &mut resp_rx, if response.is_none() => {
                    let r = r.map_err(|_| lost("the harness disconnected during the bundle"))?;
                    if !r.error.is_empty() {
                        return Err(BundleError::User(r.error));
                    }
                    response = Some(r);
                }
                ev = route_rx.recv() => match ev {
                    Some(DataEvent::Data { transform_id, data, is_last }) => {
                        let collected = result.outputs.entry(transform_id.clone()).or_default();
                        collected.extend_from_slice(&data);
                        if let Some(e) = early.as_ref().filter(|e| collected.len() >= e.min_bytes && e.transforms.contains(&transform_id)) {
                            if let Err(mpsc::error::SendError((_, back))) = e.tx.send((transform_id.clone(), std::mem::take(collected))) {
                                *collected = back;
                                early = None;
                            }
                        }
                        if is_last {
                            open.remove(&transform_id);
                        }
                    }
                    Some(DataEvent::Timers { transform_id, family, timers, is_last }) => {
                        let key = (transform_id, family);
                        if is_last {
                            open_timers.remove(&key);
                        }
                        result.timers.entry(key).or_default().extend_from_slice(&timers);
                    }
                    None => return Err(lost("the harness disconnected during the bundle")),
                }
            }
        }
        if let Some(fn_pb::instruction_response::Response::ProcessBundle(pb)) = response.and_then(|r| r.response) {
            result.monitoring_infos = pb.monitoring_infos;
            result.requires_finalization = pb.requires_finalization;
            result.residuals = pb
                .residual_roots
                .into_iter()
                .map(crate::split::Residual::from_proto)
                .collect::<Result<_, _>>()
                .map_err(BundleError::Worker)?;
        }
        Ok(result)
    }
}

#[cfg(test)]
mod tests {
    //! The bundle protocol against a fake harness driven through channels.
    use super::*;
    use fn_pb::instruction_request::Request as Req;

    fn worker() -> (std::sync::Arc<SdkWorker>, mpsc::UnboundedReceiver<Result<fn_pb::InstructionRequest, Status>>) {
        let (tx, rx) = mpsc::unbounded_channel();
        (std::sync::Arc::new(SdkWorker::new("w".into(), tx)), rx)
    }

    fn data(instruction: &str, transform: &str, bytes: &[u8], is_last: bool) -> fn_pb::Elements {
        fn_pb::Elements {
            data: vec![fn_pb::elements::Data {
                instruction_id: instruction.into(),
                transform_id: transform.into(),
                data: bytes.to_vec(),
                is_last,
            }],
            ..Default::default()
        }
    }

    /// Plays the harness for one bundle: opens the data stream when asked to
    /// process, collects inputs, and answers with `outputs` and `error`.
    async fn fake_harness(
        w: std::sync::Arc<SdkWorker>,
        mut control: mpsc::UnboundedReceiver<Result<fn_pb::InstructionRequest, Status>>,
        outputs: Vec<(&'static str, &'static [u8])>,
        error: &'static str,
    ) -> Vec<fn_pb::elements::Data> {
        let req = control.recv().await.unwrap().unwrap();
        assert!(matches!(req.request, Some(Req::ProcessBundle(_))));
        let (tx, mut inbound) = mpsc::unbounded_channel();
        w.set_data_stream(tx);
        let mut got = Vec::new();
        while let Some(Ok(e)) = inbound.recv().await {
            got.extend(e.data);
            if got.iter().filter(|d| d.is_last).count() == 2 {
                break;
            }
        }
        for (t, bytes) in outputs {
            w.on_data(data(&req.instruction_id, t, bytes, false));
            w.on_data(data(&req.instruction_id, t, &[], true));
        }
        w.on_response(fn_pb::InstructionResponse { instruction_id: req.instruction_id, error: error.into(), ..Default::default() });
        got
    }

    fn inputs() -> Vec<BundleInput> {
        vec![
            BundleInput { transform_id: "src-a".into(), data: vec![1, 2], ends: vec![1, 2] },
            BundleInput { transform_id: "src-b".into(), data: vec![], ends: vec![] },
        ]
    }

    #[tokio::test]
    async fn large_outputs_are_handed_over_as_they_come_and_the_rest_stays_in_the_result() {
        let (w, mut control) = worker();
        let harness = {
            let w = w.clone();
            tokio::spawn(async move {
                let req = control.recv().await.unwrap().unwrap();
                let (tx, mut inbound) = mpsc::unbounded_channel();
                w.set_data_stream(tx);
                let mut lasts = 0;
                while let Some(Ok(e)) = inbound.recv().await {
                    lasts += e.data.iter().filter(|d| d.is_last).count();
                    if lasts == 2 {
                        break;
                    }
                }
                for (t, bytes) in [("sink-x", &b"abc"[..]), ("sink-y", b"12345"), ("sink-x", b"de"), ("sink-x", b"f")] {
                    w.on_data(data(&req.instruction_id, t, bytes, false));
                }
                for t in ["sink-x", "sink-y"] {
                    w.on_data(data(&req.instruction_id, t, &[], true));
                }
                w.on_response(fn_pb::InstructionResponse { instruction_id: req.instruction_id, ..Default::default() });
            })
        };
        let (tx, mut rx) = mpsc::unbounded_channel();
        let early = EarlyOutputs { transforms: ["sink-x".to_string()].into(), min_bytes: 3, tx };
        let sinks = ["sink-x".to_string(), "sink-y".to_string()];
        let id = w.next_instruction_id("bundle");
        let result = w.process_bundle(&id, "pbd", &inputs(), HashMap::new(), &[], &sinks, None, Some(early)).await.unwrap();
        harness.await.unwrap();
        let mut handed = Vec::new();
        while let Ok(chunk) = rx.try_recv() {
            handed.push(chunk);
        }
        // sink-x reached 3 bytes after "abc", and again after "de" + "f";
        // sink-y is not handed over, however large.
        assert_eq!(handed, vec![("sink-x".to_string(), b"abc".to_vec()), ("sink-x".to_string(), b"def".to_vec())]);
        assert!(result.outputs["sink-x"].is_empty());
        assert_eq!(result.outputs["sink-y"], b"12345");
    }

    #[tokio::test]
    async fn a_bundle_sends_every_source_its_end_and_collects_every_sink() {
        let (w, control) = worker();
        let harness = tokio::spawn(fake_harness(w.clone(), control, vec![("sink-x", b"out"), ("sink-y", b"")], ""));
        let result = w
            .process_bundle(
                &w.next_instruction_id("bundle"),
                "pbd",
                &inputs(),
                HashMap::new(),
                &[],
                &["sink-x".into(), "sink-y".into()],
                None,
                None,
            )
            .await
            .unwrap();
        assert_eq!(result.outputs["sink-x"], b"out");
        assert!(result.outputs["sink-y"].is_empty());
        let sent = harness.await.unwrap();
        let ends: Vec<_> = sent.iter().filter(|d| d.is_last).map(|d| d.transform_id.as_str()).collect();
        assert_eq!(ends, ["src-a", "src-b"], "an input without elements still gets its end");
        assert_eq!(sent.iter().find(|d| d.transform_id == "src-a" && !d.is_last).unwrap().data, [1, 2]);
    }

    #[tokio::test]
    async fn a_user_error_fails_the_bundle_with_the_sdk_text() {
        let (w, control) = worker();
        tokio::spawn(fake_harness(w.clone(), control, vec![], "Traceback: ZeroDivisionError"));
        let err = w
            .process_bundle(&w.next_instruction_id("bundle"), "pbd", &inputs(), HashMap::new(), &[], &["sink-x".into()], None, None)
            .await
            .unwrap_err();
        assert_eq!(err, BundleError::User("Traceback: ZeroDivisionError".into()));
    }

    #[tokio::test]
    async fn an_error_before_the_data_stream_opens_fails_the_bundle_at_once() {
        let (w, mut control) = worker();
        let w2 = w.clone();
        tokio::spawn(async move {
            let req = control.recv().await.unwrap().unwrap();
            let error = "ModuleNotFoundError: No module named 'pipeline'".to_string();
            w2.on_response(fn_pb::InstructionResponse { instruction_id: req.instruction_id, error, ..Default::default() });
        });
        let (id, inputs, sinks) = (w.next_instruction_id("bundle"), inputs(), ["sink-x".to_string()]);
        let bundle = w.process_bundle(&id, "pbd", &inputs, HashMap::new(), &[], &sinks, None, None);
        // Well before the 60 s the harness has to open its data stream.
        let err = tokio::time::timeout(Duration::from_secs(10), bundle).await.expect("failed at once").unwrap_err();
        assert_eq!(err, BundleError::User("ModuleNotFoundError: No module named 'pipeline'".into()));
    }

    #[tokio::test]
    async fn a_lost_harness_fails_the_bundle_instead_of_hanging() {
        let (w, mut control) = worker();
        let w2 = w.clone();
        tokio::spawn(async move {
            let _ = control.recv().await;
            let (tx, _rx) = mpsc::unbounded_channel();
            w2.set_data_stream(tx);
            w2.disconnect("the SDK harness closed its control stream");
        });
        let err = w
            .process_bundle(&w.next_instruction_id("bundle"), "pbd", &inputs(), HashMap::new(), &[], &["sink-x".into()], None, None)
            .await
            .unwrap_err();
        assert!(matches!(err, BundleError::Worker(ref m) if m.contains("closed its control stream")), "{err:?}");
        // Later bundles fail at once.
        assert!(w.process_bundle(&w.next_instruction_id("bundle"), "pbd", &inputs(), HashMap::new(), &[], &[], None, None).await.is_err());
    }

    #[test]
    fn data_messages_end_on_element_boundaries() {
        let data: Vec<u8> = (0..10).collect();
        // Elements of 3, 3, 1 and 3 bytes; at most 4 bytes a message.
        let chunks = element_chunks(&data, &[3, 6, 7, 10], 4);
        assert_eq!(chunks, [&data[0..3], &data[3..7], &data[7..10]]);
        // One element longer than the limit travels alone.
        assert_eq!(element_chunks(&data, &[1, 9, 10], 4), [&data[0..1], &data[1..9], &data[9..10]]);
        assert_eq!(element_chunks(&data, &[], 4), [&data[..]]);
        assert!(element_chunks(&[], &[], 4).is_empty());
    }
}
