//! Messages between the poll loop, task supervisors and stage actors. Every
//! data message carries a batch, never one element.
use actix::Message;
use beam_kafka_proto::pipeline::MonitoringInfo;

/// Records of partitions one task owns, in offset order per partition.
#[derive(Message)]
#[rtype(result = "()")]
pub struct RecordBatch {
    pub records: Vec<InputRecord>,
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

/// Lets a held stage run bundles again (the commit finished).
#[derive(Message)]
#[rtype(result = "()")]
pub struct Resume;

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
    Failed {
        error: String,
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
