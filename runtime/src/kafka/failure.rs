//! What the runner does about an error from Kafka or its local store: the
//! error carries its recovery (`Failure`). Wait and restart the task from
//! its last commit (the infrastructure is unavailable for a while: a broker
//! restarting, a coordinator moving, a full disk); stop this incarnation
//! because another owns the task now (fenced, handed over); stop because
//! Kafka aborted the transaction; send the same request again; or fail the
//! job with what the user must fix. Kafka Streams' contract: a broker bounce
//! is a non-event; only a misconfiguration ends the application.
//!
//! A Kafka error is judged by its librdkafka error code (`Failure::kafka`,
//! given the code's name as rdkafka's `RDKafkaErrorCode` spells it, so
//! this crate needs no Kafka client). Errors that have no code (the
//! runner's own timeouts, the operating system's I/O errors as RocksDB
//! words them) are judged by their wording (`Failure::local`); text that
//! crossed a boundary where the code was lost (a start step's message, a
//! reader's report) by the code names rdkafka writes into it
//! (`Failure::from_text`).
use std::fmt;

/// What can be done about a failure.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Recovery {
    /// Restart the task from its last commit after a backoff; the job
    /// stays RUNNING and says what it waits for.
    Transient { waiting_for: &'static str },
    /// Another incarnation owns the task now (this one's producer was
    /// fenced, or its partitions are being handed over): stop without
    /// committing; the owner redoes what this one did not commit.
    Migrated,
    /// Kafka aborted the transaction: stop without committing and start
    /// again from the last commit.
    Aborted,
    /// The same request may be sent again (a commit the coordinator
    /// refused for now).
    Retry,
    /// Fail the job; `fix` tells the user what to change, when known.
    Fatal { fix: Option<&'static str> },
}

/// An error and what to do about it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Failure {
    pub message: String,
    pub recovery: Recovery,
}

pub const BROKERS: &str = "the Kafka brokers to answer again";
const LEADER: &str = "a partition leader to be elected";
const COORDINATOR: &str = "the group or transaction coordinator to be available";
const PRODUCER: &str = "a fresh producer (its earlier one was reset by the broker)";
const DISK: &str = "the local state directory to be writable (disk full, or no permission?)";
/// What a task start that found its task fenced waits for: another copy
/// started the task after this one began to, and this copy's revocation
/// is on its way. Never a job's end.
pub const MOVED: &str = "the group's next assignment (another copy started the task after this one began to)";

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

/// Codes that mean the task's producer was fenced by a newer owner.
const FENCED: &[&str] = &["Fenced", "ProducerFenced", "InvalidProducerEpoch"];

/// The recovery for a librdkafka error code.
fn recovery_of_code(code: &str) -> Option<Recovery> {
    if FENCED.contains(&code) {
        return Some(Recovery::Migrated);
    }
    if let Some((_, fix)) = FATAL.iter().find(|(c, _)| *c == code) {
        return Some(Recovery::Fatal { fix: Some(fix) });
    }
    TRANSIENT.iter().find(|(c, _)| *c == code).map(|(_, waiting_for)| Recovery::Transient { waiting_for })
}

/// The recovery for an error that has no code, by its wording.
fn recovery_of_wording(message: &str) -> Recovery {
    let lower = message.to_ascii_lowercase();
    TRANSIENT_TEXT
        .iter()
        .find(|(text, _)| lower.contains(text))
        .map_or(Recovery::Fatal { fix: None }, |(_, waiting_for)| Recovery::Transient { waiting_for })
}

impl Failure {
    /// An error librdkafka or a broker reported with error `code`. Unknown
    /// codes are fatal: a restart is only promised for what is known to pass.
    pub fn kafka(code: &str, message: impl Into<String>) -> Failure {
        Failure { message: message.into(), recovery: recovery_of_code(code).unwrap_or(Recovery::Fatal { fix: None }) }
    }

    /// An error without a Kafka code: the runner's own timeouts and the
    /// operating system's I/O errors wait; anything else is fatal.
    pub fn local(message: impl Into<String>) -> Failure {
        let message = message.into();
        Failure { recovery: recovery_of_wording(&message), message }
    }

    /// Text that may carry rdkafka's rendering of an error
    /// (`<context>: <CodeName> (<description>)`), where the code itself was
    /// lost on the way: the code names in it decide, a fatal one first (a
    /// timeout wrapping an authorization failure must not be retried
    /// forever), then a fencing, then a transient one; then its wording. Names match whole words: "ssl://host"
    /// or "SSL handshake failed" (a transport error) are not the `Ssl` code.
    pub fn from_text(message: impl Into<String>) -> Failure {
        let message = message.into();
        let words: Vec<&str> = message.split(|c: char| !c.is_ascii_alphanumeric() && c != '_').filter(|w| !w.is_empty()).collect();
        let named = |table: &[(&'static str, &'static str)]| -> Option<&'static str> {
            table.iter().find(|(code, _)| words.contains(code)).map(|(c, _)| *c)
        };
        let fenced = words.iter().any(|w| FENCED.contains(w));
        let recovery = match named(FATAL) {
            Some(code) => recovery_of_code(code).expect("a code of the tables"),
            None if fenced => Recovery::Migrated,
            None => named(TRANSIENT).and_then(recovery_of_code).unwrap_or_else(|| recovery_of_wording(&message)),
        };
        Failure { message, recovery }
    }

    pub fn transient(message: impl Into<String>, waiting_for: &'static str) -> Failure {
        Failure { message: message.into(), recovery: Recovery::Transient { waiting_for } }
    }

    pub fn migrated(message: impl Into<String>) -> Failure {
        Failure { message: message.into(), recovery: Recovery::Migrated }
    }

    pub fn aborted(message: impl Into<String>) -> Failure {
        Failure { message: message.into(), recovery: Recovery::Aborted }
    }

    pub fn retry(message: impl Into<String>) -> Failure {
        Failure { message: message.into(), recovery: Recovery::Retry }
    }

    /// A failure no restart cures, with no known fix (user code, a bug).
    pub fn fatal(message: impl Into<String>) -> Failure {
        Failure { message: message.into(), recovery: Recovery::Fatal { fix: None } }
    }

    /// The same failure, its message prefixed with where it happened.
    pub fn within(mut self, context: impl fmt::Display) -> Failure {
        self.message = format!("{context}: {}", self.message);
        self
    }

    /// The same failure with `f` applied to its message.
    pub fn map_message(mut self, f: impl FnOnce(String) -> String) -> Failure {
        self.message = f(self.message);
        self
    }

    /// Whether the job must end (no wait or restart cures it).
    pub fn is_fatal(&self) -> bool {
        matches!(self.recovery, Recovery::Fatal { .. })
    }

    /// Whether a reader that otherwise retries on its own (a side input's
    /// consumer) must stop and fail its task: the cause is one no wait
    /// cures (an ACL revoked, a topic deleted). Other errors, even ones not
    /// recognised, are left to the client's own retries.
    pub fn stops_a_reader(&self) -> bool {
        matches!(self.recovery, Recovery::Fatal { fix: Some(_) })
    }

    /// The message with its fix, for the job's failure message.
    pub fn explain(&self) -> String {
        match self.recovery {
            Recovery::Fatal { fix: Some(fix) } => format!("{} (to fix: {fix})", self.message),
            _ => self.message.clone(),
        }
    }
}

impl fmt::Display for Failure {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.message)
    }
}

/// Where errors are still text (most of the start path), a failure goes on
/// as its message.
impl From<Failure> for String {
    fn from(f: Failure) -> String {
        f.message
    }
}

/// Whether error `code` is the cluster refusing the runner's credentials or
/// permissions: what a client that otherwise retries on its own (the
/// group consumer) must not wait through forever.
pub fn is_access_denied(code: &str) -> bool {
    const CODES: &[&str] = &[
        "TopicAuthorizationFailed",
        "GroupAuthorizationFailed",
        "TransactionalIdAuthorizationFailed",
        "ClusterAuthorizationFailed",
        "SaslAuthenticationFailed",
        "Authentication",
        "Ssl",
    ];
    CODES.contains(&code)
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

    fn recovery(code: &str) -> Recovery {
        Failure::kafka(code, "e").recovery
    }

    #[test]
    fn a_code_decides_the_recovery() {
        let cases = [
            ("MessageTimedOut", Recovery::Transient { waiting_for: BROKERS }),
            ("AllBrokersDown", Recovery::Transient { waiting_for: BROKERS }),
            ("NotCoordinator", Recovery::Transient { waiting_for: COORDINATOR }),
            ("NotLeaderForPartition", Recovery::Transient { waiting_for: LEADER }),
            ("UnknownProducerId", Recovery::Transient { waiting_for: PRODUCER }),
            // An idempotent or transactional producer librdkafka gave up on.
            ("Fatal", Recovery::Transient { waiting_for: PRODUCER }),
            ("Fenced", Recovery::Migrated),
            ("ProducerFenced", Recovery::Migrated),
            ("InvalidProducerEpoch", Recovery::Migrated),
            ("NoError", Recovery::Fatal { fix: None }),
            ("SomethingNew", Recovery::Fatal { fix: None }),
        ];
        for (code, want) in cases {
            assert_eq!(recovery(code), want, "{code}");
        }
        let Recovery::Fatal { fix: Some(fix) } = recovery("TopicAuthorizationFailed") else { panic!("an ACL is fatal with a fix") };
        assert!(fix.contains("grant"), "{fix}");
        assert!(Failure::kafka("SaslAuthenticationFailed", "refused").explain().contains("sasl.password"));
        assert!(Failure::kafka("MessageSizeTooLarge", "too big").explain().contains("max.message.bytes"));
        // A code decides, whatever the message says.
        assert_eq!(Failure::kafka("AllBrokersDown", "TopicAuthorizationFailed in the text").recovery, recovery("AllBrokersDown"));
    }

    #[test]
    fn an_error_without_a_code_waits_only_for_what_its_wording_names() {
        assert_eq!(Failure::local("Kafka did not acknowledge writes within 60 s").recovery, Recovery::Transient { waiting_for: BROKERS });
        assert_eq!(
            Failure::local("IO error: No space left on device: /state/000012.log").recovery,
            Recovery::Transient { waiting_for: DISK }
        );
        assert_eq!(Failure::local("Error in stage-1: ZeroDivisionError: division by zero").recovery, Recovery::Fatal { fix: None });
        // Code names in the text are not read: the code was at hand.
        assert_eq!(Failure::local("NotCoordinator").recovery, Recovery::Fatal { fix: None });
        assert_eq!(Failure::fatal("something odd").explain(), "something odd");
    }

    #[test]
    fn text_that_lost_its_code_is_judged_by_the_code_names_in_it() {
        for e in [
            "a write to Kafka failed: Message production error: MessageTimedOut (Local: Message timed out)",
            "task 1_0: cannot initialise transactions (a-task-1_0): Transaction error: OperationTimedOut (Local: Timed out)",
            "Kafka did not acknowledge writes within 60 s",
        ] {
            assert_eq!(Failure::from_text(e).recovery, Recovery::Transient { waiting_for: BROKERS }, "{e}");
        }
        // A fatal cause anywhere wins: a timeout wrapping an authorization
        // failure must not be retried forever.
        let e = "Message production error: TopicAuthorizationFailed (Broker: Topic authorization failed) after the request timed out";
        assert!(Failure::from_text(e).stops_a_reader());
        assert!(!Failure::from_text("Message consumption error: BrokerTransportFailure (Local: Broker transport failure)").stops_a_reader());
        assert!(!Failure::from_text("something nobody has seen").stops_a_reader(), "an unknown error is retried by the client");
        // Seen in CI: three copies starting together, a task moved while one
        // of them initialised its transactional id.
        let fenced = "task 0_2: cannot initialise transactions (app-task-0_2): Transaction error: Producer fenced by newer \
                      instance: Broker: There is a newer producer with the same transactionalId [Fenced]";
        assert_eq!(Failure::from_text(fenced).recovery, Recovery::Migrated);
        // A broker that is down, reached over TLS, is not a TLS refusal;
        // "Retry" is a code, "Retrying" or "Statement" are not.
        let down =
            "Global error: BrokerTransportFailure (Local: Broker transport failure): ssl://b1:9093/1: SSL handshake failed: Disconnected";
        assert_eq!(Failure::from_text(down).recovery, Recovery::Transient { waiting_for: BROKERS });
        assert_eq!(Failure::from_text("Statement rejected; Retrying is pointless").recovery, Recovery::Fatal { fix: None });
    }

    #[test]
    fn access_is_denied_only_by_the_codes_that_say_so() {
        for code in ["TopicAuthorizationFailed", "SaslAuthenticationFailed", "Ssl", "Authentication"] {
            assert!(is_access_denied(code), "{code}");
        }
        for code in ["UnknownTopicOrPartition", "BrokerTransportFailure", "AllBrokersDown"] {
            assert!(!is_access_denied(code), "{code}");
        }
    }

    #[test]
    fn context_goes_in_front_and_the_recovery_stays() {
        let f = Failure::kafka("NotCoordinator", "Broker: Not coordinator").within("task 1_0");
        assert_eq!(f.message, "task 1_0: Broker: Not coordinator");
        assert_eq!(f.recovery, Recovery::Transient { waiting_for: COORDINATOR });
        assert_eq!(String::from(f.clone()), f.to_string());
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
