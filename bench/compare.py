"""Runs the same SDK-bound workloads on beam-kafka and on the runners a user
would pick instead, one after another in this run, and prints absolute
figures and ratios (plus a CSV, and a PNG chart when matplotlib is present).

Peers started here (see bench/PEERS.md for how each is fetched and started):
  beam-kafka-eo   our job server, processing_guarantee=exactly_once
  beam-kafka-alo  the same, at_least_once
  beam-kafka-eo-otel  exactly_once, exporting metrics and traces over OTLP
                  (every second) to a receiver process of its own: with
                  beam-kafka-eo in the same run, the export's cost
  beam-kafka-eo-p2  exactly_once with --sdk_worker_parallelism=2 (two SDK
                  harness processes, through KafkaStreamsRunner) and
                  --internal_parallelism=4
  python-ref      Beam's reference runner behind its job service
                  (apache_beam.runners.portability.local_job_service_main)
  prism           Beam's Go runner, built from the Go module proxy at the
                  SDK's version (scripts/go-pipelines.sh)
  flink           Beam's Flink job server with an in-process Flink mini
                  cluster (--flink-master=[local]), fetched by
                  bench/peers/flink.sh; not at the SDK's version when Maven
                  Central lacks it, so its start-up line names the version
Every runner gets the pipeline through the Job API with LOOPBACK, so the SDK
harness runs in this process (or, for beam-kafka-eo-p2, in processes it
starts): its CPU is the CPU of this process and its children during the run.
The runner's CPU and peak RSS are read from /proc for the runner's process.

The SDK's own time is measured too: each bundle the LOOPBACK harness in
this process runs is timed, so "wall - bundles" is what a runner (and the
client's submission, the same for all) adds to the SDK's work. A Python
bundle ends on a tick of the SDK's state sampler (up to 200 ms apart), so
bundle times, and with them the wall times of every runner, come in steps
of ~200 ms: "wall - bundles" is the steadier comparison of runners.

The runner-native Kafka path against a Kafka Streams app, streaming latency
and the Kafka ceiling are bench/native.py; bench/run.sh runs both.
"""

import argparse
import csv
import os
import re
import socket
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path

import apache_beam as beam
import procstat
from apache_beam.options.pipeline_options import PipelineOptions
from apache_beam.runners.worker import bundle_processor

REPO = Path(__file__).resolve().parent.parent
SEEDS = 100  # elements are generated from this many seeds, after a Reshuffle


# ------------------------------------------------- the SDK's bundle times
_bundle_seconds = []


def _timed_process_bundle(process_bundle):
  def timed(self, *args, **kwargs):
    began = time.monotonic()
    try:
      return process_bundle(self, *args, **kwargs)
    finally:
      _bundle_seconds.append(time.monotonic() - began)
  return timed


bundle_processor.BundleProcessor.process_bundle = _timed_process_bundle(
    bundle_processor.BundleProcessor.process_bundle)


# ---------------------------------------------------------------- workloads
def _generate(p, n):
  per_seed = n // SEEDS
  return (p
          | 'Seeds' >> beam.Create(list(range(SEEDS)))
          | 'Generate' >> beam.FlatMap(
              lambda s, k=per_seed: range(s * k, (s + 1) * k)))


def map_filter(p, n, keys):
  _ = (_generate(p, n)
       | 'Double' >> beam.Map(lambda x: x * 2)
       | 'KeepThirds' >> beam.Filter(lambda x: x % 3 != 0)
       | 'Format' >> beam.Map(lambda x: 'v%d' % x)
       | 'Length' >> beam.Map(len))


def combine_per_key(p, n, keys):
  _ = (_generate(p, n)
       | 'Key' >> beam.Map(lambda x, k=keys: (x % k, 1))
       | 'Count' >> beam.CombinePerKey(sum))


def group_by_key(p, n, keys):
  _ = (_generate(p, n)
       | 'Key' >> beam.Map(lambda x, k=keys: (x % k, x))
       | 'Group' >> beam.GroupByKey()
       | 'Size' >> beam.MapTuple(lambda k, vs: (k, len(list(vs)))))


WORKLOADS = {'map_filter': map_filter, 'combine_per_key': combine_per_key,
             'group_by_key': group_by_key}


# ------------------------------------------------------------------ runners
def _wait_port(port, proc, what, timeout=120):
  deadline = time.monotonic() + timeout
  while time.monotonic() < deadline:
    if proc.poll() is not None:
      raise RuntimeError('%s exited with %s during start-up' % (what, proc.returncode))
    try:
      with socket.create_connection(('localhost', port), timeout=1):
        return
    except OSError:
      time.sleep(0.2)
  raise RuntimeError('%s did not listen on %d within %d s' % (what, port, timeout))


class Runner:
  """A runner process started here, with the options a pipeline needs."""

  def __init__(self, name, cmd, port, options, workdir, runner_class='PortableRunner', env=None, sidecar=None):
    self.name, self.port, self.options = name, port, options
    self.runner_class = runner_class
    # A process the runner needs, stopped with it.
    self.sidecar = sidecar
    self.log = open(workdir / ('%s.log' % name), 'wb')
    self.proc = subprocess.Popen(cmd, stdout=self.log, stderr=subprocess.STDOUT,
                                 stdin=subprocess.DEVNULL, env=env)
    _wait_port(port, self.proc, name)

  def cpu_seconds(self):
    return procstat.cpu_seconds(self.proc.pid)

  def pids(self):
    """The runner's own processes (the SDK's CPU leaves them out)."""
    return {self.proc.pid} | ({self.sidecar.proc.pid} if self.sidecar is not None else set())

  def reset_peak_rss(self):
    procstat.reset_peak_rss(self.proc.pid)

  def peak_rss_mb(self):
    return procstat.peak_rss_mb(self.proc.pid)

  def stop(self):
    self.proc.terminate()
    try:
      self.proc.wait(30)
    except subprocess.TimeoutExpired:
      self.proc.kill()
    self.log.close()
    if self.sidecar is not None:
      self.sidecar.stop()


class OtlpSink:
  """itests/otlp_receiver.py as a process of its own, so what it costs
  is not counted in this process (the SDK harness's)."""

  def __init__(self, workdir):
    self.proc = subprocess.Popen(
        [sys.executable, str(REPO / 'itests' / 'otlp_receiver.py')], stdout=subprocess.PIPE, text=True,
        stdin=subprocess.DEVNULL)
    words = self.proc.stdout.readline().split()
    if len(words) < 4:
      raise RuntimeError('the OTLP receiver did not start')
    self.grpc_endpoint = words[1]

  def stop(self):
    self.proc.terminate()
    print('otlp receiver: %s' % self.proc.communicate(timeout=30)[0].strip(), flush=True)


def beam_kafka(name, guarantee, binary, bootstrap, workdir, harnesses=1, otlp=None):
  """Our job server. With several harnesses the pipeline is submitted by
  KafkaStreamsRunner, whose LOOPBACK harnesses are then processes (Beam's
  LOOPBACK pool would run them as threads of this one process), and the
  shuffle gets as many partitions, so there are tasks to spread."""
  port = procstat.free_port()
  cmd = [binary, 'job-server', '--job-port', str(port), '--artifact-port', str(procstat.free_port()),
         '--expansion-port', str(procstat.free_port()), '--artifacts-dir', str(workdir / (name + '-artifacts')),
         # A job server of this benchmark alone: its options choose freely.
         '--trust-clients']
  env = None
  if otlp is not None:
    cmd += ['--otlp-endpoint', otlp.grpc_endpoint, '--otlp-protocol', 'grpc']
    env = dict(os.environ, OTEL_METRIC_EXPORT_INTERVAL='1000')
  options = ['--bootstrap_servers=%s' % bootstrap, '--processing_guarantee=%s' % guarantee,
             '--state_dir=%s' % (workdir / (name + '-state'))]
  if harnesses == 1:
    return Runner(name, cmd, port, options, workdir, env=env)
  options += ['--sdk_worker_parallelism=%d' % harnesses, '--internal_parallelism=%d' % (2 * harnesses)]
  return Runner(name, cmd, port, options, workdir, runner_class='beam_kafka.KafkaStreamsRunner', env=env)


def _with_otlp(workdir, make):
  sink = OtlpSink(workdir)
  try:
    runner = make(sink)
  except BaseException:
    sink.stop()
    raise
  runner.sidecar = sink
  return runner


def python_reference(name, workdir):
  port = procstat.free_port()
  cmd = [sys.executable, '-m', 'apache_beam.runners.portability.local_job_service_main',
         '--port', str(port), '--staging_dir', str(workdir / (name + '-staging'))]
  return Runner(name, cmd, port, [], workdir)


def prism(name, binary, workdir):
  port = procstat.free_port()
  cmd = [binary, '--job_port=%d' % port, '--serve_http=false', '--log_level=warn']
  return Runner(name, cmd, port, [], workdir)


# Java 17 closes the JDK internals Flink reflects into; these are the opens
# that Flink's own start scripts pass.
FLINK_OPENS = ['--add-opens=java.base/%s=ALL-UNNAMED' % m for m in (
    'java.lang', 'java.net', 'java.io', 'java.nio', 'sun.nio.ch', 'java.lang.reflect', 'java.text',
    'java.time', 'java.util', 'java.util.concurrent', 'java.util.concurrent.atomic',
    'java.util.concurrent.locks')]
FLINK_HEAP = '-Xmx2g'  # else the JVM takes a quarter of RAM and RSS says little


def _fetch_flink():
  fetched = subprocess.run(['bash', str(REPO / 'bench' / 'peers' / 'flink.sh')],
                           stdout=subprocess.PIPE, text=True, check=True)
  return fetched.stdout.strip().splitlines()[-1].split(' ', 1)[1]


def _flink_versions(libdir):
  # Read from the jar names, so a libdir given by --flink is named too.
  names = sorted(os.listdir(libdir))
  beam_v, flink_v = '?', '?'
  for jar in names:
    m = re.fullmatch(r'beam-runners-flink-(\d+\.\d+)(?:-job-server)?-(\d[\w.]*)\.jar', jar)
    if m:
      flink_v, beam_v = m.groups()
  for jar in names:  # the full Flink version, when its jars are unshaded
    m = re.fullmatch(r'flink-runtime-(\d[\w.]*)\.jar', jar)
    if m:
      flink_v = m.group(1)
  return beam_v, flink_v


def flink(name, libdir, workdir):
  beam_v, flink_v = _flink_versions(libdir)
  print('%s: Beam %s job server, Flink %s, %s, local mini cluster, parallelism 1 (log: %s)' % (
      name, beam_v, flink_v, FLINK_HEAP, workdir / (name + '.log')), flush=True)
  port = procstat.free_port()
  cmd = ['java', FLINK_HEAP] + FLINK_OPENS + [
      '-cp', os.path.join(libdir, '*'), 'org.apache.beam.runners.flink.FlinkJobServerDriver',
      '--flink-master=[local]', '--job-port=%d' % port, '--artifact-port=%d' % procstat.free_port(),
      '--expansion-port=-1', '--artifacts-dir=%s' % (workdir / (name + '-artifacts'))]
  # All subtasks share the one LOOPBACK SDK process, so more would only contend.
  return Runner(name, cmd, port, ['--parallelism=1'], workdir)


# -------------------------------------------------------------- measurement
def run_once(runner, workload, n, keys):
  app = 'bench-%s-%s' % (workload, uuid.uuid4().hex[:8])
  opts = PipelineOptions(['--runner=%s' % runner.runner_class, '--job_endpoint=localhost:%d' % runner.port,
                          '--environment_type=LOOPBACK', '--application_id=%s' % app,
                          '--job_name=%s' % app] + runner.options)
  p = beam.Pipeline(options=opts)
  WORKLOADS[workload](p, n, keys)
  runner.reset_peak_rss()
  sdk_cpu = lambda: procstat.own_tree_cpu_seconds(exclude=runner.pids())
  _bundle_seconds.clear()
  cpu0, sdk0, t0 = runner.cpu_seconds(), sdk_cpu(), time.monotonic()
  result = p.run()
  state = result.wait_until_finish()
  wall = time.monotonic() - t0
  if str(state) != 'DONE':
    raise RuntimeError('%s on %s ended %s' % (workload, runner.name, state))
  # None where the harnesses are processes of their own (not timed here).
  bundles = sum(_bundle_seconds) if _bundle_seconds else None
  return {'wall_s': wall, 'elements_per_s': n / wall,
          'runner_cpu_s': runner.cpu_seconds() - cpu0,
          'sdk_cpu_s': sdk_cpu() - sdk0,
          'runner_peak_rss_mb': runner.peak_rss_mb(),
          'sdk_bundles': len(_bundle_seconds), 'sdk_bundle_s': bundles}


def _build_prism():
  built = subprocess.run(['bash', str(REPO / 'scripts' / 'go-pipelines.sh'), 'prism',
                          'github.com/apache/beam/sdks/v2/go/cmd/prism'],
                         capture_output=True, text=True, check=True)
  return built.stdout.strip().splitlines()[-1]


def spread(values):
  return statistics.median(values), min(values), max(values)


def main():
  ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
  ap.add_argument('--binary', default=str(REPO / 'bin' / 'beam-kafka'))
  ap.add_argument('--bootstrap_servers', default='localhost:9092')
  ap.add_argument('--elements', type=int, default=1_000_000)
  ap.add_argument('--keys', type=int, default=10_000)
  ap.add_argument('--repeat', type=int, default=5, help='measured runs per (runner, workload)')
  ap.add_argument('--warmup', type=int, default=1, help='discarded runs first')
  ap.add_argument('--workloads', default=','.join(WORKLOADS))
  ap.add_argument('--runners', default='beam-kafka-eo,beam-kafka-alo,beam-kafka-eo-p2,python-ref,prism,flink')
  ap.add_argument('--prism', default=None, help='a prism binary (default: built by scripts/go-pipelines.sh)')
  ap.add_argument('--flink', default=None,
                  help='a Flink job server libdir (default: fetched by bench/peers/flink.sh)')
  ap.add_argument('--out', default=str(REPO / 'bench' / 'results'))
  ap.add_argument('--option', action='append', default=[],
                  help='a pipeline option for our runners, e.g. --option=--commit_interval_ms=50')
  ap.add_argument('--interleave', action='store_true',
                  help='start every runner first, then take turns run by run (paired samples: for small '
                       'differences between our own variants, e.g. beam-kafka-eo vs beam-kafka-eo-otel, '
                       'which drift over a session would otherwise swamp)')
  args = ap.parse_args()
  out = Path(args.out)
  out.mkdir(parents=True, exist_ok=True)
  workdir = Path(tempfile.mkdtemp(prefix='beam-kafka-bench-'))
  makers = {
      'beam-kafka-eo': lambda: beam_kafka('beam-kafka-eo', 'exactly_once', args.binary, args.bootstrap_servers, workdir),
      'beam-kafka-alo': lambda: beam_kafka('beam-kafka-alo', 'at_least_once', args.binary, args.bootstrap_servers, workdir),
      'beam-kafka-eo-otel': lambda: _with_otlp(workdir, lambda sink: beam_kafka(
          'beam-kafka-eo-otel', 'exactly_once', args.binary, args.bootstrap_servers, workdir, otlp=sink)),
      'beam-kafka-eo-p2': lambda: beam_kafka('beam-kafka-eo-p2', 'exactly_once', args.binary, args.bootstrap_servers,
                                             workdir, harnesses=2),
      'python-ref': lambda: python_reference('python-ref', workdir),
      'prism': lambda: prism('prism', args.prism or _build_prism(), workdir),
      'flink': lambda: flink('flink', args.flink or _fetch_flink(), workdir),
  }
  runners = args.runners.split(',')
  workloads = args.workloads.split(',')
  rows = []

  def make(name):
    runner = makers[name]()
    if name.startswith('beam-kafka'):
      runner.options += args.option
    return runner

  def measure(runner, w, i):
    m = run_once(runner, w, args.elements, args.keys)
    measured = i >= args.warmup
    bundles = ('%d bundle(s) %.2f s' % (m['sdk_bundles'], m['sdk_bundle_s'])
               if m['sdk_bundle_s'] is not None else 'bundles not timed')
    print('%-15s %-16s %s %6.2f s %10.0f el/s runner %.2f cpu-s sdk %.2f cpu-s %.0f MB; %s' % (
        runner.name, w, 'run   ' if measured else 'warmup', m['wall_s'], m['elements_per_s'],
        m['runner_cpu_s'], m['sdk_cpu_s'], m['runner_peak_rss_mb'], bundles), flush=True)
    if measured:
      rows.append(dict(runner=runner.name, workload=w, run=i - args.warmup, **m))

  if args.interleave:
    started = []
    try:
      for name in runners:
        started.append(make(name))
      for w in workloads:
        for i in range(args.warmup + args.repeat):
          # Each round in another order, so neither always goes first.
          for runner in (started if i % 2 == 0 else started[::-1]):
            measure(runner, w, i)
    finally:
      for runner in started:
        runner.stop()
    report(rows, runners, workloads, out, args)
    return
  for name in runners:
    # One runner at a time: the peers never compete for the cores.
    runner = make(name)
    try:
      for w in workloads:
        for i in range(args.warmup + args.repeat):
          measure(runner, w, i)
    finally:
      runner.stop()
  report(rows, runners, workloads, out, args)


def report(rows, runners, workloads, out, args):
  with open(out / 'sdk_bound.csv', 'w', newline='') as f:
    writer = csv.DictWriter(f, fieldnames=list(rows[0]))
    writer.writeheader()
    writer.writerows(rows)
  med = {}
  print('\nSDK-bound workloads, %d elements, %d keys, median (min-max) of %d runs; LOOPBACK' % (
      args.elements, args.keys, args.repeat))
  print('%-16s %-15s %24s %10s %10s %9s %9s %15s' % ('workload', 'runner', 'elements/s', 'runner cpu',
                                                   'sdk cpu', 'cpu ratio', 'peak MB', 'wall - bundles'))
  for w in workloads:
    for r in runners:
      got = [x for x in rows if x['workload'] == w and x['runner'] == r]
      if not got:
        continue
      eps = spread([x['elements_per_s'] for x in got])
      cpu = statistics.median(x['runner_cpu_s'] for x in got)
      sdk = statistics.median(x['sdk_cpu_s'] for x in got)
      rss = max(x['runner_peak_rss_mb'] for x in got)
      beyond = [x['wall_s'] - x['sdk_bundle_s'] for x in got if x['sdk_bundle_s'] is not None]
      med[(w, r)] = eps[0]
      print('%-16s %-15s %10.0f (%5.0f-%5.0f) %9.2fs %9.2fs %8.0f%% %9.0f %15s' % (
          w, r, eps[0], eps[1], eps[2], cpu, sdk, 100 * cpu / sdk if sdk else float('nan'), rss,
          '%.0f ms' % (1000 * statistics.median(beyond)) if beyond else '-'))
  ours = [r for r in runners if r.startswith('beam-kafka')]
  peers = [r for r in runners if not r.startswith('beam-kafka')]
  if ours and peers:
    print('\nThroughput ratios (ours / peer; > 1 means ours is faster)')
    for w in workloads:
      for o in ours:
        parts = ['%s %.2fx' % (p, med[(w, o)] / med[(w, p)]) for p in peers if (w, p) in med and (w, o) in med]
        print('%-16s %-15s %s' % (w, o, '  '.join(parts)))
  if 'beam-kafka-eo' in runners and 'beam-kafka-eo-otel' in runners:
    print('\nOpenTelemetry export (beam-kafka-eo-otel / beam-kafka-eo throughput; 1.00 costs nothing)')
    for w in workloads:
      if (w, 'beam-kafka-eo') in med and (w, 'beam-kafka-eo-otel') in med:
        print('%-16s %.3f' % (w, med[(w, 'beam-kafka-eo-otel')] / med[(w, 'beam-kafka-eo')]))
  chart(med, runners, workloads, out)
  print('\nCSV: %s' % (out / 'sdk_bound.csv'))


def chart(med, runners, workloads, out):
  try:
    import matplotlib
    matplotlib.use('Agg')
    import matplotlib.pyplot as plt
  except ImportError:
    print('(no matplotlib: no chart)')
    return
  fig, ax = plt.subplots(figsize=(8, 4))
  width = 0.8 / len(runners)
  for i, r in enumerate(runners):
    ax.bar([j + i * width for j in range(len(workloads))], [med.get((w, r), 0) for w in workloads],
           width, label=r)
  ax.set_xticks([j + 0.4 - width / 2 for j in range(len(workloads))], workloads)
  ax.set_ylabel('elements / s (median)')
  ax.legend()
  fig.tight_layout()
  fig.savefig(out / 'sdk_bound.png')
  print('chart: %s' % (out / 'sdk_bound.png'))


if __name__ == '__main__':
  main()
