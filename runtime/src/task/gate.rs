//! What reaches a task's stage while a commit cycle closes, and what waits.
//!
//! Two rules keep a cycle's commit exact:
//!
//! 1. Panes a GroupByKey fires after it answered the open cycle's barrier
//!    (while another actor has not) are state of the next cycle: their
//!    removal from the GroupByKey is not in this cycle's changes, so they
//!    reach the stage only behind this cycle's flush (`Cycles::after_barrier`
//!    tells which).
//! 2. A stage with timers decides which fire once its flush completed, from
//!    what every bundle before the flush set; a bundle of later data in
//!    between could re-set a timer about to fire, which would then fire
//!    twice. So from the flush until the due timers were sent the gate is
//!    closed: queued records wait (the pump asks `is_closed`), and side
//!    records and panes are parked here.
//!
//! When the gate opens, parked panes go first (they are older than any
//! queued record), then side records in the order they came.
use std::collections::VecDeque;

/// Whether input reaches the stage.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum GateState {
    /// Input, side records and panes reach the stage.
    #[default]
    Open,
    /// The stage of a task with timers was flushed: nothing reaches it
    /// until the cycle's due timers were sent.
    DecidingTimers,
}

/// The gate in front of a task's stage, generic over side records `S` and
/// pane batches `P` (the actor's types; fakes in tests).
#[derive(Debug)]
pub struct InputGate<S, P> {
    state: GateState,
    side: VecDeque<S>,
    panes: VecDeque<P>,
}

impl<S, P> Default for InputGate<S, P> {
    fn default() -> Self {
        InputGate { state: GateState::Open, side: VecDeque::new(), panes: VecDeque::new() }
    }
}

/// What waited behind a closed gate, in the order it goes to the stage.
#[derive(Debug, PartialEq, Eq)]
pub struct Opened<S, P> {
    pub panes: Vec<P>,
    pub side: Vec<S>,
}

impl<S, P> InputGate<S, P> {
    pub fn state(&self) -> GateState {
        self.state
    }

    pub fn is_closed(&self) -> bool {
        self.state == GateState::DecidingTimers
    }

    /// Whether panes wait here (the task is not idle).
    pub fn has_parked_panes(&self) -> bool {
        !self.panes.is_empty()
    }

    /// A side record: given back to hand over now, or kept while closed.
    pub fn side(&mut self, record: S) -> Option<S> {
        if self.is_closed() {
            self.side.push_back(record);
            return None;
        }
        Some(record)
    }

    /// Panes a GroupByKey fired; `after_barrier`: it answered the open
    /// cycle's barrier already. Given back to hand over now, or parked.
    pub fn panes(&mut self, panes: P, after_barrier: bool) -> Option<P> {
        if self.is_closed() || after_barrier {
            self.panes.push_back(panes);
            return None;
        }
        Some(panes)
    }

    /// The open cycle's barrier aligned and the stage's flush was sent. A
    /// stage with timers closes the gate until they are decided; otherwise
    /// the panes parked behind the barrier go now, behind the flush.
    pub fn flush_sent(&mut self, stage_has_timers: bool) -> Vec<P> {
        if stage_has_timers {
            self.state = GateState::DecidingTimers;
            return Vec::new();
        }
        self.panes.drain(..).collect()
    }

    /// The cycle's due timers were sent: what waited, to hand over now.
    /// Nothing if the gate was open (its panes went at the flush).
    pub fn open(&mut self) -> Opened<S, P> {
        if !self.is_closed() {
            return Opened { panes: Vec::new(), side: Vec::new() };
        }
        self.state = GateState::Open;
        Opened { panes: self.panes.drain(..).collect(), side: self.side.drain(..).collect() }
    }

    /// The task stops: side records it kept are dropped (its next owner
    /// reads them again from the side topic's start).
    pub fn drop_side(&mut self) {
        self.side.clear();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    type Gate = InputGate<&'static str, &'static str>;

    #[test]
    fn an_open_gate_lets_everything_through_but_panes_of_the_next_cycle() {
        let mut g = Gate::default();
        assert_eq!(g.side("s1"), Some("s1"));
        assert_eq!(g.panes("p1", false), Some("p1"));
        assert_eq!(g.panes("p2", true), None, "its GroupByKey answered the barrier: next cycle");
        assert!(g.has_parked_panes());
        // No timers: they go right behind the flush.
        assert_eq!(g.flush_sent(false), vec!["p2"]);
        assert!(!g.has_parked_panes());
        assert_eq!(g.open(), Opened { panes: vec![], side: vec![] }, "opening an open gate gives nothing");
        assert_eq!(g.state(), GateState::Open);
    }

    #[test]
    fn a_stage_with_timers_gets_nothing_between_its_flush_and_its_timers() {
        let mut g = Gate::default();
        assert_eq!(g.panes("before", true), None);
        assert!(g.flush_sent(true).is_empty(), "the timers are decided first");
        assert!(g.is_closed());
        assert_eq!(g.side("s1"), None);
        assert_eq!(g.panes("p1", false), None, "closed: even panes of this cycle wait");
        assert_eq!(g.side("s2"), None);
        assert_eq!(g.open(), Opened { panes: vec!["before", "p1"], side: vec!["s1", "s2"] }, "panes first, each in order");
        assert!(!g.is_closed());
        assert_eq!(g.side("s3"), Some("s3"));
    }

    #[test]
    fn a_stopping_task_drops_the_side_records_it_kept_but_not_the_panes() {
        let mut g = Gate::default();
        g.flush_sent(true);
        g.side("s1");
        g.panes("p1", false);
        g.drop_side();
        assert_eq!(g.open(), Opened { panes: vec!["p1"], side: vec![] });
    }

    /// The exactly-once case a task with two GroupByKeys meets: A answers
    /// the barrier (its state changes of cycle 1 go with the answer), then
    /// fires panes before B answers. They must reach the stage only behind
    /// cycle 1's flush: had they gone before it, cycle 1 would commit their
    /// output but not their removal from A's state, and a restart after
    /// that commit would fire them again. B's panes before its own answer
    /// are cycle 1's, and go at once.
    #[test]
    fn panes_a_group_by_key_fires_after_answering_go_behind_the_flush() {
        use crate::task::cycle::Cycles;
        let mut cycles = Cycles::new();
        let mut gate: InputGate<(), &str> = InputGate::default();
        let mut to_stage: Vec<&str> = Vec::new();
        let id = cycles.begin(0, ["a".to_string(), "b".to_string()]).expect("no cycle open").id;
        assert!(cycles.barrier_answered(id, "a").is_some());
        assert!(!cycles.aligned("a"), "b has not answered");
        for (who, panes) in [("a", "a's panes after its answer"), ("b", "b's panes before its answer")] {
            if let Some(p) = gate.panes(panes, cycles.after_barrier(who)) {
                to_stage.push(p);
            }
        }
        assert!(cycles.barrier_answered(id, "b").is_some());
        assert!(cycles.aligned("b"));
        to_stage.push("flush 1");
        to_stage.extend(gate.flush_sent(false));
        assert_eq!(to_stage, ["b's panes before its answer", "flush 1", "a's panes after its answer"]);
        // With timers, they wait for the timers too.
        let (mut cycles, mut gate) = (Cycles::new(), InputGate::<(), &str>::default());
        let id = cycles.begin(0, ["a".to_string(), "b".to_string()]).unwrap().id;
        cycles.barrier_answered(id, "a");
        cycles.aligned("a");
        assert_eq!(gate.panes("late", cycles.after_barrier("a")), None);
        cycles.barrier_answered(id, "b");
        cycles.aligned("b");
        assert!(gate.flush_sent(true).is_empty());
        assert!(!cycles.after_barrier("a"), "flushing: the barrier is behind");
        assert_eq!(gate.open().panes, ["late"]);
    }
}
