"""Helper of scripts/go-integration.sh (standard library only).

  results.py skip-regex SKIPS            the skip list as one Go regexp for `go test -skip`
  results.py plan PKGDIR SKIPS [RUN]     per top-level test of the package's sources:
                                         `skip NAME # reason` or `run NAME` (RUN: the -run regexp)
  results.py parse JSON LOGDIR           outcomes of one `go test -json` run, one per line:
                                         `pass|fail|skip|crash NAME`, then `end clean|crashed|timeout|build-failed`;
                                         writes LOGDIR/NAME.log for each failed or crashed test
  results.py why LOG                     the lines of a test's log that say why it failed
"""
import json
import os
import re
import sys

TEST_FUNC = re.compile(r'^func (Test[A-Za-z0-9_]*)\(t \*testing\.T\)', re.M)


def read_skips(path):
  """[(regexp, reason)] from the skip list: `REGEXP # reason` per line."""
  skips = []
  with open(path) as f:
    for line in f:
      line = line.strip()
      if not line or line.startswith('#'):
        continue
      pattern, _, reason = line.partition('#')
      skips.append((pattern.strip(), reason.strip()))
  return skips


def skip_regex(path):
  return '^(' + '|'.join(p for p, _ in read_skips(path)) + ')$'


def plan(pkgdir, skips_path, run=None):
  names = []
  for f in sorted(os.listdir(pkgdir)):
    if f.endswith('_test.go'):
      with open(os.path.join(pkgdir, f)) as src:
        names += TEST_FUNC.findall(src.read())
  skips = read_skips(skips_path)
  for name in names:
    if run and not re.search(run, name):
      continue
    reason = next((r for p, r in skips if re.fullmatch(p, name)), None)
    print('skip %s # %s' % (name, reason) if reason is not None else 'run %s' % name)


def parse(json_path, logdir):
  outcome, output, started, package_output = {}, {}, [], []
  ended, failed_build = None, False
  with open(json_path, errors='replace') as f:
    for line in f:
      try:
        ev = json.loads(line)
      except ValueError:
        package_output.append(line)  # go's own messages (e.g. a build error)
        continue
      test, action = ev.get('Test'), ev.get('Action')
      if action == 'build-output' or ev.get('FailedBuild'):
        failed_build = failed_build or action == 'fail'
        package_output.append(ev.get('Output', ''))
        continue
      if test is None:
        if action == 'output':
          package_output.append(ev['Output'])
        elif action in ('pass', 'fail', 'skip'):
          ended = action
        continue
      top = test.split('/')[0]
      if action == 'output':
        output.setdefault(top, []).append(ev['Output'])
      elif action == 'run' and test == top:
        started.append(top)
      elif action in ('pass', 'fail', 'skip') and test == top:
        outcome[top] = action
  text = ''.join(package_output)
  timed_out = 'panic: test timed out' in text
  for name in started:
    result = outcome.get(name, 'crash')
    print('%s %s' % (result, name))
    if result in ('fail', 'crash'):
      with open(os.path.join(logdir, name + '.log'), 'w') as log:
        log.write(''.join(output.get(name, [])))
        if result == 'crash':
          # The panic (or the timeout) is printed outside any test.
          log.write('\n--- the test binary ended while this test ran:\n' + text)
  if failed_build or (not started and ended == 'fail'):
    with open(os.path.join(logdir, 'build.log'), 'a') as log:
      log.write(text)
    print('end build-failed')
  elif any(n not in outcome for n in started):
    print('end timeout' if timed_out else 'end crashed')
  else:
    print('end clean')


NOISE = re.compile(r'level=(INFO|DEBUG)|^=== RUN|^--- FAIL|^\s*$|WARN StructWrapper|^(PASS|FAIL)$|^\s*caused by:$|^\s*\d+: [A-Z]')
REASON = re.compile(r'^- |^[{].*[}]$|panic:|Error|error|failed|not found|has no|cannot|invalid|timed out|got|want|unexpected|missing|does not match')
FRAME = re.compile(r'\.go:[0-9]+')


def why(path, limit=7, width=300):
  """The lines of a failed test's log that say why: the messages, then where it panicked."""
  lines = [l.strip() for l in open(path, errors='replace') if not NOISE.search(l)]
  keep = [l for l in lines if REASON.search(l) and not FRAME.search(l.split(' ')[0])][:limit - 1]
  frames = [l for l in lines if FRAME.search(l) and '/testing/' not in l and '/runtime/' not in l.split('/go/pkg/')[0]]
  if any(l.startswith('panic:') for l in keep) and frames:
    keep.append(frames[0])
  for l in keep or lines[:limit]:
    print('      ' + l[:width] + ('...' if len(l) > width else ''))


if __name__ == '__main__':
  cmd, args = sys.argv[1], sys.argv[2:]
  {'skip-regex': lambda p: print(skip_regex(p)), 'plan': plan, 'parse': parse, 'why': why}[cmd](*args)
