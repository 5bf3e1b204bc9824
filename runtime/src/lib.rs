//! The pure core of beam-kafka: what a pipeline means and how it maps onto
//! Kafka, with no I/O, no async, no gRPC and no Kafka client. Everything here is
//! unit-tested without a broker. Its folders follow the data path: a pipeline
//! is planned (`plan`), its records coded (`codec`), grouped (`gbk`) in event
//! time (`window`) with the rest of a task's state (`state`), by a task whose
//! decisions live in `task`, reading and writing Kafka (`kafka`); `app` is an
//! application across runs, versions and copies, `test_stream` Beam's
//! TestStream, and `metrics` what the runner measures itself.
pub mod app;
pub mod codec;
pub mod gbk;
pub mod kafka;
pub mod metrics;
pub mod plan;
pub mod state;
pub mod task;
pub mod test_stream;
pub mod urns;
pub mod window;

pub use beam_kafka_proto::pipeline as pb;
