//! The running dataflow: a job's topology as actix actors over Kafka.
//!
//! Each job runs on its own actix system (a dedicated thread); its arbiters
//! play the part of Kafka Streams' stream threads. A poll loop routes record
//! batches from Kafka partitions to the mailbox of the task supervisor that
//! owns them; supervisors feed stage actors, which run bundles on the SDK
//! harness over the Fn API.
mod bundle_state;
mod cleanup;
pub mod control;
pub mod copies;
mod copy_transaction;
mod group_by_key;
pub mod harnesses;
pub mod identity;
mod impulse;
pub mod job;
mod job_input;
mod job_messages;
mod job_revocation;
mod job_topics;
pub mod kafka;
mod messages;
pub mod output;
mod poller;
pub mod private_dir;
mod side_inputs;
mod source;
mod source_watch;
mod stage;
pub mod standby;
mod start_offsets;
mod state;
pub mod status_board;
mod store;
mod supervision;
mod task;
mod task_start;
pub mod telemetry;
pub mod test_stream;
mod user_io;
mod watermark_aggregator;
mod window_fns;

pub use harnesses::{EnvironmentWorker, Harnesses};
pub use job::{run_job, JobEvent, JobInput, JobOutcome};
pub use source::SourceInput;
