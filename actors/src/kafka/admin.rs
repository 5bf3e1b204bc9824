//! Creating and deleting runner-owned topics. User topics are never created.
use std::collections::HashMap;
use std::time::Duration;

use beam_kafka_config::RunnerOptions;
use rdkafka::admin::{AdminClient, AdminOptions, NewPartitions, NewTopic, ResourceSpecifier, TopicReplication};
use rdkafka::consumer::{BaseConsumer, CommitMode, Consumer};
use rdkafka::error::{KafkaError, RDKafkaErrorCode};
use rdkafka::{Offset, TopicPartitionList};

use crate::kafka::config;
use crate::kafka::context::AccessWatch;

const METADATA_TIMEOUT: Duration = Duration::from_secs(10);

/// How a connection's error starts when no broker answered (as opposed to
/// one that refused the client): worth trying again later.
const UNREACHABLE: &str = "cannot reach Kafka at";

/// Whether `Admin::connect` failed because no broker answered.
pub fn is_unreachable(error: &str) -> bool {
    error.starts_with(UNREACHABLE)
}

/// How long transient broker errors (a coordinator moving or loading, a
/// leader election) are retried before they count as failures.
const TRANSIENT_RETRY: Duration = Duration::from_secs(30);

fn is_transient(e: &KafkaError) -> bool {
    use RDKafkaErrorCode::*;
    matches!(
        e.rdkafka_error_code(),
        Some(
            NotCoordinator
                | CoordinatorLoadInProgress
                | CoordinatorNotAvailable
                | LeaderNotAvailable
                | NotLeaderForPartition
                | RequestTimedOut
                | OperationTimedOut
                | UnknownTopicOrPartition
        )
    )
}

async fn retry_transient<T>(mut op: impl FnMut() -> Result<T, KafkaError>) -> Result<T, KafkaError> {
    let deadline = tokio::time::Instant::now() + TRANSIENT_RETRY;
    let mut pause = Duration::from_millis(50);
    loop {
        match op() {
            Err(e) if is_transient(&e) && tokio::time::Instant::now() < deadline => {
                tokio::time::sleep(pause).await;
                pause = (pause * 2).min(Duration::from_secs(1));
            }
            other => return other,
        }
    }
}

/// How many metadata questions `at_once` asks together.
const AT_ONCE: usize = 16;

/// `ask` of every item, up to `AT_ONCE` at a time on threads of their own
/// (each is a blocking round trip to the brokers); `None` where it panicked.
fn at_once<T: Sync, R: Send>(items: &[T], ask: impl Fn(&T) -> R + Sync) -> Vec<Option<R>> {
    let ask = &ask;
    let mut out = Vec::with_capacity(items.len());
    for chunk in items.chunks(AT_ONCE) {
        std::thread::scope(|scope| {
            let asks: Vec<_> = chunk.iter().map(|item| scope.spawn(move || ask(item))).collect();
            out.extend(asks.into_iter().map(|a| a.join().ok()));
        });
    }
    out
}

pub struct Admin {
    client: AdminClient<AccessWatch>,
    access: AccessWatch,
    /// A consumer of the job's group, used to read offsets without subscribing.
    probe: BaseConsumer<AccessWatch>,
    /// The same with read_uncommitted, only to read the group's committed
    /// offsets without asking for stable ones: a copy killed mid-transaction
    /// leaves offsets pending until a new owner of its tasks fences it, and a
    /// copy starting while every other copy is starting too would otherwise
    /// wait for a fence that needs it to join the group first.
    offsets_probe: BaseConsumer,
    bootstrap: String,
    /// The brokers' ids, from the first metadata answer.
    brokers: Vec<i32>,
}

/// Where a source partition without a committed offset starts.
#[derive(Clone, Copy, Debug)]
pub enum StartAt {
    Earliest,
    Latest,
    /// The first record at or after this time (epoch millis).
    Time(i64),
}

/// A topic the runner needs, and what the admin found.
#[derive(Clone, Debug)]
pub struct TopicSpec {
    pub name: String,
    pub partitions: u32,
    /// A changelog: compacted, so it keeps the latest value per key.
    pub compacted: bool,
    /// Kept forever (a side input is read whole by every task that starts).
    pub keep_forever: bool,
    /// Segments roll this often (a compacted topic whose keys are rewritten
    /// all the time: compaction leaves the active segment alone).
    pub segment_ms: Option<u64>,
    /// Grown when it exists with fewer partitions than planned (the
    /// changelog of a sub-topology whose source gained partitions).
    pub grows: bool,
}

impl Admin {
    /// Connects and checks that the brokers answer; the error says what to fix.
    pub fn connect(opts: &RunnerOptions) -> Result<Admin, String> {
        Admin::connect_with(opts, &[])
    }

    /// The same, with the probes of user topics configured as the job's
    /// consumer of them (`consumer_properties`: ReadFromKafka's consumer_config).
    pub fn connect_with(opts: &RunnerOptions, consumer_properties: &[(String, String)]) -> Result<Admin, String> {
        let consumer = || {
            let mut c = config::consumer(opts);
            for (k, v) in consumer_properties {
                c.set(k, v);
            }
            // The probes ask for runner topics before they exist: a metadata
            // request must never create one with the broker's defaults.
            c.set("allow.auto.create.topics", "false");
            c
        };
        let access = AccessWatch::default();
        let client: AdminClient<AccessWatch> = config::base(opts, "admin")
            .create_with_context(access.clone())
            .map_err(|e| format!("cannot create a Kafka admin client: {e}"))?;
        let probe: BaseConsumer<AccessWatch> =
            consumer().create_with_context(access.clone()).map_err(|e| format!("cannot create a Kafka consumer: {e}"))?;
        let offsets_probe: BaseConsumer =
            consumer().set("isolation.level", "read_uncommitted").create().map_err(|e| format!("cannot create a Kafka consumer: {e}"))?;
        let mut admin = Admin { client, access, probe, offsets_probe, bootstrap: opts.bootstrap_servers.clone(), brokers: Vec::new() };
        admin.brokers = admin.check_reachable()?;
        Ok(admin)
    }

    /// Asks for metadata in short tries, so credentials the cluster refuses
    /// fail within about a second instead of looking like an outage.
    /// Returns the brokers' ids.
    fn check_reachable(&self) -> Result<Vec<i32>, String> {
        let began = std::time::Instant::now();
        let deadline = began + METADATA_TIMEOUT;
        loop {
            let e = match self.probe.fetch_metadata(None, Duration::from_secs(1)) {
                Ok(md) => {
                    super::transaction::first_contact(&self.bootstrap, began.elapsed());
                    return Ok(md.brokers().iter().map(|b| b.id()).collect());
                }
                Err(e) => e,
            };
            // Serves the probe's event queue: its error callback (the
            // refusal) runs only here.
            let _ = self.probe.poll(Duration::ZERO);
            if let Some(refusal) = self.access.denied() {
                return Err(refusal.within(format_args!("Kafka at {} refused the runner's client", self.bootstrap)).explain());
            }
            if std::time::Instant::now() >= deadline {
                return Err(format!(
                    "{UNREACHABLE} {} within {} s ({e}); check --bootstrap_servers and that the brokers are running",
                    self.bootstrap,
                    METADATA_TIMEOUT.as_secs()
                ));
            }
        }
    }

    /// The smallest `socket.request.max.bytes` of the brokers: no produce
    /// request may be larger. `None` when their settings cannot be read (a
    /// principal without DescribeConfigs on the cluster).
    pub async fn socket_request_max_bytes(&self) -> Option<u64> {
        let brokers: Vec<ResourceSpecifier> = self.brokers.iter().map(|id| ResourceSpecifier::Broker(*id)).collect();
        let opts = AdminOptions::new().request_timeout(Some(Duration::from_secs(5)));
        let described = match self.client.describe_configs(&brokers, &opts).await {
            Ok(d) => d,
            Err(e) => {
                tracing::debug!("cannot read the brokers' settings: {e}");
                return None;
            }
        };
        described.iter().filter_map(|r| r.as_ref().ok()?.get("socket.request.max.bytes")?.value.as_deref()?.parse().ok()).min()
    }

    /// Adds partitions to topics that have fewer than planned. Another
    /// copy may be growing them at the same time: what counts is that they
    /// have enough once this returns.
    async fn grow(&self, topics: &[(&TopicSpec, u32)]) -> Result<(), String> {
        let new: Vec<NewPartitions> = topics.iter().map(|(t, _)| NewPartitions::new(&t.name, t.partitions as usize)).collect();
        let opts = AdminOptions::new().operation_timeout(Some(Duration::from_secs(30)));
        let results = self.client.create_partitions(&new, &opts).await.map_err(|e| format!("cannot add partitions: {e}"))?;
        for r in results {
            if let Err((name, code)) = r {
                let planned = topics.iter().find(|(t, _)| t.name == name).map_or(0, |(t, _)| t.partitions);
                let now = self.partitions(&name)?.unwrap_or(0);
                if now < planned {
                    return Err(format!("cannot grow topic {name} to {planned} partitions (it has {now}): {code}"));
                }
            }
        }
        for (t, was) in topics {
            tracing::info!("topic {} grew from {was} to {} partitions with its source", t.name, t.partitions);
        }
        self.await_leaders(&topics.iter().map(|(t, _)| *t).collect::<Vec<_>>()).await
    }

    /// Partition count of an existing topic, `None` if it does not exist.
    /// Asked through the probe: on the admin's connection the question
    /// would wait behind a topic creation under way (~30 ms).
    pub fn partitions(&self, topic: &str) -> Result<Option<u32>, String> {
        super::partition_count(&self.probe, topic, METADATA_TIMEOUT)
    }

    /// The names of every topic of the cluster the runner may see.
    pub fn topic_names(&self) -> Result<Vec<String>, String> {
        let md = self.client.inner().fetch_metadata(None, METADATA_TIMEOUT).map_err(|e| format!("cannot list the topics: {e}"))?;
        Ok(md.topics().iter().filter(|t| t.error().is_none()).map(|t| t.name().to_string()).collect())
    }

    /// How many members the consumer group `group` has now (copies running).
    pub fn group_members(&self, group: &str) -> Result<usize, String> {
        let list = self.probe.fetch_group_list(Some(group), METADATA_TIMEOUT).map_err(|e| format!("cannot describe group {group}: {e}"))?;
        Ok(list.groups().iter().filter(|g| g.name() == group).map(|g| g.members().len()).sum())
    }

    /// Creates the topics that do not exist; an existing one must have the
    /// planned partition count. Returns the names that were created now.
    pub async fn ensure_topics(&self, topics: &[TopicSpec], replication: u32, max_message_bytes: usize) -> Result<Vec<String>, String> {
        let t0 = std::time::Instant::now();
        let found = at_once(topics, |t| self.partitions(&t.name));
        let checked_after = t0.elapsed();
        let mut missing = Vec::new();
        let mut growing = Vec::new();
        for (t, found) in topics.iter().zip(found) {
            match found.unwrap_or_else(|| Err("reading topic metadata panicked".into()))? {
                Some(n) if n == t.partitions => {}
                Some(n) if n < t.partitions && t.grows => growing.push((t, n)),
                Some(n) => {
                    return Err(format!(
                        "topic {} exists with {n} partition(s) but the plan needs {}; delete it or use another --application_id",
                        t.name, t.partitions
                    ))
                }
                None => missing.push(t),
            }
        }
        if !growing.is_empty() {
            self.grow(&growing).await?;
        }
        if missing.is_empty() {
            return Ok(Vec::new());
        }
        let max_message_bytes = max_message_bytes.to_string();
        let segment_ms: Vec<Option<String>> = missing.iter().map(|t| t.segment_ms.map(|ms| ms.to_string())).collect();
        let new: Vec<NewTopic> = missing
            .iter()
            .zip(&segment_ms)
            .map(|(t, segment_ms)| {
                let topic = NewTopic::new(&t.name, t.partitions as i32, TopicReplication::Fixed(replication as i32))
                    .set("max.message.bytes", &max_message_bytes);
                let topic = if t.compacted { topic.set("cleanup.policy", "compact") } else { topic };
                let topic = match segment_ms {
                    Some(ms) => topic.set("segment.ms", ms),
                    None => topic,
                };
                if t.keep_forever {
                    topic.set("retention.ms", "-1")
                } else {
                    topic
                }
            })
            .collect();
        let opts = AdminOptions::new().operation_timeout(Some(Duration::from_secs(30)));
        let results = self.client.create_topics(&new, &opts).await.map_err(|e| format!("cannot create topics: {e}"))?;
        let created_after = t0.elapsed();
        let mut created = Vec::new();
        for r in results {
            match r {
                Ok(name) => created.push(name),
                Err((_, RDKafkaErrorCode::TopicAlreadyExists)) => {}
                Err((name, code)) => return Err(format!("cannot create topic {name}: {code}")),
            }
        }
        self.await_leaders(&missing).await?;
        tracing::debug!(
            "{} topic(s) checked after {checked_after:?}, created after {created_after:?}, led after {:?}",
            missing.len(),
            t0.elapsed()
        );
        Ok(created)
    }

    /// A created topic is usable once every partition has a leader that
    /// answers for its offsets; metadata reaches clients a moment later.
    async fn await_leaders(&self, topics: &[&TopicSpec]) -> Result<(), String> {
        let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
        let mut waiting: Vec<&TopicSpec> = topics.to_vec();
        let mut pause = Duration::from_millis(2);
        loop {
            let (led, last_error) = self.answering_topics(&waiting);
            waiting.retain(|t| !led.contains(t.name.as_str()));
            let Some(t) = waiting.first() else { return Ok(()) };
            if tokio::time::Instant::now() > deadline {
                let why = last_error.map(|e| format!(" (last answer: {e})")).unwrap_or_default();
                return Err(format!("topic {} was created but its partitions got no leader within 30 s{why}", t.name));
            }
            // Leaders usually answer within a few tens of milliseconds of
            // the creation; asked often at first, less so later.
            tokio::time::sleep(pause).await;
            pause = (pause * 2).min(Duration::from_millis(20));
        }
    }

    /// Those of `topics` whose every partition has a leader that answers for
    /// its end offset. The probe's metadata of each is asked first, at once:
    /// the probe would otherwise keep what it cached of a topic before the
    /// brokers knew it; then one ListOffsets request per broker for all.
    /// Also says what the brokers last answered for one that is not.
    fn answering_topics<'a>(&self, topics: &[&'a TopicSpec]) -> (std::collections::HashSet<&'a str>, Option<String>) {
        let led = at_once(topics, |t| self.has_leaders(t));
        let mut last_error = None;
        let mut known: Vec<&TopicSpec> = Vec::new();
        for (t, led) in topics.iter().zip(led) {
            match led {
                Some(Ok(())) => known.push(t),
                Some(Err(e)) => last_error = Some(e),
                None => last_error = Some("reading its metadata panicked".into()),
            }
        }
        if known.is_empty() {
            return (Default::default(), last_error);
        }
        let mut ask = TopicPartitionList::new();
        for t in &known {
            for p in 0..t.partitions as i32 {
                // Cannot fail for `End`; a partition left without it would read as not led.
                let _ = ask.add_partition_offset(&t.name, p, Offset::End);
            }
        }
        let answered = match self.probe.offsets_for_times(ask, Duration::from_secs(1)) {
            Ok(a) => a,
            Err(e) => return (Default::default(), Some(e.to_string())),
        };
        let answers = |t: &TopicSpec, p: i32| {
            answered.find_partition(&t.name, p).is_some_and(|e| e.error().is_ok() && matches!(e.offset(), Offset::Offset(o) if o >= 0))
        };
        let led = known.iter().filter(|t| (0..t.partitions as i32).all(|p| answers(t, p))).map(|t| t.name.as_str()).collect();
        (led, last_error)
    }

    /// Whether the probe's fresh metadata shows every partition of `t` with
    /// a leader; if not, what it showed.
    fn has_leaders(&self, t: &TopicSpec) -> Result<(), String> {
        let md = self.probe.fetch_metadata(Some(&t.name), METADATA_TIMEOUT).map_err(|e| e.to_string())?;
        let m = md.topics().iter().find(|m| m.name() == t.name).ok_or("not in the metadata")?;
        if let Some(e) = m.error() {
            return Err(format!("{:?}", RDKafkaErrorCode::from(e)));
        }
        if m.partitions().len() != t.partitions as usize {
            return Err(format!("{} of {} partition(s) known", m.partitions().len(), t.partitions));
        }
        match m.partitions().iter().find(|p| p.error().is_some() || p.leader() < 0) {
            Some(p) => Err(format!("partition {} has no leader yet", p.id())),
            None => Ok(()),
        }
    }

    /// Partition count of a user's topic, `None` if it does not exist. Asked
    /// through the consumer, which never has a topic auto-created.
    pub async fn user_topic_partitions(&self, topic: &str) -> Result<Option<u32>, String> {
        let md = retry_transient(|| self.probe.fetch_metadata(Some(topic), METADATA_TIMEOUT))
            .await
            .map_err(|e| format!("cannot read metadata of topic {topic}: {e}"))?;
        Ok(md
            .topics()
            .iter()
            .find(|t| t.name() == topic && t.error().is_none() && !t.partitions().is_empty())
            .map(|t| t.partitions().len() as u32))
    }

    /// Gives every partition of `topic` that the job's group has no committed
    /// offset for a starting offset, so a first run starts where the user
    /// asked (ReadFromKafka's start_read_time / auto.offset.reset) and later
    /// runs resume where they committed. Returns each partition's starting
    /// offset (committed or seeded).
    /// `start_for(whether any partition of the topic has a commit)`: where
    /// a partition without one starts.
    pub async fn seed_offsets(
        &self,
        topic: &str,
        partitions: u32,
        start_for: impl Fn(bool) -> StartAt,
    ) -> Result<HashMap<i32, i64>, String> {
        let mut all = TopicPartitionList::new();
        for p in 0..partitions as i32 {
            all.add_partition(topic, p);
        }
        // Committed offsets, stable or not: seeding only asks whether the
        // group ever committed one (a task reads its stable commit once it
        // fenced earlier owners).
        let committed = retry_transient(|| self.offsets_probe.committed_offsets(all.clone(), METADATA_TIMEOUT))
            .await
            .map_err(|e| format!("cannot read committed offsets of {topic}: {e}"))?;
        let mut starts: HashMap<i32, i64> =
            committed.elements().iter().filter_map(|e| e.offset().to_raw().filter(|o| *o >= 0).map(|o| (e.partition(), o))).collect();
        let missing: Vec<i32> = (0..partitions as i32).filter(|p| !starts.contains_key(p)).collect();
        if missing.is_empty() {
            return Ok(starts);
        }
        let start = start_for(!starts.is_empty());
        let mut seed = TopicPartitionList::new();
        for &p in &missing {
            let (low, high) = retry_transient(|| self.probe.fetch_watermarks(topic, p, METADATA_TIMEOUT))
                .await
                .map_err(|e| format!("cannot read the offsets of {topic}[{p}]: {e}"))?;
            let offset = match start {
                StartAt::Earliest => low,
                StartAt::Latest => high,
                StartAt::Time(millis) => {
                    let mut q = TopicPartitionList::new();
                    q.add_partition_offset(topic, p, Offset::Offset(millis)).map_err(|e| e.to_string())?;
                    let found = retry_transient(|| self.probe.offsets_for_times(q.clone(), METADATA_TIMEOUT))
                        .await
                        .map_err(|e| format!("cannot look up offsets of {topic}[{p}] by time: {e}"))?;
                    // No record at or after the time: start at the end.
                    found.elements().first().and_then(|e| e.offset().to_raw()).filter(|o| *o >= 0).unwrap_or(high)
                }
            };
            seed.add_partition_offset(topic, p, Offset::Offset(offset)).map_err(|e| e.to_string())?;
            starts.insert(p, offset);
        }
        // Another copy of the job may already be running the group: then it
        // seeded the offsets, and a commit from outside the group is refused.
        match self.probe.commit(&seed, CommitMode::Sync) {
            Ok(()) => tracing::info!("{topic}: first run starts at {starts:?} (partition: offset)"),
            Err(e) => tracing::info!("not seeding offsets of {topic}: {e}"),
        }
        Ok(starts)
    }

    /// The end offset of one partition. Coordinator moves and leader
    /// elections are transient: retried for a while.
    pub async fn end_offset(&self, topic: &str, partition: i32) -> Result<i64, String> {
        let (_, high) = retry_transient(|| self.probe.fetch_watermarks(topic, partition, METADATA_TIMEOUT))
            .await
            .map_err(|e| format!("cannot read the end offset of {topic}[{partition}]: {e}"))?;
        Ok(high)
    }

    /// Deletes topics; missing ones are fine.
    pub async fn delete_topics(&self, names: &[String]) -> Result<(), String> {
        if names.is_empty() {
            return Ok(());
        }
        let refs: Vec<&str> = names.iter().map(String::as_str).collect();
        let opts = AdminOptions::new().operation_timeout(Some(Duration::from_secs(30)));
        let results = self.client.delete_topics(&refs, &opts).await.map_err(|e| format!("cannot delete topics: {e}"))?;
        for r in results {
            if let Err((name, code)) = r {
                if code != RDKafkaErrorCode::UnknownTopicOrPartition {
                    return Err(format!("cannot delete topic {name}: {code}"));
                }
            }
        }
        Ok(())
    }

    /// The job group's committed offsets of `topics` (each with its
    /// partition count); partitions without one are left out.
    pub async fn committed_positions(&self, topics: &[(String, u32)]) -> Result<TopicPartitionList, String> {
        let mut tpl = TopicPartitionList::new();
        for (topic, partitions) in topics {
            for p in 0..*partitions as i32 {
                tpl.add_partition(topic, p);
            }
        }
        let committed = retry_transient(|| self.probe.committed_offsets(tpl.clone(), METADATA_TIMEOUT))
            .await
            .map_err(|e| format!("cannot read the committed offsets: {e}"))?;
        let mut out = TopicPartitionList::new();
        for e in committed.elements() {
            if let Offset::Offset(o) = e.offset() {
                out.add_partition_offset(e.topic(), e.partition(), Offset::Offset(o)).map_err(|e| e.to_string())?;
            }
        }
        Ok(out)
    }

    /// Commits `positions` to the job's group, from outside it (the group
    /// has no members).
    pub fn commit_positions(&self, positions: &TopicPartitionList) -> Result<(), String> {
        if positions.count() == 0 {
            return Ok(());
        }
        self.probe.commit(positions, CommitMode::Sync).map_err(|e| format!("cannot commit the source positions: {e}"))
    }

    /// Deletes the job's consumer group (its committed offsets).
    pub async fn delete_group(&self, group: &str) -> Result<(), String> {
        let opts = AdminOptions::new().operation_timeout(Some(Duration::from_secs(30)));
        let results = self.client.delete_groups(&[group], &opts).await.map_err(|e| format!("cannot delete group {group}: {e}"))?;
        for r in results {
            if let Err((name, code)) = r {
                if code != RDKafkaErrorCode::GroupIdNotFound {
                    return Err(format!("cannot delete consumer group {name}: {code}"));
                }
            }
        }
        Ok(())
    }
}
