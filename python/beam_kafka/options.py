"""Pipeline options of the beam-kafka runner.

Every option here is also advertised by the job server in
``DescribePipelineOptions`` under the same name, type and default, so a program
that submits with ``--runner=PortableRunner --job_endpoint=...`` without
importing this module gets the same flags. Declaring them here additionally
makes them show up in ``--help`` and lets a program set them in code::

    options = PipelineOptions(argv)
    options.view_as(KafkaStreamsRunnerOptions).application_id = 'my-app'

The job server is the authority on validation (it fails ``Prepare`` with a
message naming the option); this class only declares types and defaults.
Integers reach the job server as strings, as with every Beam portable runner.
"""

from apache_beam.options.pipeline_options import PipelineOptions

__all__ = ['KafkaStreamsRunnerOptions', 'PROCESSING_GUARANTEES']

PROCESSING_GUARANTEES = ('exactly_once', 'at_least_once')


def _add(parser, flag, **kwargs):
  """Adds ``flag`` unless another options class already declared it.

  All PipelineOptions subclasses share one parser; a user class that declares,
  say, ``--bootstrap_servers`` for its own KafkaIO must not make every pipeline
  fail with argparse's "conflicting option string".
  """
  existing = getattr(parser, '_option_string_actions', {})
  if flag in existing:
    return
  parser.add_argument(flag, **kwargs)


class KafkaStreamsRunnerOptions(PipelineOptions):
  """Options of ``beam_kafka.KafkaStreamsRunner`` (and of its job server)."""
  @classmethod
  def _add_argparse_args(cls, parser):
    # Kafka connection and identity.
    _add(
        parser,
        '--bootstrap_servers',
        default='localhost:9092',
        help='Comma-separated host:port list of the Kafka brokers the runner '
        'uses for its own topics, consumer group and transactions '
        '(default: localhost:9092).')
    _add(
        parser,
        '--application_id',
        default=None,
        help='Identifies the pipeline on Kafka: it is the consumer '
        'group id and the prefix of every runner-owned topic and '
        'transactional id. Start more copies of the program with the same '
        'application id to scale out; two different pipelines must not share '
        'one. Without it the job server names the application after the job, '
        'and only a run given it resumes an earlier run.')
    _add(
        parser,
        '--kafka_property',
        action='append',
        default=None,
        metavar='KEY=VALUE',
        help='An extra Kafka client property passed to every producer, '
        'consumer and admin client of the runner, e.g. '
        'security.protocol=SASL_SSL or sasl.mechanism=PLAIN. Repeat the flag '
        'for several properties.')

    # Topology and topics.
    _add(
        parser,
        '--internal_parallelism',
        type=int,
        default=1,
        help='Number of partitions of the runner-owned shuffle topics, i.e. '
        'the maximum parallelism downstream of a shuffle (default: 1).')
    _add(
        parser,
        '--topic_replication_factor',
        type=int,
        default=1,
        help='Replication factor of the topics the runner creates '
        '(default: 1).')
    # Dataflow's names; Beam's GoogleCloudOptions usually declares them.
    _add(
        parser,
        '--update',
        action='store_true',
        default=False,
        help='This is a new version of the pipeline running (or stopped) '
        'under its --application_id: take over its state where compatible.')
    _add(
        parser,
        '--transform_name_mapping',
        default=None,
        help='With --update: a JSON object of earlier transform names to new '
        'ones; a name mapped to "" is dropped with its state.')
    _add(
        parser,
        '--keep_runner_topics',
        action='store_true',
        default=False,
        help='Keep the runner-owned topics (__beam_<application_id>_...) when '
        'a bounded pipeline finishes instead of deleting them.')

    # Bundles.
    _add(
        parser,
        '--max_bundle_size',
        type=int,
        default=10000,
        help='Most elements in a bundle before it is closed. A bundle fills '
        'up to it only under a backlog (a commit closes it sooner otherwise), '
        'where large bundles cost the SDK far less per element (default: '
        '10000).')
    _add(
        parser,
        '--max_bundle_time_ms',
        type=int,
        default=5000,
        help='Maximum time in milliseconds a bundle stays open before it is '
        'closed, and how long a commit waits on a running bundle before the '
        'SDK is asked to stop it after its current element (default: 5000).')

    # Reading.
    _add(
        parser,
        '--read_max_elements_per_poll',
        type=int,
        default=1000,
        help='Maximum number of records taken from one Kafka poll '
        '(default: 1000).')
    _add(
        parser,
        '--read_max_poll_time_ms',
        type=int,
        default=0,
        help='Maximum time in milliseconds one poll waits for more records '
        'to fill its batch (default: 0, what has arrived is handed over at '
        'once).')
    _add(
        parser,
        '--read_checkpoint_num_bundles',
        type=int,
        default=10,
        help='Number of bundles a source reads between two checkpoints '
        '(default: 10).')

    # Group membership, commits and guarantees.
    _add(
        parser,
        '--session_timeout_ms',
        type=int,
        default=45000,
        help='Kafka consumer group session timeout in milliseconds '
        '(default: 45000).')
    _add(
        parser,
        '--group_protocol',
        default='classic',
        choices=('classic', 'consumer'),
        help='classic (any copy joining or leaving stops every task for the '
        'rebalance) or consumer (KIP-848, brokers 4.0+: only the tasks whose '
        'partitions move stop; the session timeout is the brokers\' '
        'group.consumer.session.timeout.ms).')
    _add(
        parser,
        '--acceptable_recovery_lag',
        type=int,
        default=10000,
        help='With standby replicas, a copy joining while others run tasks '
        'first warms a store of each of their tasks and joins the group '
        'once every store is within this many records of its changelog\'s '
        'end (or after 10 minutes).')
    _add(
        parser,
        '--num_standby_replicas',
        type=int,
        default=0,
        help='How many other copies keep a warm copy of each task\'s state '
        '(tailing its changelog), so a task that moves to one of them '
        'starts at once; copies - 1 puts every task on every copy.')
    _add(
        parser,
        '--group_instance_id',
        default=None,
        help="This copy's static membership of the application's consumer "
        'group (Kafka group.instance.id; one name per copy): a copy '
        'restarted under the same name within session_timeout_ms gets its '
        'partitions back without a rebalance.')
    _add(
        parser,
        '--processing_guarantee',
        default='exactly_once',
        choices=PROCESSING_GUARANTEES,
        help='exactly_once (Kafka transactions; the default) or at_least_once '
        '(no transactions: lower latency, duplicates possible after a '
        'failure).')
    _add(
        parser,
        '--commit_interval_ms',
        type=int,
        default=100,
        help='How often, in milliseconds, a task commits its progress '
        '(a transaction under exactly_once) (default: 100).')
    _add(
        parser,
        '--transaction_timeout_ms',
        type=int,
        default=60000,
        help='Under exactly_once, how long a task transaction may stay open '
        'before the broker aborts it (transaction.timeout.ms; default: 60000).')

    # Local state.
    _add(
        parser,
        '--state_dir',
        default=None,
        help='Directory for the local state stores (RocksDB). Default: a '
        'temporary directory chosen by the job server.')

    # Client side only: how the runner finds its job server binary.
    _add(
        parser,
        '--beam_kafka_binary',
        default=None,
        help='Path of the beam-kafka executable the runner starts as its job '
        'server when no --job_endpoint is given. Default: $BEAM_KAFKA_BINARY, '
        'then the build of a source checkout (bin/beam-kafka, cargo target '
        'directories), then beam-kafka on PATH.')
