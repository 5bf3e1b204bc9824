//! A task's identity, and how it is written in names and records.

/// Identifies a task: the unit that owns one partition of a sub-topology's inputs.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct TaskId {
    pub sub_topology: u32,
    pub partition: u32,
}

impl std::fmt::Display for TaskId {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}_{}", self.sub_topology, self.partition)
    }
}

impl std::str::FromStr for TaskId {
    type Err = String;

    /// Reads `<sub-topology>_<partition>`, as `Display` writes it.
    fn from_str(s: &str) -> Result<TaskId, String> {
        let (sub, partition) = s.split_once('_').ok_or_else(|| format!("'{s}' is not a task id"))?;
        let number = |n: &str| n.parse::<u32>().map_err(|_| format!("'{s}' is not a task id"));
        Ok(TaskId { sub_topology: number(sub)?, partition: number(partition)? })
    }
}
