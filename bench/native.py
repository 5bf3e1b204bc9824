"""The runner-native Kafka path: topic in, stateful count per key, topic out,
on beam-kafka against a Kafka Streams app doing the same job, with the
broker's own ceiling and the streaming latency of both. Every figure is
printed as a table with ratios, and written to native.csv and native.png.

Parts (--parts, one after another, never side by side):
  ceiling  Kafka's ProducerPerformance (acks=all, plain and transactional with
           100 ms transactions) and ConsumerPerformance (fetch.nMsg.sec) on
           N records of 16 bytes (our words are 6), median of 3 runs each. A
           pipeline consumes and produces every record, so the ceiling is
           1/(1/produce + 1/consume).
  native   One input topic filled up front with N records (null key, value a
           word 'w%05d' % (i % K), CreateTime = produce time), then, per
           system, a fresh output topic that must end with one count per
           input and, per word, a last count summing to N:
             kafka-streams  bench/peers/StreamsCount.java (selectKey,
                            repartition, count, cache 0), eos_v2 / alo
             beam-kafka     ReadFromKafka(max_num_records=N) -> Map(word, None)
                            -> stateful DoFn (ReadModifyWriteState) emitting
                            (word, b'count@input millis') -> WriteToKafka,
                            --streaming, exactly_once / at_least_once
           records/s = N / (N-th output seen - first output seen) by a
           read_committed reader; wall = N-th output seen - start (JVM launch,
           or job submission to a running job server).
  latency  Per rate R (--rates, 300,1000,5000 by default) and system, fresh
           topics; a producer writes R records/s; once the
           first output shows, D more seconds are written. Latency = time a
           read_committed reader sees an output - CreateTime of the input it
           counts (Kafka Streams keeps the input's timestamp on the output;
           ours carries it in the value, since WriteToKafka stamps records
           with the produce time). Inputs from the first 2 s are dropped.
Both systems commit every 100 ms. The reader and the producer run in their
own processes, so only the SDK harness (LOOPBACK) shares this one.
"""

import argparse
import csv
import json
import os
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import typing
import uuid
from pathlib import Path

import procstat
from portable_job import PortableJob

REPO = Path(__file__).resolve().parent.parent
CACHE = Path(os.environ.get('BEAM_KAFKA_CACHE', Path.home() / '.cache' / 'beam-kafka'))
KAFKA_LIBS = CACHE / 'kafka-4.3.2' / 'libs'  # scripts/common.sh's KAFKA_VERSION
STREAMS_DIR = CACHE / 'kafka-streams-4.1.1'
STREAMS_JARS = ['org.apache.kafka:kafka-streams:4.1.1', 'org.rocksdb:rocksdbjni:9.7.3']
STRING = 'org.apache.kafka.common.serialization.StringDeserializer'
RECORD_SIZE = 16  # bytes per ceiling record: our values are 6, plus framing
CEILING_RUNS = 3  # median of this many runs of each Kafka tool
WARMUP_S = 2.0  # latency samples from the first seconds of a run are dropped
LATENCY_GRACE_S = 60  # how long outputs may lag behind the latency producer
TARGET_P99_MS = 250
SYSTEMS = ['kafka-streams-eos', 'kafka-streams-alo', 'beam-kafka-eo', 'beam-kafka-alo']
# Also runs (named in --systems): beam-flink, Beam's Flink runner with Java
# KafkaIO (bench/native_flink.py; fetches its jars on first use).
OPTIONAL_SYSTEMS = ['beam-flink']


def word(i, keys):
  return 'w%05d' % (i % keys)


# ------------------------------------------------------------ kafka helpers
def create_topic(bootstrap, name, partitions):
  from confluent_kafka.admin import AdminClient, NewTopic
  admin = AdminClient({'bootstrap.servers': bootstrap, 'log_level': 4})
  admin.create_topics([NewTopic(name, num_partitions=partitions, replication_factor=1)])[name].result(30)
  deadline = time.monotonic() + 30
  while time.monotonic() < deadline:  # until every partition has a leader
    md = admin.list_topics(name, timeout=10).topics.get(name)
    if md is not None and md.error is None and len(md.partitions) == partitions and all(
        p.leader >= 0 for p in md.partitions.values()):
      return
    time.sleep(0.1)
  raise TimeoutError('topic %s has no leaders' % name)


def drop_topics(bootstrap, prefixes):
  # Keeps the bench broker small across runs; the jobs are stopped by now.
  from confluent_kafka.admin import AdminClient
  admin = AdminClient({'bootstrap.servers': bootstrap, 'log_level': 4})
  names = [t for t in admin.list_topics(timeout=10).topics if any(t.startswith(p) for p in prefixes)]
  if names:
    for f in admin.delete_topics(names).values():
      try:
        f.result(30)
      except Exception:  # already gone
        pass


def fill(bootstrap, topic, n, keys):
  from confluent_kafka import Producer
  producer = Producer({'bootstrap.servers': bootstrap, 'linger.ms': 20, 'enable.idempotence': True,
                       'queue.buffering.max.messages': 1_000_000})
  for i in range(n):
    while True:
      try:
        producer.produce(topic, value=word(i, keys).encode())
        break
      except BufferError:
        producer.poll(0.05)
  if producer.flush(60):
    raise RuntimeError('could not fill %s' % topic)


# -------------------------------------------- reader and producer processes
# Both run as `native.py _read|_produce ...`: in this process they would take
# the GIL from the LOOPBACK SDK harness of our runner.

# A crashed or killed harness must leave no runner, app or helper behind: each
# child asks for SIGTERM when this process dies. Not with preexec_fn: forking
# a process with gRPC threads and running Python in the child crashed it.
def _die_with_parent():
  import ctypes
  ctypes.CDLL(None).prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG


def _with_parent(cmd):
  return (['setpriv', '--pdeathsig', 'TERM', '--'] if shutil.which('setpriv') else []) + cmd


def _helper(role, *args):
  return subprocess.Popen([sys.executable, __file__, role] + [str(a) for a in args],
                          stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)


def reader_main(argv):
  """Reads a topic read_committed from its start; prints 'first' on the first
  record, and a JSON summary once the count given on stdin ('COUNT SECONDS')
  was reached (plus a second, so duplicates would show), or SECONDS after that
  line, or `timeout` s after the start when no line came."""
  from confluent_kafka import Consumer, KafkaError, TopicPartition
  bootstrap, topic, fmt, latency, timeout = argv[0], argv[1], argv[2], argv[3] == '1', float(argv[4])
  expected, deadline = [], [time.time() + timeout]

  def until():
    n, seconds = sys.stdin.readline().split()
    deadline[0] = time.time() + float(seconds)
    expected.append(int(n))
  threading.Thread(target=until, daemon=True).start()
  c = Consumer({'bootstrap.servers': bootstrap, 'group.id': 'bench-reader-%s' % uuid.uuid4().hex[:8],
                'isolation.level': 'read_committed', 'enable.auto.commit': False,
                'fetch.wait.max.ms': 10})
  md = c.list_topics(topic, timeout=10).topics[topic]
  c.assign([TopicPartition(topic, p, 0) for p in md.partitions])
  count, first, done, last, lat = 0, None, None, {}, []
  while True:
    msgs = c.consume(10000, 0.02)
    now = time.time()
    for m in msgs:
      if m.error():
        if m.error().code() == KafkaError._PARTITION_EOF:
          continue
        raise RuntimeError(m.error())
      count += 1
      last[m.key()] = m.value()
      if latency:
        ts = m.timestamp()[1] if fmt == 'streams' else int(m.value().rsplit(b'@', 1)[1])
        lat.append((ts, now * 1000 - ts))
    if msgs and first is None:
      first = now
      print('first', flush=True)
    if done is None and expected and count >= expected[0]:
      done = now
    if (done and now - done >= 1.0) or now > deadline[0]:
      break
  c.close()
  if fmt == 'streams':
    finals = [int.from_bytes(v, 'big', signed=True) for v in last.values()]
  else:
    finals = [int(v.split(b'@', 1)[0]) for v in last.values()]
  print(json.dumps({'count': count, 'first': first, 'done': done, 'keys': len(finals),
                    'sum_final': sum(finals), 'lat': lat}), flush=True)


def producer_main(argv):
  """Writes `rate` records/s until SIGUSR1, then `seconds` more; prints the
  number sent and when the steady part started."""
  from confluent_kafka import Producer
  bootstrap, topic, keys, rate, seconds = argv[0], argv[1], int(argv[2]), float(argv[3]), float(argv[4])
  steady = []
  signal.signal(signal.SIGUSR1, lambda *_: steady.append(time.time()))
  producer = Producer({'bootstrap.servers': bootstrap, 'linger.ms': 0, 'enable.idempotence': True})
  t0, i = time.monotonic(), 0
  give_up = time.time() + 600  # no output at all: the caller reports it
  while time.time() < (steady[0] + seconds if steady else give_up):
    delay = t0 + i / rate - time.monotonic()
    if delay > 0:
      time.sleep(delay)
    producer.produce(topic, value=word(i, keys).encode())
    producer.poll(0)
    i += 1
  producer.flush(30)
  print(json.dumps({'sent': i, 'steady': steady[0] if steady else None}), flush=True)


# ---------------------------------------------------------------- processes
class Proc:
  """A process started here; CPU and peak RSS from /proc (as compare.py)."""

  def __init__(self, name, cmd, workdir):
    self.name = name
    self.log_path = workdir / ('%s.log' % name)
    self.log = open(self.log_path, 'wb')
    # setpriv execs the command in place: the pid stays the measured one.
    self.proc = subprocess.Popen(_with_parent(cmd), stdout=self.log, stderr=subprocess.STDOUT,
                                 stdin=subprocess.DEVNULL)
    # RSS over time (MB, one reading a second): a flat line under a backlog
    # is the point of flow control, and a peak alone does not show it.
    self.rss_series = []
    threading.Thread(target=self._sample_rss, daemon=True).start()

  def _sample_rss(self):
    while self.proc.poll() is None:
      try:
        rss = procstat.rss_mb(self.proc.pid)
      except OSError:
        return
      if rss != rss:  # NaN: an exiting process's status has no VmRSS line
        return
      self.rss_series.append(round(rss))
      time.sleep(1)

  def rss_summary(self):
    """Every 10th second's RSS and the largest, e.g. '45 120 130 131 (max 140)'."""
    if not self.rss_series:
      return ''
    return '%s (max %d, %d s)' % (' '.join(str(x) for x in self.rss_series[::10]), max(self.rss_series),
                                  len(self.rss_series))

  def cpu_seconds(self):
    return procstat.cpu_seconds(self.proc.pid)

  def peak_rss_mb(self):
    return procstat.peak_rss_mb(self.proc.pid)

  def tail(self, lines=15):
    self.log.flush()
    return '\n'.join(self.log_path.read_text(errors='replace').splitlines()[-lines:])

  def stop(self):
    if self.proc.poll() is None:
      self.proc.terminate()
      try:
        self.proc.wait(30)
      except subprocess.TimeoutExpired:
        self.proc.kill()
        self.proc.wait()
    self.log.close()


def _wait_port(port, proc, timeout=60):
  deadline = time.monotonic() + timeout
  while time.monotonic() < deadline:
    if proc.proc.poll() is not None:
      raise RuntimeError('%s exited during start-up:\n%s' % (proc.name, proc.tail()))
    try:
      with socket.create_connection(('localhost', port), timeout=1):
        return
    except OSError:
      time.sleep(0.1)
  raise RuntimeError('%s did not listen on %d' % (proc.name, port))


def _log4j(workdir):
  path = workdir / 'log4j2.properties'
  path.write_text('rootLogger.level=WARN\nrootLogger.appenderRef.err.ref=ERR\n'
                  'appender.err.type=Console\nappender.err.name=ERR\nappender.err.target=SYSTEM_ERR\n'
                  'appender.err.layout.type=PatternLayout\nappender.err.layout.pattern=[%d] %p %m (%c)%n\n')
  return path


# ------------------------------------------------------------------ systems
def prepare_streams():
  """kafka-streams and rocksdbjni next to Kafka's jars (cached), and the
  compiled peer; returns the classpath."""
  if not (STREAMS_DIR / '.complete').exists():
    STREAMS_DIR.mkdir(parents=True, exist_ok=True)
    for artifact in STREAMS_JARS:
      subprocess.run(['mvn', '-q', '-B', '-Dstyle.color=never',
                      'org.apache.maven.plugins:maven-dependency-plugin:3.8.1:copy',
                      '-Dartifact=' + artifact, '-DoutputDirectory=%s' % STREAMS_DIR], check=True)
    (STREAMS_DIR / '.complete').touch()
  src = REPO / 'bench' / 'peers' / 'StreamsCount.java'
  cls = STREAMS_DIR / 'classes' / 'StreamsCount.class'
  cp = '%s/*:%s/*' % (KAFKA_LIBS, STREAMS_DIR)
  if not cls.exists() or cls.stat().st_mtime < src.stat().st_mtime:
    subprocess.run(['javac', '-d', str(STREAMS_DIR / 'classes'), '-cp', cp, str(src)], check=True)
  return '%s:%s' % (cp, STREAMS_DIR / 'classes')


class StreamsApp:
  """The Kafka Streams peer, one JVM per run; it never finishes by itself."""

  def __init__(self, name, guarantee, src, dst, args, workdir):
    self.app = 'bench-%s-%s' % (name, uuid.uuid4().hex[:8])
    self.prefixes = [self.app + '-']
    cmd = ['java', '-Xmx1g', '-Dlog4j2.configurationFile=%s' % _log4j(workdir), '-cp', args.streams_cp,
           'StreamsCount', args.bootstrap_servers, src, dst, self.app, str(workdir / (self.app + '-state')),
           'eos' if guarantee == 'exactly_once' else 'alo', str(args.partitions)]
    self.t_start = time.time()
    self.proc = Proc(name, cmd, workdir)

  def error(self):
    if self.proc.proc.poll() is not None:
      return 'exited with %s:\n%s' % (self.proc.proc.returncode, self.proc.tail())
    return None

  def finish(self):
    pass

  def stop(self):
    m = {'runner_cpu_s': self.proc.cpu_seconds(), 'runner_peak_rss_mb': self.proc.peak_rss_mb()}
    self.proc.stop()
    return m


def _count_word():
  # Defined on first use: the reader and producer processes never import Beam.
  import apache_beam as beam
  from apache_beam.coders import VarIntCoder
  from apache_beam.transforms import userstate

  class _CountWord(beam.DoFn):
    """One (word, b'count@input millis') per input, like the Streams count."""
    COUNT = userstate.ReadModifyWriteStateSpec('count', VarIntCoder())

    def process(self, kv, count=beam.DoFn.StateParam(COUNT), ts=beam.DoFn.TimestampParam):
      n = (count.read() or 0) + 1
      count.write(n)
      yield kv[0].encode(), b'%d@%d' % (n, ts.micros // 1000)
  return _CountWord


def _harness_args(harnesses):
  """Options for `harnesses` SDK harness processes (beam_kafka.boot with
  this interpreter), or none for the one LOOPBACK harness."""
  if harnesses <= 0:
    return []
  command = '%s -m beam_kafka.boot' % sys.executable
  return ['--sdk_worker_parallelism=%d' % harnesses, '--environment_type=PROCESS',
          '--environment_config=%s' % json.dumps({'command': command})]


def count_pipeline(opts, args, src, dst, max_records, expansion_service, read=None):
  """The Beam pipeline every Beam system runs: read, key by word, count
  per key in a stateful DoFn, write. `read` replaces ReadFromKafka (then
  the values come as bytes)."""
  import apache_beam as beam
  from apache_beam.io.kafka import ReadFromKafka, WriteToKafka
  if read is None:
    config = dict(consumer_config={'bootstrap.servers': args.bootstrap_servers, 'auto.offset.reset': 'earliest'},
                  topics=[src], value_deserializer=STRING, timestamp_policy=ReadFromKafka.create_time_policy,
                  expansion_service=expansion_service)
    if max_records:
      config['max_num_records'] = max_records  # bounded: the job finishes
    read, word = ReadFromKafka(**config), lambda kv: kv[1]
  else:
    word = lambda kv: kv[1].decode()  # noqa: E731
  p = beam.Pipeline(options=opts)
  _ = (p
       | 'Read' >> read
       # The word becomes the key: our runner sends a stateful ParDo's input
       # through a keyed topic, as Streams does its repartition topic.
       | 'Key' >> beam.Map(lambda kv: (word(kv), None)).with_output_types(
           typing.Tuple[str, typing.Optional[bytes]])
       | 'Count' >> beam.ParDo(_count_word()()).with_output_types(typing.Tuple[bytes, bytes])
       | 'Write' >> WriteToKafka(producer_config={'bootstrap.servers': args.bootstrap_servers}, topic=dst,
                                 expansion_service=expansion_service))
  return p


class BeamKafkaJob(PortableJob):
  """Our job server (fresh per run, so its peak RSS is this job's) and the
  pipeline submitted to it through PortableRunner with LOOPBACK."""

  def __init__(self, name, guarantee, src, dst, max_records, args, workdir):
    try:
      import beam_kafka  # noqa: F401  (registers our options: no "Unparseable argument" warnings)
    except ImportError:
      pass
    from apache_beam.options.pipeline_options import PipelineOptions
    port, exp = procstat.free_port(), procstat.free_port()
    self.proc = Proc(name, [args.binary, 'job-server', '--job-port', str(port), '--artifact-port',
                            str(procstat.free_port()), '--expansion-port', str(exp),
                            '--artifacts-dir', str(workdir / (name + '-artifacts')),
                            # This benchmark's own job server: PROCESS harnesses, its state_dir.
                            '--trust-clients'], workdir)
    _wait_port(port, self.proc)
    _wait_port(exp, self.proc)
    app = 'bench-%s-%s' % (name, uuid.uuid4().hex[:8])
    self.prefixes = ['__beam_%s_' % app]
    opts = PipelineOptions([
        '--runner=PortableRunner', '--job_endpoint=localhost:%d' % port, '--environment_type=LOOPBACK',
        '--bootstrap_servers=%s' % args.bootstrap_servers, '--processing_guarantee=%s' % guarantee,
        '--application_id=%s' % app, '--job_name=%s' % app, '--streaming', '--commit_interval_ms=100',
        '--internal_parallelism=%d' % args.partitions, '--state_dir=%s' % (workdir / (app + '-state'))]
        + _harness_args(args.harnesses) + args.beam_args.split())
    p = count_pipeline(opts, args, src, dst, max_records, 'localhost:%d' % exp)
    # The SDK runs in this process (LOOPBACK) or in the job server's children.
    self.cpu0, self.sdk0 = self.proc.cpu_seconds(), self._sdk_cpu_seconds()
    self.submit(p, 'job server log')

  def _sdk_cpu_seconds(self):
    return time.process_time() + procstat.descendants_cpu_seconds(self.proc.proc.pid)

  def stop(self):
    sdk = self._sdk_cpu_seconds() - self.sdk0
    m = {'runner_cpu_s': self.proc.cpu_seconds() - self.cpu0, 'runner_peak_rss_mb': self.proc.peak_rss_mb(),
         'sdk_cpu_s': sdk, 'runner_rss_series_mb': self.proc.rss_summary()}
    self.cancel_unless_done()
    self.proc.stop()
    return m


def start_system(system, src, dst, max_records, args, workdir, tag):
  guarantee = 'exactly_once' if system.endswith(('-eo', '-eos')) else 'at_least_once'
  name = '%s-%s' % (system, tag)
  if system.startswith('kafka-streams'):
    return StreamsApp(name, guarantee, src, dst, args, workdir)
  if system == 'beam-flink':
    from native_flink import BeamFlinkJob
    return BeamFlinkJob(name, src, dst, max_records, args, workdir, Proc, _wait_port, count_pipeline)
  return BeamKafkaJob(name, guarantee, src, dst, max_records, args, workdir)


def _wait_reader(reader, sys_, deadline, first_line=False):
  """Waits for the reader's next line, failing fast when the system dies."""
  got = []
  t = threading.Thread(target=lambda: got.append(reader.stdout.readline()), daemon=True)
  t.start()
  while t.is_alive():
    t.join(0.5)
    if not t.is_alive():
      break
    err = sys_.error()
    if err:
      raise RuntimeError(err)
    if time.time() > deadline:
      raise RuntimeError('timed out waiting for %s' % ('the first output' if first_line else 'all outputs'))
  if first_line and got[0].strip() != 'first':  # the reader gave up: its summary, or nothing
    raise RuntimeError('no output within %.0f s (reader: %s)' % (time.time() - sys_.t_start, got[0].strip()[:200]))
  return got[0]


def _verify(res, expected, keys):
  want_keys = min(keys, expected)
  ok = res['count'] == expected and res['sum_final'] == expected and res['keys'] == want_keys
  return 'ok' if ok else 'FAIL: %d outputs, %d keys, final counts sum to %d (want %d, %d, %d)' % (
      res['count'], res['keys'], res['sum_final'], expected, want_keys, expected)


# ------------------------------------------------------------------- parts
def _kafka_tool(cls, argv, workdir):
  cmd = ['java', '-Dlog4j2.configurationFile=%s' % _log4j(workdir), '-cp', '%s/*' % KAFKA_LIBS,
         'org.apache.kafka.tools.' + cls] + argv
  return subprocess.run(cmd, capture_output=True, text=True, check=True).stdout


def _produce_perf(topic, args, workdir, extra=()):
  out = _kafka_tool('ProducerPerformance', [
      '--topic', topic, '--num-records', str(args.records), '--record-size', str(RECORD_SIZE),
      '--throughput', '-1', '--producer-props', 'bootstrap.servers=%s' % args.bootstrap_servers,
      'acks=all'] + list(extra), workdir)
  # The last line: "N records sent, R records/sec (M MB/sec), A ms avg latency, ..."
  final = [l for l in out.splitlines() if 'records sent' in l][-1]
  return float(final.split(',')[1].split()[0]), final


def ceiling(args, workdir, uid):
  plain, tx = 'bench-ceil-%s' % uid, 'bench-ceil-tx-%s' % uid
  for t in (plain, tx):
    create_topic(args.bootstrap_servers, t, args.partitions)
  produce, consume, produce_tx = [], [], []
  try:
    for i in range(CEILING_RUNS):  # each tool is a fresh JVM: the median evens out warm-up and noise
      rate, line = _produce_perf(plain, args, workdir)
      produce.append(rate)
      print('ProducerPerformance:', line, flush=True)
      out = _kafka_tool('ConsumerPerformance', [
          '--bootstrap-server', args.bootstrap_servers, '--topic', plain, '--messages', str(args.records),
          '--timeout', '30000', '--hide-header'], workdir)
      fields = [l for l in out.splitlines() if l.strip()][-1].split(', ')
      consume.append(float(fields[9]))  # fetch.nMsg.sec: without the group join
      print('ConsumerPerformance:', ', '.join(fields), flush=True)
      rate, line = _produce_perf(tx, args, workdir, ['--transaction-duration-ms', '100',
                                                     '--transactional-id', 'bench-ceil-%s-%d' % (uid, i)])
      produce_tx.append(rate)
      print('ProducerPerformance (transactions of 100 ms):', line, flush=True)
  finally:
    drop_topics(args.bootstrap_servers, [plain, tx])
  produce, consume, produce_tx = (statistics.median(v) for v in (produce, consume, produce_tx))
  both = 1 / (1 / produce + 1 / consume)
  return [dict(part='ceiling', system='kafka', measure=m, records_per_s=v) for m, v in (
      ('produce acks=all', produce), ('produce transactional 100 ms', produce_tx),
      ('consume fetch.nMsg.sec', consume), ('produce+consume ceiling', both))]


def native(args, workdir, uid):
  src = 'bench-in-%s' % uid
  create_topic(args.bootstrap_servers, src, args.partitions)
  t0 = time.monotonic()
  fill(args.bootstrap_servers, src, args.records, args.keys)
  print('filled %s with %d records in %.1f s' % (src, args.records, time.monotonic() - t0), flush=True)
  rows = []
  try:
    for system in args.systems:
      rows.append(_native_run(system, src, args, workdir, uid))
  finally:
    drop_topics(args.bootstrap_servers, [src])
  return rows


def _native_run(system, src, args, workdir, uid):
  dst = 'bench-out-%s-%s' % (system, uid)
  create_topic(args.bootstrap_servers, dst, args.partitions)
  fmt = 'streams' if system.startswith('kafka-streams') else 'ours'
  reader = _helper('_read', args.bootstrap_servers, dst, fmt, 0, args.timeout)
  reader.stdin.write('%d %f\n' % (args.records, args.timeout))
  reader.stdin.flush()
  row = dict(part='native', system=system)
  sys_ = None
  try:
    sys_ = start_system(system, src, dst, args.records, args, workdir, 'native')
    deadline = time.time() + args.timeout + 30  # the reader gives up first, with its counts
    _wait_reader(reader, sys_, deadline, first_line=True)
    res = json.loads(_wait_reader(reader, sys_, deadline))
    row.update(outputs=res['count'])
    if res['done'] is None:
      # Unfinished: the rate so far is still worth a row (marked partial).
      row['partial_records_per_s'] = res['count'] / (time.time() - res['first'])  # before the stop's wait
      row.update(sys_.stop())
      raise RuntimeError('only %d of %d outputs within %.0f s of the start (%.0f/s since the first output)' % (
          res['count'], args.records, time.time() - sys_.t_start, row['partial_records_per_s']))
    sys_.finish()
    row.update(sys_.stop())
    row.update(verified=_verify(res, args.records, args.keys))
    row.update(wall_s=res['done'] - sys_.t_start, first_output_s=res['first'] - sys_.t_start)
    span = res['done'] - res['first']
    if span > 0:
      row['records_per_s'] = args.records / span
    else:
      # Every output became visible at once (one transaction): too few
      # records to measure a rate between outputs; wall rec/s still holds.
      row['all_at_once'] = True
    row['wall_records_per_s'] = args.records / row['wall_s']
  except Exception as e:
    row['verified'] = 'ERROR: %s' % e
    if sys_ is not None and 'runner_cpu_s' not in row:
      sys_.stop()
  finally:
    reader.kill()
    _drop_unless_failed(args, row, [dst] + (sys_.prefixes if sys_ else []))
  row['load1'] = os.getloadavg()[0]  # this machine is shared: say how busy it was
  print('%-18s %s' % (system, _short(row)), flush=True)
  return row


def _drop_unless_failed(args, row, prefixes):
  # A failed run's topics stay for a post-mortem (its input is kept only in
  # the latency part: the native part's input is shared).
  if str(row.get('verified', '')).startswith('ERROR'):
    row['verified'] += '\n(topics kept: %s)' % ', '.join(prefixes)
  else:
    drop_topics(args.bootstrap_servers, prefixes)


def latency(args, workdir, uid):
  rows = []
  for rate in args.rates:
    for system in args.systems:
      rows.append(_latency_run(system, rate, args, workdir, uid))
  return rows


def _latency_run(system, rate, args, workdir, uid):
  tag = '%s-%d-%s' % (system, rate, uid)
  src, dst = 'bench-lat-in-%s' % tag, 'bench-lat-out-%s' % tag
  for t in (src, dst):
    create_topic(args.bootstrap_servers, t, args.partitions)
  fmt = 'streams' if system.startswith('kafka-streams') else 'ours'
  reader = _helper('_read', args.bootstrap_servers, dst, fmt, 1, args.timeout)
  row = dict(part='latency', system=system, rate=rate)
  sys_, producer = None, None
  try:
    sys_ = start_system(system, src, dst, None, args, workdir, 'latency')
    producer = _helper('_produce', args.bootstrap_servers, src, args.keys, rate, args.seconds)
    _wait_reader(reader, sys_, time.time() + args.timeout + 30, first_line=True)
    producer.send_signal(signal.SIGUSR1)  # warm: the measured D seconds start now
    sent = json.loads(producer.stdout.readline())
    # The reader stops after every output, or LATENCY_GRACE_S after the producer.
    reader.stdin.write('%d %f\n' % (sent['sent'], LATENCY_GRACE_S))
    reader.stdin.flush()
    res = json.loads(_wait_reader(reader, sys_, time.time() + LATENCY_GRACE_S + 30))
    row.update(sys_.stop())
    row.update(sent=sent['sent'], outputs=res['count'], verified=_verify(res, sent['sent'], args.keys))
    start_ms = (sent['steady'] + WARMUP_S) * 1000
    lat = sorted(l for ts, l in res['lat'] if ts >= start_ms)
    # Inputs with no output by the end are left out of the percentiles; the
    # missing column counts them.
    row.update(count=len(lat), missing=max(0, sent['sent'] - res['count']), p50_ms=_pct(lat, 50),
               p99_ms=_pct(lat, 99), max_ms=lat[-1] if lat else float('nan'),
               mean_ms=statistics.mean(lat) if lat else float('nan'),
               p50_series_ms=_series(res['lat'], start_ms))
  except Exception as e:
    row['verified'] = 'ERROR: %s' % e
    if sys_ is not None and 'runner_cpu_s' not in row:
      sys_.stop()
  finally:
    for h in (reader, producer):
      if h is not None:
        h.kill()
    _drop_unless_failed(args, row, [src, dst] + (sys_.prefixes if sys_ else []))
  row['load1'] = os.getloadavg()[0]  # this machine is shared: say how busy it was
  print('%-18s %s' % (system, _short(row)), flush=True)
  return row


def _series(samples, start_ms, bucket_s=4):
  """p50 latency per `bucket_s` of input time from `start_ms`: steady, or
  growing (the system falls behind)?"""
  buckets = {}
  for ts, l in samples:
    if ts >= start_ms:
      buckets.setdefault(int((ts - start_ms) // (bucket_s * 1000)), []).append(l)
  return ' '.join('%.0f' % _pct(sorted(buckets[b]), 50) for b in sorted(buckets))


def _pct(sorted_values, p):
  if not sorted_values:
    return float('nan')
  return sorted_values[min(len(sorted_values) - 1, int(len(sorted_values) * p / 100))]


def _short(row):
  return ' '.join('%s=%s' % (k, '%.4g' % v if isinstance(v, float) else v)
                  for k, v in row.items() if k not in ('part', 'system'))


# ------------------------------------------------------------------ report
def report(rows, args, out):
  ceil = next((r['records_per_s'] for r in rows if r.get('measure') == 'produce+consume ceiling'), None)
  frac = lambda v: '%7.1f%%' % (100 * v / ceil) if ceil and v == v else '%8s' % '-'
  for r in rows:
    if ceil and r.get('records_per_s'):
      r['of_ceiling'] = r['records_per_s'] / ceil
  got = [r for r in rows if r['part'] == 'ceiling']
  if got:
    print('\nKafka ceiling: %d records of %d B, acks=all, %d partition(s), one broker, median of %d runs' % (
        args.records, RECORD_SIZE, args.partitions, CEILING_RUNS))
    print('%-32s %12s %10s' % ('measure', 'records/s', 'of ceiling'))
    for r in got:
      print('%-32s %12.0f %10s' % (r['measure'], r['records_per_s'], frac(r['records_per_s'])))
  got = [r for r in rows if r['part'] == 'native']
  if got:
    print('\nRunner-native path: %d records, %d keys, %d partition(s), commit every 100 ms; '
          'records/s = N / (N-th output - first output), read_committed' % (args.records, args.keys, args.partitions))
    print('%-18s %10s %10s %8s %8s %10s %10s %9s %9s  %s' % (
        'system', 'records/s', 'of ceiling', 'first s', 'wall s', 'wall rec/s', 'runner cpu', 'sdk cpu', 'peak MB',
        'verified'))
    for r in got:
      rate = '%10.0f' % r['records_per_s'] if 'records_per_s' in r else (
          '%9.0f*' % r['partial_records_per_s'] if 'partial_records_per_s' in r else '%10s' % '-')
      print('%-18s %s %10s %8.1f %8.1f %10.0f %9.1fs %8.1fs %9.0f  %s' % (
          r['system'], rate, frac(r.get('records_per_s', r.get('partial_records_per_s', float('nan')))),
          r.get('first_output_s', float('nan')), r.get('wall_s', float('nan')),
          r.get('wall_records_per_s', float('nan')), r.get('runner_cpu_s', float('nan')),
          r.get('sdk_cpu_s', float('nan')), r.get('runner_peak_rss_mb', float('nan')),
          r.get('verified', '').splitlines()[0] if r.get('verified') else ''))
    if any('partial_records_per_s' in r for r in got):
      print('* did not finish within --timeout: outputs/s from the first output until then')
    if any(r.get('all_at_once') for r in got):
      print('- every output became visible at once (one commit): no rate between outputs; see wall rec/s')
    _ratios(got, 'records_per_s', 'throughput (ours / Kafka Streams; > 1 means ours is faster)')
  for rate in args.rates:
    _latency_table([r for r in rows if r['part'] == 'latency' and r['rate'] == rate], rate, args)
  _report_tail(rows, out)


def _latency_table(got, rate, args):
  if not got:
    return
  print('\nStreaming latency: %d records/s for %d s after the first output, first %.0f s dropped; '
        'input CreateTime -> output seen read_committed (target p99 <= %d ms exactly-once)' % (
            rate, args.seconds, WARMUP_S, TARGET_P99_MS))
  print('%-18s %7s %7s %8s %8s %8s %8s %10s %9s  %s' % (
      'system', 'count', 'missing', 'p50 ms', 'p99 ms', 'max ms', 'mean ms', 'runner cpu', 'peak MB', 'verified'))
  for r in got:
    print('%-18s %7s %7s %8.0f %8.0f %8.0f %8.0f %9.1fs %9.0f  %s' % (
        r['system'], r.get('count', '-'), r.get('missing', '-'), r.get('p50_ms', float('nan')),
        r.get('p99_ms', float('nan')), r.get('max_ms', float('nan')), r.get('mean_ms', float('nan')),
        r.get('runner_cpu_s', float('nan')), r.get('runner_peak_rss_mb', float('nan')),
        r.get('verified', '').splitlines()[0] if r.get('verified') else ''))
  _ratios(got, 'p99_ms', 'p99 latency (ours / Kafka Streams; < 1 means ours is faster)')


def _report_tail(rows, out):
  fields = []
  for r in rows:
    fields += [k for k in r if k not in fields]
  with open(out / 'native.csv', 'w', newline='') as f:
    writer = csv.DictWriter(f, fieldnames=fields, restval='')
    writer.writeheader()
    writer.writerows(rows)
  chart(rows, out)
  print('\nCSV: %s' % (out / 'native.csv'))
  for r in rows:  # full errors last, so the tables stay readable
    if str(r.get('verified', '')).startswith(('ERROR', 'FAIL')):
      print('\n%s %s: %s' % (r['part'], r['system'], r['verified']))


def _ratios(got, key, title):
  by = {r['system']: r.get(key, r.get('partial_' + key)) for r in got}
  partial = {r['system'] for r in got if key not in r and 'partial_' + key in r}
  pairs = [('beam-kafka-eo', 'kafka-streams-eos'), ('beam-kafka-alo', 'kafka-streams-alo'),
           ('beam-kafka-eo', 'beam-flink'), ('beam-kafka-alo', 'beam-flink')]
  lines = ['%-15s %.2fx%s%s' % (o, by[o] / by[s], '*' if partial & {o, s} else '',
                                '' if s.startswith('kafka-streams') else ' (of %s)' % s)
           for o, s in pairs if by.get(o) and by.get(s)]
  if lines:
    print(title + ':\n  ' + '\n  '.join(lines))


def chart(rows, out):
  try:
    import matplotlib
    matplotlib.use('Agg')
    import matplotlib.pyplot as plt
  except ImportError:
    print('(no matplotlib: no chart)')
    return
  parts = [p for p in ('ceiling', 'native', 'latency') if any(r['part'] == p for r in rows)]
  fig, axes = plt.subplots(1, len(parts), figsize=(5 * len(parts), 4), squeeze=False)
  for ax, part in zip(axes[0], parts):
    got = [r for r in rows if r['part'] == part]
    if part == 'latency':
      xs = range(len(got))
      ax.bar([x - 0.2 for x in xs], [r.get('p50_ms', 0) for r in got], 0.4, label='p50')
      ax.bar([x + 0.2 for x in xs], [r.get('p99_ms', 0) for r in got], 0.4, label='p99')
      ax.axhline(TARGET_P99_MS, color='grey', linestyle='--', label='p99 target')
      ax.set_yscale('log')  # peers can be orders of magnitude apart
      ax.set_ylabel('ms, input produced -> output visible')
      ax.legend()
    else:
      rates = [r.get('records_per_s', r.get('partial_records_per_s', 0)) for r in got]
      bars = ax.bar(range(len(got)), rates)
      for b, r in zip(bars, got):
        if 'partial_records_per_s' in r:  # unfinished run: hatched
          b.set_hatch('//')
      ax.set_ylabel('records / s (hatched: unfinished, rate so far)')
      if part == 'native':
        ax.set_yscale('log')
    labels = [r.get('measure', r['system'] + (' @%.0f/s' % r['rate'] if 'rate' in r else '')).replace(' ', '\n', 1)
              for r in got]
    ax.set_xticks(range(len(got)), labels, rotation=20, fontsize=7)
    ax.set_title(part)
  fig.tight_layout()
  fig.savefig(out / 'native.png')
  print('chart: %s' % (out / 'native.png'))


def main():
  ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
  ap.add_argument('--binary', default=str(REPO / 'bin' / 'beam-kafka'))
  ap.add_argument('--bootstrap_servers', default='localhost:9092')
  ap.add_argument('--records', type=int, default=1_000_000, help='N for the ceiling and the native part')
  ap.add_argument('--keys', type=int, default=10_000)
  ap.add_argument('--partitions', type=int, default=1, help='of every topic, and of the repartition/shuffle')
  ap.add_argument('--rates', default='300,1000,5000', help='records/s in the latency part, one run each')
  ap.add_argument('--rate', type=float, default=None, help='one rate instead of --rates')
  ap.add_argument('--seconds', type=float, default=20, help='measured seconds in the latency part')
  ap.add_argument('--parts', default='ceiling,native,latency')
  ap.add_argument('--harnesses', type=int, default=0,
                  help='SDK harness processes for our pipeline (PROCESS environment); 0: one LOOPBACK harness')
  ap.add_argument('--beam_args', default='', help='more options for our pipeline, e.g. "--max_cache_memory_usage_mb=100"')
  ap.add_argument('--systems', default=','.join(SYSTEMS))
  ap.add_argument('--timeout', type=float, default=None, help='s per run (default 120 + N/1000)')
  ap.add_argument('--out', default=str(REPO / 'bench' / 'results'))
  args = ap.parse_args()
  args.systems = args.systems.split(',')
  args.rates = [args.rate] if args.rate else [float(r) for r in args.rates.split(',')]
  args.timeout = args.timeout or 120 + args.records / 1000
  out = Path(args.out)
  out.mkdir(parents=True, exist_ok=True)
  workdir = Path(tempfile.mkdtemp(prefix='beam-kafka-native-'))
  print('workdir (logs): %s' % workdir, flush=True)
  parts = args.parts.split(',')
  if any(s.startswith('kafka-streams') for s in args.systems) and set(parts) & {'native', 'latency'}:
    args.streams_cp = prepare_streams()
  uid = uuid.uuid4().hex[:8]
  rows = []
  for part, run in (('ceiling', ceiling), ('native', native), ('latency', latency)):
    if part in parts:
      rows += run(args, workdir, uid)
  report(rows, args, out)
  failed = [r['system'] for r in rows if str(r.get('verified', '')).startswith('ERROR')]
  if failed:
    # Still reported above; the exit status lets a smoke run notice.
    print('unverified: %s' % ', '.join(failed))
    sys.exit(1)


if __name__ == '__main__':
  if len(sys.argv) > 1 and sys.argv[1] in ('_read', '_produce'):
    _die_with_parent()
    (reader_main if sys.argv[1] == '_read' else producer_main)(sys.argv[2:])
  else:
    main()
