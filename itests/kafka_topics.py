"""User topics for the Kafka I/O tests: create, fill, and read back.

A real client (confluent-kafka) against the session's real broker. Reads
are read_committed and from the start of every partition, so a test sees
exactly what a downstream consumer of the pipeline's output would.
"""

import time
import uuid
from typing import Dict
from typing import Iterable
from typing import List
from typing import Optional
from typing import Tuple

from confluent_kafka import Consumer
from confluent_kafka import KafkaError
from confluent_kafka import Producer
from confluent_kafka import TopicPartition
from confluent_kafka.admin import AdminClient
from confluent_kafka.admin import NewTopic


def unique_topic(prefix: str) -> str:
  return '%s-%s' % (prefix, uuid.uuid4().hex[:8])


def create_topic(broker: str, name: str, partitions: int, config: Optional[Dict[str, str]] = None) -> None:
  admin = AdminClient({'bootstrap.servers': broker})
  futures = admin.create_topics(
      [NewTopic(name, num_partitions=partitions, replication_factor=1, config=config or {})])
  futures[name].result(30)
  # Wait until every partition has a leader.
  deadline = time.monotonic() + 30
  while time.monotonic() < deadline:
    md = admin.list_topics(name, timeout=10).topics.get(name)
    if md is not None and md.error is None and len(md.partitions) == partitions:
      if all(p.leader >= 0 for p in md.partitions.values()):
        return
    time.sleep(0.1)
  raise TimeoutError('topic %s has no leaders after 30 s' % name)


Record = Tuple[int, Optional[bytes], Optional[bytes], Optional[int]]


def delete_topics(broker: str, prefixes: Iterable[str]) -> None:
  """Deletes every topic whose name starts with one of `prefixes` (a
  benchmark's gigabytes, once measured)."""
  admin = AdminClient({'bootstrap.servers': broker})
  names = [t for t in admin.list_topics(timeout=30).topics if any(t.startswith(p) for p in prefixes)]
  for f in admin.delete_topics(names, operation_timeout=60).values() if names else []:
    try:
      f.result()
    except Exception:  # pylint: disable=broad-except
      pass


def produce(broker: str, topic: str, records: Iterable[Record]) -> int:
  """Writes (partition, key, value, timestamp millis or None) records."""
  producer = Producer({'bootstrap.servers': broker, 'enable.idempotence': True})
  errors = []

  def on_delivery(err, _msg):
    if err is not None:
      errors.append(err)

  n = 0
  for partition, key, value, ts in records:
    kwargs = {'partition': partition, 'key': key, 'value': value}
    if ts is not None:
      kwargs['timestamp'] = ts
    producer.produce(topic, on_delivery=on_delivery, **kwargs)
    n += 1
  remaining = producer.flush(30)
  assert remaining == 0 and not errors, (remaining, errors)
  return n


def read_committed(broker: str, topic: str, expected: int,
                   timeout: float = 60.0,
                   settle: float = 2.0) -> List[Tuple[int, bytes, bytes]]:
  """Every committed record of `topic` as (partition, key, value).

  Reads until `expected` records arrived, then `settle` seconds more so that
  duplicates would show; gives up after `timeout`.
  """
  consumer = Consumer({
      'bootstrap.servers': broker,
      'group.id': 'itest-reader-%s' % uuid.uuid4().hex[:8],
      'isolation.level': 'read_committed',
      'enable.auto.commit': False,
  })
  try:
    md = consumer.list_topics(topic, timeout=10).topics[topic]
    consumer.assign([
        TopicPartition(topic, p, 0)  # from the first offset
        for p in md.partitions
    ])
    out = []
    deadline = time.monotonic() + timeout
    settle_until = None
    while time.monotonic() < deadline:
      if settle_until is None and len(out) >= expected:
        settle_until = time.monotonic() + settle
      if settle_until is not None and time.monotonic() >= settle_until:
        break
      msg = consumer.poll(0.2)
      if msg is None:
        continue
      if msg.error():
        if msg.error().code() == KafkaError._PARTITION_EOF:
          continue
        raise RuntimeError(msg.error())
      out.append((msg.partition(), msg.key(), msg.value()))
    return out
  finally:
    consumer.close()
