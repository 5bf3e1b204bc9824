#!/usr/bin/env python3
"""hello_kafka: the smallest pipeline that runs on Apache Kafka with beam-kafka.

    Impulse -> FlatMap (a few words) -> Map (word -> "word:length")

Each result is printed and recorded by the Map; once the pipeline is DONE the
program compares what was recorded with what was expected and exits non-zero
if they differ (a missing, extra or duplicated element is an error).

Run it against a broker (scripts/kafka.sh start starts one on localhost:9092):

    python examples/hello_kafka.py --bootstrap_servers=localhost:9092

It takes the usual Beam flags (--runner, --job_endpoint, --environment_type)
and the runner's (--application_id, --bootstrap_servers, ...; see --help).
Defaults: --runner=beam_kafka.KafkaStreamsRunner, which starts its own job
server from the beam-kafka binary, and a fresh --application_id
(hello-kafka-<random>) so the demo can run again and again.

Results are recorded in a local temporary file, so the SDK workers must run on
this machine: LOOPBACK (the default) or PROCESS environments.
"""

import collections
import os
import sys
import tempfile
import uuid

try:
  import beam_kafka
except ImportError:  # Running from a source checkout without installing.
  sys.path.insert(
      0,
      os.path.join(
          os.path.dirname(os.path.dirname(os.path.abspath(__file__))),
          'python'))
  import beam_kafka

import apache_beam as beam
from apache_beam.options.pipeline_options import PipelineOptions
from apache_beam.options.pipeline_options import StandardOptions
from apache_beam.runners.runner import PipelineState

WORDS = [
    'hello', 'kafka', 'this', 'is', 'apache', 'beam', 'running', 'on', 'a',
    'runner', 'written', 'in', 'rust'
]


def expected_results():
  return ['%s:%d' % (word, len(word)) for word in WORDS]


def make_recorder(path):
  """A Map function that prints its element and appends it to ``path``."""
  def record(element):
    print('hello_kafka: %s' % element, flush=True)
    with open(path, 'a', encoding='utf-8') as f:
      f.write(element + '\n')
    return element

  return record


def build_pipeline(p, results_path):
  _ = (
      p
      | 'Impulse' >> beam.Impulse()
      | 'Words' >> beam.FlatMap(lambda _: WORDS)
      | 'Annotate' >> beam.Map(lambda word: '%s:%d' % (word, len(word)))
      | 'Record' >> beam.Map(make_recorder(results_path)))


def compare(actual, expected):
  """Returns a list of problems (empty when actual == expected as multisets)."""
  missing = collections.Counter(expected) - collections.Counter(actual)
  extra = collections.Counter(actual) - collections.Counter(expected)
  problems = []
  if missing:
    problems.append('missing: %s' % sorted(missing.elements()))
  if extra:
    problems.append('unexpected or duplicated: %s' % sorted(extra.elements()))
  return problems


def main(argv=None):
  argv = list(sys.argv[1:] if argv is None else argv)
  if '-h' in argv or '--help' in argv:
    print(__doc__)
    # Prints the runner's options and exits.
    beam_kafka.KafkaStreamsRunnerOptions(['--help'])
    return 0

  options = PipelineOptions(argv)
  standard = options.view_as(StandardOptions)
  if not standard.runner:
    standard.runner = 'beam_kafka.KafkaStreamsRunner'
  kafka = options.view_as(beam_kafka.KafkaStreamsRunnerOptions)
  if not kafka.application_id:
    kafka.application_id = 'hello-kafka-%s' % uuid.uuid4().hex[:8]
  print(
      'hello_kafka: runner %s, application id %s, brokers %s' %
      (standard.runner, kafka.application_id, kafka.bootstrap_servers),
      flush=True)

  with tempfile.TemporaryDirectory(prefix='hello-kafka-') as tmp:
    results_path = os.path.join(tmp, 'results.txt')
    p = beam.Pipeline(options=options)
    build_pipeline(p, results_path)
    result = p.run()
    state = result.wait_until_finish()
    if state != PipelineState.DONE:
      print(
          'hello_kafka: FAILED: the pipeline ended in state %s' % state,
          file=sys.stderr)
      return 1
    actual = []
    if os.path.exists(results_path):
      with open(results_path, encoding='utf-8') as f:
        actual = f.read().splitlines()

  problems = compare(actual, expected_results())
  if problems:
    print('hello_kafka: FAILED: ' + '; '.join(problems), file=sys.stderr)
    return 1
  print('hello_kafka: OK (%d elements)' % len(actual), flush=True)
  return 0


if __name__ == '__main__':
  sys.exit(main())
