//! From a submitted pipeline to what a job runs, in the order a job is
//! prepared: the pipeline's shape is checked (`structure`, `validate`,
//! `sdk_version`) and its ids made stable (`stable_ids`); the runner's own
//! expansions come next (`lift`, `sdf`, `runner_flatten`, `expansion`);
//! then `graph` walks it, `fusion` cuts it into stages, `topology` joins them
//! with runner-owned topics, `descriptor` builds each stage's bundle
//! descriptor, and `lower` turns the plan into a `spec`. `plan_facts` says what
//! decides how stored bytes are read, for an update.
pub mod descriptor;
pub mod expansion;
pub mod expansion_route;
pub mod fusion;
pub mod graph;
pub mod lift;
pub mod lower;
pub mod plan_facts;
pub mod runner_flatten;
pub mod sdf;
pub mod sdk_version;
pub mod spec;
pub mod stable_ids;
pub mod structure;
pub mod topology;
pub mod validate;
