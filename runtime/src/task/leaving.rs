//! Whether a task hands its partitions over (incremental rebalancing), and
//! when it may stop: once the cycle it handed in as its last committed.
//!
//! Under exactly_once a cycle already handed in to the copy's transaction
//! when the hand-over was asked is not the last: one more follows, marked
//! last, so the transaction knows the task leaves before its next owner
//! starts. Without transactions the next commit is the last.

/// A task's way out; `D` is what it tells once it handed over.
#[derive(Debug, Default)]
pub enum Leaving<D> {
    #[default]
    Staying,
    HandingOver {
        done: D,
        /// The cycle handed in last was marked the task's last here.
        last_handed_in: bool,
    },
}

impl<D> Leaving<D> {
    /// The hand-over was asked for; `done` is told once it is over.
    pub fn hand_over(&mut self, done: D) {
        *self = Leaving::HandingOver { done, last_handed_in: false };
    }

    pub fn is_handing_over(&self) -> bool {
        matches!(self, Leaving::HandingOver { .. })
    }

    /// A cycle is handed in to the copy's transaction: whether it is marked
    /// the task's last.
    pub fn hand_in(&mut self) -> bool {
        match self {
            Leaving::HandingOver { last_handed_in, .. } => {
                *last_handed_in = true;
                true
            }
            Leaving::Staying => false,
        }
    }

    /// Whether the cycle that just committed was the task's last here.
    pub fn leaves_now(&self, transactional: bool) -> bool {
        match self {
            Leaving::HandingOver { last_handed_in, .. } => !transactional || *last_handed_in,
            Leaving::Staying => false,
        }
    }

    /// The hand-over is over: what to tell, if one was asked for.
    pub fn done(&mut self) -> Option<D> {
        match std::mem::take(self) {
            Leaving::HandingOver { done, .. } => Some(done),
            Leaving::Staying => None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_task_that_stays_never_leaves() {
        let mut l: Leaving<&str> = Leaving::Staying;
        assert!(!l.is_handing_over());
        assert!(!l.hand_in(), "its cycles are not marked last");
        assert!(!l.leaves_now(false) && !l.leaves_now(true));
        assert_eq!(l.done(), None);
    }

    #[test]
    fn without_transactions_the_next_commit_is_the_last() {
        let mut l = Leaving::Staying;
        l.hand_over("done");
        assert!(l.is_handing_over());
        assert!(l.leaves_now(false));
        assert_eq!(l.done(), Some("done"));
        assert!(!l.is_handing_over(), "told once");
    }

    #[test]
    fn under_exactly_once_only_a_cycle_handed_in_as_the_last_ends_the_task() {
        let mut l = Leaving::Staying;
        // A cycle handed in before the hand-over was asked commits: not the last.
        assert!(!l.hand_in());
        l.hand_over("done");
        assert!(!l.leaves_now(true), "the cycle under way was not marked last");
        assert!(l.hand_in(), "the next is");
        assert!(l.leaves_now(true));
        assert_eq!(l.done(), Some("done"));
    }
}
