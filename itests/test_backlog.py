"""A pipeline started on a topic that already holds a backlog keeps every
commit cycle short: it never holds a transaction open past a shortened
transaction_timeout_ms (the broker would abort it and fence the task), and
its stateful running count is exact."""

import collections
import typing

import pytest

import apache_beam as beam
from apache_beam.io.kafka import WriteToKafka
from apache_beam.options.pipeline_options import PipelineOptions
from apache_beam.runners.runner import PipelineState

from conftest import kafka_args
from conftest import portable_args
from conftest import read_from_start
from kafka_topics import create_topic
from kafka_topics import produce
from kafka_topics import read_committed
from kafka_topics import unique_topic
from test_copies import _RunningCount  # word@n for the n-th occurrence of a word

PARTITIONS = 4
KEYS = 300
# Sized so that handing the whole backlog to the stage in one cycle (as the
# runner did before flow control) takes well past the 5 s timeout below.
RECORDS = 60_000


@pytest.mark.timeout_seconds(300)
def test_a_backlog_commits_in_short_cycles_and_counts_exactly(
    job_server, broker, app_id, tmp_path):
  source, sink = unique_topic('backlog-in'), unique_topic('backlog-out')
  create_topic(broker, source, PARTITIONS)
  create_topic(broker, sink, 1)
  produce(broker, source, [(i % PARTITIONS, None, b'w%d' % (i % KEYS), None)
                           for i in range(RECORDS)])
  log_start = len(job_server.log_text().encode())

  args = portable_args(job_server) + kafka_args(
      broker, app_id, tmp_path / 'state') + [
          '--streaming',
          '--processing_guarantee=exactly_once',
          '--transaction_timeout_ms=5000',
      ]
  p = beam.Pipeline(options=PipelineOptions(args))
  _ = (
      p
      | read_from_start(job_server, broker, source, max_num_records=RECORDS)
      | beam.Map(lambda kv: (kv[1], b'')).with_output_types(
          typing.Tuple[bytes, bytes])
      | beam.ParDo(_RunningCount()).with_output_types(
          typing.Tuple[bytes, bytes])
      | WriteToKafka(
          producer_config={'bootstrap.servers': broker},
          topic=sink,
          expansion_service='localhost:%d' % job_server.expansion_port))
  result = p.run()
  state = result.wait_until_finish()
  assert state == PipelineState.DONE, state

  out = read_committed(broker, sink, expected=RECORDS, timeout=60)
  counts = collections.defaultdict(list)
  for _, key, _ in out:
    word, n = key.split(b'@')
    counts[word].append(int(n))
  assert len(out) == RECORDS, 'records out: %d of %d' % (len(out), RECORDS)
  assert len(counts) == KEYS
  for word, ns in counts.items():
    assert sorted(ns) == list(range(1, RECORDS // KEYS + 1)), (
        word, sorted(ns)[:10], len(ns))

  log = job_server.log_text(log_start).lower()
  for bad in ('fenced', 'abort', 'restarting it from its last commit'):
    assert bad not in log, 'the log says %r:\n%s' % (bad, '\n'.join(
        l for l in log.splitlines() if bad in l)[:3000])
  # Every task says how its cycles went when it finishes.
  reports = [l for l in log.splitlines() if 'commit cycle(s), longest' in l]
  assert len(reports) >= PARTITIONS, reports
  print('\n'.join(reports))
