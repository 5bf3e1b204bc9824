"""A job server started with the observability flags (OTLP export, the
status page), and a streaming pipeline to watch on it: ReadFromKafka of a
topic that already holds data, a user counter, fixed windows, a
GroupByKey and WriteToKafka, running until cancelled."""

import os
import re
import subprocess
import threading
import time
import typing
from pathlib import Path

import apache_beam as beam
from apache_beam.io.kafka import ReadFromKafka
from apache_beam.io.kafka import WriteToKafka
from apache_beam.metrics import Metrics
from apache_beam.options.pipeline_options import PipelineOptions
from apache_beam.transforms import window

from conftest import free_ports
from conftest import kafka_args
from kafka_topics import create_topic
from kafka_topics import produce

# Event times in the past (the broker refuses timestamps far ahead).
BASE_MS = 1_700_000_000_000
COUNTER_NAMESPACE = 'observed'
COUNTER_NAME = 'words_seen'


class ObservedServer:
  """`beam-kafka job-server` with `extra` flags and `env` additions."""
  def __init__(self, binary, root: Path, extra=(), env=None):
    root.mkdir(parents=True, exist_ok=True)
    self.log_path = root / 'job-server.log'
    self.job_port, self.artifact_port, self.expansion_port = free_ports(3)
    cmd = [
        binary, 'job-server', '--job-port', str(self.job_port),
        '--artifact-port', str(self.artifact_port),
        '--expansion-port', str(self.expansion_port),
        '--artifacts-dir', str(root / 'artifacts'),
        '--state-root', str(root / 'state'),
        '--trust-clients'
    ] + list(extra)
    full_env = dict(os.environ)
    full_env.update(env or {})
    with open(self.log_path, 'wb') as log:
      self.process = subprocess.Popen(
          cmd, stdout=log, stderr=subprocess.STDOUT, env=full_env)
    self.endpoint = 'localhost:%d' % self.job_port
    deadline = time.monotonic() + 60
    while 'job server listening' not in self.log():
      assert self.process.poll() is None, self.log()
      assert time.monotonic() < deadline, self.log()
      time.sleep(0.1)

  def log(self) -> str:
    return self.log_path.read_text(errors='replace')

  def status_url(self) -> str:
    m = re.search(r'status page on (http://\S+)', self.log())
    assert m, 'no status page address in the log:\n%s' % self.log()
    return m.group(1)

  def stop(self):
    self.process.terminate()
    try:
      self.process.wait(30)
    except subprocess.TimeoutExpired:
      self.process.kill()
      self.process.wait()


def portable(server: ObservedServer) -> typing.List[str]:
  return [
      '--runner=PortableRunner',
      '--job_endpoint=%s' % server.endpoint,
      '--environment_type=LOOPBACK',
  ]


class _Count(beam.DoFn):
  def __init__(self):
    self.seen = Metrics.counter(COUNTER_NAMESPACE, COUNTER_NAME)

  def process(self, kv):
    self.seen.inc()
    yield kv


def produce_words(broker: str, topic: str, start_s: int, count: int):
  """`count` records one second apart from `start_s` (event time),
  alternating between partitions 0 and 1."""
  produce(
      broker, topic,
      [(i % 2, b'word-%d' % (i % 3), b'x', BASE_MS + (start_s + i) * 1000)
       for i in range(count)])


class StreamingJob:
  """The watched pipeline, run from a thread of this process (LOOPBACK)."""
  def __init__(self, server, broker, app_id, tmp_path, source, sink):
    create_topic(broker, source, 2)
    create_topic(broker, sink, 1)
    # The topic already holds data when the job starts.
    produce_words(broker, source, 0, 30)
    args = portable(server) + kafka_args(
        broker, app_id, tmp_path / 'state') + [
            '--streaming', '--read_idle_timeout_ms=3600000'
        ]
    expansion = 'localhost:%d' % server.expansion_port
    self.pipeline = beam.Pipeline(options=PipelineOptions(args))
    _ = (
        self.pipeline
        | ReadFromKafka(
            consumer_config={
                'bootstrap.servers': broker, 'auto.offset.reset': 'earliest'
            },
            topics=[source],
            with_metadata=False,
            # Event time: the watermark moves only with records.
            timestamp_policy=ReadFromKafka.create_time_policy,
            expansion_service=expansion)
        | beam.ParDo(_Count())
        | beam.WindowInto(window.FixedWindows(10))
        | beam.GroupByKey()
        | beam.Map(lambda kv: (kv[0], b'%d' % len(kv[1])))
        | WriteToKafka(
            producer_config={'bootstrap.servers': broker},
            topic=sink,
            expansion_service=expansion))
    self.result = None
    self._started = threading.Event()

  def start(self):
    self.result = self.pipeline.run()
    return self

  def cancel(self):
    if self.result is not None:
      try:
        self.result.cancel()
        self.result.wait_until_finish(duration=60_000)
      except Exception:  # already ended: the test's assertions tell why
        pass
