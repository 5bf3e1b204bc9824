"""A broker of a test's own, started with scripts/kafka.sh on free ports, for
tests that crash it or need listeners the shared broker does not have."""

import contextlib
import os
import socket
import subprocess
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parent.parent
SCRIPT = str(REPO_ROOT / 'scripts' / 'kafka.sh')


def kafka(*args, timeout=300, env=None):
  """Runs scripts/kafka.sh with `args`; returns its output."""
  done = subprocess.run([SCRIPT, *args], stdout=subprocess.PIPE,
                        stderr=subprocess.STDOUT, timeout=timeout, check=False,
                        env=env)
  assert done.returncode == 0, done.stdout.decode(errors='replace')
  return done.stdout.decode(errors='replace')


def _free(port):
  with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
    try:
      s.bind(('localhost', port))
      return True
    except OSError:
      return False


def broker_dir(port):
  """Where kafka.sh keeps the broker's data, logs and certificates."""
  cache = subprocess.run(
      ['bash', '-c', 'source "%s/scripts/common.sh" && echo "$BEAM_KAFKA_CACHE"'
       % REPO_ROOT], stdout=subprocess.PIPE, check=True).stdout.decode().strip()
  return Path(cache) / ('broker-%d' % port)


@contextlib.contextmanager
def own_broker(first_port, secure=False, properties=None):
  """Starts a broker on the first free ports from `first_port` on (the
  broker's, its controller's and, if `secure`, a SASL_SSL listener's), with
  `properties` (a dict) added to its settings; yields the port. Stopped at
  the end."""
  width = 3 if secure else 2
  port = next(p for p in range(first_port, first_port + 400, 4)
              if all(_free(p + i) for i in range(width)))
  env = dict(os.environ, BEAM_KAFKA_BROKER_PROPERTIES=' '.join(
      '%s=%s' % kv for kv in (properties or {}).items()))
  kafka('secure' if secure else 'start', str(port), env=env)
  try:
    yield port
  finally:
    kafka('stop', str(port), timeout=120)
