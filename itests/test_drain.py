"""`beam-kafka drain`: a streaming job whose windows cannot close on their
own (their records are an hour ahead of the clock), and whose
PeriodicImpulse would run for an hour, ends DONE when drained, with every
window fired; a second run of the application reads on from where the
drain stopped."""

import subprocess
import threading
import time

import apache_beam as beam
from apache_beam.io.kafka import ReadFromKafka
from apache_beam.options.pipeline_options import PipelineOptions
from apache_beam.runners.runner import PipelineState
from apache_beam.transforms import window
from apache_beam.transforms.periodicsequence import PeriodicImpulse

from conftest import Collector
from conftest import kafka_args
from conftest import make_app_id
from conftest import portable_args
from conftest import read_from_start
from kafka_topics import create_topic
from kafka_topics import produce
from kafka_topics import unique_topic

AHEAD_MS = 3_600_000


def _drain(binary, broker, app_id):
  out = subprocess.run([
      binary, 'drain', '--',
      '--application_id=%s' % app_id,
      '--bootstrap_servers=%s' % broker
  ],
                       stdout=subprocess.PIPE,
                       stderr=subprocess.PIPE,
                       timeout=60,
                       check=False)
  assert out.returncode == 0, out.stderr.decode(errors='replace')
  assert b'drain requested' in out.stdout


def _drain_job(binary, job_server, result):
  """Drains the job through the job server (the Job API's Drain), named by
  its name, as `beam-kafka jobs` lists it."""
  listed = subprocess.run([binary, 'jobs', '--endpoint', job_server.endpoint],
                          capture_output=True, text=True, timeout=60,
                          check=False)
  assert listed.returncode == 0, listed.stderr
  row = [line.split() for line in listed.stdout.splitlines()
         if line.startswith(result._job_id)]
  assert row and row[0][1] == 'RUNNING', listed.stdout
  out = subprocess.run(
      [binary, 'drain', '--endpoint', job_server.endpoint, row[0][3]],
      capture_output=True, text=True, timeout=60, check=False)
  assert out.returncode == 0, out.stderr
  assert out.stdout.startswith('job %s: DRAINING' % result._job_id), out.stdout


def _hour_of_ticks(p, ticks):
  # An hour of ticks: only a drain truncates it.
  now = time.time()
  _ = (
      p
      | PeriodicImpulse(start_timestamp=now, stop_timestamp=now + 3600,
                        fire_interval=0.5)
      | 'Tick' >> beam.Map(ticks.recorder()))


def _run_until_drained(job_server, binary, broker, app_id, topic, tmp_path,
                       name, expect_seen, drain):
  seen = Collector(tmp_path / ('%s-seen.txt' % name))
  fired = Collector(tmp_path / ('%s-fired.txt' % name))
  ticks = Collector(tmp_path / ('%s-ticks.txt' % name))
  args = portable_args(job_server) + kafka_args(
      broker, app_id, tmp_path / 'state') + [
          '--streaming', '--internal_parallelism=2']
  p = beam.Pipeline(options=PipelineOptions(args))
  _ = (
      p
      | read_from_start(job_server, broker, topic,
                        timestamp_policy=ReadFromKafka.create_time_policy)
      | 'Seen' >> beam.Map(seen.recorder())
      | beam.Map(lambda kv: (kv[1].decode().split(':')[0], 1))
      | beam.WindowInto(window.FixedWindows(60))
      | beam.CombinePerKey(sum)
      | beam.MapTuple(lambda k, n: '%s=%d' % (k, n))
      | 'Fired' >> beam.Map(fired.recorder()))
  _hour_of_ticks(p, ticks)
  result = p.run()
  deadline = time.monotonic() + 120
  while len(seen.lines()) < expect_seen:
    assert time.monotonic() < deadline, 'the job read %d of %d records' % (
        len(seen.lines()), expect_seen)
    assert result.state not in (PipelineState.FAILED, PipelineState.DONE)
    time.sleep(0.3)
  assert fired.lines() == [], 'a window fired before the drain'
  drain(result)
  state = result.wait_until_finish()
  assert state == PipelineState.DONE
  return seen.lines(), sorted(fired.lines()), ticks.lines()


def test_a_drained_streaming_job_fires_every_window_ends_done_and_resumes_there(
    job_server, binary, broker, tmp_path):
  topic = unique_topic('drain')
  create_topic(broker, topic, 2)
  ahead = int(time.time() * 1000) + AHEAD_MS
  produce(broker, topic, [(i % 2, None, b'%s:%d' % (b'ab'[i % 2:i % 2 + 1], i),
                           ahead) for i in range(40)])
  app_id = make_app_id('drain')
  seen, fired, ticks = _run_until_drained(
      job_server, binary, broker, app_id, topic, tmp_path, 'first', 40,
      lambda _: _drain(binary, broker, app_id))
  assert len(seen) == 40
  assert fired == ['a=20', 'b=20']
  assert ticks, 'the PeriodicImpulse ran until the drain'

  # The second run starts where the drain stopped: only the new records.
  # It is drained through the job server, by its job name.
  produce(broker, topic, [(i % 2, None, b'c:%d' % i, ahead) for i in range(6)])
  seen, fired, _ = _run_until_drained(
      job_server, binary, broker, app_id, topic, tmp_path, 'second', 6,
      lambda result: _drain_job(binary, job_server, result))
  assert len(seen) == 6, seen
  assert fired == ['c=6']


def test_a_drain_asked_before_the_first_run_ends_it_done_at_once(
    job_server, binary, broker, tmp_path):
  # The drain creates the control topic before any run: the job finds it
  # there as it starts and runs drained from its first element.
  app_id = make_app_id('drain-first')
  _drain(binary, broker, app_id)
  ticks = Collector(tmp_path / 'ticks.txt')
  args = portable_args(job_server) + kafka_args(
      broker, app_id, tmp_path / 'state') + ['--streaming']
  p = beam.Pipeline(options=PipelineOptions(args))
  _hour_of_ticks(p, ticks)
  result = p.run()
  # Undrained, the PeriodicImpulse would run for an hour.
  state = result.wait_until_finish(duration=120_000)
  if state != PipelineState.DONE:
    result.cancel()
  assert state == PipelineState.DONE
