"""Beam's own trigger tests (apache_beam/transforms/trigger_test.py) against
`beam-kafka job-server`: TriggerPipelineTest and the TestStream transcript
tests (TestStreamTranscriptTest, WeakTestStreamTranscriptTest), whose
pipelines are built by Beam's TestPipeline. TestPipeline takes its runner
from `--test-pipeline-options`, which Beam's own pytest plugin fills in; here
each test gets PortableRunner flags for the session's job server with an
application id of its own, also when the test passes options of its own
(TestPipeline would then ignore `--test-pipeline-options`). A test that
names its runner (test_always: 'FnApiRunner') keeps it.

Run: scripts/beam-suite.sh triggers (or pytest itests/beam_suite -k Trigger).
"""

import os
import shlex

import pytest

pytest.importorskip(
    'hamcrest', reason='Beam\'s trigger tests need apache-beam[test]')

from apache_beam.options.pipeline_options import PortableOptions
from apache_beam.options.pipeline_options import StandardOptions
from apache_beam.testing.test_pipeline import TestPipeline
# The module, not its classes: pytest would collect Beam's own TestCases.
from apache_beam.transforms import trigger_test

from conftest import kafka_args
from conftest import make_app_id
from conftest import portable_args

import test_portable_runner_suite as suite

PARALLELISM = int(os.environ.get('BEAM_KAFKA_SUITE_PARALLELISM', '1'))

# The tests skipped here, each with its reason; every other test must pass.
SKIPS = {
    # Upstream: Python cannot put this timestamp combiner into a portable
    # pipeline at all (it has no Runner API value), whatever the runner.
    'test_timestamp_combiner_custom_timestamping_earliest_1':
        'OUTPUT_AT_EARLIEST_TRANSFORMED has no Runner API form: the Python SDK '
        'fails to translate the pipeline for any portable runner (ValueError: '
        'unknown enum label)',
    # The window [10, 20) of key A gets two elements and AfterCount(3) never
    # fires. Beam's model (Java's ReduceFnRunner, which Flink and Dataflow
    # run; Prism too: its test_after_count_trigger_batch expects ('A-2',
    # {10, 11})) emits what a trigger left unfired as the window's final pane
    # when it is garbage-collected; the Python FnApiRunner drops it, and this
    # test expects that.
    'test_after_count':
        'expects the Python FnApiRunner\'s dropping of unfired data at '
        'garbage collection; Beam\'s model (Java ReduceFnRunner, Prism) fires it as the final pane',
}


class _OnBeamKafka:
  """Points TestPipeline at the session's job server, per test."""
  @pytest.fixture(autouse=True)
  def _test_pipeline_options(self, request, job_server, broker, tmp_path):
    name = request.node.name
    reason = SKIPS.get(name)
    if reason:
      pytest.skip(reason)
    # Counted per mode with the PortableRunnerTest suite ('triggers').
    config = request.config
    if not config.pluginmanager.has_plugin(suite._PLUGIN_NAME):  # pylint: disable=protected-access
      config.pluginmanager.register(suite._SuiteReport(), suite._PLUGIN_NAME)  # pylint: disable=protected-access
    app_id = make_app_id('trig-%s' % name[-30:])
    args = portable_args(job_server) + kafka_args(broker, app_id, tmp_path / 'state') + [
        '--internal_parallelism=%d' % PARALLELISM
    ]
    saved = TestPipeline.pytest_test_pipeline_options
    TestPipeline.pytest_test_pipeline_options = ' '.join(shlex.quote(a) for a in args)
    original_init = TestPipeline.__init__

    def init(pipeline, runner=None, options=None, *rest, **kwargs):
      if options is not None and runner is None:
        portable = options.view_as(PortableOptions)
        portable.job_endpoint = job_server.endpoint
        portable.environment_type = 'LOOPBACK'
        options.view_as(StandardOptions).runner = 'PortableRunner'
        # Our options are declared by no PipelineOptions class here; the
        # job server describes them, and PortableRunner applies these.
        options._all_options.update({  # pylint: disable=protected-access
            'bootstrap_servers': broker,
            'application_id': app_id,
            'state_dir': str(tmp_path / 'state'),
            'internal_parallelism': PARALLELISM,
        })
      original_init(pipeline, runner, options, *rest, **kwargs)

    TestPipeline.__init__ = init
    try:
      yield
    finally:
      TestPipeline.__init__ = original_init
      TestPipeline.pytest_test_pipeline_options = saved


class TriggerPipelineSuiteTest(_OnBeamKafka, trigger_test.TriggerPipelineTest):
  pass


class TestStreamTranscriptSuiteTest(_OnBeamKafka,
                                    trigger_test.TestStreamTranscriptTest):
  pass


class WeakTestStreamTranscriptSuiteTest(
    _OnBeamKafka, trigger_test.WeakTestStreamTranscriptTest):
  pass


for _cls in (TriggerPipelineSuiteTest, TestStreamTranscriptSuiteTest,
             WeakTestStreamTranscriptSuiteTest):
  suite._MODES[_cls.__name__] = 'triggers'  # pylint: disable=protected-access
del _cls
