//! The SDK harnesses of this copy, and which one each task's stage uses
//! (`runtime::app::harnesses` decides): a stage holds a lease on a harness of its
//! own SDK environment for as long as it lives, so a task that stops frees
//! its place.
use std::sync::{Arc, Mutex, OnceLock};

use beam_kafka_fnapi::SdkWorker;
use beam_kafka_runtime::app::harnesses::least_loaded_where;

/// One connected harness and the environment (its id in the pipeline) it
/// runs.
pub struct EnvironmentWorker {
    pub environment_id: String,
    pub worker: Arc<SdkWorker>,
}

pub struct Harnesses {
    /// Set once they connected (a job's Kafka start-up runs meanwhile).
    workers: OnceLock<Vec<EnvironmentWorker>>,
    /// Live stages per harness, and the last harness picked.
    loads: Mutex<(Vec<usize>, usize)>,
}

/// A stage's claim on one harness; released when dropped.
pub struct HarnessLease {
    pool: Arc<Harnesses>,
    index: usize,
}

impl Harnesses {
    /// Harnesses still starting: `connected` hands them over.
    pub fn pending() -> Arc<Harnesses> {
        Arc::new(Harnesses { workers: OnceLock::new(), loads: Mutex::new((Vec::new(), 0)) })
    }

    /// The harnesses connected; a second call changes nothing.
    pub fn connected(&self, workers: Vec<EnvironmentWorker>) {
        assert!(!workers.is_empty(), "a job runs at least one SDK harness");
        let n = workers.len();
        let mut loads = self.loads.lock().expect("lock");
        if self.workers.set(workers).is_ok() {
            *loads = (vec![0; n], n - 1);
        }
    }

    /// The least loaded harness of `environment_id`, for a stage about to
    /// start (a job starts its tasks only once its harnesses connected).
    pub fn lease(self: &Arc<Self>, environment_id: &str) -> Result<HarnessLease, String> {
        let workers = self.workers.get().ok_or("a task started before its job's SDK harnesses connected")?;
        let mut guard = self.loads.lock().expect("lock");
        let (loads, last) = &mut *guard;
        let index = least_loaded_where(loads, *last, |i| workers[i].environment_id == environment_id)
            .ok_or_else(|| format!("the job started no SDK harness for environment '{environment_id}'"))?;
        loads[index] += 1;
        *last = index;
        Ok(HarnessLease { pool: self.clone(), index })
    }
}

impl HarnessLease {
    pub fn worker(&self) -> &Arc<SdkWorker> {
        &self.pool.workers.get().expect("a lease is taken once harnesses connected")[self.index].worker
    }
}

impl Drop for HarnessLease {
    fn drop(&mut self) {
        let mut guard = self.pool.loads.lock().expect("lock");
        guard.0[self.index] = guard.0[self.index].saturating_sub(1);
    }
}
