//! Messages between the poll loop, task supervisors and stage actors. Every
//! data message carries a batch, never one element.
use actix::Message;
use beam_kafka_proto::pipeline::MonitoringInfo;
use beam_kafka_runtime::codec::timestamp::Watermark;
use beam_kafka_runtime::task::cycle::Changes;
use beam_kafka_runtime::task::gbk_view::GbkReport;
use beam_kafka_runtime::test_stream::progress::Progress;

/// Records of partitions one task owns, in offset order per partition.
#[derive(Message)]
#[rtype(result = "()")]
pub struct RecordBatch {
    pub records: Vec<InputRecord>,
    /// Their payload bytes (`payload_bytes`), counted once by the poll loop.
    pub bytes: u64,
}

/// The payload bytes of `records` (what flow control counts).
pub fn payload_bytes<'a>(records: impl IntoIterator<Item = &'a InputRecord>) -> u64 {
    records.into_iter().map(|r| r.payload.as_ref().map_or(0, Vec::len) as u64).sum()
}

pub struct InputRecord {
    pub topic: String,
    pub partition: i32,
    pub offset: i64,
    pub key: Option<Vec<u8>>,
    /// `None` for a Kafka null value (a tombstone).
    pub payload: Option<Vec<u8>>,
    pub timestamp: rdkafka::Timestamp,
    pub headers: Vec<(String, Option<Vec<u8>>)>,
}

/// Encoded elements for one data source of a stage.
#[derive(Message)]
#[rtype(result = "()")]
pub struct Elements {
    pub source_transform: String,
    pub elements: Vec<Vec<u8>>,
}

/// Timers to fire in a stage's next bundle, encoded, per timer family.
#[derive(Message)]
#[rtype(result = "()")]
pub struct FireTimers {
    pub timers: Vec<(beam_kafka_fnapi::TimerFamily, Vec<u8>)>,
}

/// Asks a stage to close its open bundle and answer once everything it was
/// sent before this message has been processed.
#[derive(Message)]
#[rtype(result = "()")]
pub struct Flush {
    pub id: u64,
    /// Start no bundle after the flushed ones until [`Resume`]: the task is
    /// committing a transaction, and nothing may be written meanwhile.
    pub hold: bool,
}

/// Answered once Kafka acknowledged (or refused) every record the stage's
/// processed bundles queued, with the first refusal's error: an
/// exactly_once commit asks before it commits (a refused write says better
/// why the cycle failed than an aborted transaction would).
#[derive(Message)]
#[rtype(result = "Option<beam_kafka_runtime::kafka::failure::Failure>")]
pub struct Settle;

/// The held cycle took every change of the bundles it flushed: bundles
/// after them may run while it commits, but what they write waits for
/// [`Resume`] (it belongs to the next transaction). So the SDK harness
/// works during the commit instead of waiting for it.
#[derive(Message)]
#[rtype(result = "()")]
pub struct Release;

/// The commit finished: a held stage runs bundles again, and bundles that
/// ran during the commit write their outputs.
#[derive(Message)]
#[rtype(result = "()")]
pub struct Resume;

/// The job drains: sources stop where they are (their shared bound says
/// so), and splittable DoFns' restrictions are truncated from now on.
#[derive(Message)]
#[rtype(result = "()")]
pub struct Drain;

/// The cycle that flushed as `Flush{id}` committed: bundles it covered
/// that asked for finalization are finalized now.
#[derive(Message)]
#[rtype(result = "()")]
pub struct Committed {
    pub id: u64,
    /// Told once the bundles this commit covered are finalized (the task's
    /// last cycle waits for it before the task reports itself finished).
    pub finalized: Option<tokio::sync::oneshot::Sender<()>>,
}

/// What a bundle left of a splittable DoFn's restriction, for the task to
/// keep and hand back to `source` no sooner than `delay_ms` from now.
#[derive(Debug)]
pub struct StageResidual {
    pub source: String,
    pub element: Vec<u8>,
    pub delay_ms: u64,
    /// The DoFn's watermark estimate for it (else the element's timestamp).
    pub output_watermark: Option<i64>,
}

/// What a stage tells its supervisor.
#[derive(Message)]
#[rtype(result = "()")]
pub enum StageEvent {
    Flushed {
        id: u64,
    },
    /// A bundle finished (its outputs acknowledged): how many data elements
    /// it held and how long it took. Gives the task room to send more.
    Processed {
        elements: u64,
        millis: u64,
    },
    /// The stage cannot go on: user code failed (fatal), or writing to
    /// Kafka did (the task may restart from its last commit if the cause
    /// is transient, or stop if another owner fenced it).
    Failed(beam_kafka_runtime::kafka::failure::Failure),
    /// Work the stage handed back: elements unprocessed (a bundle split for
    /// a flush), per data source, and residuals of splittable DoFns. Sent
    /// before the bundle counts as processed, so they are state of the
    /// cycle whose flush covers it, run again after its commit.
    Deferred {
        unprocessed: Vec<(String, Vec<Vec<u8>>)>,
        residuals: Vec<StageResidual>,
    },
    Metrics(Vec<MonitoringInfo>),
    /// Timers a bundle set or cleared (sent before that bundle counts as
    /// flushed), encoded, per timer family.
    TimersSet(std::collections::HashMap<beam_kafka_fnapi::TimerFamily, Vec<u8>>),
}

/// Stops an actor at the end of a job.
#[derive(Message)]
#[rtype(result = "()")]
pub struct Shutdown;

/// What a task sends its GroupByKey actor, in the order it must happen.
#[derive(Message)]
#[rtype(result = "()")]
pub enum GbkCommand {
    /// Values of shuffle records (envelopes decoded, their packs read in
    /// place), in offset order.
    Data(Vec<beam_kafka_runtime::codec::packed::Pack>),
    /// The task's input watermark moved (sent by its watermark aggregator).
    Watermark(Watermark),
    /// Fire up to `limit` closed panes.
    Fire { limit: usize },
    /// Processing time reached this (millis): triggers waiting for it fire.
    ProcessingTime(i64),
    /// The test clock of a TestStream pipeline moved: processing time is
    /// this from now on (not the wall clock).
    TestClock(i64),
    /// Answer with the state changes made by everything sent before this.
    Barrier { id: u64 },
    /// Barrier `id`'s changes are in the task's store: panes they hold may
    /// leave memory (see `runtime::gbk::spill`).
    Committed { id: u64 },
}

/// What a GroupByKey actor tells its task. Its answers arrive in the order
/// of the commands they answer.
#[derive(Message)]
#[rtype(result = "()")]
pub enum GbkEvent {
    /// A command was handled: `credit` elements of room to give back (the
    /// values taken in, or the firing limit asked for) and the panes fired.
    Output {
        topic: String,
        credit: u64,
        panes: Vec<Vec<u8>>,
        fired: bool,
        report: GbkReport,
        /// It holds back credit until its next barrier: commit soon.
        commit_wanted: bool,
    },
    /// The state changes since the last barrier, as changelog entries.
    Barrier {
        topic: String,
        id: u64,
        changes: Changes,
        report: GbkReport,
    },
    Failed {
        error: String,
    },
}

/// Which of a task's aggregated watermarks a report moves.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum WatermarkInput {
    /// Its main input (what its GroupByKeys and timers see).
    Main,
    /// One side-input topic.
    Side(String),
}

/// One upstream partition's watermark report.
pub struct WatermarkReport {
    pub input: WatermarkInput,
    pub upstream: String,
    pub partition: u32,
    pub total: u32,
    pub wm: Watermark,
    /// TestStream progress it carries (none outside TestStream pipelines).
    pub progress: Progress,
}

/// What a task sends its watermark aggregator.
#[derive(Message)]
#[rtype(result = "()")]
pub enum WatermarkCommand {
    Reports(Vec<WatermarkReport>),
    /// Answer with the main watermark's state, then pass the barrier on to
    /// the GroupByKeys.
    Barrier {
        id: u64,
    },
}

/// What a watermark aggregator tells its task.
#[derive(Message)]
#[rtype(result = "()")]
pub enum WatermarkEvent {
    Advanced {
        input: WatermarkInput,
        wm: Watermark,
    },
    /// The main watermark's state (for the changelog) and value at barrier `id`.
    Barrier {
        id: u64,
        snapshot: Vec<u8>,
        current: Watermark,
    },
    /// The TestStream progress of the task's inputs moved.
    Progress(Progress),
}
