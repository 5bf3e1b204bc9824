package dev.beamkafka.runner;

import java.util.List;
import org.apache.beam.sdk.options.Description;
import org.apache.beam.sdk.options.PortablePipelineOptions;

/**
 * Options of {@link BeamKafkaRunner}. The runner's own options reach the job server as {@code
 * beam:option:<snake_case>:v1}, so each getter here is named after the server's option (see
 * docs/using.md, "Options"). None has a default here: an option left unset is not sent and the server's
 * default applies.
 */
public interface BeamKafkaPipelineOptions extends PortablePipelineOptions {
  // jobEndpoint comes from PortablePipelineOptions; BeamKafkaRunner uses localhost:8099 when unset
  // (a second @Default on the same property would clash with PortablePipelineOptions).

  @Description("Kafka brokers the application connects to (host:port, comma separated).")
  String getBootstrapServers();

  void setBootstrapServers(String value);

  @Description(
      "Identity of the pipeline on Kafka (consumer group, topic prefix). Required; letters, "
          + "digits, '.', '_' and '-'.")
  String getApplicationId();

  void setApplicationId(String value);

  @Description("Partitions of the runner's shuffle topics: the parallelism after a shuffle.")
  Integer getInternalParallelism();

  void setInternalParallelism(Integer value);

  @Description("Replication factor of the topics the runner creates.")
  Integer getTopicReplicationFactor();

  void setTopicReplicationFactor(Integer value);

  @Description("Elements per bundle sent to the SDK harness.")
  Integer getMaxBundleSize();

  void setMaxBundleSize(Integer value);

  @Description("Longest time a bundle stays open, in milliseconds.")
  Integer getMaxBundleTimeMs();

  void setMaxBundleTimeMs(Integer value);

  @Description("Where the job keeps local state (inside the job server's --state-root).")
  String getStateDir();

  void setStateDir(String value);

  @Description("exactly_once (default) or at_least_once.")
  String getProcessingGuarantee();

  void setProcessingGuarantee(String value);

  @Description("How often a task commits its progress, in milliseconds.")
  Integer getCommitIntervalMs();

  void setCommitIntervalMs(Integer value);

  // Named kafkaProperty (not kafkaProperties): the server reads beam:option:kafka_property:v1.
  @Description("Extra Kafka client property key=value for the runner's clients; repeatable.")
  List<String> getKafkaProperty();

  void setKafkaProperty(List<String> value);

  @Description("Keep the topics of a finished bounded job instead of deleting them.")
  Boolean getKeepRunnerTopics();

  void setKeepRunnerTopics(Boolean value);

  @Description("A new version of the pipeline under its applicationId: take over its state where compatible.")
  Boolean getUpdate();

  void setUpdate(Boolean value);

  @Description("With update: a JSON object of earlier transform names to new ones; a name mapped to \"\" is dropped.")
  String getTransformNameMapping();

  void setTransformNameMapping(String value);

  @Description("The job server's token, for a server started with --auth-token-file.")
  String getJobServerToken();

  void setJobServerToken(String value);

  @Description("Records a source task takes from Kafka per poll, separate from maxBundleSize.")
  Integer getReadMaxElementsPerPoll();

  void setReadMaxElementsPerPoll(Integer value);

  @Description("Longest time one poll may wait for more records to fill its batch, in milliseconds.")
  Integer getReadMaxPollTimeMs();

  void setReadMaxPollTimeMs(Integer value);

  @Description("A caught-up, silent KafkaIO partition moves its watermark to now minus this, in milliseconds.")
  Integer getReadIdleTimeoutMs();

  void setReadIdleTimeoutMs(Integer value);

  @Description("Bundles of an unbounded source between stores of its checkpoint mark.")
  Integer getReadCheckpointNumBundles();

  void setReadCheckpointNumBundles(Integer value);

  @Description("Consumer group session timeout, in milliseconds.")
  Integer getSessionTimeoutMs();

  void setSessionTimeoutMs(Integer value);

  @Description(
      "classic (every rebalance stops every task) or consumer (KIP-848, brokers 4.0+: only the tasks whose "
          + "partitions move stop).")
  String getGroupProtocol();

  void setGroupProtocol(String value);

  @Description(
      "How many other copies keep a warm copy of each task's state (tailing its changelog), so a task that moves "
          + "to one of them starts at once; copies - 1 puts every task on every copy.")
  Integer getNumStandbyReplicas();

  void setNumStandbyReplicas(Integer value);

  @Description(
      "With standby replicas, a copy joining while others run first warms a store of each of their tasks and "
          + "joins once every store is within this many records of its changelog's end (or after 10 minutes).")
  Integer getAcceptableRecoveryLag();

  void setAcceptableRecoveryLag(Integer value);

  @Description(
      "This copy's static membership of the consumer group (group.instance.id): a copy restarted under the "
          + "same name within the session timeout keeps its partitions without a rebalance.")
  String getGroupInstanceId();

  void setGroupInstanceId(String value);

  @Description("Memory the RocksDB state stores of one process share, in MiB.")
  Integer getStateStoreMemoryMb();

  void setStateStoreMemoryMb(Integer value);

  @Description("Memory the GroupByKeys of a batch job hold in one process before spilling, in MiB.")
  Integer getGroupByKeyMemoryMb();

  void setGroupByKeyMemoryMb(Integer value);

  @Description("Under exactly_once: how long a transaction may stay open, in milliseconds.")
  Integer getTransactionTimeoutMs();

  void setTransactionTimeoutMs(Integer value);

  @Description("A task with work and no progress this long is named in the job's messages; 0: off.")
  Integer getStallWarningMs();

  void setStallWarningMs(Integer value);

  // sdkWorkerParallelism comes from PortablePipelineOptions.
}
