//! The pure core of beam-kafka: what a pipeline means and how it maps onto
//! Kafka, with no I/O, no async, no gRPC and no Kafka client. Everything here is
//! unit-tested without a broker.
pub mod bounded_trie;
pub mod chunks;
pub mod coder;
pub mod coders;
pub mod deferred;
pub mod descriptor;
pub mod envelope;
pub mod expansion;
pub mod expiry;
pub mod failure;
pub mod fusion;
pub mod gbk;
#[cfg(any(test, feature = "fixtures"))]
pub mod gbk_fixtures;
pub mod gbk_merge;
pub mod gbk_state;
pub mod graph;
pub mod harnesses;
pub mod held;
pub mod identity;
pub mod kafka_io;
pub mod kafka_sink;
pub mod kafka_source;
pub mod lift;
pub mod lower;
pub mod multimap_state;
pub mod packed;
mod panes;
pub mod partition;
pub mod pickle;
pub mod progress;
pub mod prometheus;
pub mod row;
pub mod runner_flatten;
pub mod sdf;
pub mod sdk_version;
pub mod side_input;
pub mod spec;
pub mod state_api;
pub mod structure;
pub mod task;
pub mod task_state;
pub mod test_stream;
pub mod timers;
pub mod timestamp;
pub mod topology;
pub mod trigger;
pub mod urns;
pub mod user_state;
pub mod validate;
pub mod watermark;
pub mod window_fns;
pub mod windowed;
pub mod windowing;

pub use beam_kafka_proto::pipeline as pb;
