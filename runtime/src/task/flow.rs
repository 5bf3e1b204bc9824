//! Flow control between a task's input and its stage: how much work may be
//! in flight, and when the task's partitions must stop or start fetching.
//!
//! Two bounds:
//! - **in flight**: elements handed to the stage whose bundle has not
//!   finished, and their bytes. Nothing more is handed over once either
//!   reaches its limit, so a commit cycle's flush waits for at most that
//!   much work, never for a backlog, and large elements cannot fill memory
//!   two bundles of `max_bundle_size` at a time.
//! - **queued**: records taken from Kafka that wait in the task because the
//!   stage is full. Past a high mark (in records, or in bytes: a packed
//!   record holds many elements) the task's partitions are paused; below
//!   the low marks they are resumed. What librdkafka had already fetched
//!   still arrives and is queued, so memory is bounded by the high mark plus
//!   one fetch.

/// The limits of one task.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct FlowLimits {
    /// Elements in the stage (its open, queued and running bundles) at most.
    pub max_in_flight: u64,
    /// Queued input records at which the partitions are paused.
    pub pause_at: u64,
    /// Queued input records at or below which they are resumed.
    pub resume_at: u64,
    /// Queued bytes at which the partitions are paused; they are resumed
    /// at a quarter of it.
    pub pause_at_bytes: u64,
    /// Bytes of elements in the stage at most (what a GroupByKey fires is
    /// counted in elements only).
    pub max_in_flight_bytes: u64,
}

/// Queued bytes per task before its partitions pause: a poll's worth of
/// packed records would otherwise be a thousand times a poll's elements.
pub const PAUSE_AT_BYTES: u64 = 16 << 20;

/// Bytes of elements a task's stage holds at most (one element more than
/// that is let in when nothing is in flight).
pub const MAX_IN_FLIGHT_BYTES: u64 = 64 << 20;

impl FlowLimits {
    /// Two bundles in flight (one running, the next one filling, so the
    /// harness never waits for the runner) and two polls' worth of queued
    /// input before the partitions pause.
    pub fn for_bundles(max_bundle_size: u64, records_per_poll: u64) -> FlowLimits {
        let max_in_flight = max_bundle_size.saturating_mul(2).max(1);
        let pause_at = records_per_poll.saturating_mul(2).max(1);
        FlowLimits {
            max_in_flight,
            pause_at,
            resume_at: pause_at / 4,
            pause_at_bytes: PAUSE_AT_BYTES,
            max_in_flight_bytes: MAX_IN_FLIGHT_BYTES,
        }
    }
}

/// What the task must do to its partitions.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FlowCommand {
    Pause,
    Resume,
}

#[derive(Debug)]
pub struct FlowControl {
    limits: FlowLimits,
    in_flight: u64,
    in_flight_bytes: u64,
    /// Bytes per element of the last elements handed over: what the room
    /// left in bytes is counted in.
    element_bytes: u64,
    queued: u64,
    queued_bytes: u64,
    paused: bool,
    /// Times the partitions were paused, for the task's report.
    pub pauses: u64,
    /// Of those, by someone else (`paused_elsewhere`).
    pub pauses_elsewhere: u64,
}

impl FlowControl {
    pub fn new(limits: FlowLimits) -> FlowControl {
        FlowControl {
            limits,
            in_flight: 0,
            in_flight_bytes: 0,
            element_bytes: 0,
            queued: 0,
            queued_bytes: 0,
            paused: false,
            pauses: 0,
            pauses_elsewhere: 0,
        }
    }

    /// How many more elements the stage may be given now: fewer when the
    /// bytes left, at the size of the last elements, hold fewer (at least
    /// one while any bytes are left).
    pub fn room(&self) -> u64 {
        let bytes_left = self.limits.max_in_flight_bytes.saturating_sub(self.in_flight_bytes);
        if bytes_left == 0 {
            return 0;
        }
        let by_bytes = bytes_left.checked_div(self.element_bytes).map_or(u64::MAX, |n| n.max(1));
        self.limits.max_in_flight.saturating_sub(self.in_flight).min(by_bytes)
    }

    pub fn has_room(&self) -> bool {
        self.room() > 0
    }

    pub fn in_flight(&self) -> u64 {
        self.in_flight
    }

    pub fn queued(&self) -> u64 {
        self.queued
    }

    pub fn is_paused(&self) -> bool {
        self.paused
    }

    /// Elements were handed to the stage (may overshoot `room` by what one
    /// input record produced: a record is never split).
    pub fn sent(&mut self, elements: u64) {
        self.sent_bytes(elements, 0);
    }

    /// Elements of so many bytes in all were handed to the stage.
    pub fn sent_bytes(&mut self, elements: u64, bytes: u64) {
        self.in_flight += elements;
        self.in_flight_bytes += bytes;
        if elements > 0 && bytes > 0 {
            self.element_bytes = bytes.div_ceil(elements);
        }
    }

    /// A bundle of the stage finished with this many of them. Bundles do
    /// not say their bytes: the elements in flight are taken as alike.
    pub fn processed(&mut self, elements: u64) {
        let done = elements.min(self.in_flight);
        if done > 0 {
            let share = self.in_flight_bytes as u128 * done as u128 / self.in_flight as u128;
            self.in_flight_bytes -= share as u64;
        }
        self.in_flight -= done;
        if self.in_flight == 0 {
            self.in_flight_bytes = 0;
        }
    }

    /// Records of so many bytes were put in the task's queue.
    pub fn enqueued(&mut self, records: u64, bytes: u64) {
        self.queued += records;
        self.queued_bytes += bytes;
    }

    /// Records left the queue (handled, or dropped when the task stops).
    pub fn dequeued(&mut self, records: u64, bytes: u64) {
        self.queued = self.queued.saturating_sub(records);
        self.queued_bytes = self.queued_bytes.saturating_sub(bytes);
    }

    /// The partitions were paused by someone else (the poll loop, when the
    /// task's mail piled up): they are resumed as if paused here.
    pub fn paused_elsewhere(&mut self) {
        if !self.paused {
            self.paused = true;
            self.pauses += 1;
            self.pauses_elsewhere += 1;
        }
    }

    /// Whether to pause or resume the partitions now. Called after every
    /// change; says each transition once.
    pub fn decide(&mut self) -> Option<FlowCommand> {
        let over = self.queued >= self.limits.pause_at || self.queued_bytes >= self.limits.pause_at_bytes;
        let under = self.queued <= self.limits.resume_at && self.queued_bytes <= self.limits.pause_at_bytes / 4;
        if !self.paused && over {
            self.paused = true;
            self.pauses += 1;
            return Some(FlowCommand::Pause);
        }
        if self.paused && under {
            self.paused = false;
            return Some(FlowCommand::Resume);
        }
        None
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn flow() -> FlowControl {
        FlowControl::new(FlowLimits { max_in_flight: 10, pause_at: 8, resume_at: 2, pause_at_bytes: 1000, max_in_flight_bytes: 100 })
    }

    #[test]
    fn room_shrinks_with_elements_in_flight_and_returns_when_bundles_finish() {
        let mut f = flow();
        assert_eq!(f.room(), 10);
        f.sent(7);
        assert_eq!(f.room(), 3);
        f.sent(5); // one record's output is never split
        assert_eq!(f.room(), 0);
        assert!(!f.has_room());
        f.processed(7);
        assert_eq!(f.room(), 5);
        f.processed(100);
        assert_eq!(f.in_flight(), 0);
    }

    #[test]
    fn large_elements_stop_at_the_byte_limit_and_their_bytes_leave_with_their_bundles() {
        let mut f = flow();
        f.sent_bytes(2, 20);
        assert_eq!(f.room(), 8, "80 bytes left hold 8 elements of 10");
        f.sent_bytes(2, 60);
        assert_eq!(f.room(), 1, "20 bytes left: one more element, whatever its size");
        f.sent_bytes(1, 50); // over: a record is never split
        assert_eq!(f.room(), 0, "130 bytes in flight of 100");
        f.processed(2);
        assert_eq!(f.room(), 1, "two fifths of the bytes left with two of five elements: 78 in flight, 22 left");
        f.processed(10);
        assert_eq!(f.in_flight(), 0);
        assert_eq!(f.room(), 2, "nothing in flight: 100 bytes at the last 50-byte elements");
    }

    #[test]
    fn partitions_pause_at_the_high_mark_and_resume_at_the_low_mark_once_each() {
        let mut f = flow();
        f.enqueued(5, 50);
        assert_eq!(f.decide(), None);
        f.enqueued(3, 30);
        assert_eq!(f.decide(), Some(FlowCommand::Pause));
        assert_eq!(f.decide(), None, "said once");
        f.enqueued(4, 40); // fetched before the pause took effect
        assert_eq!(f.decide(), None);
        f.dequeued(9, 90);
        assert_eq!(f.decide(), None, "3 queued is above the low mark");
        f.dequeued(1, 10);
        assert_eq!(f.decide(), Some(FlowCommand::Resume));
        assert_eq!(f.decide(), None);
        assert_eq!(f.pauses, 1);
    }

    #[test]
    fn partitions_paused_elsewhere_resume_at_the_low_mark() {
        let mut f = flow();
        f.enqueued(3, 30);
        f.paused_elsewhere();
        f.paused_elsewhere();
        assert_eq!((f.pauses, f.pauses_elsewhere), (1, 1), "one pause until resumed");
        assert_eq!(f.decide(), None, "3 queued is above the low mark");
        f.dequeued(1, 10);
        assert_eq!(f.decide(), Some(FlowCommand::Resume), "resumed as if paused here");
        assert_eq!(f.decide(), None);
    }

    #[test]
    fn a_few_large_records_pause_the_partitions_too() {
        let mut f = flow();
        f.enqueued(2, 900);
        assert_eq!(f.decide(), None);
        f.enqueued(1, 300);
        assert_eq!(f.decide(), Some(FlowCommand::Pause), "3 records, but 1200 bytes");
        f.dequeued(2, 900);
        assert_eq!(f.decide(), None, "300 bytes are above a quarter of 1000");
        f.dequeued(1, 300);
        assert_eq!(f.decide(), Some(FlowCommand::Resume));
    }

    #[test]
    fn limits_follow_the_bundle_size_and_poll_size() {
        let l = FlowLimits::for_bundles(1000, 500);
        assert_eq!(
            l,
            FlowLimits {
                max_in_flight: 2000,
                pause_at: 1000,
                resume_at: 250,
                pause_at_bytes: PAUSE_AT_BYTES,
                max_in_flight_bytes: MAX_IN_FLIGHT_BYTES
            }
        );
        let tiny = FlowLimits::for_bundles(0, 0);
        assert!(tiny.max_in_flight >= 1 && tiny.pause_at >= 1);
    }
}
