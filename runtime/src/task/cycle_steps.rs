//! What a task does once a cycle's flush completed and once the cycle
//! committed, in order: the steps are data, so their order is tested here,
//! and the task supervisor (`actors::task::cycle`) carries each out.
//!
//! After the flush (and the timer rounds it fired): user state of windows
//! the watermark passed is dropped and expiry timers are armed before the
//! stores' changes are taken, so both join this cycle; under exactly_once
//! the stage may run later bundles only once the changes were taken (their
//! changes belong to the next cycle); the writes are queued before input
//! flows again.
//!
//! After the commit the order matters:
//! - the stage hears of the commit (bundles the cycle covered may be
//!   finalized) before it may write again (`ResumeStage`, exactly_once);
//!   a task handing over never resumes it: what ran during its last commit
//!   is its next owner's to redo;
//! - deferred work is marked durable before the pump runs, which hands it
//!   to the stage again, and the pump runs before the next cycle opens, so
//!   that cycle covers it;
//! - the local store takes the cycle's changes before the GroupByKeys hear
//!   of the commit: a GroupByKey then lets panes it wrote leave memory, and
//!   reads them back from the store;
//! - a task handing over stops right after the commit (its partitions may
//!   go), unless the cycle was its last, which ends once its bundles were
//!   finalized (the job may stop the harness right after).

/// One step after a cycle's flush completed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FlushStep {
    /// Drop user state of windows the watermark passed (unless a timer of
    /// the window still reads it).
    ExpireUserState,
    /// Arm the OnWindowExpiration timers of the cells the flushed bundles
    /// wrote.
    ArmWindowExpiries,
    /// Take every store's changes into the cycle, and the holds of timers
    /// and deferred work into its output watermark.
    TakeChanges,
    /// Let the stage run bundles again (exactly_once: their writes wait for
    /// the commit).
    ReleaseStage,
    /// Queue the watermark reports and changelog entries, then commit.
    Write,
    /// Let input that waited for the timers through (`gate`).
    OpenGate,
}

/// The steps once the flush completed and no (more) timers fire in it.
pub fn after_flush(transactional: bool) -> Vec<FlushStep> {
    use FlushStep::*;
    let mut steps = vec![ExpireUserState, ArmWindowExpiries, TakeChanges];
    if transactional {
        steps.push(ReleaseStage);
    }
    steps.extend([Write, OpenGate]);
    steps
}

/// What the task knows of the cycle that committed.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Committed {
    /// This incarnation's first commit: its restart backoff starts over.
    pub first: bool,
    /// The cycle covered the end of the task's input.
    pub last: bool,
    /// exactly_once: the stage's writes wait for the commit.
    pub transactional: bool,
    /// The task leaves after this commit (`leaving::Leaving::leaves_now`).
    pub hands_over: bool,
}

/// One step, carried out by the task supervisor.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Step {
    /// Tell the job the incarnation works.
    SayWorks,
    /// Count the cycle (latency, span) in the task's status.
    RecordCycle,
    /// Leave the copy's transaction, with nothing in it.
    LeaveTransaction,
    /// Tell the stage (`await_finalization`: the task's end waits for the
    /// covered bundles' finalization).
    TellStage {
        await_finalization: bool,
    },
    /// Tell a TestStream's driver which step the task has processed.
    TellProgress,
    /// Let the stage write what bundles ran during the commit.
    ResumeStage,
    /// Deferred work this cycle wrote is durable: it may run again.
    DeferredSaved,
    /// Bounded reads count what the cycle covered as committed.
    SourcesCommitted,
    /// Apply the cycle's changes to the local store (a failure stops the
    /// task: the changelog has them, and a restart rebuilds the store).
    ApplyToStore,
    TellGroupByKeys,
    /// Late drops warned about, offsets to the user's consumer group,
    /// committed metrics.
    Report,
    /// Stop: the partitions go to their next owner.
    HandOver,
    /// Hand the stage what waits (deferred elements first).
    Pump,
    /// End once the stage finalized the covered bundles.
    FinishOnceFinalized,
    /// Open or ask for the next cycle if one was asked for meanwhile or
    /// something is worth one (`cycle_requests::CycleRequests::committed`).
    NextCycle,
}

/// The steps after a commit, in order.
pub fn after_commit(c: Committed) -> Vec<Step> {
    use Step::*;
    let mut steps = Vec::with_capacity(16);
    if c.first {
        steps.push(SayWorks);
    }
    steps.push(RecordCycle);
    if c.last {
        steps.push(LeaveTransaction);
    }
    steps.extend([TellStage { await_finalization: c.last }, TellProgress]);
    if c.transactional && !c.hands_over {
        steps.push(ResumeStage);
    }
    steps.extend([DeferredSaved, SourcesCommitted, ApplyToStore, TellGroupByKeys, Report]);
    if c.hands_over && !c.last {
        steps.push(HandOver);
        return steps;
    }
    steps.push(Pump);
    steps.push(if c.last { FinishOnceFinalized } else { NextCycle });
    steps
}

/// Whether an at_least_once offset commit must be synchronous: the
/// partitions go right after it (the task's last cycle, a hand-over), and
/// their next owner must find it.
pub fn commit_synchronously(last: bool, handing_over: bool) -> bool {
    last || handing_over
}

#[cfg(test)]
mod tests {
    use super::Step::*;
    use super::*;

    fn position(steps: &[Step], step: Step) -> usize {
        steps.iter().position(|s| *s == step).unwrap_or_else(|| panic!("{step:?} missing from {steps:?}"))
    }

    #[test]
    fn a_running_task_resumes_its_stage_pumps_and_goes_on_to_the_next_cycle() {
        let steps = after_commit(Committed { first: true, transactional: true, ..Committed::default() });
        assert_eq!(
            steps,
            [
                SayWorks,
                RecordCycle,
                TellStage { await_finalization: false },
                TellProgress,
                ResumeStage,
                DeferredSaved,
                SourcesCommitted,
                ApplyToStore,
                TellGroupByKeys,
                Report,
                Pump,
                NextCycle
            ]
        );
        let later = after_commit(Committed { transactional: false, ..Committed::default() });
        assert!(!later.contains(&SayWorks) && !later.contains(&ResumeStage), "{later:?}");
    }

    #[test]
    fn the_order_that_keeps_a_commit_exact_holds_in_every_case() {
        for first in [false, true] {
            for last in [false, true] {
                for transactional in [false, true] {
                    for hands_over in [false, true] {
                        let c = Committed { first, last, transactional, hands_over };
                        let s = after_commit(c);
                        let at = |step| position(&s, step);
                        assert!(at(TellStage { await_finalization: last }) < at(ApplyToStore), "{c:?}");
                        assert!(at(ApplyToStore) < at(TellGroupByKeys), "the store first: {c:?}");
                        if s.contains(&ResumeStage) {
                            assert!(at(TellStage { await_finalization: last }) < at(ResumeStage), "{c:?}");
                        }
                        if s.contains(&Pump) {
                            assert!(at(DeferredSaved) < at(Pump), "{c:?}");
                        }
                        assert_eq!(s.contains(&ResumeStage), transactional && !hands_over, "{c:?}");
                        assert_eq!(s.contains(&LeaveTransaction), last, "{c:?}");
                        // Exactly one way on, and it is the last step.
                        let ends: Vec<&Step> = s.iter().filter(|x| matches!(x, HandOver | FinishOnceFinalized | NextCycle)).collect();
                        assert_eq!(ends.len(), 1, "{c:?}: {s:?}");
                        assert_eq!(s.last(), Some(ends[0]), "{c:?}");
                        let expected = if last {
                            FinishOnceFinalized
                        } else if hands_over {
                            HandOver
                        } else {
                            NextCycle
                        };
                        assert_eq!(*ends[0], expected, "{c:?}");
                    }
                }
            }
        }
    }

    #[test]
    fn after_a_flush_the_changes_are_taken_before_the_stage_runs_on_and_written_before_input_flows() {
        use FlushStep::*;
        assert_eq!(after_flush(false), [ExpireUserState, ArmWindowExpiries, TakeChanges, Write, OpenGate]);
        let s = after_flush(true);
        let at = |step| s.iter().position(|x| *x == step).unwrap();
        assert!(at(ExpireUserState) < at(TakeChanges) && at(ArmWindowExpiries) < at(TakeChanges), "{s:?}");
        assert!(at(TakeChanges) < at(ReleaseStage), "later bundles' changes are the next cycle's: {s:?}");
        assert!(at(Write) < at(OpenGate), "{s:?}");
    }

    #[test]
    fn offsets_commit_synchronously_only_when_the_partitions_go_right_after() {
        assert!(!commit_synchronously(false, false));
        assert!(commit_synchronously(true, false));
        assert!(commit_synchronously(false, true));
    }
}
