//! A task's side inputs: every record of each side topic, read whole from the
//! start by the task itself (not through the group: every task needs all of
//! it), kept per window, and served to its bundles through the State API.
//!
//! The side topic is itself the durable copy: a task that starts again reads
//! it again, so side inputs need no changelog of their own.
use std::sync::RwLock;
use std::time::Duration;

use actix::prelude::*;
use beam_kafka_config::RunnerOptions;
use beam_kafka_fnapi::StateHandler;
use beam_kafka_proto::fn_execution as fn_pb;
use beam_kafka_runtime::state::side_input::SideInputData;
use beam_kafka_runtime::state::state_api::paged;
use fn_pb::state_key::Type as Key;
use rdkafka::consumer::{Consumer, StreamConsumer};
use rdkafka::message::Message;
use rdkafka::{Offset, TopicPartitionList};

use crate::kafka::config;
pub use beam_kafka_runtime::plan::spec::SideInputSpec;

/// The contents of a task's side inputs, shared by the task (which adds
/// records) and its bundles' state requests (which read them); one entry
/// per side input of the stage, in the order of its specs.
pub struct SideInputs {
    specs: Vec<SideInputSpec>,
    data: RwLock<Vec<SideInputData>>,
}

impl SideInputs {
    pub fn new(specs: &[SideInputSpec]) -> Result<SideInputs, String> {
        let data = specs
            .iter()
            .map(|s| {
                SideInputData::new(s.access, &s.element_coder, s.window_coder.clone())
                    .map_err(|e| format!("side input '{}' of '{}': {e}", s.local_name, s.transform))
            })
            .collect::<Result<Vec<_>, _>>()?;
        Ok(SideInputs { specs: specs.to_vec(), data: RwLock::new(data) })
    }

    /// Adds one element of `topic` to every side input read from it.
    pub fn add(&self, topic: &str, windowed_value: &[u8]) -> Result<(), String> {
        let mut data = self.data.write().expect("side input lock");
        for (s, d) in self.specs.iter().zip(data.iter_mut()).filter(|(s, _)| s.topic == topic) {
            d.add(windowed_value).map_err(|e| format!("side input '{}' of '{}': {e}", s.local_name, s.transform))?;
        }
        Ok(())
    }

    /// A cache token per side input, naming its current contents (see
    /// `SideInputData::cache_token`): the SDK may reuse what it read under
    /// one until new side data arrives.
    pub fn cache_tokens(&self) -> Vec<fn_pb::process_bundle_request::CacheToken> {
        use fn_pb::process_bundle_request::cache_token;
        let data = self.data.read().expect("side input lock");
        self.specs
            .iter()
            .zip(data.iter())
            .map(|(s, d)| fn_pb::process_bundle_request::CacheToken {
                token: d.cache_token(),
                r#type: Some(cache_token::Type::SideInput(cache_token::SideInput {
                    transform_id: s.transform.clone(),
                    side_input_id: s.local_name.clone(),
                })),
            })
            .collect()
    }
}

impl StateHandler for SideInputs {
    fn handle(&self, request: &fn_pb::StateRequest) -> Result<fn_pb::state_response::Response, String> {
        if !matches!(request.request, Some(fn_pb::state_request::Request::Get(_))) {
            return Err(format!("side inputs are read-only ({} request)", beam_kafka_fnapi::state::kind_of(request)));
        }
        let data = self.data.read().expect("side input lock");
        let find = |transform: &str, name: &str| {
            self.specs
                .iter()
                .position(|s| s.transform == transform && s.local_name == name)
                .map(|i| &data[i])
                .ok_or_else(|| format!("'{transform}' has no side input '{name}' in this runner's plan"))
        };
        match request.state_key.as_ref().and_then(|k| k.r#type.as_ref()) {
            // Long answers come in pages that end on element boundaries.
            Some(Key::IterableSideInput(k)) => paged(find(&k.transform_id, &k.side_input_id)?.iterable(&k.window), request),
            Some(Key::MultimapSideInput(k)) => paged(find(&k.transform_id, &k.side_input_id)?.values(&k.window, &k.key), request),
            // The keys are sorted anew for each read, so offsets into them
            // would not survive a new key between pages: answered whole.
            Some(Key::MultimapKeysSideInput(k)) => {
                let keys = find(&k.transform_id, &k.side_input_id)?.keys(&k.window);
                Ok(fn_pb::state_response::Response::Get(fn_pb::StateGetResponse {
                    continuation_token: Vec::new(),
                    data: keys.bytes().to_vec(),
                }))
            }
            _ => Err(format!("the runner does not serve {} state requests yet", beam_kafka_fnapi::state::kind_of(request))),
        }
    }
}

/// One record of a side topic, for the task that reads it.
#[derive(Message)]
#[rtype(result = "()")]
pub struct SideRecord {
    pub topic: String,
    pub payload: Vec<u8>,
    /// The reader stopped on an error no wait cures: the task fails with it.
    pub failed: Option<beam_kafka_runtime::kafka::failure::Failure>,
}

/// Reads `topic` (one partition) from its start, committed records only,
/// and sends every record to `to` until the task stops, one at a time.
pub fn read_side_topic(opts: &RunnerOptions, topic: &str, to: Recipient<SideRecord>) -> Result<(), String> {
    let consumer: StreamConsumer = config::base(opts, "side")
        .set("group.id", format!("{}-side", opts.application_id))
        .set("enable.auto.commit", "false")
        .set("isolation.level", "read_committed")
        .create()
        .map_err(|e| format!("cannot create a side input reader: {e}"))?;
    let mut tpl = TopicPartitionList::new();
    tpl.add_partition_offset(topic, 0, Offset::Beginning).map_err(|e| e.to_string())?;
    consumer.assign(&tpl).map_err(|e| format!("cannot read side input topic {topic}: {e}"))?;
    let topic = topic.to_string();
    actix_rt::spawn(async move {
        loop {
            if !to.connected() {
                return;
            }
            match tokio::time::timeout(Duration::from_millis(500), consumer.recv()).await {
                Err(_) => continue,
                Ok(Err(e)) => {
                    let failure = crate::kafka::failure::failure(&e);
                    if failure.stops_a_reader() {
                        let _ = to.send(SideRecord { topic: topic.clone(), payload: Vec::new(), failed: Some(failure) }).await;
                        return;
                    }
                    tracing::warn!("side input reader of {topic}: {e}");
                    tokio::time::sleep(Duration::from_millis(200)).await;
                }
                Ok(Ok(m)) => {
                    let record = SideRecord { topic: topic.clone(), payload: m.payload().unwrap_or_default().to_vec(), failed: None };
                    // Waits until the task took it: a side topic is read no
                    // faster than its task handles it (bounded memory).
                    if to.send(record).await.is_err() {
                        return;
                    }
                }
            }
        }
    });
    Ok(())
}
