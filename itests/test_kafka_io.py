"""Beam's own ReadFromKafka and WriteToKafka, expanded by our job server and
run natively, on the real broker: no Java anywhere."""

import collections
import random
import re
import time
import typing

import pytest

import apache_beam as beam
from apache_beam.io.kafka import ReadFromKafka
from apache_beam.io.kafka import WriteToKafka
from apache_beam.options.pipeline_options import PipelineOptions
from apache_beam.runners.runner import PipelineState
from apache_beam.transforms import window

from conftest import kafka_args
from conftest import make_app_id
from conftest import portable_args
from conftest import read_from_start
from kafka_topics import create_topic
from kafka_topics import produce
from kafka_topics import read_committed
from kafka_topics import unique_topic

STRING_DESER = 'org.apache.kafka.common.serialization.StringDeserializer'
WORDS = ['apple', 'banana', 'cherry', 'date', 'elder', 'fig', 'grape']


def _options(job_server, broker, tmp_path, *extra):
  args = portable_args(job_server) + kafka_args(
      broker, make_app_id('kafka-io'), tmp_path / 'state') + list(extra)
  return PipelineOptions(args)


def _expansion(job_server):
  return 'localhost:%d' % job_server.expansion_port


def _word_records(n, partitions, seed):
  rng = random.Random(seed)
  return [(i % partitions, None, rng.choice(WORDS).encode(), None)
          for i in range(n)]


@pytest.mark.parametrize('parallelism', [1, 4])
def test_topic_to_topic_word_count_is_exact(
    job_server, broker, tmp_path, parallelism):
  source, sink = unique_topic('words'), unique_topic('counts')
  create_topic(broker, source, 4)
  create_topic(broker, sink, 3)
  records = _word_records(400, 4, seed=parallelism)
  produce(broker, source, records)
  expected = collections.Counter(r[2].decode() for r in records)

  p = beam.Pipeline(
      options=_options(
          job_server, broker, tmp_path,
          '--internal_parallelism=%d' % parallelism))
  _ = (
      p
      | read_from_start(job_server, broker, source,
          value_deserializer=STRING_DESER,
          max_num_records=len(records))
      | beam.Map(lambda kv: (kv[1], 1))
      | beam.CombinePerKey(sum)
      | beam.Map(lambda kv: (kv[0].encode(), str(kv[1]).encode())).
      with_output_types(typing.Tuple[bytes, bytes])
      | WriteToKafka(
          producer_config={'bootstrap.servers': broker},
          topic=sink,
          expansion_service=_expansion(job_server)))
  assert p.run().wait_until_finish() == PipelineState.DONE

  out = read_committed(broker, sink, expected=len(expected))
  got = collections.Counter()
  for _, key, value in out:
    got[key.decode()] += int(value)
  assert len(out) == len(expected), 'duplicated or missing: %s' % out
  assert got == expected


def test_bounded_read_takes_exactly_max_num_records(
    job_server, broker, tmp_path, collector):
  source = unique_topic('bounded')
  create_topic(broker, source, 4)
  produce(broker, source, _word_records(90, 4, seed=7))

  p = beam.Pipeline(options=_options(job_server, broker, tmp_path))
  _ = (
      p
      | read_from_start(job_server, broker, source,
          max_num_records=25)
      | beam.Map(lambda kv: kv[1].decode())
      | beam.Map(collector.recorder()))
  assert p.run().wait_until_finish() == PipelineState.DONE
  assert len(collector.lines()) == 25


class _WindowedCount(beam.DoFn):
  def process(self, kv, w=beam.DoFn.WindowParam, pane=beam.DoFn.PaneInfoParam):
    yield '%s@%d=%d/%s' % (kv[0], int(w.start), kv[1], pane.timing)


def test_create_time_drives_event_time_windows(
    job_server, broker, tmp_path, collector):
  source = unique_topic('events')
  create_topic(broker, source, 4)
  base = 1_700_000_000_000  # ms; a fixed point in the past
  rng = random.Random(3)
  # Producers stamp in time order, so each partition's timestamps rise.
  stamps = sorted(base + rng.randrange(0, 5 * 60_000) for _ in range(120))
  records = [(i % 4, None, rng.choice(WORDS[:3]).encode(), ts)
             for i, ts in enumerate(stamps)]
  produce(broker, source, records)
  expected = collections.Counter(
      (r[2].decode(), (r[3] // 60_000) * 60) for r in records)

  p = beam.Pipeline(options=_options(job_server, broker, tmp_path))
  _ = (
      p
      | read_from_start(job_server, broker, source,
          value_deserializer=STRING_DESER,
          timestamp_policy=ReadFromKafka.create_time_policy,
          max_num_records=len(records))
      | beam.Map(lambda kv: (kv[1], 1))
      | beam.WindowInto(window.FixedWindows(60))
      | beam.CombinePerKey(sum)
      | beam.ParDo(_WindowedCount())
      | beam.Map(collector.recorder()))
  assert p.run().wait_until_finish() == PipelineState.DONE
  want = sorted(
      '%s@%d=%d/%s' % (word, start, n, 1)  # 1 = PaneInfoTiming.ON_TIME
      for (word, start), n in expected.items())
  assert sorted(collector.lines()) == want


def test_each_partition_is_read_by_its_own_task(job_server, broker, tmp_path):
  source = unique_topic('spread')
  create_topic(broker, source, 4)
  produce(broker, source, _word_records(80, 4, seed=11))
  log_start = len(job_server.log_text())

  p = beam.Pipeline(options=_options(job_server, broker, tmp_path))
  _ = (
      p
      | read_from_start(job_server, broker, source,
          max_num_records=80)
      | beam.Map(lambda kv: kv))
  assert p.run().wait_until_finish() == PipelineState.DONE

  # Each task reports what it read when it finishes.
  reads = {}
  deadline = time.monotonic() + 10
  pattern = r'task (\d+_\d+) read (\d+) record\(s\) of %s\[(\d+)\]' % source
  while len(reads) < 4 and time.monotonic() < deadline:
    for task, n, partition in re.findall(pattern, job_server.log_text(log_start)):
      reads[int(partition)] = (task, int(n))
    time.sleep(0.2)
  assert sorted(reads) == [0, 1, 2, 3], reads
  assert len({task for task, _ in reads.values()}) == 4, reads
  assert sum(n for _, n in reads.values()) == 80, reads
  assert all(n == 20 for _, n in reads.values()), reads


def test_runner_class_expands_kafka_transforms_itself(
    broker, app_id, tmp_path, collector):
  # No expansion_service: KafkaStreamsRunner points Beam's Kafka transforms
  # at the job server it starts, instead of Beam's Java expansion jar.
  source = unique_topic('native')
  create_topic(broker, source, 2)
  produce(broker, source, [(i % 2, b'k', b'v%d' % i, None) for i in range(10)])
  args = ['--runner=beam_kafka.KafkaStreamsRunner'] + kafka_args(
      broker, app_id, tmp_path / 'state')
  p = beam.Pipeline(options=PipelineOptions(args))
  _ = (
      p
      | ReadFromKafka(
          consumer_config={
              'bootstrap.servers': broker, 'auto.offset.reset': 'earliest'
          },
          topics=[source],
          max_num_records=10)
      | beam.Map(lambda kv: '%s=%s' % (kv[0].decode(), kv[1].decode()))
      | beam.Map(collector.recorder()))
  assert p.run().wait_until_finish() == PipelineState.DONE
  assert sorted(collector.lines()) == sorted('k=v%d' % i for i in range(10))


def test_a_missing_topic_fails_the_job_with_its_name(job_server, broker, tmp_path):
  missing = unique_topic('nowhere')
  p = beam.Pipeline(options=_options(job_server, broker, tmp_path))
  _ = (
      p
      | ReadFromKafka(
          consumer_config={'bootstrap.servers': broker},
          topics=[missing],
          expansion_service=_expansion(job_server))
      | beam.Map(lambda kv: kv))
  with pytest.raises(Exception) as excinfo:
    p.run().wait_until_finish()
  text = str(excinfo.value)
  assert missing in text and 'does not exist' in text, text


def test_an_unknown_deserializer_is_refused_at_construction(job_server, broker):
  p = beam.Pipeline()
  with pytest.raises(RuntimeError) as excinfo:
    _ = p | ReadFromKafka(
        consumer_config={'bootstrap.servers': broker},
        topics=['anything'],
        value_deserializer='io.confluent.kafka.serializers.KafkaAvroDeserializer',
        expansion_service=_expansion(job_server))
  text = str(excinfo.value)
  assert 'value_deserializer' in text and 'KafkaAvroDeserializer' in text, text


def test_a_write_of_untyped_elements_is_refused_with_a_fix(job_server, broker):
  p = beam.Pipeline()
  with pytest.raises(RuntimeError) as excinfo:
    _ = (
        p
        | beam.Create([1, 2])
        # A table lookup: Beam cannot infer the pair's type from it.
        | beam.Map(lambda x, table={1: (b'k', b'1'), 2: (b'k', b'2')}: table[x])
        | WriteToKafka(
            producer_config={'bootstrap.servers': broker},
            topic='anything',
            expansion_service=_expansion(job_server)))
  assert 'with_output_types' in str(excinfo.value), str(excinfo.value)


def test_a_missing_sink_topic_fails_the_job_with_its_name(
    job_server, broker, tmp_path):
  missing = unique_topic('nowhere-out')
  text = _failed_write(_options(job_server, broker, tmp_path), job_server, broker, missing, [(b'k', b'v')])
  assert missing in text and 'does not exist' in text, text


def _failed_write(options, job_server, broker, topic, pairs):
  """Writes `pairs` to `topic` with WriteToKafka (after a Map, so from a
  stage of its own); the job must fail: returns its error."""
  p = beam.Pipeline(options=options)
  _ = (
      p
      | beam.Create(pairs).with_output_types(typing.Tuple[bytes, bytes])
      | beam.Map(lambda kv: kv).with_output_types(typing.Tuple[bytes, bytes])
      | WriteToKafka(
          producer_config={'bootstrap.servers': broker},
          topic=topic,
          expansion_service=_expansion(job_server)))
  with pytest.raises(Exception) as excinfo:
    p.run().wait_until_finish()
  return str(excinfo.value)


@pytest.mark.parametrize('guarantee', ['exactly_once', 'at_least_once'])
def test_a_record_the_broker_refuses_fails_the_job_with_the_reason(
    job_server, broker, tmp_path, guarantee):
  # Writes are queued, not awaited, bundle by bundle; the refusal must still
  # end the job with Kafka's own reason (not an aborted commit's), and under
  # exactly_once nothing of the failed transaction may become visible.
  small = unique_topic('small-out')
  create_topic(broker, small, 1, {'max.message.bytes': '2000'})
  options = _options(job_server, broker, tmp_path, '--processing_guarantee=%s' % guarantee)
  text = _failed_write(options, job_server, broker, small, [(b'a', b'a'), (b'b', b'b' * 20000), (b'c', b'c')])
  assert 'MessageSizeTooLarge' in text and 'max.message.bytes' in text, text
  assert 'aborted the transaction' not in text, text
  if guarantee == 'exactly_once':
    assert read_committed(broker, small, 0, timeout=3) == [], 'records of an aborted transaction became visible'


class Header(typing.NamedTuple):
  key: str
  value: bytes


class Tagged(typing.NamedTuple):
  key: bytes
  value: bytes
  headers: typing.List[Header]


beam.coders.registry.register_coder(Header, beam.coders.RowCoder)
beam.coders.registry.register_coder(Tagged, beam.coders.RowCoder)


def test_metadata_rows_in_and_headers_out(job_server, broker, tmp_path):
  source, sink = unique_topic('meta-in'), unique_topic('meta-out')
  create_topic(broker, source, 2)
  create_topic(broker, sink, 1)
  stamp = 1_650_000_000_000
  produce(broker, source,
          [(p, b'key%d' % p, b'value%d' % p, stamp + p) for p in range(2)])

  def tag(r):
    # Every field of the record, carried to the output as headers.
    return Tagged(
        key=r.key,
        value=r.value,
        headers=[
            Header('topic', r.topic.encode()),
            Header('partition', b'%d' % r.partition),
            Header('offset', b'%d' % r.offset),
            Header('timestamp', b'%d' % r.timestamp),
            Header('type', r.timestampTypeName.encode()),
        ])

  p = beam.Pipeline(options=_options(job_server, broker, tmp_path))
  _ = (
      p
      | read_from_start(job_server, broker, source,
          with_metadata=True,
          max_num_records=2)
      | beam.Map(tag).with_output_types(Tagged)
      | WriteToKafka(
          producer_config={'bootstrap.servers': broker},
          topic=sink,
          with_headers=True,
          expansion_service=_expansion(job_server)))
  assert p.run().wait_until_finish() == PipelineState.DONE

  from confluent_kafka import Consumer, TopicPartition
  consumer = Consumer({
      'bootstrap.servers': broker, 'group.id': unique_topic('reader'),
      'isolation.level': 'read_committed'})
  consumer.assign([TopicPartition(sink, 0, 0)])
  got = {}
  deadline = time.monotonic() + 30
  while len(got) < 2 and time.monotonic() < deadline:
    msg = consumer.poll(0.2)
    if msg is not None and not msg.error():
      got[msg.key()] = (msg.value(), dict(
          (k, v.decode()) for k, v in msg.headers()))
  consumer.close()
  for part in range(2):
    value, headers = got[b'key%d' % part]
    assert value == b'value%d' % part
    assert headers == {
        'topic': source, 'partition': str(part), 'offset': '0',
        'timestamp': str(stamp + part), 'type': 'CreateTime'}, headers


def test_start_read_time_and_offsets_committed_to_the_users_group(
    job_server, broker, tmp_path, collector):
  source = unique_topic('from-time')
  create_topic(broker, source, 2)
  stamp = 1_690_000_000_000
  # Per partition: 5 records before the start time, 5 at or after it.
  produce(broker, source, [(i % 2, None, b'%d' % i, stamp + i * 1000)
                           for i in range(20)])
  start = stamp + 10 * 1000
  group = unique_topic('users-group')

  p = beam.Pipeline(options=_options(job_server, broker, tmp_path))
  _ = (
      p
      | ReadFromKafka(
          consumer_config={'bootstrap.servers': broker, 'group.id': group},
          topics=[source],
          start_read_time=start,
          max_num_records=10,
          commit_offset_in_finalize=True,
          expansion_service=_expansion(job_server))
      | beam.Map(lambda kv: kv[1].decode())
      | beam.Map(collector.recorder()))
  assert p.run().wait_until_finish() == PipelineState.DONE
  assert sorted(collector.lines(), key=int) == [str(i) for i in range(10, 20)]

  from confluent_kafka import Consumer, TopicPartition
  consumer = Consumer({'bootstrap.servers': broker, 'group.id': group})
  committed = consumer.committed(
      [TopicPartition(source, 0), TopicPartition(source, 1)], timeout=10)
  consumer.close()
  assert sorted(tp.offset for tp in committed) == [10, 10], committed
