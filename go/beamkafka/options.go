package beamkafka

// Kind is how an option's flag reads its value.
type Kind int

// The kinds of options.
const (
	String Kind = iota
	Integer
	Boolean
	List
)

// Option is one of the runner's options: its flag name (the job server's
// option name) and what it does.
type Option struct {
	Name  string
	Kind  Kind
	Usage string
}

// Options are the job server's runner options (docs/using.md, "Options"); a test
// of the job server's option table checks this list names every one.
var Options = []Option{
	{"bootstrap_servers", String, "beam-kafka: the Kafka brokers (host:port, comma separated); default: the job server's --default-bootstrap-servers"},
	{"application_id", String, "beam-kafka: the pipeline's identity on Kafka (consumer group, topic prefix); default: from the job name"},
	{"internal_parallelism", Integer, "beam-kafka: partitions of the runner's shuffle topics"},
	{"topic_replication_factor", Integer, "beam-kafka: replication factor of the topics the runner creates"},
	{"max_bundle_size", Integer, "beam-kafka: elements per bundle sent to the SDK harness"},
	{"max_bundle_time_ms", Integer, "beam-kafka: longest time a commit waits on a running bundle before splitting it, in ms"},
	{"read_max_elements_per_poll", Integer, "beam-kafka: records a source task takes from Kafka per poll"},
	{"read_max_poll_time_ms", Integer, "beam-kafka: longest time one poll waits to fill its batch, in ms"},
	{"read_idle_timeout_ms", Integer, "beam-kafka: a caught-up, silent partition moves its watermark to now minus this, in ms"},
	{"read_checkpoint_num_bundles", Integer, "beam-kafka: bundles of an unbounded source between stores of its checkpoint mark"},
	{"session_timeout_ms", Integer, "beam-kafka: consumer group session timeout, in ms"},
	{"acceptable_recovery_lag", Integer, "beam-kafka: with standby replicas, a joining copy first warms its stores to within this many records of each changelog's end"},
	{"num_standby_replicas", Integer, "beam-kafka: copies keeping a warm copy of each task's state (copies - 1: every task on every copy)"},
	{"group_protocol", String, "beam-kafka: classic (every rebalance stops every task) or consumer (KIP-848: only moving tasks stop)"},
	{"group_instance_id", String, "beam-kafka: this copy's static group membership (group.instance.id): restarted within the session timeout, it keeps its partitions without a rebalance"},
	{"state_dir", String, "beam-kafka: directory for local state (inside the job server's --state-root)"},
	{"state_store_memory_mb", Integer, "beam-kafka: memory the RocksDB state stores of one process share, in MiB"},
	{"group_by_key_memory_mb", Integer, "beam-kafka: memory a batch job's GroupByKeys hold before spilling, in MiB"},
	{"processing_guarantee", String, "beam-kafka: exactly_once (default) or at_least_once"},
	{"commit_interval_ms", Integer, "beam-kafka: how often a task commits its progress, in ms"},
	{"transaction_timeout_ms", Integer, "beam-kafka: under exactly_once, how long a transaction may stay open, in ms"},
	{"stall_warning_ms", Integer, "beam-kafka: a task with work and no progress this long is named in the job's messages; 0: off"},
	{"kafka_property", List, "beam-kafka: extra Kafka client property key=value for the runner's clients"},
	{"job_server_token", String, "beam-kafka: the job server's token, for a server started with --auth-token-file"},
	{"keep_runner_topics", Boolean, "beam-kafka: keep the topics of a finished bounded job"},
	{"update", Boolean, "beam-kafka: a new version of the pipeline under its application_id takes over its state"},
	{"transform_name_mapping", String, "beam-kafka: with --update, a JSON object of earlier transform names to new ones (\"\" drops one)"},
	{"sdk_worker_parallelism", Integer, "beam-kafka: SDK harnesses per environment"},
}
