"""What the benchmarks read about a process they started, from /proc (the
same way for every runner and peer), and a free local port to start it on."""

import os
import socket
from pathlib import Path

TICKS = os.sysconf('SC_CLK_TCK')


def cpu_seconds(pid):
  """User + system CPU of every thread of `pid` so far."""
  # Split after the last ')': the command name may contain spaces.
  fields = Path('/proc/%d/stat' % pid).read_text().rsplit(')', 1)[1].split()
  return (int(fields[11]) + int(fields[12])) / TICKS


def _children(pid):
  kids = []
  for task in Path('/proc/%d/task' % pid).glob('*'):
    try:
      kids += [int(c) for c in (task / 'children').read_text().split()]
    except OSError:
      pass
  return kids


def descendants_cpu_seconds(pid):
  """CPU of `pid`'s children that ended (and it waited for) and of every
  descendant still running: what the SDK harness processes a job server
  started used."""
  fields = Path('/proc/%d/stat' % pid).read_text().rsplit(')', 1)[1].split()
  return (int(fields[13]) + int(fields[14])) / TICKS + _running_descendants_cpu_seconds(pid)


def _running_descendants_cpu_seconds(pid, exclude=()):
  """`exclude`: processes whose own CPU is left out (their descendants
  still count)."""
  total = 0.0
  todo = _children(pid)
  while todo:
    kid = todo.pop()
    try:
      if kid not in exclude:
        total += cpu_seconds(kid)
      todo += _children(kid)
    except OSError:  # ended meanwhile (and is then counted once waited for)
      pass
  return total


def own_tree_cpu_seconds(exclude=()):
  """CPU of this process, of its children that ended (and were waited for),
  and of every descendant still running but those in `exclude`: what the SDK
  harnesses this process runs (threads, or processes of a LOOPBACK pool)
  used. The runner under test is a child of this process too: exclude it,
  or its CPU counts as the SDK's."""
  t = os.times()
  return t.user + t.system + t.children_user + t.children_system + _running_descendants_cpu_seconds(os.getpid(), exclude)


def peak_rss_mb(pid):
  for line in Path('/proc/%d/status' % pid).read_text().splitlines():
    if line.startswith('VmHWM:'):
      return int(line.split()[1]) / 1024
  return float('nan')


def rss_mb(pid):
  """The current resident set size."""
  for line in Path('/proc/%d/status' % pid).read_text().splitlines():
    if line.startswith('VmRSS:'):
      return int(line.split()[1]) / 1024
  return float('nan')


def reset_peak_rss(pid):
  """Makes VmHWM the current RSS, so the next peak read is the next job's own."""
  try:
    Path('/proc/%d/clear_refs' % pid).write_text('5')
  except OSError:
    pass


def free_port():
  with socket.socket() as s:
    s.bind(('localhost', 0))
    return s.getsockname()[1]
