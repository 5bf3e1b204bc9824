//! What a task hands its stage next, oldest work first.
//!
//! The task supervisor asks this each time the stage may take more
//! (`actors::task::input`), and carries the step out:
//!
//! 1. nothing while the task is stopping, input is blocked (a cycle's
//!    barrier aligns, or its timers are being decided) or the stage has
//!    no room;
//! 2. deferred elements that are due (the rest of a split bundle, delayed
//!    residuals), but only between cycles: a cycle in progress waits for its
//!    own flush, and nothing else goes meanwhile, or later input would take
//!    the room and the deferred set would grow with every split;
//! 3. main input held for side inputs that became ready;
//! 4. closed windows' panes, asked of the GroupByKeys holding them;
//! 5. queued records, unless panes asked for are still coming (they are
//!    older than any queued record).

/// What the task knows when it decides.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct PumpState {
    /// The task runs (not stopping, not failed).
    pub running: bool,
    /// Input is blocked: a barrier aligns, or the cycle's timers are decided.
    pub blocked: bool,
    /// The stage has room for more.
    pub room: bool,
    /// Deferred elements are due now.
    pub deferred_due: bool,
    /// A commit cycle is open.
    pub cycle_open: bool,
    /// Held main input may be released (a side input became ready).
    pub releasing: bool,
    /// A GroupByKey holds closed panes nobody asked for yet.
    pub closed_to_ask: bool,
    /// Panes asked for (or closed by a watermark step) are still coming.
    pub firing: bool,
    /// Records wait in the queue.
    pub queued: bool,
}

/// The next thing to do.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Step {
    /// Stop handing over for now.
    Wait,
    ReleaseDeferred,
    ReleaseHeld,
    FireClosedWindows,
    HandRecords,
}

/// The next step from `s` (see the module's order).
pub fn next_step(s: PumpState) -> Step {
    if !s.running || s.blocked || !s.room {
        return Step::Wait;
    }
    if s.deferred_due {
        return if s.cycle_open { Step::Wait } else { Step::ReleaseDeferred };
    }
    if s.releasing {
        return Step::ReleaseHeld;
    }
    if s.closed_to_ask {
        return Step::FireClosedWindows;
    }
    if s.firing || !s.queued {
        return Step::Wait;
    }
    Step::HandRecords
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Everything waiting, a running task with room between cycles.
    fn busy() -> PumpState {
        PumpState {
            running: true,
            blocked: false,
            room: true,
            deferred_due: true,
            cycle_open: false,
            releasing: true,
            closed_to_ask: true,
            firing: true,
            queued: true,
        }
    }

    #[test]
    fn the_oldest_work_goes_first() {
        let rows: [(&str, PumpState, Step); 12] = [
            ("deferred before everything", busy(), Step::ReleaseDeferred),
            ("deferred waits for the open cycle, and holds the rest back", PumpState { cycle_open: true, ..busy() }, Step::Wait),
            ("then held input", PumpState { deferred_due: false, ..busy() }, Step::ReleaseHeld),
            ("then closed windows", PumpState { deferred_due: false, releasing: false, ..busy() }, Step::FireClosedWindows),
            (
                "records wait for panes on their way",
                PumpState { deferred_due: false, releasing: false, closed_to_ask: false, ..busy() },
                Step::Wait,
            ),
            (
                "then records",
                PumpState { deferred_due: false, releasing: false, closed_to_ask: false, firing: false, ..busy() },
                Step::HandRecords,
            ),
            (
                "nothing queued",
                PumpState { queued: false, firing: false, ..PumpState { running: true, room: true, ..Default::default() } },
                Step::Wait,
            ),
            ("a stopping task hands nothing", PumpState { running: false, ..busy() }, Step::Wait),
            ("blocked input hands nothing", PumpState { blocked: true, ..busy() }, Step::Wait),
            ("no room, nothing", PumpState { room: false, ..busy() }, Step::Wait),
            ("held input goes during a cycle", PumpState { deferred_due: false, cycle_open: true, ..busy() }, Step::ReleaseHeld),
            (
                "records go during a cycle",
                PumpState { deferred_due: false, cycle_open: true, releasing: false, closed_to_ask: false, firing: false, ..busy() },
                Step::HandRecords,
            ),
        ];
        for (what, state, want) in rows {
            assert_eq!(next_step(state), want, "{what}");
        }
    }
}
