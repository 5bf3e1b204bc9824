#!/usr/bin/env python3
"""streaming_wordcount: lines from a Kafka topic in, word counts per window out.

    ReadFromKafka (lines) -> FlatMap (words) -> WindowInto (fixed windows)
      -> CombinePerKey (sum) -> WriteToKafka (key: word, value: "count@window")

Beam's own ReadFromKafka and WriteToKafka, unchanged: with the
KafkaStreamsRunner they are expanded and run by beam-kafka itself, with no
Java expansion service. Records are timestamped with their Kafka CreateTime,
so the windows are event-time windows; each partition of the input topic is
read by its own task.

    python examples/streaming_wordcount.py --bootstrap_servers=localhost:9092 \\
        --input_topic=lines --output_topic=counts --application_id=wordcount

Runs until stopped (Ctrl-C). --read_seconds=N makes the read end after N
seconds, so the pipeline drains and finishes (scripts/wordcount.sh uses it).
The topics must exist: beam-kafka never creates a user's topic.
"""

import argparse
import logging
import re
import sys
import typing

try:
  import beam_kafka  # noqa: F401  (registers the runner's options)
except ImportError:  # run from a source checkout without installing
  from pathlib import Path
  sys.path.insert(0, str(Path(__file__).resolve().parent.parent / 'python'))
  import beam_kafka  # noqa: F401

import apache_beam as beam
from apache_beam.io.kafka import ReadFromKafka
from apache_beam.io.kafka import WriteToKafka
from apache_beam.options.pipeline_options import PipelineOptions
from apache_beam.transforms import window

STRING = 'org.apache.kafka.common.serialization.StringDeserializer'


class FormatCount(beam.DoFn):
  """(word, n) in a window -> (b'word', b'n@start-end')."""
  def process(self, kv, w=beam.DoFn.WindowParam):
    word, n = kv
    yield (
        word.encode(),
        ('%d@%s-%s' % (n, w.start.to_utc_datetime().strftime('%H:%M:%S'),
                       w.end.to_utc_datetime().strftime('%H:%M:%S'))).encode())


def build(p, bootstrap, input_topic, output_topic, window_seconds, read_seconds):
  _ = (
      p
      | 'ReadLines' >> ReadFromKafka(
          consumer_config={
              'bootstrap.servers': bootstrap, 'auto.offset.reset': 'earliest'
          },
          topics=[input_topic],
          value_deserializer=STRING,
          timestamp_policy=ReadFromKafka.create_time_policy,
          max_read_time=read_seconds)
      | 'Words' >> beam.FlatMap(
          lambda kv: re.findall(r"[a-z']+", (kv[1] or '').lower()))
      | 'Window' >> beam.WindowInto(window.FixedWindows(window_seconds))
      | 'Count' >> beam.combiners.Count.PerElement()
      | 'Format' >> beam.ParDo(FormatCount()).with_output_types(
          typing.Tuple[bytes, bytes])
      | 'WriteCounts' >> WriteToKafka(
          producer_config={'bootstrap.servers': bootstrap}, topic=output_topic))


def main(argv=None):
  parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  parser.add_argument('--input_topic', required=True)
  parser.add_argument('--output_topic', required=True)
  parser.add_argument('--window_seconds', type=int, default=10)
  parser.add_argument(
      '--read_seconds', type=int, default=None,
      help='end the read after this many seconds (default: run until stopped)')
  known, pipeline_args = parser.parse_known_args(argv)
  options = PipelineOptions(pipeline_args, streaming=True)
  all_options = options.get_all_options(retain_unknown_options=True)
  if not all_options.get('runner'):
    options = PipelineOptions(
        pipeline_args + ['--runner=beam_kafka.KafkaStreamsRunner'],
        streaming=True)
  bootstrap = options.get_all_options(
      retain_unknown_options=True).get('bootstrap_servers')
  if not bootstrap:
    sys.exit('--bootstrap_servers is required')
  with beam.Pipeline(options=options) as p:
    build(p, bootstrap, known.input_topic, known.output_topic,
          known.window_seconds, known.read_seconds)


if __name__ == '__main__':
  logging.getLogger().setLevel(logging.WARNING)
  main()
