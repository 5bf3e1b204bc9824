//! When a task opens its next commit cycle.
//!
//! One cycle is open at a time. A cycle asked for while one is open opens
//! after it commits. Under exactly_once the copy's transaction decides when
//! cycles open: the task asks for a round (once per round, again only when
//! urgent), and the round's start opens its cycle, or, if the last round's
//! cycle still waits for its commit, the cycle after it.

/// What follows the open cycle once it committed.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord)]
enum Then {
    #[default]
    Nothing,
    /// Something was asked for meanwhile: ask again (a round, or a cycle).
    Ask,
    /// The transaction's round began meanwhile: open its cycle at once.
    Open,
}

/// What to do about a request for a cycle.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Request {
    /// Nothing now (one is open: the next follows it).
    Later,
    /// Open a cycle now.
    Open,
    /// Ask the copy's transaction for a round (exactly_once).
    AskRound,
}

/// What to do once the open cycle committed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Next {
    Nothing,
    /// Open a cycle at once (a round began meanwhile).
    Open,
    /// Ask for one, as `CycleRequests::request` decides.
    Ask,
}

/// What a task holds that only a cycle commits, as its commit interval's
/// tick sees it.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Uncommitted {
    /// Offsets were handed to the stage or a GroupByKey since the last commit.
    pub offsets: bool,
    /// The output watermark is past the one last reported downstream.
    pub watermark: bool,
    /// A timer is due (a cycle fires it).
    pub timers_due: bool,
    /// Deferred work changed (a split, a residual, a release).
    pub deferred: bool,
    /// A TestStream step is done here and waits to be passed on.
    pub progress: bool,
}

/// The task's requests for cycles.
#[derive(Clone, Copy, Debug, Default)]
pub struct CycleRequests {
    then: Then,
    /// A round was asked for and has not begun yet.
    round_asked: bool,
    /// A GroupByKey fired panes on its own (a processing-time trigger, a
    /// watermark step) since the last snapshot.
    panes_fired: bool,
}

impl CycleRequests {
    /// The task has something to commit (`open`: a cycle is open;
    /// `transactional`: the copy's transaction opens cycles).
    pub fn request(&mut self, open: bool, transactional: bool) -> Request {
        if open {
            self.then = self.then.max(Then::Ask);
            return Request::Later;
        }
        if transactional {
            self.then = Then::Nothing;
            return Request::AskRound;
        }
        Request::Open
    }

    /// Whether to send the transaction a request for a round: once per
    /// round, and again when `urgent` (the input ended, a TestStream step
    /// or a drain or a hand-over waits).
    pub fn ask_round(&mut self, urgent: bool) -> bool {
        if self.round_asked && !urgent {
            return false;
        }
        self.round_asked = true;
        true
    }

    /// The transaction's round began: whether to open a cycle now (`open`:
    /// one is still open, waiting for the last round's commit; it opens
    /// after that).
    pub fn round_began(&mut self, open: bool) -> bool {
        self.round_asked = false;
        if open {
            self.then = Then::Open;
            return false;
        }
        true
    }

    /// A cycle opened: it covers every request so far.
    pub fn opened(&mut self) {
        self.then = Then::Nothing;
    }

    /// The open cycle committed; `more`: something since its snapshot is
    /// worth a cycle anyway (a hand-over, the watermark moved, timers due).
    pub fn committed(&mut self, more: bool) -> Next {
        match std::mem::take(&mut self.then) {
            Then::Open => Next::Open,
            Then::Ask => Next::Ask,
            Then::Nothing if more => Next::Ask,
            Then::Nothing => Next::Nothing,
        }
    }

    /// A GroupByKey fired panes on its own: their removal from its state
    /// is worth a cycle.
    pub fn panes_fired(&mut self) {
        self.panes_fired = true;
    }

    /// A cycle's snapshot was taken: it covers the panes fired so far.
    pub fn snapshot_taken(&mut self) {
        self.panes_fired = false;
    }

    /// Whether the commit interval's tick asks for a cycle: something only
    /// a commit makes durable or visible is waiting.
    pub fn worth_a_cycle(&self, u: Uncommitted) -> bool {
        let Uncommitted { offsets, watermark, timers_due, deferred, progress } = u;
        offsets || watermark || timers_due || deferred || progress || self.panes_fired
    }

    /// Whether a cycle was asked for while the open one runs.
    pub fn wanted(&self) -> bool {
        self.then != Then::Nothing
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_tick_asks_for_a_cycle_only_when_something_waits_for_a_commit() {
        let mut r = CycleRequests::default();
        assert!(!r.worth_a_cycle(Uncommitted::default()), "an idle task commits nothing");
        let one = |f: fn(&mut Uncommitted)| {
            let mut u = Uncommitted::default();
            f(&mut u);
            u
        };
        for (what, u) in [
            ("offsets", one(|u| u.offsets = true)),
            ("watermark", one(|u| u.watermark = true)),
            ("timers", one(|u| u.timers_due = true)),
            ("deferred", one(|u| u.deferred = true)),
            ("progress", one(|u| u.progress = true)),
        ] {
            assert!(r.worth_a_cycle(u), "{what}");
        }
        r.panes_fired();
        assert!(r.worth_a_cycle(Uncommitted::default()), "panes fired on their own");
        r.snapshot_taken();
        assert!(!r.worth_a_cycle(Uncommitted::default()), "the snapshot covers them");
    }

    #[test]
    fn without_transactions_a_request_opens_a_cycle_or_follows_the_open_one() {
        let mut r = CycleRequests::default();
        assert_eq!(r.request(false, false), Request::Open);
        r.opened();
        assert_eq!(r.committed(false), Next::Nothing, "nothing asked meanwhile");
        assert_eq!(r.request(true, false), Request::Later);
        assert_eq!(r.request(true, false), Request::Later, "asked twice, one cycle follows");
        assert!(r.wanted());
        assert_eq!(r.committed(false), Next::Ask);
        assert_eq!(r.committed(false), Next::Nothing, "taken");
        assert_eq!(r.committed(true), Next::Ask, "the watermark moved, say");
    }

    #[test]
    fn a_round_is_asked_once_unless_urgent_and_its_start_opens_the_cycle() {
        let mut r = CycleRequests::default();
        assert_eq!(r.request(false, true), Request::AskRound);
        assert!(r.ask_round(false));
        assert!(!r.ask_round(false), "once per round");
        assert!(r.ask_round(true), "again when urgent");
        assert!(r.round_began(false), "no cycle open: it opens now");
        r.opened();
        assert!(r.ask_round(false), "a new round may be asked for");
    }

    #[test]
    fn a_round_that_begins_while_the_last_cycle_waits_opens_the_next_right_after() {
        let mut r = CycleRequests::default();
        assert!(!r.round_began(true));
        assert_eq!(r.request(true, true), Request::Later, "asked meanwhile too");
        assert_eq!(r.committed(false), Next::Open, "the round's start wins over a request");
        r.opened();
        assert_eq!(r.committed(false), Next::Nothing);
    }

    #[test]
    fn a_cycle_that_opens_covers_what_was_asked_before() {
        let mut r = CycleRequests::default();
        r.request(true, false);
        r.opened();
        assert!(!r.wanted());
        assert_eq!(r.committed(false), Next::Nothing);
    }
}
