//! Running one job: topics, bootstrap records, the actor topology, and the
//! end of a bounded job (every terminal task at +∞).
use std::collections::{BTreeSet, HashMap};
use std::sync::Arc;
use std::time::Duration;

use actix::prelude::*;
use beam_kafka_config::RunnerOptions;
use beam_kafka_fnapi::SdkWorker;
use beam_kafka_proto::pipeline::MonitoringInfo;
use beam_kafka_runtime::coders::impulse_element;
use beam_kafka_runtime::timestamp::Watermark;
use beam_kafka_runtime::topology::{TaskId, TopicKind, TopologyPlan};
use rdkafka::consumer::{Consumer, StreamConsumer};
use rdkafka::producer::{FutureProducer, FutureRecord};
use tokio::sync::{mpsc, watch};

use crate::envelope;
use crate::kafka::admin::{Admin, TopicSpec};
use crate::kafka::config;
use crate::messages::Shutdown;
use crate::poller::{poll_loop, PollSettings};
use crate::stage::{StageActor, StageSpec};
use crate::task::{TaskEvent, TaskSupervisor};

/// A stage's process bundle descriptor, already registered with the worker.
pub struct StageDescriptor {
    pub sub_topology: u32,
    pub descriptor_id: String,
    pub display_name: String,
    /// Data source transform id per input topic index.
    pub sources: Vec<String>,
    pub sinks: Vec<String>,
}

pub struct JobInput {
    pub job_id: String,
    pub options: RunnerOptions,
    pub plan: TopologyPlan,
    pub stages: Vec<StageDescriptor>,
    pub worker: Arc<SdkWorker>,
}

/// What a running job reports as it goes.
#[derive(Debug)]
pub enum JobEvent {
    Info(String),
    Metrics(Vec<MonitoringInfo>),
}

#[derive(Debug, PartialEq, Eq)]
pub enum JobOutcome {
    Done,
    Failed(String),
    Cancelled,
}

/// Runs a job to its end on the calling thread, inside an actix system of its
/// own. Blocking: call it from a dedicated thread.
pub fn run_job(input: JobInput, events: mpsc::UnboundedSender<JobEvent>, cancel: watch::Receiver<bool>) -> JobOutcome {
    let system = actix::System::new();
    let outcome = system.block_on(drive(input, events, cancel));
    System::current().stop();
    let _ = system.run();
    outcome
}

async fn drive(input: JobInput, events: mpsc::UnboundedSender<JobEvent>, mut cancel: watch::Receiver<bool>) -> JobOutcome {
    let opts = &input.options;
    let admin = match Admin::connect(opts) {
        Ok(a) => a,
        Err(e) => return JobOutcome::Failed(e),
    };
    if let Err(e) = bootstrap(&admin, &input).await {
        return JobOutcome::Failed(e);
    }
    let consumer: Arc<StreamConsumer> = match config::consumer(opts).create() {
        Ok(c) => Arc::new(c),
        Err(e) => return JobOutcome::Failed(format!("cannot create the Kafka consumer: {e}")),
    };
    let topic_names: Vec<&str> = input.plan.topics.iter().map(|t| t.name.as_str()).collect();
    if let Err(e) = consumer.subscribe(&topic_names) {
        return JobOutcome::Failed(format!("cannot subscribe to {}: {e}", topic_names.join(", ")));
    }
    let (task_tx, mut task_rx) = mpsc::unbounded_channel();
    let (routes, tasks) = start_tasks(&input, consumer.clone(), task_tx.clone());
    let _ = events.send(JobEvent::Info(format!(
        "running {} task(s) of application {} on {}",
        tasks.len(),
        opts.application_id,
        opts.bootstrap_servers
    )));
    let settings = PollSettings {
        max_records: opts.read_max_elements_per_poll as usize,
        max_wait: Duration::from_millis(opts.read_max_poll_time_ms),
    };
    let poll_consumer = consumer.clone();
    let poller = actix_rt::spawn(async move {
        let reason = poll_loop(poll_consumer, routes, settings).await;
        let _ = task_tx.send(TaskEvent::Failed(reason));
    });
    let mut waiting: BTreeSet<TaskId> = input.plan.terminal_tasks().into_iter().collect();
    let outcome = loop {
        tokio::select! {
            ev = task_rx.recv() => match ev {
                Some(TaskEvent::Finished(task)) => {
                    waiting.remove(&task);
                    if waiting.is_empty() {
                        break JobOutcome::Done;
                    }
                }
                Some(TaskEvent::Failed(error)) => break JobOutcome::Failed(error),
                Some(TaskEvent::Metrics(m)) => { let _ = events.send(JobEvent::Metrics(m)); }
                None => break JobOutcome::Failed("every task stopped before the job finished".into()),
            },
            _ = cancel.changed() => break JobOutcome::Cancelled,
        }
    };
    poller.abort();
    for t in &tasks {
        t.do_send(Shutdown);
    }
    consumer.unsubscribe();
    drop(tasks);
    drop(consumer);
    // Let the actors stop and release the consumer before the group is deleted.
    tokio::time::sleep(Duration::from_millis(100)).await;
    if outcome == JobOutcome::Done && !opts.keep_runner_topics {
        cleanup(&admin, &input, &events).await;
    }
    outcome
}

/// Creates the runner-owned topics and writes the bootstrap records of every
/// impulse topic whose previous contents were fully consumed.
async fn bootstrap(admin: &Admin, input: &JobInput) -> Result<(), String> {
    let opts = &input.options;
    let specs: Vec<TopicSpec> =
        input.plan.topics.iter().map(|t| TopicSpec { name: t.name.clone(), partitions: t.partitions }).collect();
    admin.ensure_topics(&specs, opts.topic_replication_factor).await?;
    let producer: FutureProducer =
        config::producer(opts).create().map_err(|e| format!("cannot create a Kafka producer: {e}"))?;
    for topic in &input.plan.topics {
        match topic.kind {
            TopicKind::Impulse => {
                let (committed, end) = admin.progress(&topic.name, 0)?;
                if committed < end {
                    // An earlier run of this application stopped before it
                    // consumed its impulse: resume it instead of firing twice.
                    continue;
                }
                let records = [
                    envelope::data(impulse_element()),
                    envelope::watermark(Watermark::PosInf, &topic.producer_transform, 0, 1),
                ];
                for payload in records {
                    producer
                        .send(FutureRecord::<[u8], _>::to(&topic.name).partition(0).payload(&payload), Duration::from_secs(30))
                        .await
                        .map_err(|(e, _)| format!("cannot write to {}: {e}", topic.name))?;
                }
            }
        }
    }
    Ok(())
}

fn start_tasks(
    input: &JobInput,
    consumer: Arc<StreamConsumer>,
    events: mpsc::UnboundedSender<TaskEvent>,
) -> (HashMap<(String, i32), Recipient<crate::messages::RecordBatch>>, Vec<Addr<TaskSupervisor>>) {
    let opts = &input.options;
    let mut routes = HashMap::new();
    let mut tasks = Vec::new();
    for task in input.plan.tasks() {
        let sub = &input.plan.sub_topologies[task.sub_topology as usize];
        let stage = input.stages.iter().find(|s| s.sub_topology == sub.id).expect("a descriptor per sub-topology");
        let mut sources = HashMap::new();
        let mut upstreams = Vec::new();
        for (i, &t) in sub.input_topics.iter().enumerate() {
            let topic = &input.plan.topics[t];
            sources.insert(topic.name.clone(), stage.sources[i].clone());
            upstreams.push(topic.producer_transform.clone());
        }
        let spec = StageSpec {
            display_name: stage.display_name.clone(),
            descriptor_id: stage.descriptor_id.clone(),
            sinks: stage.sinks.clone(),
            max_bundle_size: opts.max_bundle_size,
            max_bundle_time: Duration::from_millis(opts.max_bundle_time_ms),
        };
        let worker = input.worker.clone();
        let consumer = consumer.clone();
        let events = events.clone();
        let commit_interval = Duration::from_millis(opts.commit_interval_ms);
        let topics: Vec<String> = sources.keys().cloned().collect();
        let addr = TaskSupervisor::create(move |ctx| {
            let stage = StageActor::new(spec, worker, ctx.address().recipient()).start();
            TaskSupervisor::new(task, stage, sources, upstreams, consumer, events, commit_interval)
        });
        for topic in topics {
            routes.insert((topic, task.partition as i32), addr.clone().recipient());
        }
        tasks.push(addr);
    }
    (routes, tasks)
}

/// Deletes the topics and consumer group of a finished bounded job.
async fn cleanup(admin: &Admin, input: &JobInput, events: &mpsc::UnboundedSender<JobEvent>) {
    let names: Vec<String> = input.plan.topics.iter().map(|t| t.name.clone()).collect();
    if let Err(e) = admin.delete_topics(&names).await {
        let _ = events.send(JobEvent::Info(format!("could not delete the job's topics: {e}")));
    }
    // The group empties once the consumer has left; retry briefly.
    for attempt in 0..10 {
        match admin.delete_group(&input.options.application_id).await {
            Ok(()) => return,
            Err(e) if attempt == 9 => {
                let _ = events.send(JobEvent::Info(format!("could not delete the consumer group: {e}")));
            }
            Err(_) => tokio::time::sleep(Duration::from_millis(300)).await,
        }
    }
}
