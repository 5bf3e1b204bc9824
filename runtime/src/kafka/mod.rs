//! Kafka as the runner uses it, free of I/O: Beam's Kafka transforms
//! (`io`, `source`, `sink`), the default partitioner (`partition`), source
//! topics that grow (`source_growth`), what an error from Kafka or the store
//! means for a task (`failure`) and the partition of a topic
//! (`topic_partition`).
pub mod failure;
pub mod io;
pub mod partition;
pub mod sink;
pub mod source;
pub mod source_growth;
pub mod topic_partition;
