//! Runs the runner's helper bundles on an SDK harness (the descriptors and
//! their data: `runtime::window::window_fns`): a GroupByKey's custom WindowFn
//! (merging windows, the ends of windows the runner cannot read), and the
//! side windows a task's main windows need.
use std::collections::{BTreeSet, HashMap};
use std::sync::Arc;

use beam_kafka_fnapi::{BundleInput, SdkWorker};
use beam_kafka_runtime::codec::coder::Coder;
use beam_kafka_runtime::codec::timestamp::Millis;
use beam_kafka_runtime::codec::windowed::Window;
use beam_kafka_runtime::gbk::merge::MergeRequests;
use beam_kafka_runtime::plan::spec::{SideMapping, WindowFnDescriptors};
use beam_kafka_runtime::window::window_fns::{self as wf, Merge};

use crate::harnesses::HarnessLease;

/// Helper bundles on one harness, held while its user lives.
pub struct HelperBundles {
    worker: Arc<SdkWorker>,
    _lease: HarnessLease,
}

impl HelperBundles {
    pub fn new(lease: HarnessLease) -> HelperBundles {
        HelperBundles { worker: lease.worker().clone(), _lease: lease }
    }

    /// Runs one helper bundle over `data`; returns what it wrote.
    async fn run(&self, descriptor: &str, data: Vec<u8>) -> Result<Vec<u8>, String> {
        let id = self.worker.next_instruction_id("helper");
        let inputs = [BundleInput { transform_id: wf::HELPER_SOURCE.to_string(), data, ends: Vec::new() }];
        let sinks = [wf::HELPER_SINK.to_string()];
        let mut result = self
            .worker
            .process_bundle(&id, descriptor, &inputs, HashMap::new(), &[], &sinks, None, None)
            .await
            .map_err(|e| format!("the SDK failed to evaluate a WindowFn for the runner: {e}"))?;
        Ok(result.outputs.remove(wf::HELPER_SINK).unwrap_or_default())
    }

    /// The last timestamp of each window, through an end descriptor.
    async fn ends(&self, descriptor: &str, windows: &[Window]) -> Result<Vec<(Window, Millis)>, String> {
        if windows.is_empty() {
            return Ok(Vec::new());
        }
        let answer = wf::decode_ends(&self.run(descriptor, wf::encode_window_requests(windows)).await?)?;
        windows
            .iter()
            .enumerate()
            .map(|(i, w)| answer.get(&i).map(|&max| (w.clone(), max)).ok_or_else(|| "the SDK did not tell the end of a window".to_string()))
            .collect()
    }

    /// For each main window, the last timestamp of the side window it needs.
    pub async fn side_window_ends(&self, m: &SideMapping, mains: &[Window]) -> Result<Vec<(Window, Millis)>, String> {
        let mut mapped = wf::decode_mapped(&self.run(&m.map, wf::encode_window_requests(mains)).await?, &m.side_window_coder)?;
        let sides =
            (0..mains.len()).map(|i| mapped.remove(&i).ok_or("the SDK did not map a main window")).collect::<Result<Vec<_>, _>>()?;
        let side_ends: Vec<Millis> = match &m.end {
            Some(end) => self.ends(end, &sides).await?.into_iter().map(|(_, max)| max).collect(),
            None => sides.iter().map(|w| w.max_timestamp()).collect(),
        };
        Ok(mains.iter().cloned().zip(side_ends).collect())
    }
}

/// A GroupByKey's custom WindowFn, run in the SDK.
pub struct WindowFnClient {
    bundles: HelperBundles,
    descriptors: WindowFnDescriptors,
    /// The GroupByKey's wire window coder.
    window_coder: Coder,
}

/// What a batch needs from the SDK before the GroupByKey takes it.
pub struct Asked {
    pub ends: Vec<(Window, Millis)>,
    pub merges: HashMap<Vec<u8>, Vec<Merge>>,
}

impl WindowFnClient {
    pub fn new(lease: HarnessLease, descriptors: WindowFnDescriptors, window_coder: Coder) -> WindowFnClient {
        WindowFnClient { bundles: HelperBundles::new(lease), descriptors, window_coder }
    }

    /// The ends of `unresolved` windows, then the merges of `requests` (per
    /// key: its windows) and the ends of new windows the merges made.
    pub async fn ask(&self, unresolved: Vec<Window>, requests: MergeRequests) -> Result<Asked, String> {
        let mut ends = self.ends(&unresolved).await?;
        let merges = self.merges(&requests).await?;
        let known: BTreeSet<&Window> = unresolved.iter().collect();
        let made: BTreeSet<Window> = merges
            .values()
            .flatten()
            .map(|m| m.result.clone())
            .filter(|w| matches!(w, Window::Opaque { .. }) && !known.contains(w))
            .collect();
        ends.extend(self.ends(&made.into_iter().collect::<Vec<_>>()).await?);
        tracing::debug!(?requests, ?merges, ?ends, "asked the SDK's WindowFn");
        Ok(Asked { ends, merges })
    }

    async fn ends(&self, windows: &[Window]) -> Result<Vec<(Window, Millis)>, String> {
        if windows.is_empty() {
            return Ok(Vec::new());
        }
        let id = self.descriptors.end.as_deref().ok_or("the runner cannot read these windows and has no way to ask their end")?;
        self.bundles.ends(id, windows).await
    }

    async fn merges(&self, requests: &MergeRequests) -> Result<HashMap<Vec<u8>, Vec<Merge>>, String> {
        if requests.is_empty() {
            return Ok(HashMap::new());
        }
        let id = self.descriptors.merge.as_deref().ok_or("no merge descriptor for a WindowFn that merges in the SDK")?;
        let data = wf::encode_merge_requests(requests.iter().map(|(_, ws)| ws.iter().collect()));
        let mut answer = wf::decode_merge_results(&self.bundles.run(id, data).await?, &self.window_coder)?;
        Ok(requests.iter().enumerate().filter_map(|(i, (key, _))| answer.remove(&i).map(|m| (key.clone(), m))).collect())
    }
}
