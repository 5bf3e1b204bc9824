//! The application's copies topic (`__beam_<app>_copies`, one compacted
//! partition): each copy's latest report of itself and its tasks, keyed by
//! the copy, so any copy's status page, and `beam-kafka status`, show the
//! whole application. What a report says is the server's business (bytes
//! here); when a report counts as current is `runtime::app::copies`'.
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use beam_kafka_config::RunnerOptions;
use beam_kafka_runtime::app::copies::REPORT_EVERY_MS;
use dashmap::DashMap;
use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::producer::{BaseProducer, BaseRecord, Producer};
use rdkafka::{Message, Offset, TopicPartitionList};

use crate::kafka::admin::TopicSpec;
use crate::kafka::config;
use crate::status_board::now_ms;

const READ_TIMEOUT: Duration = Duration::from_secs(10);
/// How long a copy's last report may take to land when its job ends.
const LAST_REPORT_TIMEOUT: Duration = Duration::from_secs(3);

pub fn copies_topic(application_id: &str) -> String {
    format!("{}copies", beam_kafka_runtime::plan::topology::topic_prefix(application_id))
}

/// Created with the job's other topics. Compaction skips a partition's
/// active segment, so segments roll every minute: the topic then holds
/// about one report per copy, not every report ever written.
pub fn topic_spec(application_id: &str) -> TopicSpec {
    TopicSpec {
        name: copies_topic(application_id),
        partitions: 1,
        compacted: true,
        keep_forever: false,
        segment_ms: Some(60_000),
        grows: false,
    }
}

/// The last report read of one copy.
#[derive(Clone, Debug)]
pub struct Report {
    /// When this process read it (ms since the epoch).
    pub received_ms: i64,
    pub bytes: Vec<u8>,
}

/// Every copy's last report, as read from the topic (this copy's own too).
pub type Reports = Arc<DashMap<String, Report>>;

/// A reader of the topic from its start, keeping each copy's last report.
struct Reader {
    consumer: BaseConsumer,
    topic: String,
    assigned: bool,
}

impl Reader {
    fn new(opts: &RunnerOptions) -> Result<Reader, String> {
        let consumer: BaseConsumer =
            config::topic_reader(opts, "copies").create().map_err(|e| format!("cannot create the copies topic's consumer: {e}"))?;
        Ok(Reader { consumer, topic: copies_topic(&opts.application_id), assigned: false })
    }

    /// Whether the topic exists; assigns it from its start the first time.
    fn ready(&mut self) -> Result<bool, String> {
        if self.assigned {
            return Ok(true);
        }
        if crate::kafka::partition_count(&self.consumer, &self.topic, READ_TIMEOUT)?.unwrap_or(0) == 0 {
            return Ok(false);
        }
        let mut tpl = TopicPartitionList::new();
        tpl.add_partition_offset(&self.topic, 0, Offset::Beginning).map_err(|e| e.to_string())?;
        self.consumer.assign(&tpl).map_err(|e| format!("cannot read {}: {e}", self.topic))?;
        self.assigned = true;
        Ok(true)
    }

    /// Reads what arrived, waiting up to `wait` for the first record.
    fn read_into(&mut self, reports: &Reports, wait: Duration) -> Result<(), String> {
        let mut timeout = wait;
        while let Some(m) = self.consumer.poll(timeout) {
            let m = m.map_err(|e| format!("cannot read {}: {e}", self.topic))?;
            if let Some(copy) = m.key().and_then(|k| std::str::from_utf8(k).ok()) {
                match m.payload() {
                    Some(bytes) => {
                        reports.insert(copy.to_string(), Report { received_ms: now_ms(), bytes: bytes.to_vec() });
                    }
                    None => {
                        reports.remove(copy);
                    }
                }
            }
            timeout = Duration::ZERO;
        }
        Ok(())
    }

    /// Every report up to the topic's end now (`beam-kafka status`).
    fn read_to_end(&mut self, reports: &Reports) -> Result<(), String> {
        let (_, high) = self
            .consumer
            .fetch_watermarks(&self.topic, 0, READ_TIMEOUT)
            .map_err(|e| format!("cannot read the end of {}: {e}", self.topic))?;
        let deadline = Instant::now() + READ_TIMEOUT;
        loop {
            self.read_into(reports, Duration::from_millis(200))?;
            let at = self.consumer.position().ok().and_then(|p| p.find_partition(&self.topic, 0).map(|e| e.offset()));
            if matches!(at, Some(Offset::Offset(o)) if o >= high) || high == 0 {
                return Ok(());
            }
            if Instant::now() > deadline {
                return Err(format!("the records of {} up to {high} did not arrive within {READ_TIMEOUT:?}", self.topic));
            }
        }
    }
}

/// What `beam-kafka status` reads: every copy's last report. `Ok(None)`:
/// the application has no copies topic (it never ran, or it finished).
pub fn read_all(opts: &RunnerOptions) -> Result<Option<Vec<(String, Report)>>, String> {
    let mut reader = Reader::new(opts)?;
    if !reader.ready()? {
        return Ok(None);
    }
    let reports: Reports = Default::default();
    let read = reader.read_to_end(&reports);
    crate::kafka::close_in_background(reader);
    read?;
    let mut all: Vec<(String, Report)> = reports.iter().map(|e| (e.key().clone(), e.value().clone())).collect();
    all.sort_by(|a, b| a.0.cmp(&b.0));
    Ok(Some(all))
}

/// A running copy's reporting: writes `report(false)` every
/// [`REPORT_EVERY_MS`] and reads every copy's reports into `reports`.
pub struct Reporting {
    pub reports: Reports,
    /// Whether `reports` holds every report written before this copy
    /// started (or there was no topic, so no report).
    pub read_up: Arc<AtomicBool>,
    stop: Arc<AtomicBool>,
    thread: Mutex<Option<std::thread::JoinHandle<()>>>,
}

impl Reporting {
    /// Starts once the topic exists (the job creates it); a topic that cannot
    /// be read or written is retried: reports are never why a job fails.
    pub fn start(opts: &RunnerOptions, copy: String, report: impl Fn(bool) -> Vec<u8> + Send + 'static) -> Arc<Reporting> {
        let reports: Reports = Default::default();
        let stop = Arc::new(AtomicBool::new(false));
        let read_up = Arc::new(AtomicBool::new(false));
        let (opts, shared, stopping, read) = (opts.clone(), reports.clone(), stop.clone(), read_up.clone());
        let thread = std::thread::Builder::new()
            .name("copies".into())
            .spawn(move || report_until(&opts, &copy, &report, (&shared, &read), &stopping))
            .map_err(|e| tracing::warn!("cannot start reporting to the copies topic: {e}"))
            .ok();
        Arc::new(Reporting { reports, read_up, stop, thread: Mutex::new(thread) })
    }

    /// Writes the last report (`report(true)`) and stops; returns once it
    /// landed or could not.
    pub fn stop(&self) {
        self.stop.store(true, Ordering::Release);
        let thread = self.thread.lock().unwrap_or_else(|p| p.into_inner()).take();
        if let Some(t) = thread {
            let _ = t.join();
        }
    }
}

fn report_until(
    opts: &RunnerOptions,
    copy: &str,
    report: &dyn Fn(bool) -> Vec<u8>,
    (reports, read_up): (&Reports, &AtomicBool),
    stop: &AtomicBool,
) {
    let every = Duration::from_millis(REPORT_EVERY_MS as u64);
    let mut reader: Option<Reader> = None;
    let mut producer: Option<BaseProducer> = None;
    let mut wrote = false;
    while !stop.load(Ordering::Acquire) {
        let tick = Instant::now();
        if reader.is_none() {
            reader = Reader::new(opts).map_err(|e| tracing::warn!("{e}")).ok();
        }
        let ready = reader.as_mut().map(|r| r.ready()).unwrap_or(Ok(false));
        match ready {
            Ok(true) => {
                if producer.is_none() {
                    producer = new_producer(opts).map_err(|e| tracing::warn!("{e}")).ok();
                }
                if let Some(p) = &producer {
                    wrote |= send(p, opts, copy, &report(false));
                    p.poll(Duration::ZERO);
                }
                // Once: every report written before this copy started.
                let read = match reader.as_mut() {
                    Some(r) if !read_up.load(Ordering::Acquire) => r.read_to_end(reports).map(|()| read_up.store(true, Ordering::Release)),
                    Some(r) => r.read_into(reports, Duration::ZERO),
                    None => Ok(()),
                };
                if let Err(e) = read {
                    tracing::debug!("copies topic: {e}");
                }
            }
            // No topic: no copy ever reported.
            Ok(false) => read_up.store(true, Ordering::Release),
            Err(e) => tracing::debug!("copies topic: {e}"),
        }
        // Read while waiting for the next report, so others' land soon.
        while tick.elapsed() < every && !stop.load(Ordering::Acquire) {
            match reader.as_mut().filter(|r| r.assigned) {
                Some(r) => {
                    if let Err(e) = r.read_into(reports, Duration::from_millis(200)) {
                        tracing::debug!("copies topic: {e}");
                        std::thread::sleep(Duration::from_millis(200));
                    }
                }
                None => std::thread::sleep(Duration::from_millis(200)),
            }
        }
    }
    // The last word: this copy's job ended. Only a copy that reported says
    // it, and only to a topic still there (a finished job deleted it).
    let there =
        || reader.as_ref().is_some_and(|r| crate::kafka::partition_count(&r.consumer, &r.topic, READ_TIMEOUT).ok().flatten().is_some());
    if let (true, Some(p), true) = (wrote, &producer, wrote && there()) {
        send(p, opts, copy, &report(true));
        if let Err(e) = p.flush(LAST_REPORT_TIMEOUT) {
            tracing::debug!("the copy's last report did not land: {e}");
        }
    }
    if let Some(r) = reader {
        crate::kafka::close_in_background(r);
    }
}

fn new_producer(opts: &RunnerOptions) -> Result<BaseProducer, String> {
    let mut c = config::base(opts, "copies");
    // Never (re)creates the topic the job deleted when it finished.
    c.set("allow.auto.create.topics", "false").set("linger.ms", "0").set("message.timeout.ms", "10000");
    c.create().map_err(|e| format!("cannot create a producer for the copies topic: {e}"))
}

fn send(producer: &BaseProducer, opts: &RunnerOptions, copy: &str, bytes: &[u8]) -> bool {
    let topic = copies_topic(&opts.application_id);
    match producer.send(BaseRecord::<str, [u8]>::to(&topic).partition(0).key(copy).payload(bytes)) {
        Ok(()) => true,
        Err((e, _)) => {
            tracing::debug!("cannot write this copy's report to {topic}: {e}");
            false
        }
    }
}
