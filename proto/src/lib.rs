//! Beam's model protos (pipeline, Fn API, Job API, artifacts, expansion) and the
//! runner's record envelope, generated at build time by tonic/prost.
#![allow(clippy::all, missing_docs)]

pub mod pipeline {
    tonic::include_proto!("org.apache.beam.model.pipeline.v1");
}
pub mod fn_execution {
    tonic::include_proto!("org.apache.beam.model.fn_execution.v1");
}
pub mod job_management {
    tonic::include_proto!("org.apache.beam.model.job_management.v1");
}
pub mod expansion {
    tonic::include_proto!("org.apache.beam.model.expansion.v1");
}
pub mod envelope {
    tonic::include_proto!("beam_kafka.v1");
}

pub use prost;
pub use prost_types;
