//! What a job is given to run: its options, plan, lowered sub-topologies and
//! SDK harnesses. Apart from `job` so that the modules `job` drives (task
//! start-up, user topics) can read it without importing `job` back.
use std::sync::Arc;

use beam_kafka_config::RunnerOptions;
use beam_kafka_runtime::plan::spec::SubTopologySpec;
use beam_kafka_runtime::plan::topology::TopologyPlan;
use tokio::sync::oneshot;

use crate::harnesses::Harnesses;
use crate::test_stream::TestStreamJob;

pub struct JobInput {
    pub job_id: String,
    pub options: RunnerOptions,
    pub plan: TopologyPlan,
    pub sub_topologies: Vec<SubTopologySpec>,
    /// The SDK harnesses this copy started; every stage descriptor is
    /// registered with each.
    pub harnesses: Arc<Harnesses>,
    /// Said once `harnesses` connected, or why they did not: the job's
    /// Kafka start-up runs meanwhile, and its tasks start after.
    pub harnesses_ready: Option<oneshot::Receiver<Result<(), String>>>,
    /// The pipeline's TestStream, replayed by the job (one copy only).
    pub test_stream: Option<Arc<TestStreamJob>>,
    /// What this copy knows of the job's tasks, for the status page and
    /// the exported metrics.
    pub board: Arc<crate::status_board::StatusBoard>,
    /// The application's first run or an update: what to record with its
    /// topics before any task starts (`runtime::app::identity`).
    pub plan_record: Option<crate::identity::PlanRecord>,
    /// Topics of earlier versions this one no longer uses (kept for a
    /// rollback): a drain's clean-up deletes them with the rest.
    pub retired_topics: Vec<String>,
    /// Sub-topologies an update just retired: their tasks' transactional
    /// ids are fenced at the start (no task of this version fences them,
    /// and what a killed copy left open under one would hold readers of
    /// the topics it wrote until the transaction timed out).
    pub retired_sub_topologies: Vec<u32>,
}
