"""An update of `beam-kafka run` copies under a steady stream: every copy of
the running version is killed with SIGKILL, copies of the new version start
with --update, and one of them is killed too while they take over. Each word's
running count goes on 1, 2, 3, … across the switch: nothing counted twice or
skipped, the new version's counts after the earlier one's."""

import collections
import signal
import time
import typing

import apache_beam as beam
from apache_beam.io.kafka import WriteToKafka

from conftest import make_app_id
from conftest import read_from_start
from kafka_topics import create_topic
from kafka_topics import read_committed
from kafka_topics import unique_topic
from test_copies import Copy
from test_copies import WORDS
from test_copies import _RunningCount
from test_copies import _Stream
from test_copies import _wait
from test_copies import assert_each_word_counted_once


def _word_key(kv):
  return kv[1], b''


def _lower(kv):
  return kv[0].lower(), kv[1]


def _tag_two(kv):
  return kv[0], b'2'


def _save(job_server, broker, source, sink, path, version):
  """Version 1: word → running count (valued b'1'). Version 2: a step added
  before the count, and one after it that values its outputs b'2'."""
  p = beam.Pipeline()
  words = (
      p
      | read_from_start(job_server, broker, source)
      | 'Key' >> beam.Map(_word_key).with_output_types(typing.Tuple[bytes, bytes]))
  if version == 2:
    words = words | 'Lower' >> beam.Map(_lower).with_output_types(typing.Tuple[bytes, bytes])
  counted = words | 'RunningCount' >> beam.ParDo(_RunningCount()).with_output_types(typing.Tuple[bytes, bytes])
  if version == 2:
    counted = counted | 'Tag' >> beam.Map(_tag_two).with_output_types(typing.Tuple[bytes, bytes])
  _ = counted | WriteToKafka(
      producer_config={'bootstrap.servers': broker}, topic=sink, expansion_service='localhost:%d' % job_server.expansion_port)
  path.write_bytes(p.to_runner_api().SerializeToString())


def _outputs(broker, sink, produced, timeout):
  deadline = time.monotonic() + timeout
  while True:
    out = read_committed(broker, sink, expected=produced, timeout=5, settle=0.5)
    if len(out) >= produced or time.monotonic() > deadline:
      return out
    time.sleep(1)


def test_copies_updated_under_a_stream_with_sigkill_count_on_exactly(job_server, binary, broker, tmp_path):
  source, sink = unique_topic('update-copies-in'), unique_topic('update-copies-out')
  create_topic(broker, source, 4)
  create_topic(broker, sink, 1)
  v1, v2 = tmp_path / 'v1.pb', tmp_path / 'v2.pb'
  _save(job_server, broker, source, sink, v1, 1)
  _save(job_server, broker, source, sink, v2, 2)
  app = make_app_id('update-copies')
  everyone = []
  stream = None
  try:
    old = [Copy(binary, v1, broker, app, tmp_path / ('old%d' % i)) for i in range(2)]
    everyone.extend(old)
    _wait(lambda: sum(c.tasks_running() for c in old) > 0, 60, 'the first version to run', old)
    stream = _Stream(broker, source)
    time.sleep(3)
    # The switch: the running version is killed, the new one starts.
    for c in old:
      c.stop(signal.SIGKILL)
    new = [Copy(binary, v2, broker, app, tmp_path / ('new%d' % i), ['--update']) for i in range(2)]
    everyone.extend(new)
    time.sleep(2)
    new[0].stop(signal.SIGKILL)
    new[0] = Copy(binary, v2, broker, app, tmp_path / 'new0-again', ['--update'])
    everyone.append(new[0])
    _wait(lambda: sum(c.tasks_running() for c in new) > 0, 90, 'the new version to run', new)
    time.sleep(3)
    produced = stream.stop()
    stream = None
    out = _outputs(broker, sink, produced, timeout=150)
  finally:
    if stream is not None:
      stream.stop()
    for c in everyone:
      c.stop()
  story = '\n'.join('%d: %s' % (i, l) for i, c in enumerate(everyone) for l in c.lines
                    if 'update' in l or ' ERROR ' in l or 'refused' in l)
  assert_each_word_counted_once(out, produced, story)
  # Both versions counted, the new one after the earlier one, per word.
  by_version = collections.defaultdict(lambda: collections.defaultdict(list))
  for _, key, value in out:
    word, n = key.split(b'@')
    by_version[value][word].append(int(n))
  assert set(by_version) == {b'1', b'2'}, (sorted(by_version), story)
  for word in WORDS:
    assert max(by_version[b'1'][word]) < min(by_version[b'2'][word]), (word, story)
  assert any('takes over the state' in l for c in everyone for l in c.lines), story
