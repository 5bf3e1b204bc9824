//! Asking a harness to split a running bundle (`crate::split` reads its
//! answer): a checkpoint that keeps nothing, and a sliver when that cut none.
use std::time::Duration;

use beam_kafka_proto::fn_execution as fn_pb;
use tokio::sync::oneshot;

use super::{BundleError, SdkWorker};
use crate::split::{ask_for_sliver, checkpoint_request, merge_splits, read_split, SplitResult, RESTRICTION_SLIVER};

/// How long a split waits for the harness's answer.
const SPLIT_TIMEOUT: Duration = Duration::from_secs(30);

impl SdkWorker {
    /// Asks the harness to stop bundle `bundle_id` after the elements it is
    /// processing; `sources` are its data sources and how many elements
    /// each was sent. Returns where each source stopped (none: the bundle
    /// had finished, or not started) and the restrictions it cut.
    pub async fn split_bundle(
        &self,
        bundle_id: &str,
        sources: &[(String, usize)],
        splittable: &[String],
    ) -> Result<SplitResult, BundleError> {
        let first = self.ask_split(checkpoint_request(bundle_id, sources, splittable, 0.0)).await?;
        if !ask_for_sliver(&first, sources, splittable) {
            return Ok(first);
        }
        let second = self.ask_split(checkpoint_request(bundle_id, sources, splittable, RESTRICTION_SLIVER)).await?;
        Ok(merge_splits(first, second))
    }

    async fn ask_split(&self, split: fn_pb::ProcessBundleSplitRequest) -> Result<SplitResult, BundleError> {
        let bundle_id = split.instruction_id.clone();
        let instruction_id = self.next_instruction_id("split");
        tracing::debug!(worker = %self.name, "splitting {bundle_id}: {:?}", split.desired_splits);
        let (tx, rx) = oneshot::channel();
        self.pending.insert(instruction_id.clone(), tx);
        let request = fn_pb::InstructionRequest {
            instruction_id: instruction_id.clone(),
            request: Some(fn_pb::instruction_request::Request::ProcessBundleSplit(split)),
        };
        if !self.send_instruction(request) {
            self.pending.remove(&instruction_id);
            return Err(BundleError::Worker("control stream closed".into()));
        }
        let answer = tokio::time::timeout(SPLIT_TIMEOUT, rx).await;
        self.pending.remove(&instruction_id);
        let response = match answer {
            Ok(Ok(r)) => r,
            Ok(Err(_)) => return Err(BundleError::Worker("the harness disconnected during a split".into())),
            Err(_) => return Err(BundleError::Worker(format!("the harness did not answer a split within {SPLIT_TIMEOUT:?}"))),
        };
        if !response.error.is_empty() {
            // A harness that cannot split leaves the bundle whole.
            tracing::debug!(worker = %self.name, "split of {bundle_id} refused: {}", response.error);
            return Ok(SplitResult::default());
        }
        match response.response {
            Some(fn_pb::instruction_response::Response::ProcessBundleSplit(r)) => {
                tracing::debug!(
                    worker = %self.name,
                    "split of {bundle_id}: channels {:?}, {} residual(s)",
                    r.channel_splits.iter().map(|c| (&c.transform_id, c.first_residual_element)).collect::<Vec<_>>(),
                    r.residual_roots.len()
                );
                read_split(r).map_err(BundleError::Worker)
            }
            _ => Ok(SplitResult::default()),
        }
    }
}
