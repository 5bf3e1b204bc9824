"""How time, memory and state on disk grow with the work: a GroupByKey of N
elements over N/10 keys and a CombinePerKey of N elements over N/30 keys (at
30M: 3M and 1M keys), on our job server (exactly_once, LOOPBACK, release
build), for N in --sizes (1M, 3M, 10M and 30M by default).

Every run's output is checked exactly: each pipeline ends in a global
summary of its per-key results (how many keys, the fewest and most values a
key got, their count and sum, and a checksum over (key, size)), written by
the harness (LOOPBACK: this process) to a file and compared with the same
figures computed here in closed form. A key lost, duplicated or split shows.

Per run: wall time (submission to DONE), elements/s, the runner's peak RSS
(VmHWM, reset before each job), the SDK harness's CPU, and the largest size
the job's state directory (its RocksDB stores) reached, sampled every
second. The last column is throughput relative to the 3M run of the same
workload (issue 35 asks 30M within 20% of it).
"""

import argparse
import csv
import json
import os
import tempfile
import threading
import time
import uuid
from pathlib import Path

import apache_beam as beam
import compare
import procstat
from apache_beam.options.pipeline_options import PipelineOptions

MOD = (1 << 61) - 1  # checksums are taken modulo a prime so they stay small
SEEDS = compare.SEEDS  # compare.py's generator: N elements from this many seeds


class Summary(beam.CombineFn):
  """(keys, fewest, most, values, sum of values, checksum) over (key, size,
  sum) triples."""

  def create_accumulator(self):
    return (0, None, None, 0, 0, 0)

  def add_input(self, acc, kss):
    k, size, total = kss
    keys, lo, hi, count, s, check = acc
    lo = size if lo is None else min(lo, size)
    hi = size if hi is None else max(hi, size)
    return (keys + 1, lo, hi, count + size, s + total, (check + (k + 1) * (size * 31 + total)) % MOD)

  def merge_accumulators(self, accs):
    keys, lo, hi, count, s, check = 0, None, None, 0, 0, 0
    for a in accs:
      keys, count, s, check = keys + a[0], count + a[3], s + a[4], (check + a[5]) % MOD
      lo = a[1] if lo is None else (lo if a[1] is None else min(lo, a[1]))
      hi = a[2] if hi is None else (hi if a[2] is None else max(hi, a[2]))
    return (keys, lo, hi, count, s, check)

  def extract_output(self, acc):
    return list(acc)


def expected(n, keys):
  """The summary computed here: key k gets the elements x < n with x % keys == k."""
  per, extra = divmod(n, keys)
  sizes = lambda k: per + (1 if k < extra else 0)
  check = 0
  for k in range(keys):
    size = sizes(k)
    # sum of k, k + keys, ..., k + (size - 1) * keys
    total = size * k + keys * size * (size - 1) // 2
    check = (check + (k + 1) * (size * 31 + total)) % MOD
  return [keys, sizes(keys - 1), sizes(0), n, n * (n - 1) // 2, check]


def _write(path):
  def write(summary):
    Path(path).write_text(json.dumps(summary))
  return write


def _sizes(k, vs):
  vs = list(vs)
  return k, len(vs), sum(vs)


def group_by_key(p, n, keys, out):
  # The values' sum is taken after the group, so a value lost or doubled shows.
  _ = (compare._generate(p, n)
       | 'Key' >> beam.Map(lambda x, k=keys: (x % k, x))
       | 'Group' >> beam.GroupByKey()
       | 'Sizes' >> beam.MapTuple(_sizes)
       | 'Summary' >> beam.CombineGlobally(Summary())
       | 'Write' >> beam.Map(_write(out)))


def combine_per_key(p, n, keys, out):
  _ = (compare._generate(p, n)
       | 'Key' >> beam.Map(lambda x, k=keys: (x % k, (1, x)))
       | 'Count' >> beam.CombinePerKey(lambda vs: tuple(map(sum, zip(*vs))) if vs else (0, 0))
       | 'Sizes' >> beam.MapTuple(lambda k, cs: (k, cs[0], cs[1]))
       | 'Summary' >> beam.CombineGlobally(Summary())
       | 'Write' >> beam.Map(_write(out)))


WORKLOADS = {'group_by_key': (group_by_key, 10), 'combine_per_key': (combine_per_key, 30)}


def _dir_bytes(path):
  total = 0
  for root, _, files in os.walk(path):
    for f in files:
      try:
        total += os.path.getsize(os.path.join(root, f))
      except OSError:
        pass  # RocksDB removed it meanwhile
  return total


class DiskSampler:
  """The largest size a directory reached while running."""

  def __init__(self, path):
    self.path, self.peak, self._stop = path, 0, threading.Event()
    self._thread = threading.Thread(target=self._run, daemon=True)
    self._thread.start()

  def _run(self):
    while not self._stop.wait(1.0):
      self.peak = max(self.peak, _dir_bytes(self.path))

  def stop(self):
    self._stop.set()
    self._thread.join()
    return self.peak


def run_once(runner, state_dir, workload, n, workdir):
  make, per_key = WORKLOADS[workload]
  keys = n // per_key
  app = 'scale-%s-%s' % (workload, uuid.uuid4().hex[:8])
  out = workdir / ('%s.json' % app)
  opts = PipelineOptions(['--runner=PortableRunner', '--job_endpoint=localhost:%d' % runner.port,
                          '--environment_type=LOOPBACK', '--application_id=%s' % app,
                          '--job_name=%s' % app] + runner.options)
  p = beam.Pipeline(options=opts)
  make(p, n, keys, str(out))
  runner.reset_peak_rss()
  disk = DiskSampler(state_dir)
  sdk_cpu = lambda: procstat.own_tree_cpu_seconds(exclude=runner.pids())
  sdk0, t0 = sdk_cpu(), time.monotonic()
  cpu0 = runner.cpu_seconds()
  state = p.run().wait_until_finish()
  wall = time.monotonic() - t0
  row = dict(workload=workload, elements=n, keys=keys, wall_s=round(wall, 2),
             elements_per_s=round(n / wall), runner_cpu_s=round(runner.cpu_seconds() - cpu0, 2),
             sdk_cpu_s=round(sdk_cpu() - sdk0, 2),
             runner_peak_rss_mb=round(runner.peak_rss_mb()), state_peak_mb=round(disk.stop() / 2**20, 1))
  if str(state) != 'DONE':
    row['verified'] = 'ERROR: ended %s' % state
  elif not out.exists():
    row['verified'] = 'ERROR: no summary written'
  else:
    got, want = json.loads(out.read_text()), expected(n, keys)
    row['verified'] = 'exact' if got == want else 'ERROR: got %s, want %s' % (got, want)
  return row


def main():
  ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
  ap.add_argument('--binary', default=str(compare.REPO / 'bin' / 'beam-kafka'))
  ap.add_argument('--bootstrap_servers', default='localhost:9092')
  ap.add_argument('--sizes', default='1000000,3000000,10000000,30000000', help='element counts, multiples of 100')
  ap.add_argument('--workloads', default=','.join(WORKLOADS))
  ap.add_argument('--out', default=str(compare.REPO / 'bench' / 'results'))
  ap.add_argument('--option', action='append', default=[],
                  help='a pipeline option for every run, e.g. --option=--kafka_property=linger.ms=5')
  args = ap.parse_args()
  if any(int(n) % SEEDS for n in args.sizes.split(',')):
    ap.error('every size must be a multiple of %d (the elements are generated from that many seeds)' % SEEDS)
  out = Path(args.out)
  out.mkdir(parents=True, exist_ok=True)
  workdir = Path(tempfile.mkdtemp(prefix='beam-kafka-scale-'))
  rows = []
  for w in args.workloads.split(','):
    for n in (int(s) for s in args.sizes.split(',')):
      # A job server per run: memory one job freed is not always given back
      # to the system, so a shared one would show the last job's peak.
      name = 'beam-kafka-eo-%s-%d' % (w, n)
      runner = compare.beam_kafka(name, 'exactly_once', args.binary, args.bootstrap_servers, workdir)
      runner.options += args.option
      try:
        row = run_once(runner, workdir / (name + '-state'), w, n, workdir)
      finally:
        runner.stop()
      rows.append(row)
      print(' '.join('%s=%s' % kv for kv in row.items()), flush=True)
  with open(out / 'scale.csv', 'w', newline='') as f:
    writer = csv.DictWriter(f, fieldnames=list(rows[0]))
    writer.writeheader()
    writer.writerows(rows)
  print('\n%-16s %10s %9s %9s %11s %10s %10s %9s  %s' % (
      'workload', 'elements', 'keys', 'wall s', 'elements/s', 'peak RSS', 'state MB', 'vs 3M', 'output'))
  for r in rows:
    base = [x for x in rows if x['workload'] == r['workload'] and x['elements'] == 3_000_000]
    rel = '%.2f' % (r['elements_per_s'] / base[0]['elements_per_s']) if base else '-'
    print('%-16s %10d %9d %9.1f %11d %8d MB %10.1f %9s  %s' % (
        r['workload'], r['elements'], r['keys'], r['wall_s'], r['elements_per_s'], r['runner_peak_rss_mb'],
        r['state_peak_mb'], rel, r['verified']))
  print('\nCSV: %s' % (out / 'scale.csv'))
  if any(r['verified'] != 'exact' for r in rows):
    raise SystemExit('some outputs were wrong')


if __name__ == '__main__':
  main()
