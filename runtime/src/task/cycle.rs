//! A task's commit cycle, as a checked state machine:
//!
//! ```text
//!          begin          aligned          flushed (no timers due)      written           committed
//!  (idle) ──────► Aligning ──────► Flushing ─────────────────────────► Writing ──────► Committing ───────► (idle)
//!                                   │    ▲                                               │   ▲
//!                                   └────┘ flushed, timers due: fire them, flush again   └───┘ retriable error
//! ```
//!
//! A cycle starts by sending a barrier through the task's watermark
//! aggregator and GroupByKey actors; each answers with its state changes
//! once it handled everything sent before the barrier. Input waits until
//! all of them answered (barrier alignment), then the stage is flushed. A
//! task without such actors begins in Flushing.
//!
//! A cycle covers what the task handed over before its flush: input offsets,
//! state changes, and the output watermark. One cycle is open at a time; its
//! flush waits only for the stage's bundles (bounded by flow control), never
//! for queued input, so a cycle closes in about one commit interval plus a
//! bundle whatever the backlog.
use std::collections::{BTreeMap, BTreeSet};

use crate::codec::timestamp::Watermark;
use crate::kafka::topic_partition::TopicPartition;
use crate::task::stats::DurationStats;

/// Next offset to commit per (topic, partition).
pub type Offsets = BTreeMap<TopicPartition, i64>;
/// Changelog entries: key, and value (`None` deletes the key).
pub type Changes = Vec<crate::state::changelog::Entry>;

/// How many times timers may fire within one cycle (timers that set due
/// timers); what is still due then waits for the next cycle.
pub const TIMER_ROUNDS: u32 = 100;
/// How many times a retriable commit error is retried.
pub const COMMIT_ATTEMPTS: u32 = 100;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Phase {
    /// Waiting for the barrier's answers.
    Aligning,
    /// Waiting for the stage to finish every bundle before the flush.
    Flushing,
    /// Writing watermark reports and the changelog.
    Writing,
    /// Committing the offsets (the transaction under exactly_once).
    Committing,
}

/// The open cycle and what it covers.
#[derive(Debug)]
pub struct Cycle {
    pub id: u64,
    pub phase: Phase,
    /// Offsets handed over up to the (latest) flush.
    pub offsets: Offsets,
    /// The output watermark when the flush was requested: everything it
    /// covers had been handed to the stage before the flush.
    pub watermark: Watermark,
    /// State changes up to the flush, written before the commit.
    pub changes: Changes,
    /// The changelog offset of the last change written.
    pub changelog_last: Option<i64>,
    /// The TestStream step the task passes on with this cycle (0: none).
    pub epoch: u64,
    /// How many of the uncommitted bundle metrics the cycle covers.
    pub metrics: usize,
    /// Timer rounds fired within the cycle so far.
    pub timer_rounds: u32,
    pub attempts: u32,
    /// The earliest output timestamp the GroupByKeys' buffered data held
    /// when they answered the barrier: the cycle's output watermark may not
    /// pass it (what they fire after answering comes after the flush).
    pub barrier_hold: Watermark,
    /// Who has not answered the barrier yet.
    waiting: BTreeSet<String>,
    /// Who answered it while others had not.
    answered: BTreeSet<String>,
    started_ms: i64,
}

impl Cycle {
    /// When the cycle began (ms since the epoch).
    pub fn started_ms(&self) -> i64 {
        self.started_ms
    }

    /// Whether this cycle ends the task's input (+∞ reported).
    pub fn is_final(&self) -> bool {
        self.watermark == Watermark::PosInf
    }
}

/// The cycles of one task: at most one open.
#[derive(Debug)]
pub struct Cycles {
    next_id: u64,
    open: Option<Cycle>,
    /// How long closed cycles took, from request to commit.
    pub durations: DurationStats,
    /// When the last cycle committed (ms since the epoch).
    pub last_committed_ms: Option<i64>,
}

impl Default for Cycles {
    fn default() -> Self {
        Cycles::new()
    }
}

impl Cycles {
    pub fn new() -> Cycles {
        Cycles { next_id: 1, open: None, durations: DurationStats::default(), last_committed_ms: None }
    }

    pub fn is_open(&self) -> bool {
        self.open.is_some()
    }

    pub fn open(&self) -> Option<&Cycle> {
        self.open.as_ref()
    }

    pub fn open_mut(&mut self) -> Option<&mut Cycle> {
        self.open.as_mut()
    }

    /// Opens a cycle, unless one is open; it waits for a barrier answer
    /// from each of `aligning`.
    pub fn begin(&mut self, now_ms: i64, aligning: impl IntoIterator<Item = String>) -> Option<&mut Cycle> {
        if self.open.is_some() {
            return None;
        }
        let id = self.next_id;
        self.next_id += 1;
        let waiting: BTreeSet<String> = aligning.into_iter().collect();
        self.open = Some(Cycle {
            id,
            phase: if waiting.is_empty() { Phase::Flushing } else { Phase::Aligning },
            waiting,
            answered: BTreeSet::new(),
            barrier_hold: Watermark::PosInf,
            offsets: Offsets::new(),
            epoch: 0,
            watermark: Watermark::NegInf,
            changes: Changes::new(),
            changelog_last: None,
            metrics: usize::MAX,
            timer_rounds: 0,
            attempts: 0,
            started_ms: now_ms,
        });
        self.open.as_mut()
    }

    /// Whether the open cycle waits for barrier answers.
    pub fn is_aligning(&self) -> bool {
        self.open.as_ref().is_some_and(|c| c.phase == Phase::Aligning)
    }

    /// `who` answered barrier `id`: the open cycle while it aligns (a stale
    /// or repeated answer is ignored).
    pub fn barrier_answered(&mut self, id: u64, who: &str) -> Option<&mut Cycle> {
        self.open.as_mut().filter(|c| c.id == id && c.phase == Phase::Aligning && c.waiting.contains(who))
    }

    /// Counts `who`'s answer to the open cycle's barrier; whether it was the
    /// last (the cycle moves on to Flushing).
    pub fn aligned(&mut self, who: &str) -> bool {
        let Some(c) = self.open.as_mut().filter(|c| c.phase == Phase::Aligning) else { return false };
        if c.waiting.remove(who) {
            c.answered.insert(who.to_string());
        }
        if c.waiting.is_empty() {
            c.phase = Phase::Flushing;
            return true;
        }
        false
    }

    /// Whether what `who` sends now belongs to the next cycle: it answered
    /// the open cycle's barrier (with its state changes) while others have
    /// not yet, so the stage's flush is still to come. Panes it fires now
    /// must reach the stage after that flush: before it, the cycle would
    /// commit their output but not their removal from the GroupByKey's
    /// state, and a restart after the commit would fire them again.
    pub fn after_barrier(&self, who: &str) -> bool {
        self.open.as_ref().is_some_and(|c| c.phase == Phase::Aligning && c.answered.contains(who))
    }

    /// The stage answered flush `id`: the open cycle, if that flush is its
    /// current one (a stale answer is ignored).
    pub fn flushed(&mut self, id: u64) -> Option<&mut Cycle> {
        self.open.as_mut().filter(|c| c.id == id && c.phase == Phase::Flushing)
    }

    /// Whether the open cycle may fire another round of timers (and then
    /// flush again); counts the round.
    pub fn next_timer_round(&mut self) -> bool {
        match self.open.as_mut() {
            Some(c) if c.phase == Phase::Flushing && c.timer_rounds < TIMER_ROUNDS => {
                c.timer_rounds += 1;
                true
            }
            _ => false,
        }
    }

    /// Moves the open cycle on to `to`, checking the order.
    pub fn advance(&mut self, to: Phase) -> Result<&mut Cycle, String> {
        let c = self.open.as_mut().ok_or_else(|| format!("no commit cycle is open to move to {to:?}"))?;
        let ok = matches!((c.phase, to), (Phase::Flushing, Phase::Writing) | (Phase::Writing, Phase::Committing));
        if !ok {
            return Err(format!("commit cycle {} cannot go from {:?} to {to:?}", c.id, c.phase));
        }
        c.phase = to;
        Ok(c)
    }

    /// A commit attempt failed retriably: whether to try again.
    pub fn retry(&mut self) -> bool {
        match self.open.as_mut() {
            Some(c) if c.phase == Phase::Committing && c.attempts + 1 < COMMIT_ATTEMPTS => {
                c.attempts += 1;
                true
            }
            _ => false,
        }
    }

    /// The open cycle committed: closes it and records how long it took.
    pub fn committed(&mut self, now_ms: i64) -> Result<Cycle, String> {
        match self.open.take() {
            Some(c) if c.phase == Phase::Committing => {
                self.durations.record((now_ms - c.started_ms).max(0) as u64);
                self.last_committed_ms = Some(now_ms);
                Ok(c)
            }
            Some(c) => {
                let e = format!("commit cycle {} committed while {:?}", c.id, c.phase);
                self.open = Some(c);
                Err(e)
            }
            None => Err("no commit cycle is open to commit".into()),
        }
    }

    /// Drops the open cycle (the task stops without committing it).
    pub fn abandon(&mut self) -> Option<Cycle> {
        self.open.take()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_cycle_at_a_time_in_order_flush_write_commit() {
        let mut cycles = Cycles::new();
        let id = cycles.begin(1_000, []).unwrap().id;
        assert!(cycles.begin(1_001, []).is_none(), "a second cycle waits for the first");
        assert!(cycles.advance(Phase::Committing).is_err(), "nothing commits before it is written");
        assert!(cycles.committed(1_002).is_err());
        assert!(cycles.flushed(id + 1).is_none(), "a stale flush answer is ignored");
        assert!(cycles.flushed(id).is_some());
        cycles.advance(Phase::Writing).unwrap();
        assert!(cycles.flushed(id).is_none(), "flushed only once");
        cycles.advance(Phase::Committing).unwrap();
        let c = cycles.committed(1_250).unwrap();
        assert_eq!(c.id, id);
        assert!(!cycles.is_open());
        assert_eq!(cycles.durations.max(), 250);
        let next = cycles.begin(2_000, []).unwrap();
        assert_eq!(next.id, id + 1, "ids only grow");
    }

    #[test]
    fn timer_rounds_are_bounded_per_cycle() {
        let mut cycles = Cycles::new();
        cycles.begin(0, []).unwrap();
        for _ in 0..TIMER_ROUNDS {
            assert!(cycles.next_timer_round());
        }
        assert!(!cycles.next_timer_round(), "the rest waits for the next cycle");
        cycles.advance(Phase::Writing).unwrap();
        assert!(!cycles.next_timer_round(), "no timers fire once writing began");
    }

    #[test]
    fn retriable_commits_are_retried_a_bounded_number_of_times() {
        let mut cycles = Cycles::new();
        cycles.begin(0, []).unwrap();
        assert!(!cycles.retry(), "only a commit is retried");
        cycles.advance(Phase::Writing).unwrap();
        cycles.advance(Phase::Committing).unwrap();
        let mut tries = 1;
        while cycles.retry() {
            tries += 1;
        }
        assert_eq!(tries, COMMIT_ATTEMPTS);
        assert!(cycles.open().is_some(), "giving up is the caller's decision");
    }

    #[test]
    fn an_abandoned_cycle_records_no_duration_and_frees_the_slot() {
        let mut cycles = Cycles::new();
        cycles.begin(0, []).unwrap();
        assert!(cycles.abandon().is_some());
        assert_eq!(cycles.durations.count(), 0);
        assert!(cycles.begin(5, []).is_some());
    }

    #[test]
    fn a_cycle_reaching_the_end_of_input_is_final() {
        let mut cycles = Cycles::new();
        let c = cycles.begin(0, []).unwrap();
        assert!(!c.is_final());
        c.watermark = Watermark::PosInf;
        assert!(c.is_final());
    }

    #[test]
    fn a_cycle_flushes_only_once_every_actor_answered_its_barrier() {
        let mut cycles = Cycles::new();
        let id = cycles.begin(0, ["watermarks".to_string(), "gbk a".to_string()]).unwrap().id;
        assert!(cycles.is_aligning());
        assert!(cycles.flushed(id).is_none(), "no flush before alignment");
        assert!(cycles.advance(Phase::Writing).is_err());
        assert!(cycles.barrier_answered(id + 1, "gbk a").is_none(), "a stale barrier answer is ignored");
        assert!(cycles.barrier_answered(id, "someone else").is_none());
        assert!(!cycles.after_barrier("gbk a"), "before its answer, its panes belong to this cycle");
        assert!(cycles.barrier_answered(id, "gbk a").is_some());
        assert!(!cycles.aligned("gbk a"));
        assert!(cycles.after_barrier("gbk a"), "after its answer, its panes wait for this cycle's flush");
        assert!(!cycles.after_barrier("watermarks"), "who has not answered still sends into this cycle");
        assert!(cycles.barrier_answered(id, "gbk a").is_none(), "counted once");
        assert!(cycles.barrier_answered(id, "watermarks").is_some());
        assert!(cycles.aligned("watermarks"), "the last answer aligns the cycle");
        assert!(!cycles.is_aligning());
        assert!(!cycles.after_barrier("gbk a"), "once the flush is sent, panes go to the stage behind it");
        assert!(cycles.flushed(id).is_some());
    }

    #[test]
    fn output_after_a_barrier_answer_waits_for_the_flush_of_that_cycle_only() {
        let mut cycles = Cycles::new();
        let actors = ["watermarks", "gbk a", "gbk b"].map(String::from);
        let first = cycles.begin(0, actors.clone()).unwrap().id;
        for who in ["watermarks", "gbk a"] {
            assert!(cycles.barrier_answered(first, who).is_some());
            cycles.aligned(who);
        }
        assert!(cycles.after_barrier("gbk a"));
        assert!(!cycles.after_barrier("gbk b"), "b's panes before its answer are state of this cycle");
        assert!(cycles.barrier_answered(first, "gbk b").is_some());
        assert!(cycles.aligned("gbk b"));
        assert!(!cycles.after_barrier("gbk a") && !cycles.after_barrier("gbk b"));
        // The cycle commits; the next one starts with nobody answered.
        cycles.advance(Phase::Writing).unwrap();
        cycles.advance(Phase::Committing).unwrap();
        cycles.committed(10).unwrap();
        let second = cycles.begin(20, actors).unwrap();
        assert_eq!(second.barrier_hold, Watermark::PosInf, "nothing holds before the answers");
        assert!(!cycles.after_barrier("gbk a"), "answers of an earlier cycle do not count");
        assert!(!cycles.after_barrier("nobody"));
    }
}
