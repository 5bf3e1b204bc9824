//! Beam's model protos (pipeline, Fn API, Job API, artifacts, expansion) and the
//! runner's record envelope, generated at build time by tonic/prost.
#![allow(clippy::all, missing_docs)]

// Generated code refers across packages with `super::` paths, so the modules
// must nest exactly like the proto packages.
pub mod org {
    pub mod apache {
        pub mod beam {
            pub mod model {
                pub mod pipeline {
                    pub mod v1 {
                        tonic::include_proto!("org.apache.beam.model.pipeline.v1");
                    }
                }
                pub mod fn_execution {
                    pub mod v1 {
                        tonic::include_proto!("org.apache.beam.model.fn_execution.v1");
                    }
                }
                pub mod job_management {
                    pub mod v1 {
                        tonic::include_proto!("org.apache.beam.model.job_management.v1");
                    }
                }
                pub mod expansion {
                    pub mod v1 {
                        tonic::include_proto!("org.apache.beam.model.expansion.v1");
                    }
                }
            }
        }
    }
}

pub mod beam_kafka {
    pub mod v1 {
        tonic::include_proto!("beam_kafka.v1");
    }
}

pub use beam_kafka::v1 as envelope;
pub use org::apache::beam::model::expansion::v1 as expansion;
pub use org::apache::beam::model::fn_execution::v1 as fn_execution;
pub use org::apache::beam::model::job_management::v1 as job_management;
pub use org::apache::beam::model::pipeline::v1 as pipeline;

pub use prost;
pub use prost_types;
