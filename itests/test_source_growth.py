"""A source topic that gains partitions while its application runs: the
copies plan again in place (no restart by anyone), the new partitions get
tasks of their own, and their records, those written before the copies
noticed included, are processed exactly once. The job reads from the
latest offset (Kafka's default), so only the rule that a partition added
since the first run is read from its start keeps those first records."""

from confluent_kafka.admin import AdminClient
from confluent_kafka.admin import NewPartitions

from conftest import make_app_id
from kafka_topics import create_topic
from kafka_topics import produce
from kafka_topics import read_committed
from kafka_topics import unique_topic
from test_copies import WORDS
from test_copies import Copy
from test_copies import _RunningCount
from test_copies import _wait
from test_copies import _word_key
from test_copies import assert_each_word_counted_once
from test_copies import save_keyed_pipeline


def _words(partitions, start, n):
  return [(partitions[i % len(partitions)], None, WORDS[i % 3], None)
          for i in range(start, start + n)]


def _all_tasks(copies):
  return set(sum((c.tasks() for c in copies), []))


def test_partitions_added_to_a_source_mid_run_are_read_exactly_once(
    job_server, binary, broker, tmp_path):
  source, sink = unique_topic('grow-in'), unique_topic('grow-out')
  create_topic(broker, source, 2)
  create_topic(broker, sink, 1)
  pipeline = tmp_path / 'grow.pb'
  save_keyed_pipeline(job_server, broker, source, sink, pipeline, _word_key,
                      _RunningCount(), offset_reset='latest')
  app_id = make_app_id('grow')
  copies = [Copy(binary, pipeline, broker, app_id, tmp_path / name)
            for name in ('a', 'b')]
  try:
    _wait(lambda: all(c.tasks() for c in copies) and
          len(_all_tasks(copies)) == sum(len(c.tasks()) for c in copies),
          120, 'both copies holding tasks', copies)
    before = _all_tasks(copies)
    produce(broker, source, _words([0, 1], 0, 30))
    read_committed(broker, sink, expected=30, timeout=90, settle=0)

    # Two partitions more; records on them at once, before any copy noticed.
    admin = AdminClient({'bootstrap.servers': broker})
    for f in admin.create_partitions([NewPartitions(source, 4)]).values():
      f.result(30)
    # The broker's metadata names them a moment after the creation returned
    # (longer on a busy machine): a producer asking before then finds them unknown.
    _wait(lambda: len(admin.list_topics(source, timeout=10).topics[source].partitions) == 4,
          30, 'the broker naming the new partitions')
    produce(broker, source, _words([2, 3], 30, 30))
    _wait(lambda: all('source partitions were added' in '\n'.join(c.lines) for c in copies),
          60, 'every copy planning again', copies)
    produce(broker, source, _words([0, 1, 2, 3], 60, 40))
    total = 100

    out = read_committed(broker, sink, expected=total, timeout=120, settle=3)
    assert_each_word_counted_once(out, total, '\n'.join(c.log() for c in copies))
    assert len(out) == total
    # The new partitions' tasks run: two more than before, of the source's
    # sub-topology, partitions 2 and 3.
    _wait(lambda: len(_all_tasks(copies)) == len(before) + 2, 60,
          'two more tasks running', copies)
    added = _all_tasks(copies) - before
    assert {t.split('_')[1] for t in added} == {'2', '3'}, added
    assert len({t.split('_')[0] for t in added}) == 1, added
  finally:
    for c in copies:
      c.stop()
