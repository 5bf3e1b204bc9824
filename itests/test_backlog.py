"""A pipeline started on a topic that already holds a backlog keeps every
commit cycle short: it never holds a transaction open past a shortened
transaction_timeout_ms (the broker would abort it and fence the task), and
its stateful running count is exact. Slow elements too: a commit that waits
on a long bundle splits it, and the rest is processed after the commit."""

import collections
import time
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

SLOW_RECORDS = 240
SLOW_KEYS = 20


def _word(kv):
  return kv[1], b''


def _slowly(kv):
  time.sleep(0.05)
  return kv[1], b''


def _count_a_backlog(job_server, broker, app_id, tmp_path, name, partitions,
                     records, keys, to_word, extra_args):
  """Fills a topic with `records` words, runs ReadFromKafka -> Map(to_word)
  -> running count -> WriteToKafka under exactly_once with a 5 s
  transaction timeout, checks every word's counts are exactly 1..n and that
  no transaction was fenced or aborted; returns the job's log."""
  source, sink = unique_topic(name + '-in'), unique_topic(name + '-out')
  create_topic(broker, source, partitions)
  create_topic(broker, sink, 1)
  produce(broker, source, [(i % partitions, None, b'w%d' % (i % keys), None)
                           for i in range(records)])
  log_start = len(job_server.log_text().encode())

  args = portable_args(job_server) + kafka_args(
      broker, app_id, tmp_path / 'state') + [
          '--streaming',
          '--processing_guarantee=exactly_once',
          '--transaction_timeout_ms=5000',
      ] + extra_args
  p = beam.Pipeline(options=PipelineOptions(args))
  _ = (
      p
      | read_from_start(job_server, broker, source, max_num_records=records)
      | beam.Map(to_word).with_output_types(typing.Tuple[bytes, bytes])
      | beam.ParDo(_RunningCount()).with_output_types(
          typing.Tuple[bytes, bytes])
      | WriteToKafka(
          producer_config={'bootstrap.servers': broker},
          topic=sink,
          expansion_service='localhost:%d' % job_server.expansion_port))
  result = p.run()
  state = result.wait_until_finish()
  assert state == PipelineState.DONE, state

  out = read_committed(broker, sink, expected=records, timeout=60)
  counts = collections.defaultdict(list)
  for _, key, _ in out:
    word, n = key.split(b'@')
    counts[word].append(int(n))
  assert len(out) == records, 'records out: %d of %d' % (len(out), records)
  assert len(counts) == keys
  for word, ns in counts.items():
    assert sorted(ns) == list(range(1, records // keys + 1)), (
        word, sorted(ns)[:10], len(ns))

  log = job_server.log_text(log_start).lower()
  for bad in ('fenced', 'abort', 'restarting it from its last commit'):
    assert bad not in log, 'the log says %r:\n%s' % (bad, '\n'.join(
        l for l in log.splitlines() if bad in l)[:3000])
  return log


@pytest.mark.timeout_seconds(300)
def test_a_backlog_commits_in_short_cycles_and_counts_exactly(
    job_server, broker, app_id, tmp_path):
  log = _count_a_backlog(job_server, broker, app_id, tmp_path, 'backlog',
                         PARTITIONS, RECORDS, KEYS, _word, [])
  # Every task says how its cycles went when it finishes.
  reports = [l for l in log.splitlines() if 'commit cycle(s), longest' in l]
  assert len(reports) >= PARTITIONS, reports
  print('\n'.join(reports))


@pytest.mark.timeout_seconds(240)
def test_a_commit_splits_a_bundle_of_slow_elements_and_counts_exactly(
    job_server, broker, app_id, tmp_path):
  # 240 elements of 50 ms arrive at once: two bundles of 120 (6 s each),
  # both before the first commit's flush. The first one's outputs open the
  # transaction, which then waits 6 s for the second: past the 5 s
  # transaction timeout. Without splitting, the broker aborts it, the task
  # is fenced and restarts into the same two bundles.
  log = _count_a_backlog(
      job_server, broker, app_id, tmp_path, 'slow', 1, SLOW_RECORDS,
      SLOW_KEYS, _slowly, ['--max_bundle_size=120', '--max_bundle_time_ms=500'])
  reports = [l for l in log.splitlines() if 'deferred from split' in l]
  deferred = [int(l.split(' element(s) deferred from split')[0].split()[-1])
              for l in reports]
  assert sum(deferred) > 0, 'no bundle was split:\n%s' % '\n'.join(reports)
  print('\n'.join(reports))


@pytest.mark.timeout_seconds(300)
def test_tasks_slow_to_take_their_mail_are_paused_by_the_poll_loop_and_count_exactly(
    job_server, broker, app_id, tmp_path):
  # Polls of 5 records bound a task's untaken mail to 160 records: a
  # 20,000-record backlog sent faster than the tasks take it (at start
  # they are still busy starting) makes the poll loop pause their
  # partitions, and each task resumes them as it resumes its own pauses,
  # seeking back to what it received. Nothing lost, nothing twice.
  log = _count_a_backlog(job_server, broker, app_id, tmp_path, 'mail', 2,
                         20_000, 100, _word,
                         ['--read_max_elements_per_poll=5'])
  reports = [l for l in log.splitlines() if 'by the poll loop)' in l]
  assert reports, 'no task reported its pauses'
  by_poll_loop = sum(
      int(l.split(' by the poll loop)')[0].split('(')[-1]) for l in reports)
  assert by_poll_loop > 0, 'the poll loop never paused:\n%s' % '\n'.join(
      reports)
  print('\n'.join(reports))
