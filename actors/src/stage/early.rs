//! Writing a bundle's outputs while it runs (exactly_once only): the
//! harness's data for the stage's output sinks is handed over in large
//! chunks (`fnapi::EarlyOutputs`), and its whole elements are queued on the
//! producer at once, so Kafka takes a long bundle's outputs while the SDK
//! still computes them instead of after it. The writes join the bundle's
//! transaction like the rest of its outputs: if the bundle fails, the
//! transaction is aborted with them. (Under at_least_once a failed
//! bundle's early writes would stay, so outputs are written after it.)
use beam_kafka_runtime::kafka::failure::Failure;
use std::collections::HashMap;

use beam_kafka_fnapi::EarlyOutputs;
use tokio::sync::{mpsc, watch};

use crate::kafka::producer::ProducerSlot;
use crate::output::{queue_elements, OutputSink, Queued};

/// A sink's collected outputs are handed over once they reach this size.
const EARLY_BYTES: usize = 1 << 20;

/// What was written during a bundle: each sink's bytes after its last
/// whole element (the bundle's remaining outputs continue them), the
/// writes to await, and how many bytes were written.
#[derive(Default)]
pub struct WrittenEarly {
    pub carry: HashMap<String, Vec<u8>>,
    pub queued: Queued,
    pub bytes: usize,
}

impl WrittenEarly {
    /// Puts the unwritten part of each sink's outputs back before `outputs`
    /// (the rest the bundle returned).
    pub fn prepend_carry(&mut self, outputs: &mut HashMap<String, Vec<u8>>) {
        for (sink, mut carry) in self.carry.drain() {
            if carry.is_empty() {
                continue;
            }
            if let Some(rest) = outputs.get(&sink) {
                carry.extend_from_slice(rest);
            }
            outputs.insert(sink, carry);
        }
    }
}

/// The channel the harness's large outputs come through, for the stage's
/// output sinks (none unless `enabled` and there is a sink: the receiver
/// then ends at once).
pub fn channel(outputs: &[OutputSink], enabled: bool) -> (Option<EarlyOutputs>, mpsc::UnboundedReceiver<(String, Vec<u8>)>) {
    let (tx, rx) = mpsc::unbounded_channel();
    let transforms: std::collections::HashSet<String> = outputs.iter().map(|o| o.sink_transform.clone()).collect();
    let early = (enabled && !transforms.is_empty()).then(|| EarlyOutputs { transforms, min_bytes: EARLY_BYTES, tx });
    (early, rx)
}

/// Queues the whole elements of every chunk that comes, once bundle `seq`
/// may write (`may_write`: a bundle run during a commit writes in the next
/// transaction); ends when the bundle drops the channel.
pub async fn write(
    mut chunks: mpsc::UnboundedReceiver<(String, Vec<u8>)>,
    mut may_write: watch::Receiver<u64>,
    seq: u64,
    slot: &ProducerSlot,
    outputs: &[OutputSink],
    pack_elements: usize,
) -> Result<WrittenEarly, Failure> {
    let mut written = WrittenEarly::default();
    // Taken once writing is allowed: the producer of the bundle's transaction.
    let mut producer = None;
    while let Some((sink, chunk)) = chunks.recv().await {
        if producer.is_none() {
            may_write.wait_for(|&through| seq <= through).await.map_err(|_| Failure::fatal("the stage stopped"))?;
            producer = Some(slot.current());
        }
        let Some(producer) = producer.as_deref() else { continue };
        let buf = written.carry.entry(sink.clone()).or_default();
        if buf.is_empty() {
            *buf = chunk;
        } else {
            buf.extend_from_slice(&chunk);
        }
        let whole = queue_elements(&mut written.queued, producer, outputs, &sink, buf, pack_elements, true).await?;
        buf.drain(..whole);
        written.bytes += whole;
        tracing::debug!("bundle {seq}: {whole} bytes of {sink} queued while it runs");
    }
    Ok(written)
}
