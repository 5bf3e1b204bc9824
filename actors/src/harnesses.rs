//! The SDK harnesses of this copy, and which one each task's stage uses
//! (`runtime::harnesses` decides): a stage holds a lease on its harness for
//! as long as it lives, so a task that stops frees its place.
use std::sync::{Arc, Mutex};

use beam_kafka_fnapi::SdkWorker;
use beam_kafka_runtime::harnesses::least_loaded;

pub struct Harnesses {
    workers: Vec<Arc<SdkWorker>>,
    /// Live stages per harness, and the last harness picked.
    loads: Mutex<(Vec<usize>, usize)>,
}

/// A stage's claim on one harness; released when dropped.
pub struct HarnessLease {
    pool: Arc<Harnesses>,
    index: usize,
}

impl Harnesses {
    pub fn new(workers: Vec<Arc<SdkWorker>>) -> Arc<Harnesses> {
        assert!(!workers.is_empty(), "a job runs at least one SDK harness");
        let n = workers.len();
        Arc::new(Harnesses { workers, loads: Mutex::new((vec![0; n], n - 1)) })
    }

    pub fn all(&self) -> &[Arc<SdkWorker>] {
        &self.workers
    }

    /// The least loaded harness, for a stage about to start.
    pub fn lease(self: &Arc<Self>) -> HarnessLease {
        let mut guard = self.loads.lock().expect("lock");
        let (loads, last) = &mut *guard;
        let index = least_loaded(loads, *last);
        loads[index] += 1;
        *last = index;
        HarnessLease { pool: self.clone(), index }
    }
}

impl HarnessLease {
    pub fn worker(&self) -> &Arc<SdkWorker> {
        &self.pool.workers[self.index]
    }
}

impl Drop for HarnessLease {
    fn drop(&mut self) {
        let mut guard = self.pool.loads.lock().expect("lock");
        guard.0[self.index] = guard.0[self.index].saturating_sub(1);
    }
}
