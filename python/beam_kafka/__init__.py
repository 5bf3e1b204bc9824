"""beam-kafka: run Apache Beam pipelines on Apache Kafka.

Use ``--runner=beam_kafka.KafkaStreamsRunner`` with ``--application_id`` and
``--bootstrap_servers``; see :class:`KafkaStreamsRunnerOptions` for the rest.
"""

from beam_kafka.options import KafkaStreamsRunnerOptions
from beam_kafka.runner import KafkaStreamsRunner
from beam_kafka.runner import find_binary
from beam_kafka.runner import stop_job_servers

__all__ = [
    'KafkaStreamsRunner',
    'KafkaStreamsRunnerOptions',
    'find_binary',
    'stop_job_servers',
]
__version__ = '0.1.0'
