//! The TestStream driver: replays the pipeline's TestStream one step at a
//! time (`runtime::test_stream`), each step's records in a transaction of
//! their own, and releases the next step only once the pipeline is
//! quiescent: every awaited task (the terminal tasks the TestStream
//! reaches) committed a cycle that passed the step's epoch on, which a task
//! does only when it is idle, after its upstreams did.
//!
//! The tasks tell the driver on a board shared in this process, so a
//! TestStream job runs as one copy. Its steps are not resumed after a
//! restart: a TestStream job whose topic holds steps already fails with a
//! fix instead of replaying them twice.
use std::sync::Arc;
use std::time::{Duration, Instant};

use beam_kafka_config::RunnerOptions;
use beam_kafka_runtime::codec::envelope;
use beam_kafka_runtime::plan::spec::TestStreamRun;
use beam_kafka_runtime::plan::topology::TaskId;
use beam_kafka_runtime::test_stream::progress::Progress;
use beam_kafka_runtime::test_stream::Driver;
use dashmap::DashMap;
use rdkafka::producer::Producer;

use crate::kafka::admin::Admin;
use crate::kafka::config;
use crate::kafka::producer::{self as kafka_producer, KafkaProducer, Writes};

/// Per task, the last TestStream epoch it committed a cycle passing on,
/// and what kept it from passing on a later one (empty when nothing).
pub type ProgressBoard = Arc<DashMap<TaskId, (u64, String)>>;

/// A TestStream to replay and the board its tasks report on.
pub struct TestStreamJob {
    pub run: TestStreamRun,
    pub board: ProgressBoard,
}

impl TestStreamJob {
    pub fn new(run: TestStreamRun) -> Arc<TestStreamJob> {
        Arc::new(TestStreamJob { run, board: Arc::new(DashMap::new()) })
    }
}

/// How often the driver looks at the board while it waits.
const POLL: Duration = Duration::from_millis(5);
/// How long a wait goes before the driver says which tasks it waits for.
const STUCK_AFTER: Duration = Duration::from_secs(30);

/// Starts replaying the job's TestStream, if it has one (its topics exist
/// by now); a driver that fails calls `failed` with the job's failure.
pub async fn start(
    admin: &Admin,
    test_stream: Option<Arc<TestStreamJob>>,
    options: &RunnerOptions,
    failed: impl FnOnce(String) + 'static,
) -> Result<(), String> {
    let Some(job) = test_stream else { return Ok(()) };
    for topic in job.run.streams.iter().flat_map(|(_, topics)| topics) {
        if admin.end_offset(topic, 0).await? > 0 {
            return Err(format!(
                "the TestStream of application '{}' already replayed steps in an earlier run; a TestStream is replayed once: \
                 run the pipeline with a new --application_id",
                options.application_id
            ));
        }
    }
    let opts = options.clone();
    actix_rt::spawn(async move {
        if let Err(e) = drive(job, opts).await {
            failed(format!("TestStream: {e}"));
        }
    });
    Ok(())
}

/// Replays every step; returns once the last (every output at +∞) is
/// written, or an error that fails the job.
async fn drive(job: Arc<TestStreamJob>, opts: RunnerOptions) -> Result<(), String> {
    let run = &job.run;
    let mut config = config::producer(&opts);
    config.set("transactional.id", format!("{}-teststream", opts.application_id));
    let producer = kafka_producer::create(&config).map_err(|e| format!("cannot create a Kafka producer: {e}"))?;
    let producer = blocking(producer, |p| p.init_transactions(Duration::from_secs(30)), "set up the TestStream's transactions").await?;
    let specs: Vec<_> = run.streams.iter().map(|(spec, _)| spec.clone()).collect();
    let mut driver = Driver::new(&specs, crate::source::now_millis());
    let mut producer = producer;
    while let Some(step) = driver.next_step() {
        producer = blocking(producer, |p| p.begin_transaction(), "begin a TestStream step").await?;
        let writes = Writes::new();
        for (stream, output, elements) in &step.elements {
            let topic = &run.streams[*stream].1[*output];
            for element in elements {
                writes.send(&producer, topic, 0, None, Some(&envelope::data(element.clone()))).await?;
            }
        }
        let progress = Progress { epoch: step.epoch, clock: step.clock };
        for (stream, (spec, topics)) in run.streams.iter().enumerate() {
            for (output, topic) in topics.iter().enumerate() {
                let report = envelope::watermark_with_progress(step.watermarks[stream][output], &spec.transform, 0, 1, progress);
                writes.send(&producer, topic, 0, None, Some(&report)).await?;
            }
        }
        writes.wait().await?;
        producer = blocking(producer, |p| p.commit_transaction(Duration::from_secs(30)), "commit a TestStream step").await?;
        tracing::debug!("TestStream step {} written: {:?}", step.epoch, step.watermarks);
        wait_for(&job, step.epoch).await;
    }
    tracing::debug!("TestStream replayed in full");
    Ok(())
}

/// Waits until every awaited task passed `epoch` on; says which tasks it
/// waits for when that takes long (why a TestStream job is stuck).
async fn wait_for(job: &TestStreamJob, epoch: u64) {
    let started = Instant::now();
    let mut told = false;
    loop {
        let behind: Vec<String> = job
            .run
            .awaited
            .iter()
            .filter(|t| job.board.get(t).is_none_or(|e| e.0 < epoch))
            .map(|t| match job.board.get(t) {
                None => format!("{t} (no cycle yet)"),
                Some(e) if e.1.is_empty() => format!("{t} (at step {}, waiting for its inputs)", e.0),
                Some(e) => format!("{t} (at step {}: {})", e.0, e.1),
            })
            .collect();
        if behind.is_empty() {
            return;
        }
        if !told && started.elapsed() > STUCK_AFTER {
            told = true;
            tracing::warn!(
                "TestStream step {epoch} is still being processed after {STUCK_AFTER:?}; waiting for tasks {}",
                behind.join(", ")
            );
        }
        tokio::time::sleep(POLL).await;
    }
}

/// Runs a blocking producer call off the actor thread.
async fn blocking(
    producer: KafkaProducer,
    call: impl FnOnce(&KafkaProducer) -> rdkafka::error::KafkaResult<()> + Send + 'static,
    what: &str,
) -> Result<KafkaProducer, String> {
    tokio::task::spawn_blocking(move || call(&producer).map(|_| producer))
        .await
        .map_err(|e| format!("cannot {what}: {e}"))?
        .map_err(|e| format!("cannot {what}: {e}"))
}
