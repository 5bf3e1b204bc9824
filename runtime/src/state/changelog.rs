//! The one contract of a task's changelog-backed stores (user state,
//! timers, elements held for side inputs, deferred work): a commit cycle
//! takes each store's changes once its flush completed, as entries keyed
//! in the task's changelog layout (`task_state`), and writes them with its
//! offsets; the local store applies them once the cycle committed.
//! GroupByKeys hand theirs over with their answer to the cycle's barrier
//! (`gbk::state`, in the same entry type, keyed within the GroupByKey).

/// A changelog entry: its key, and its value (`None` deletes it).
pub type Entry = (Vec<u8>, Option<Vec<u8>>);

/// A store whose changes a commit cycle makes durable.
pub trait ChangelogStore {
    /// The entries changed since the last call, keyed in the task's
    /// changelog layout; each change is taken once.
    fn take_entries(&mut self) -> Vec<Entry>;
}
