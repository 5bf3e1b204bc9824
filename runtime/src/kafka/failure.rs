//! What a task does about an error from Kafka or its local store: wait and
//! restart from its last commit (the infrastructure is unavailable for a
//! while: a broker restarting, a coordinator moving, a full disk), or fail
//! the job with what the user must fix. Kafka Streams' contract: a broker
//! bounce is a non-event; only a misconfiguration ends the application.
//!
//! Errors reach here as text. rdkafka renders an error as `<context>:
//! <CodeName> (<description>)`, so the code names of `RDKafkaErrorCode`
//! appear in it as words; the runner's own timeouts and the operating
//! system's I/O errors are matched by their wording.

/// The decision for one error.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Verdict {
    /// Restart the task from its last commit after a backoff; the job
    /// stays RUNNING and says what it waits for.
    Transient { waiting_for: &'static str },
    /// Fail the job; `fix` tells the user what to change, when known.
    Fatal { fix: Option<&'static str> },
}

const BROKERS: &str = "the Kafka brokers to answer again";
const LEADER: &str = "a partition leader to be elected";
const COORDINATOR: &str = "the group or transaction coordinator to be available";
const PRODUCER: &str = "a fresh producer (its earlier one was reset by the broker)";
const DISK: &str = "the local state directory to be writable (disk full, or no permission?)";
const MOVED: &str = "the group's next assignment (another copy started the task after this one began to)";

/// Code names that mean: wait, then restart from the last commit.
const TRANSIENT: &[(&str, &str)] = &[
    ("MessageTimedOut", BROKERS),
    ("BrokerTransportFailure", BROKERS),
    ("AllBrokersDown", BROKERS),
    ("Resolve", BROKERS),
    ("OperationTimedOut", BROKERS),
    ("RequestTimedOut", BROKERS),
    ("TimedOutQueue", BROKERS),
    ("NetworkException", BROKERS),
    ("BrokerNotAvailable", BROKERS),
    ("KafkaStorageError", BROKERS),
    ("ThrottlingQuotaExceeded", BROKERS),
    ("PurgeQueue", BROKERS),
    ("PurgeInflight", BROKERS),
    ("BrokerDestroy", BROKERS),
    ("DestroyBroker", BROKERS),
    ("Retry", BROKERS),
    // A task's transactional id initialised by another copy after this
    // one began to start the task: the group moved it, and this copy's
    // revocation is on its way. Never a job's end.
    ("Fenced", MOVED),
    ("ProducerFenced", MOVED),
    ("LeaderNotAvailable", LEADER),
    ("NotLeaderForPartition", LEADER),
    ("ReplicaNotAvailable", LEADER),
    ("NotEnoughReplicas", LEADER),
    ("NotEnoughReplicasAfterAppend", LEADER),
    ("FencedLeaderEpoch", LEADER),
    ("UnknownLeaderEpoch", LEADER),
    ("NotCoordinator", COORDINATOR),
    ("CoordinatorNotAvailable", COORDINATOR),
    ("CoordinatorLoadInProgress", COORDINATOR),
    ("WaitingForCoordinator", COORDINATOR),
    ("RebalanceInProgress", COORDINATOR),
    ("ConcurrentTransactions", COORDINATOR),
    ("UnstableOffsetCommit", COORDINATOR),
    ("OutOfOrderSequenceNumber", PRODUCER),
    ("UnknownProducerId", PRODUCER),
    ("InvalidProducerIdMapping", PRODUCER),
    ("InvalidTransactionalState", PRODUCER),
    ("State", PRODUCER),
    // An idempotent or transactional producer librdkafka gave up on: the
    // restarted task gets a new one.
    ("Fatal", PRODUCER),
];

/// Code names that no restart cures, with what to fix.
const FATAL: &[(&str, &str)] = &[
    (
        "TopicAuthorizationFailed",
        "grant the runner's principal read, write, create and delete on the application's topics (prefix __beam_<application_id>_) and the topics the pipeline reads and writes",
    ),
    ("GroupAuthorizationFailed", "grant the runner's principal read on the consumer group named by --application_id"),
    (
        "TransactionalIdAuthorizationFailed",
        "grant the runner's principal write on transactional ids prefixed with the application id, or use --processing_guarantee=at_least_once",
    ),
    ("ClusterAuthorizationFailed", "grant the runner's principal the cluster permissions it needs (IdempotentWrite, Describe)"),
    (
        "SaslAuthenticationFailed",
        "check the credentials in --kafka_property (sasl.mechanism, sasl.username, sasl.password) against the broker's users",
    ),
    ("Authentication", "check the security settings in --kafka_property (security.protocol, sasl.*, ssl.*)"),
    ("Ssl", "check the TLS settings in --kafka_property (ssl.ca.location, ssl.endpoint.identification.algorithm, certificates)"),
    ("UnknownTopicOrPartition", "a topic the job uses does not exist (deleted while the job ran?)"),
    ("UnknownTopic", "a topic the job uses does not exist (deleted while the job ran?)"),
    ("UnknownPartition", "a partition the job uses does not exist"),
    (
        "MessageSizeTooLarge",
        "a record is larger than Kafka accepts: the runner's own topics take records up to the brokers' socket.request.max.bytes less 1 MiB (Kafka's default: 100 MiB), so raise that on the brokers; for a WriteToKafka topic, raise its max.message.bytes and the producer's message.max.bytes; or emit smaller elements",
    ),
    ("InvalidTransactionTimeout", "lower --transaction_timeout_ms to at most the broker's transaction.max.timeout.ms"),
    ("InvalidConfig", "fix the client property the message names (--kafka_property or the transform's config)"),
    ("InvalidArgument", "fix the client property the message names (--kafka_property or the transform's config)"),
    ("UnsupportedVersion", "the broker is too old for this runner: it needs Kafka 2.5 or later (transactions with consumer group metadata)"),
    ("UnsupportedFeature", "the broker does not support a feature the job needs (transactions, idempotence)"),
    ("PolicyViolation", "the broker's policy refused a topic setting: create the topic yourself or relax the policy"),
    ("MessageBatchTooLarge", "a batch is larger than the broker accepts: lower batch.size or raise the broker's message.max.bytes"),
];

/// Wording of the runner's own and the operating system's errors.
const TRANSIENT_TEXT: &[(&str, &str)] = &[
    ("did not acknowledge writes within", BROKERS),
    ("took longer than", BROKERS),
    ("connection refused", BROKERS),
    ("timed out", BROKERS),
    ("no space left on device", DISK),
    ("read-only file system", DISK),
    ("permission denied", DISK),
    ("disk quota exceeded", DISK),
];

/// Classifies an error by the code names and wording it carries. Unknown
/// errors are fatal: a restart is only promised for what is known to pass.
pub fn classify(error: &str) -> Verdict {
    let words: Vec<&str> = error.split(|c: char| !c.is_ascii_alphanumeric() && c != '_').filter(|w| !w.is_empty()).collect();
    // A fatal cause anywhere wins: a timeout wrapping an authorization
    // failure must not be retried forever.
    // Code names match exactly: "ssl://host" or "SSL handshake failed"
    // (a transport error) are not the `Ssl` code.
    for (code, fix) in FATAL {
        if words.contains(code) {
            return Verdict::Fatal { fix: Some(fix) };
        }
    }
    for (code, waiting_for) in TRANSIENT {
        if words.contains(code) {
            return Verdict::Transient { waiting_for };
        }
    }
    let lower = error.to_ascii_lowercase();
    for (text, waiting_for) in TRANSIENT_TEXT {
        if lower.contains(text) {
            return Verdict::Transient { waiting_for };
        }
    }
    Verdict::Fatal { fix: None }
}

/// Whether a reader that otherwise retries on its own (a side input's
/// consumer) must stop and fail its task: the error names a cause no wait
/// cures (an ACL revoked, a topic deleted). Other errors, even ones not
/// recognised, are left to the client's own retries.
pub fn reader_must_stop(error: &str) -> bool {
    matches!(classify(error), Verdict::Fatal { fix: Some(_) })
}

/// Whether the error is the cluster refusing the runner's credentials or
/// permissions: what a client that otherwise retries on its own (the
/// group consumer) must not wait through forever.
pub fn is_access_denied(error: &str) -> bool {
    const CODES: &[&str] = &[
        "TopicAuthorizationFailed",
        "GroupAuthorizationFailed",
        "TransactionalIdAuthorizationFailed",
        "ClusterAuthorizationFailed",
        "SaslAuthenticationFailed",
        "Authentication",
        "Ssl",
    ];
    error.split(|c: char| !c.is_ascii_alphanumeric() && c != '_').any(|w| CODES.contains(&w))
}

/// The error with its fix, for the job's failure message.
pub fn explain(error: &str) -> String {
    match classify(error) {
        Verdict::Fatal { fix: Some(fix) } => format!("{error} (to fix: {fix})"),
        _ => error.to_string(),
    }
}

/// Capped exponential backoff between restarts of a task that keeps
/// failing for the same transient reason.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct Backoff {
    pub attempt: u32,
}

impl Backoff {
    pub const FIRST_MS: u64 = 500;
    pub const MAX_MS: u64 = 30_000;

    /// The wait before the next restart; `jitter` in `[0, 1)` spreads the
    /// restarts of many tasks (and copies) over the last half of the wait.
    pub fn next_delay_ms(&mut self, jitter: f64) -> u64 {
        let full = Self::FIRST_MS.saturating_mul(1u64 << self.attempt.min(16)).min(Self::MAX_MS);
        self.attempt = self.attempt.saturating_add(1);
        let jitter = jitter.clamp(0.0, 1.0);
        full / 2 + ((full / 2) as f64 * jitter) as u64
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_reader_stops_only_for_a_cause_no_wait_cures() {
        assert!(reader_must_stop("KafkaError (Message consumption error: TopicAuthorizationFailed (Broker: Topic authorization failed))"));
        assert!(!reader_must_stop("KafkaError (Message consumption error: BrokerTransportFailure (Local: Broker transport failure))"));
        assert!(!reader_must_stop("something nobody has seen"), "an unknown error is retried by the client");
    }

    #[test]
    fn a_broker_outage_is_transient_and_names_what_it_waits_for() {
        for e in [
            "a write to Kafka failed: Message production error: MessageTimedOut (Local: Message timed out)",
            "cannot write to __beam_a_shuffle_0: Message production error: AllBrokersDown (Local: All broker connections are down)",
            "task 1_0: cannot initialise transactions (a-task-1_0): Transaction error: OperationTimedOut (Local: Timed out)",
            "Kafka did not acknowledge writes within 60 s",
        ] {
            assert_eq!(classify(e), Verdict::Transient { waiting_for: BROKERS }, "{e}");
        }
        assert_eq!(
            classify("Transaction error: NotCoordinator (Broker: Not coordinator)"),
            Verdict::Transient { waiting_for: COORDINATOR }
        );
        assert_eq!(classify("IO error: No space left on device: /state/000012.log"), Verdict::Transient { waiting_for: DISK });
        // A transaction error as `transaction::describe` words it.
        assert_eq!(
            classify("task 1_0: cannot initialise transactions (a-task-1_0): Transaction error: Broker: Not coordinator [NotCoordinator]"),
            Verdict::Transient { waiting_for: COORDINATOR }
        );
        assert_eq!(classify("Message production error: Fatal (Local: Fatal error)"), Verdict::Transient { waiting_for: PRODUCER });
        // Seen in CI: three copies starting together, a task moved while one
        // of them initialised its transactional id.
        assert_eq!(
            classify(
                "task 0_2: cannot initialise transactions (app-task-0_2): Transaction error: Producer fenced by newer \
                 instance: Failed to acquire transactional PID from broker TxnCoordinator/1: Broker: There is a newer \
                 producer with the same transactionalId which fences the current one [Fenced]"
            ),
            Verdict::Transient { waiting_for: MOVED }
        );
    }

    #[test]
    fn misconfiguration_is_fatal_with_its_fix_and_wins_over_a_timeout() {
        let e = "Message production error: TopicAuthorizationFailed (Broker: Topic authorization failed) after the request timed out";
        let Verdict::Fatal { fix: Some(fix) } = classify(e) else { panic!("{e}") };
        assert!(fix.contains("grant"), "{fix}");
        let e = "Client creation error: SaslAuthenticationFailed (Broker: SASL Authentication failed)";
        assert!(explain(e).contains("sasl.password"), "{}", explain(e));
        assert!(explain("MessageSizeTooLarge (Broker: Message size too large)").contains("max.message.bytes"));
        assert!(is_access_denied(e));
        assert!(!is_access_denied("Subscribed topic not available: t: Broker: Unknown topic or partition (UnknownTopicOrPartition)"));
        // A broker that is down, reached over TLS, is not a TLS refusal.
        let down =
            "Global error: BrokerTransportFailure (Local: Broker transport failure): ssl://b1:9093/1: SSL handshake failed: Disconnected";
        assert!(!is_access_denied(down));
        assert_eq!(classify(down), Verdict::Transient { waiting_for: BROKERS });
        assert!(is_access_denied("Global error: Ssl (Local: SSL error): ssl://b1:9093/bootstrap: certificate verify failed"));
    }

    #[test]
    fn unknown_errors_and_user_code_stay_fatal_and_words_match_whole() {
        assert_eq!(classify("Error in stage-1: ZeroDivisionError: division by zero"), Verdict::Fatal { fix: None });
        // "Retry" is a code; "Retrying" or "Statement" are not.
        assert_eq!(classify("Statement rejected; Retrying is pointless"), Verdict::Fatal { fix: None });
        assert_eq!(explain("something odd"), "something odd");
    }

    #[test]
    fn backoff_doubles_to_a_cap_with_jitter_in_the_upper_half() {
        let mut b = Backoff::default();
        let lows: Vec<u64> = (0..10).map(|_| b.next_delay_ms(0.0)).collect();
        assert_eq!(&lows[..4], &[250, 500, 1000, 2000]);
        assert_eq!(*lows.last().unwrap(), Backoff::MAX_MS / 2);
        let mut b = Backoff { attempt: 40 };
        let high = b.next_delay_ms(0.999);
        assert!(high < Backoff::MAX_MS && high > Backoff::MAX_MS * 9 / 10, "{high}");
    }
}
