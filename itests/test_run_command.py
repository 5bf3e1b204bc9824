"""`beam-kafka run`: a saved pipeline as a service process, no client."""

import collections
import os
import signal
import subprocess
import sys
import time
import typing
from pathlib import Path

import apache_beam as beam
from apache_beam.io.kafka import WriteToKafka
from apache_beam.transforms import window

from conftest import make_app_id
from conftest import read_from_start
from kafka_topics import create_topic
from kafka_topics import produce
from kafka_topics import read_committed
from kafka_topics import unique_topic
from own_broker import kafka
from own_broker import own_broker

WORDS = [b'red', b'green', b'blue']


def _to_pair(kv):
  return kv[1].decode(), 1


def _sum_values(word, ones):
  return word, sum(ones)


def _to_record(kv):
  return kv[0].encode(), b'%d' % kv[1]


class _KeyWithWindow(beam.DoFn):
  def process(self, kv, w=beam.DoFn.WindowParam):
    yield (b'%s@%d' % (kv[0].encode(), int(w.start)), b'%d' % kv[1])


def _save_word_count(job_server, broker, source, sink, path, window_secs=None,
                     with_window_key=False, combine=True, **read_args):
  expansion = 'localhost:%d' % job_server.expansion_port
  p = beam.Pipeline()
  _ = (
      p
      | read_from_start(job_server, broker, source, **read_args)
      | beam.Map(_to_pair)
      | (beam.WindowInto(window.FixedWindows(window_secs))
         if window_secs else beam.Map(lambda kv: kv))
      | (beam.CombinePerKey(sum) if combine else
         beam.GroupByKey() | beam.MapTuple(_sum_values))
      | (beam.ParDo(_KeyWithWindow()) if with_window_key else
         beam.Map(_to_record)).with_output_types(typing.Tuple[bytes, bytes])
      | WriteToKafka(
          producer_config={'bootstrap.servers': broker},
          topic=sink,
          expansion_service=expansion))
  path.write_bytes(p.to_runner_api().SerializeToString())


def _run_command(binary, pipeline, broker, app_id, state_dir, *extra,
                 stdout=subprocess.PIPE, run_flags=()):
  env = dict(os.environ)
  # The harness unpickles this module's functions.
  env['PYTHONPATH'] = os.pathsep.join(
      [str(Path(__file__).parent), env.get('PYTHONPATH', '')])
  return subprocess.Popen(
      [binary, 'run', '--pipeline', str(pipeline),
       '--sdk-worker-command', '%s -m beam_kafka.boot' % sys.executable,
       *run_flags, '--',
       '--bootstrap_servers=%s' % broker, '--application_id=%s' % app_id,
       '--state_dir=%s' % state_dir] + list(extra),
      env=env, stdout=stdout, stderr=subprocess.STDOUT)


def _bounded_word_count(job_server, broker, tmp_path, name):
  """30 words already on a new topic, and a saved pipeline counting them
  to another: (pipeline path, sink topic)."""
  source, sink = unique_topic(name + '-in'), unique_topic(name + '-out')
  create_topic(broker, source, 2)
  create_topic(broker, sink, 1)
  records = [(i % 2, None, WORDS[i % 3], None) for i in range(30)]
  produce(broker, source, records)
  pipeline = tmp_path / 'wordcount.pb'
  _save_word_count(job_server, broker, source, sink, pipeline,
                   max_num_records=len(records))
  return pipeline, sink


def test_a_saved_bounded_pipeline_runs_to_done(job_server, binary, broker, tmp_path):
  pipeline, sink = _bounded_word_count(job_server, broker, tmp_path, 'run')
  proc = _run_command(binary, pipeline, broker, make_app_id('run'),
                      tmp_path / 'state')
  out, _ = proc.communicate(timeout=180)
  assert proc.returncode == 0, out.decode(errors='replace')[-3000:]
  got = {k.decode(): int(v) for _, k, v in read_committed(broker, sink, 3)}
  assert got == {'red': 10, 'green': 10, 'blue': 10}


def test_sigterm_stops_a_service_cleanly_with_checkpointed_stores(
    job_server, binary, broker, tmp_path):
  source, sink = unique_topic('svc-in'), unique_topic('svc-out')
  create_topic(broker, source, 2)
  create_topic(broker, sink, 1)
  produce(broker, source, [(i % 2, None, WORDS[0], None) for i in range(4)])
  pipeline = tmp_path / 'service.pb'
  _save_word_count(job_server, broker, source, sink, pipeline, window_secs=2)
  app_id = make_app_id('svc')
  state = tmp_path / 'state'

  proc = _run_command(binary, pipeline, broker, app_id, state, '--streaming')
  try:
    counts = collections.Counter()
    deadline = time.monotonic() + 90
    while not counts and time.monotonic() < deadline:
      for _, k, v in read_committed(broker, sink, 1, timeout=3, settle=0.2):
        counts[k] += int(v)
    assert counts, 'the service produced nothing'
  finally:
    proc.send_signal(signal.SIGTERM)
    out, _ = proc.communicate(timeout=60)
  assert proc.returncode == 0, out.decode(errors='replace')[-3000:]
  checkpoints = sorted(p.parent.name for p in (state / app_id).glob('*/checkpoint'))
  assert checkpoints, 'no task store was checkpointed: %s' % list(state.rglob('*'))


def test_run_serves_its_status_page_and_exports_over_otlp_http(
    job_server, binary, broker, tmp_path):
  """An operator's service: `run --ui-port --otlp-endpoint`, the page's JSON
  shows its tasks and the resource names the application and job."""
  import json
  import urllib.request
  from conftest import free_ports
  from otlp_receiver import OtlpReceiver
  source, sink = unique_topic('obs-in'), unique_topic('obs-out')
  create_topic(broker, source, 2)
  create_topic(broker, sink, 1)
  produce(broker, source, [(i % 2, None, WORDS[i % 3], None) for i in range(6)])
  pipeline = tmp_path / 'observed.pb'
  _save_word_count(job_server, broker, source, sink, pipeline, window_secs=2)
  app_id = make_app_id('run-observed')
  (ui_port, ) = free_ports(1)
  env = dict(os.environ, OTEL_METRIC_EXPORT_INTERVAL='1000')
  env['PYTHONPATH'] = os.pathsep.join(
      [str(Path(__file__).parent), env.get('PYTHONPATH', '')])
  with OtlpReceiver() as receiver:
    proc = subprocess.Popen(
        [binary, 'run', '--pipeline', str(pipeline),
         '--sdk-worker-command', '%s -m beam_kafka.boot' % sys.executable,
         '--ui-port', str(ui_port), '--otlp-endpoint', receiver.http_endpoint,
         '--otlp-protocol', 'http/protobuf', '--',
         '--bootstrap_servers=%s' % broker, '--application_id=%s' % app_id,
         '--state_dir=%s' % (tmp_path / 'state'), '--streaming'],
        env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    try:
      url = 'http://127.0.0.1:%d/' % ui_port
      deadline = time.monotonic() + 120
      job = None
      while time.monotonic() < deadline:
        try:
          jobs = json.loads(urllib.request.urlopen(url + 'api/jobs', timeout=5).read())['jobs']
          if jobs and jobs[0]['state'] == 'RUNNING':
            job = json.loads(urllib.request.urlopen(
                url + 'api/jobs/' + jobs[0]['id'], timeout=5).read())
            if job['tasks'] and all(t['state'] == 'Running' for t in job['tasks']):
              break
        except OSError:
          pass
        assert proc.poll() is None, proc.stdout.read().decode(errors='replace')[-3000:]
        time.sleep(0.5)
      assert job and job['application_id'] == app_id, job
      assert job['id'].startswith('run-'), job
      assert {t['task'] for t in job['tasks']} >= {'0_0', '0_1'}, job

      def exported():
        return any(m['transport'] == 'http' and
                   m['resource'].get('beam_kafka.application.id') == app_id
                   for m in receiver.metrics_named('beam_kafka.task.commits'))

      assert receiver.wait_for(exported, timeout=60)
      m = [m for m in receiver.metrics_named('beam_kafka.task.commits')
           if m['resource'].get('beam_kafka.application.id') == app_id][0]
      assert m['resource']['beam_kafka.job.id'] == job['id'], m['resource']
    finally:
      proc.send_signal(signal.SIGTERM)
      out, _ = proc.communicate(timeout=90)
  assert proc.returncode == 0, out.decode(errors='replace')[-3000:]


def test_a_copy_started_while_its_brokers_are_down_waits_for_them(
    job_server, binary, tmp_path):
  with own_broker(29800) as port:
    broker = 'localhost:%d' % port
    pipeline, sink = _bounded_word_count(job_server, broker, tmp_path, 'wait')
    kafka('kill', str(port))
    log_path = tmp_path / 'copy.log'
    with open(log_path, 'wb') as log:
      proc = _run_command(binary, pipeline, broker, make_app_id('wait'),
                          tmp_path / 'state', stdout=log)
    try:
      # Past the 10 s a single try waits: the copy says so and keeps waiting.
      deadline = time.monotonic() + 60
      while log_path.read_text(errors='replace').count('a copy waits for its brokers') < 2:
        assert proc.poll() is None, log_path.read_text(errors='replace')[-3000:]
        assert time.monotonic() < deadline, log_path.read_text(errors='replace')[-3000:]
        time.sleep(0.5)
      kafka('resume', str(port))
      proc.wait(timeout=180)
    finally:
      if proc.poll() is None:
        proc.kill()
        proc.wait()
    out = log_path.read_text(errors='replace')
    assert proc.returncode == 0, out[-3000:]
    got = {k.decode(): int(v) for _, k, v in read_committed(broker, sink, 3)}
    assert got == {'red': 10, 'green': 10, 'blue': 10}
