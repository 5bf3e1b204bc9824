"""The torture run's driver (scripts/torture.sh): rounds of randomly chosen
tests from every suite until the time is up, each round under a time bound,
so a hang is counted as one (the round is killed), never waited through.

Suites: the integration tests (copies killed with SIGKILL, broker restarts
and chaos among them), Beam's Python PortableRunnerTest suite at internal
parallelism 1 or 4, Beam's Go integration tests and Beam's Java
ValidatesRunner classes. Every test checks its own output. Prints a line
per suite and a closing `torture: N passed, N failed` line (hung rounds are
failed); logs of every round that did not pass go under LOGS."""

import argparse
import os
import random
import re
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

GO_TESTS = [
    'TestTimers_EventTime_Bounded', 'TestTimers_EventTime_Unbounded', 'TestTimers_ProcessingTime_Bounded',
    'TestTimers_EventTime_WithOutputTimestamp', 'TestValueState', 'TestBagState', 'TestCombiningState',
    'TestMapState', 'TestSetState', 'TestOrderedListState', 'TestParDoSideInput', 'TestParDoKVSideInput',
    'TestParDoMultiMapSideInput', 'TestParDoBundleFinalizer', 'TestReshuffle', 'TestCheckpointing',
    'TestWindowSums_GBK', 'TestPanes', 'TestTestStreamTimersEventTime',
]
JAVA_CLASSES = [
    'GroupByKeyTest*', 'SplittableDoFnTest*', 'ParDoTest*', 'CombineTest*', 'ViewTest*', 'FlattenTest*',
    'CreateTest*', 'WindowTest*', 'ReshuffleTest*', 'TestStreamTest*', 'MetricsTest*', 'PAssertTest*',
]

# A test still running after this long prints every thread's stack, so a
# hung round's log says where it hung.
STACKS = ['-o', 'faulthandler_timeout=300']


def collect(py, paths):
  out = subprocess.run([py, '-m', 'pytest', '--collect-only', '-q', '-p', 'no:cacheprovider'] + paths,
                       cwd=ROOT, capture_output=True, text=True, check=False).stdout
  ids = [l.strip() for l in out.splitlines() if '::' in l and not l.startswith(' ')]
  # pytest names tests relative to its rootdir (itests/, where pytest.ini is).
  return [i if (ROOT / i.split('::')[0]).exists() else 'itests/' + i for i in ids]


def counts(text, name):
  """(passed, failed) from a runner's summary in `text`."""
  if name in ('itests', 'python-suite'):
    tail = text.strip().splitlines()[-1:] or ['']
    get = lambda w: sum(int(n) for n in re.findall(r'(\d+) %s' % w, tail[0]))
    return get('passed'), get('failed') + get('error')
  line = re.findall(r'^%s: (\d+) passed, (\d+) failed' % ('go-integration' if name == 'go' else 'java-validates-runner'),
                    text, re.M)
  return (int(line[-1][0]), int(line[-1][1])) if line else (0, 0)


def main():
  ap = argparse.ArgumentParser()
  ap.add_argument('--minutes', type=float, default=20)
  ap.add_argument('--seed', type=int, default=None)
  ap.add_argument('--python', required=True)
  ap.add_argument('--logs', required=True)
  ap.add_argument('--round-timeout', type=int, default=900, help='seconds one round may take before it counts as hung')
  args = ap.parse_args()
  seed = args.seed if args.seed is not None else random.randrange(1 << 30)
  rng = random.Random(seed)
  logs = Path(args.logs)
  logs.mkdir(parents=True, exist_ok=True)
  print('torture: seed %d, %.0f min, logs in %s' % (seed, args.minutes, logs), flush=True)
  itests = collect(args.python, ['itests', '--ignore=itests/beam_suite'])
  suite = collect(args.python, ['itests/beam_suite'])
  tally = {k: [0, 0, 0] for k in ('itests', 'python-suite', 'go', 'java')}  # passed, failed, hung
  deadline = time.monotonic() + args.minutes * 60
  round_ = 0
  while time.monotonic() < deadline:
    round_ += 1
    kind = rng.choice(list(tally))
    env = dict(os.environ)
    if kind == 'itests':
      picked = sorted(rng.sample(itests, min(4, len(itests))))
      cmd = [args.python, '-m', 'pytest', '-q', '-p', 'no:cacheprovider'] + STACKS + picked
    elif kind == 'python-suite':
      # In file and class order: Beam's suite starts a job server per test
      # class (setUpClass), and a class entered twice in one session hangs
      # the session in the harness, not in the runner.
      picked = sorted(rng.sample(suite, min(6, len(suite))))
      env['BEAM_KAFKA_SUITE_PARALLELISM'] = str(rng.choice([1, 4]))
      cmd = [args.python, '-m', 'pytest', '-q', '-p', 'no:cacheprovider'] + STACKS + picked
    elif kind == 'go':
      picked = [rng.choice(GO_TESTS)]
      cmd = [str(ROOT / 'scripts/go-integration.sh'), '--run', '^%s$' % picked[0]]
    else:
      picked = [rng.choice(JAVA_CLASSES)]
      cmd = [str(ROOT / 'scripts/java-validates-runner.sh'), '-Dtest=%s' % picked[0]]
    began = time.monotonic()
    try:
      done = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True,
                            timeout=args.round_timeout, check=False)
      text, hung = done.stdout + done.stderr, False
    except subprocess.TimeoutExpired as e:
      text, hung = '%s%s' % (e.stdout or '', e.stderr or ''), True
    passed, failed = counts(text, kind)
    t = tally[kind]
    t[0] += passed
    t[1] += failed
    t[2] += int(hung)
    verdict = 'HUNG' if hung else ('ok' if failed == 0 and passed > 0 else 'FAILED')
    print('round %d %s %s: %d passed, %d failed (%.0f s) %s' % (
        round_, kind, verdict, passed, failed, time.monotonic() - began, ' '.join(picked)), flush=True)
    if verdict != 'ok':
      (logs / ('round-%03d-%s.log' % (round_, kind))).write_text(' '.join(cmd) + '\n\n' + text)
  for kind, (p, f, h) in tally.items():
    print('  %s: %d passed, %d failed, %d round(s) hung' % (kind, p, f, h))
  passed = sum(t[0] for t in tally.values())
  failed = sum(t[1] + t[2] for t in tally.values())
  print('torture: %d passed, %d failed' % (passed, failed))
  return 1 if failed else 0


if __name__ == '__main__':
  sys.exit(main())
