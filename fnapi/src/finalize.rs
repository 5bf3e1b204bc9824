//! Bundle finalization: a bundle whose DoFns registered callbacks (Python's
//! `BundleFinalizerParam`, e.g. to acknowledge messages read) is finalized
//! only once everything it produced is committed, never for a bundle whose
//! outputs were aborted.
use std::time::Duration;

use beam_kafka_proto::fn_execution as fn_pb;
use tokio::sync::oneshot;

use crate::worker::{BundleError, SdkWorker};

/// How long finalization waits for the harness's answer.
const FINALIZE_TIMEOUT: Duration = Duration::from_secs(60);

impl SdkWorker {
    /// Runs the finalization callbacks of bundle `bundle_id`. A callback's
    /// error comes back as `BundleError::User`.
    pub async fn finalize_bundle(&self, bundle_id: &str) -> Result<(), BundleError> {
        let instruction_id = self.next_instruction_id("finalize");
        let (tx, rx) = oneshot::channel();
        self.pending.insert(instruction_id.clone(), tx);
        let request = fn_pb::InstructionRequest {
            instruction_id: instruction_id.clone(),
            request: Some(fn_pb::instruction_request::Request::FinalizeBundle(fn_pb::FinalizeBundleRequest {
                instruction_id: bundle_id.to_string(),
            })),
        };
        if !self.send_instruction(request) {
            self.pending.remove(&instruction_id);
            return Err(BundleError::Worker("control stream closed".into()));
        }
        let answer = tokio::time::timeout(FINALIZE_TIMEOUT, rx).await;
        self.pending.remove(&instruction_id);
        match answer {
            Ok(Ok(r)) if r.error.is_empty() => Ok(()),
            Ok(Ok(r)) => Err(BundleError::User(r.error)),
            Ok(Err(_)) => Err(BundleError::Worker("the harness disconnected during a bundle's finalization".into())),
            Err(_) => Err(BundleError::Worker(format!("the harness did not finalize a bundle within {FINALIZE_TIMEOUT:?}"))),
        }
    }
}
