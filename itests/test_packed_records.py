"""Packed records: a stage's output to a partition of a runner topic is a few
Kafka records holding many elements, not a record per element."""

import sys

import apache_beam as beam
from apache_beam.options.pipeline_options import PipelineOptions
from apache_beam.runners.runner import PipelineState
from confluent_kafka.admin import AdminClient

from conftest import REPO_ROOT
from conftest import kafka_args
from conftest import portable_args

sys.path.insert(0, str(REPO_ROOT / 'scripts'))
import inspect_app  # noqa: E402  (the debugging aid decodes runner records)

ELEMENTS = 6000
KEYS = 12


def test_a_shuffle_carries_many_elements_per_record(
    broker, job_server, app_id, collector, tmp_path):
  args = portable_args(job_server) + kafka_args(
      broker, app_id, tmp_path / 'state') + [
          '--keep_runner_topics', '--internal_parallelism=2']
  p = beam.Pipeline(options=PipelineOptions(args))
  _ = (
      p
      | 'Create' >> beam.Create(list(range(ELEMENTS)))
      | 'Key' >> beam.Map(lambda i: (i % KEYS, i))
      | 'Group' >> beam.GroupByKey()
      | 'Sum' >> beam.MapTuple(lambda k, vs: '%d=%d' % (k, sum(vs)))
      | 'Collect' >> beam.Map(collector.recorder()))
  result = p.run()
  assert result.wait_until_finish() == PipelineState.DONE
  expected = {
      '%d=%d' % (k, sum(i for i in range(ELEMENTS) if i % KEYS == k))
      for k in range(KEYS)
  }
  assert sorted(collector.lines()) == sorted(expected)

  admin = AdminClient({'bootstrap.servers': broker})
  prefix = '__beam_%s_' % app_id
  topics = [t for t in admin.list_topics(timeout=10).topics if t.startswith(prefix)]
  try:
    shuffles = [t for t in topics if t.startswith(prefix + 'shuffle_')]
    assert shuffles, 'no shuffle topic kept among %s' % topics
    records = elements = 0
    for topic in shuffles:
      for _, _, _, value in inspect_app.read_all(broker, topic):
        decoded = inspect_app.decode_envelope(value)
        if decoded[0] == 'data':
          records += 1
          elements += len(decoded[1])
    # The GroupByKey shuffles every element once (Create's reshuffle, when
    # it has one, once more).
    assert elements in (ELEMENTS, 2 * ELEMENTS), (elements, shuffles)
    assert records * 50 <= elements, (
        '%d data records for %d elements: not packed' % (records, elements))
  finally:
    for f in admin.delete_topics(topics).values():
      try:
        f.result(30)
      except Exception:  # already gone
        pass
