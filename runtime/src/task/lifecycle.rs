//! A task's lifecycle, with checked transitions (after Kafka Streams'
//! `Task.State`):
//!
//! ```text
//! Created ──► Restoring ──► Running ──► Finished ──► Closed
//!                 │            │
//!                 │            ├──► Suspended ──► Closed   (fenced, aborted, revoked)
//!                 └────────────┴──► Closed                 (failed, shut down)
//! ```
//!
//! Only a running task handles input or starts a commit cycle; a finished
//! task committed everything it read; a suspended one stopped without
//! committing, and whoever owns the task next redoes what it did not commit.

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum TaskState {
    Created,
    /// Its state is being read back from its changelog.
    Restoring,
    Running,
    /// Its input reached +∞ and its last cycle committed.
    Finished,
    /// Stopped without committing what it did since its last commit.
    Suspended,
    Closed,
}

#[derive(Debug)]
pub struct Lifecycle {
    state: TaskState,
    /// The job drains: the task's input is bounded now, and work it would
    /// delay (a residual's resume time) is done at once, truncated.
    draining: bool,
}

impl Default for Lifecycle {
    fn default() -> Self {
        Lifecycle::new()
    }
}

impl Lifecycle {
    pub fn new() -> Lifecycle {
        Lifecycle { state: TaskState::Created, draining: false }
    }

    pub fn state(&self) -> TaskState {
        self.state
    }

    pub fn is_running(&self) -> bool {
        self.state == TaskState::Running
    }

    /// The job drains (once told, for the rest of the task's life).
    pub fn drain(&mut self) {
        self.draining = true;
    }

    pub fn is_draining(&self) -> bool {
        self.draining
    }

    /// Moves to `to`, or says why it may not.
    pub fn transition(&mut self, to: TaskState) -> Result<(), String> {
        use TaskState::*;
        let allowed = matches!(
            (self.state, to),
            (Created, Restoring)
                | (Restoring, Running)
                | (Running, Finished | Suspended)
                | (Created | Restoring | Running | Finished | Suspended, Closed)
        );
        if !allowed {
            return Err(format!("a task cannot go from {:?} to {to:?}", self.state));
        }
        self.state = to;
        Ok(())
    }

    /// Leaves the running state for `to` if running now; returns whether it
    /// did (a second stop of one task is a no-op, not an error).
    pub fn stop(&mut self, to: TaskState) -> bool {
        self.is_running() && self.transition(to).is_ok()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use TaskState::*;

    fn running() -> Lifecycle {
        let mut l = Lifecycle::new();
        l.transition(Restoring).unwrap();
        l.transition(Running).unwrap();
        l
    }

    #[test]
    fn a_task_restores_runs_finishes_and_closes() {
        let mut l = running();
        assert!(l.is_running());
        assert!(!l.is_draining());
        l.drain();
        assert!(l.is_running() && l.is_draining(), "a draining task still runs");
        l.transition(Finished).unwrap();
        assert!(!l.is_running());
        l.transition(Closed).unwrap();
        assert_eq!(l.state(), Closed);
    }

    #[test]
    fn no_task_runs_before_it_restored_or_after_it_stopped() {
        let mut l = Lifecycle::new();
        assert!(l.transition(Running).is_err(), "running before restoring");
        let mut l = running();
        l.transition(Suspended).unwrap();
        let e = l.transition(Running).unwrap_err();
        assert!(e.contains("Suspended") && e.contains("Running"), "{e}");
        assert!(l.transition(Finished).is_err(), "a suspended task committed nothing");
        l.transition(Closed).unwrap();
        assert!(l.transition(Closed).is_err());
    }

    #[test]
    fn stopping_twice_is_a_no_op() {
        let mut l = running();
        assert!(l.stop(Suspended));
        assert!(!l.stop(Suspended));
        assert!(!l.stop(Finished));
        assert_eq!(l.state(), Suspended);
    }
}
