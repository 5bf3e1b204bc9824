"""A source topic that gains partitions while its application runs: the
copies plan again in place (no restart by anyone), the new partitions get
tasks of their own, and their records, those written before the copies
noticed included, are processed exactly once. The job reads from the
latest offset (Kafka's default), so only the rule that a partition added
since the first run is read from its start keeps those first records."""

import collections
import typing

import apache_beam as beam
from apache_beam.coders import VarIntCoder
from apache_beam.io.kafka import ReadFromKafka
from apache_beam.io.kafka import WriteToKafka
from apache_beam.transforms import userstate
from confluent_kafka.admin import AdminClient
from confluent_kafka.admin import NewPartitions

from conftest import make_app_id
from kafka_topics import create_topic
from kafka_topics import produce
from kafka_topics import read_committed
from kafka_topics import unique_topic
from test_copies import Copy
from test_copies import _wait

WORDS = [b'red', b'green', b'blue']


class _RunningCount(beam.DoFn):
  """Emits (word, n) for the n-th occurrence of each word: exactly-once
  output holds each n once per word, 1..total with no gap."""
  COUNT = userstate.ReadModifyWriteStateSpec('count', VarIntCoder())

  def process(self, kv, count=beam.DoFn.StateParam(COUNT)):
    n = (count.read() or 0) + 1
    count.write(n)
    yield kv[0], b'%d' % n


def _save(job_server, broker, source, sink, path):
  expansion = 'localhost:%d' % job_server.expansion_port
  p = beam.Pipeline()
  _ = (
      p
      | ReadFromKafka(consumer_config={'bootstrap.servers': broker},
                      topics=[source], expansion_service=expansion)
      | beam.Map(lambda kv: (kv[1], b''))
      | beam.ParDo(_RunningCount()).with_output_types(typing.Tuple[bytes, bytes])
      | WriteToKafka(producer_config={'bootstrap.servers': broker},
                     topic=sink, expansion_service=expansion))
  path.write_bytes(p.to_runner_api().SerializeToString())


def _words(partitions, start, n):
  return [(partitions[i % len(partitions)], None, WORDS[i % 3], None)
          for i in range(start, start + n)]


def test_partitions_added_to_a_source_mid_run_are_read_exactly_once(
    job_server, binary, broker, tmp_path):
  source, sink = unique_topic('grow-in'), unique_topic('grow-out')
  create_topic(broker, source, 2)
  create_topic(broker, sink, 1)
  pipeline = tmp_path / 'grow.pb'
  _save(job_server, broker, source, sink, pipeline)
  app_id = make_app_id('grow')
  copies = [Copy(binary, pipeline, broker, app_id, tmp_path / name)
            for name in ('a', 'b')]
  try:
    _wait(lambda: sum(c.tasks_running() for c in copies) > 0 and
          len(set(sum((c.tasks() for c in copies), []))) == sum(len(c.tasks()) for c in copies),
          120, 'the copies running their tasks', copies)
    _wait(lambda: all(c.tasks() for c in copies), 60, 'both copies holding tasks', copies)
    before = set(sum((c.tasks() for c in copies), []))
    produce(broker, source, _words([0, 1], 0, 30))
    read_committed(broker, sink, expected=30, timeout=90, settle=0)

    # Two partitions more; records on them at once, before any copy noticed.
    admin = AdminClient({'bootstrap.servers': broker})
    result = admin.create_partitions([NewPartitions(source, 4)])
    for f in result.values():
      f.result(30)
    produce(broker, source, _words([2, 3], 30, 30))
    _wait(lambda: all('source partitions were added' in '\n'.join(c.lines) for c in copies),
          60, 'every copy planning again', copies)
    produce(broker, source, _words([0, 1, 2, 3], 60, 40))
    total = 100

    out = read_committed(broker, sink, expected=total, timeout=120, settle=3)
    seen = collections.defaultdict(list)
    for _, key, value in out:
      seen[key].append(int(value))
    want = collections.Counter(WORDS[i % 3] for i in range(total))
    for word, n in want.items():
      assert sorted(seen[word]) == list(range(1, n + 1)), (
          word, sorted(seen[word]), '\n'.join(c.log() for c in copies))
    assert len(out) == total
    # The new partitions' tasks run: two more than before, of the source's
    # sub-topology, partitions 2 and 3.
    _wait(lambda: len(set(sum((c.tasks() for c in copies), []))) == len(before) + 2,
          60, 'two more tasks running', copies)
    added = set(sum((c.tasks() for c in copies), [])) - before
    assert {t.split('_')[1] for t in added} == {'2', '3'}, added
    assert len({t.split('_')[0] for t in added}) == 1, added
  finally:
    for c in copies:
      c.stop()
