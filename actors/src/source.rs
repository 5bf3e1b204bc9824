//! ReadFromKafka inside a task: the partition of a user topic the task owns,
//! its event-time clock, and the bound of a bounded read, shared by every
//! task reading the same transform.
use std::sync::atomic::{AtomicBool, AtomicI64, Ordering};
use std::sync::Arc;
use std::time::{Instant, SystemTime, UNIX_EPOCH};

use beam_kafka_proto::envelope::KafkaReadSpec;
use beam_kafka_runtime::codec::timestamp::Millis;
use beam_kafka_runtime::kafka::source::{KafkaRecord, PartitionClock, TimestampKind};
use rdkafka::consumer::BaseConsumer;

use crate::messages::InputRecord;
pub use beam_kafka_runtime::plan::spec::SourceInput;

/// What all tasks reading one ReadFromKafka share.
pub struct SourceShared {
    /// Records a bounded read may still take (max_num_records).
    budget: Option<AtomicI64>,
    /// When a bounded read ends (max_read_time).
    deadline: Option<Instant>,
    /// A client of the user's group.id, for commit_offset_in_finalize.
    pub finalize: Option<BaseConsumer>,
    /// The job drains: the read ends where it is.
    drained: AtomicBool,
}

impl SourceShared {
    pub fn new(spec: &KafkaReadSpec, finalize: Option<BaseConsumer>) -> Self {
        SourceShared {
            budget: spec.max_num_records.map(AtomicI64::new),
            deadline: spec.max_read_time_secs.map(|s| Instant::now() + std::time::Duration::from_secs(s as u64)),
            finalize,
            drained: AtomicBool::new(false),
        }
    }

    /// Ends the read where it is: records not yet taken are left for a
    /// later run (they are not committed), and the clocks go to the end.
    pub fn drain(&self) {
        self.drained.store(true, Ordering::Release);
    }

    /// Gives back records taken but not committed (their task stopped; the
    /// next owner reads them again).
    fn refund(&self, n: u64) {
        if let Some(b) = &self.budget {
            b.fetch_add(n as i64, Ordering::AcqRel);
        }
    }

    /// Takes one record from the bound; false once the read is over.
    fn take(&self) -> bool {
        if self.drained.load(Ordering::Acquire) || self.deadline.is_some_and(|d| Instant::now() >= d) {
            return false;
        }
        match &self.budget {
            None => true,
            Some(b) => b.fetch_update(Ordering::AcqRel, Ordering::Acquire, |n| (n > 0).then(|| n - 1)).is_ok(),
        }
    }

    fn is_over(&self) -> bool {
        self.drained.load(Ordering::Acquire)
            || self.deadline.is_some_and(|d| Instant::now() >= d)
            || self.budget.as_ref().is_some_and(|b| b.load(Ordering::Acquire) <= 0)
    }
}

pub fn now_millis() -> Millis {
    SystemTime::now().duration_since(UNIX_EPOCH).map(|d| d.as_millis() as Millis).unwrap_or(0)
}

/// The partition of one source topic a task owns.
pub struct SourceRoute {
    pub input: Arc<SourceInput>,
    pub shared: Arc<SourceShared>,
    pub clock: PartitionClock,
    pub exhausted: bool,
    /// Records turned into elements, for the task's summary.
    pub read: u64,
    /// The offset this run started reading at: the position while no record
    /// has been handed over yet.
    pub start_offset: Option<i64>,
    /// Records taken from the bound since the last commit, split at the
    /// flush that will commit them: (flush id, count) and the open count.
    taken_by_flush: Vec<(u64, u64)>,
    taken_open: u64,
}

impl SourceRoute {
    pub fn new(input: Arc<SourceInput>, shared: Arc<SourceShared>, idle_ms: i64, start_offset: Option<i64>) -> Self {
        let clock = PartitionClock::new(input.spec().timestamp_policy(), idle_ms, now_millis());
        SourceRoute { input, shared, clock, exhausted: false, read: 0, start_offset, taken_by_flush: Vec::new(), taken_open: 0 }
    }

    /// The element for `r`, or `None` when the read is over (the record is
    /// then neither processed nor committed).
    pub fn element(&mut self, r: &InputRecord) -> Result<Option<Vec<u8>>, String> {
        if self.exhausted {
            return Ok(None);
        }
        if !self.shared.take() {
            self.finish();
            return Ok(None);
        }
        let (timestamp, timestamp_kind) = match r.timestamp {
            rdkafka::Timestamp::NotAvailable => (-1, TimestampKind::NotAvailable),
            rdkafka::Timestamp::CreateTime(t) => (t, TimestampKind::CreateTime),
            rdkafka::Timestamp::LogAppendTime(t) => (t, TimestampKind::LogAppendTime),
        };
        let record = KafkaRecord {
            topic: &r.topic,
            partition: r.partition,
            offset: r.offset,
            key: r.key.as_deref(),
            value: r.payload.as_deref(),
            timestamp,
            timestamp_kind,
            headers: &r.headers,
        };
        let name = &self.input.name;
        let ts = self.clock.on_record(&record, now_millis()).map_err(|e| format!("ReadFromKafka '{name}': {e}"))?;
        let mut out = Vec::new();
        self.input.encoder.encode(&record, ts, &mut out).map_err(|e| format!("ReadFromKafka '{name}': {e}"))?;
        self.read += 1;
        self.taken_open += 1;
        Ok(Some(out))
    }

    /// A flush was requested: what was taken so far commits with it.
    pub fn mark_flush(&mut self, flush: u64) {
        self.taken_by_flush.push((flush, std::mem::take(&mut self.taken_open)));
    }

    /// The flush `flush` committed.
    pub fn committed_through(&mut self, flush: u64) {
        self.taken_by_flush.retain(|(f, _)| *f > flush);
    }

    /// The task stops without committing: its uncommitted reads go back to
    /// the bounded read's budget.
    pub fn refund_uncommitted(&mut self) {
        let n = self.taken_open + self.taken_by_flush.drain(..).map(|(_, n)| n).sum::<u64>();
        self.taken_open = 0;
        self.shared.refund(n);
    }

    /// Periodic: ends a bounded read that is over, moves an idle clock.
    pub fn tick(&mut self, caught_up: impl FnOnce() -> bool) {
        if self.exhausted {
            return;
        }
        if self.shared.is_over() {
            return self.finish();
        }
        let now = now_millis();
        let idle = self.clock.is_idle(now);
        self.clock.on_tick(now, idle && caught_up());
    }

    fn finish(&mut self) {
        self.exhausted = true;
        self.clock.finish();
    }
}
