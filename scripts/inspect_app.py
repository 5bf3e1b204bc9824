"""Inspects what an application left on Kafka, to tell where records went:
its committed offsets, the committed contents of its runner topics (data
records per window, watermark reports), and a WriteToKafka sink's panes.

  python scripts/inspect_app.py BROKER APP_ID [SOURCE_TOPIC [SINK_TOPIC [WINDOW_MS]]]

A debugging aid for the chaos test (itests/test_copies.py): given a lost
window, it shows whether the window's records reached the shuffle topic
(lost upstream of the GroupByKey) or not (lost in the source stage).
"""

import collections
import sys
import uuid

from confluent_kafka import Consumer
from confluent_kafka import KafkaError
from confluent_kafka import TopicPartition
from confluent_kafka.admin import AdminClient


def _varint(buf, at):
  shift = value = 0
  while True:
    b = buf[at]
    at += 1
    value |= (b & 0x7f) << shift
    if b < 0x80:
      return value, at
    shift += 7


def _fields(buf):
  """(field number, wire type, value) of a protobuf message, one level."""
  at = 0
  while at < len(buf):
    key, at = _varint(buf, at)
    number, wire = key >> 3, key & 7
    if wire == 0:
      value, at = _varint(buf, at)
    elif wire == 2:
      n, at = _varint(buf, at)
      value, at = buf[at:at + n], at + n
    else:
      raise ValueError('unexpected wire type %d' % wire)
    yield number, wire, value


def _timestamp(element):
  return int.from_bytes(element[:8], 'big') - (1 << 63)


def _packed_ends(buf):
  at, ends = 0, []
  while at < len(buf):
    end, at = _varint(buf, at)
    ends.append(end)
  return ends


def decode_envelope(payload):
  """('data', [timestamp millis of each element]) or ('watermark', millis,
  source, partition)."""
  for number, _, body in _fields(payload):
    if number == 1:
      value = next(v for n, _, v in _fields(body) if n == 1)
      return 'data', [_timestamp(value)]
    if number == 3:  # a packed record: elements one after another
      f = {n: v for n, _, v in _fields(body)}
      data, start, stamps = f.get(1, b''), 0, []
      for end in _packed_ends(f.get(2, b'')):
        stamps.append(_timestamp(data[start:end]))
        start = end
      return 'data', stamps
    if number == 2:
      f = {n: v for n, _, v in _fields(body)}
      millis = f.get(1, 0)
      if millis >= 1 << 63:
        millis -= 1 << 64
      return 'watermark', millis, f.get(2, b'').decode(), f.get(3, 0)
  raise ValueError('empty envelope')


def read_all(broker, topic):
  """Every committed record of `topic`: (partition, offset, key, value)."""
  c = Consumer({
      'bootstrap.servers': broker,
      'group.id': 'inspect-%s' % uuid.uuid4().hex[:8],
      'isolation.level': 'read_committed',
      'enable.auto.commit': False,
      'enable.partition.eof': True,
  })
  try:
    md = c.list_topics(topic, timeout=10).topics[topic]
    parts = sorted(md.partitions)
    c.assign([TopicPartition(topic, p, 0) for p in parts])
    out, at_end = [], set()
    while len(at_end) < len(parts):
      m = c.poll(2.0)
      if m is None:
        break
      if m.error():
        if m.error().code() == KafkaError._PARTITION_EOF:
          at_end.add(m.partition())
          continue
        raise RuntimeError(m.error())
      out.append((m.partition(), m.offset(), m.key(), m.value()))
    return out
  finally:
    c.close()


def committed(broker, group, topics):
  c = Consumer({'bootstrap.servers': broker, 'group.id': group,
                'enable.auto.commit': False})
  try:
    tps = []
    for t in topics:
      md = c.list_topics(t, timeout=10).topics[t]
      tps += [TopicPartition(t, p) for p in md.partitions]
    return {(tp.topic, tp.partition): tp.offset
            for tp in c.committed(tps, timeout=10)}
  finally:
    c.close()


def main(broker, app, source=None, sink=None, window_ms=2000):
  admin = AdminClient({'bootstrap.servers': broker})
  runner = sorted(t for t in admin.list_topics(timeout=10).topics
                  if t.startswith('__beam_%s_' % app))
  topics = runner + [t for t in (source,) if t]
  print('committed offsets of group %s:' % app)
  ends = {}
  for (t, p), o in sorted(committed(broker, app, [t for t in topics
                                                 if 'changelog' not in t]).items()):
    lo, hi = Consumer({'bootstrap.servers': broker, 'group.id': 'x'}
                      ).get_watermark_offsets(TopicPartition(t, p), timeout=10)
    ends[(t, p)] = hi
    print('  %s[%d]: committed %s, end %d' % (t, p, o, hi))
  for t in runner:
    if 'changelog' in t:
      recs = read_all(broker, t)
      print('%s: %d committed record(s)' % (t, len(recs)))
      continue
    per_window = collections.Counter()
    reports = collections.Counter()
    data = 0
    for p, off, key, value in read_all(broker, t):
      d = decode_envelope(value)
      if d[0] == 'data':
        data += len(d[1])
        for ts in d[1]:
          per_window[ts // window_ms * window_ms // 1000] += 1
      else:
        reports[(d[2], d[3])] += 1
    print('%s: %d element(s), reports %s' % (t, data, dict(reports)))
    print('  data per window start (s): %s' % sorted(per_window.items()))
  if sink:
    panes = collections.Counter()
    for _, _, key, value in read_all(broker, sink):
      word, start = key.split(b'@')
      panes[int(start)] += int(value)
    print('%s: per window start (s) %s' % (sink, sorted(panes.items())))


if __name__ == '__main__':
  args = sys.argv[1:]
  main(*args[:4], *(int(a) for a in args[4:5]))
