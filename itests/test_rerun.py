"""A submission under an application id that already holds an earlier
run's topics and state resumes only the same pipeline: another one is
refused before anything runs, naming what differs and the way out, and
`beam-kafka reset` clears the id for a fresh run. Never DONE with nothing
done."""

import subprocess

import apache_beam as beam
import pytest
from apache_beam.options.pipeline_options import PipelineOptions
from apache_beam.runners.runner import PipelineState

from conftest import kafka_args
from conftest import make_app_id
from conftest import portable_args

WORDS = ['apple', 'pear', 'apple', 'fig', 'pear', 'apple']


def _fail_on_fig(kv):
  # The user's wrong assertion: a fig is a fine fruit.
  if kv[0] == 'fig':
    raise ValueError('no figs expected')
  return kv


def _counts(p, *steps):
  counted = (
      p
      | beam.Create(WORDS)
      | 'Pair' >> beam.Map(lambda w: (w, 1))
      | 'Count' >> beam.CombinePerKey(sum))
  for label, step in steps:
    counted = counted | label >> beam.Map(step)
  return counted


def _args(job_server, broker, app, state, extra=()):
  return portable_args(job_server) + kafka_args(broker, app, state) + list(extra)


def test_a_changed_pipeline_is_refused_until_reset_then_runs_exactly(
    job_server, binary, broker, tmp_path, collector):
  app, state = make_app_id('rerun'), tmp_path / 'state'

  p = beam.Pipeline(options=PipelineOptions(_args(job_server, broker, app, state)))
  _counts(p, ('Check', _fail_on_fig))
  first = p.run()
  with pytest.raises(RuntimeError, match='no figs expected'):
    first.wait_until_finish()
  assert first.state == PipelineState.FAILED

  # The fixed pipeline has other steps: its plan is not the failed run's.
  def fixed(p):
    _counts(p, ('Format', lambda kv: '%s=%d' % kv), ('Record', collector.recorder()))

  p = beam.Pipeline(options=PipelineOptions(_args(job_server, broker, app, state)))
  fixed(p)
  refused = p.run()
  with pytest.raises(RuntimeError) as excinfo:
    refused.wait_until_finish()
  why = str(excinfo.value)
  assert 'cannot resume' in why and 'Check' in why and 'Format' in why, why
  assert 'beam-kafka reset -- --application_id=%s' % app in why, why
  assert refused.state == PipelineState.FAILED
  assert not collector.exists(), 'nothing may run before the refusal'

  reset = subprocess.run(
      [binary, 'reset', '--application_id=%s' % app, '--bootstrap_servers=%s' % broker,
       '--state_dir=%s' % state],
      capture_output=True, text=True, timeout=120, check=False)
  assert reset.returncode == 0, reset.stderr
  assert '__beam_%s_plan' % app in reset.stdout, reset.stdout
  assert 'shuffle' in reset.stdout, reset.stdout

  p = beam.Pipeline(options=PipelineOptions(_args(job_server, broker, app, state)))
  fixed(p)
  assert p.run().wait_until_finish() == PipelineState.DONE
  assert sorted(collector.lines()) == ['apple=3', 'fig=1', 'pear=2']


def test_the_same_pipeline_after_a_finished_run_that_kept_its_topics_is_refused(
    job_server, broker, tmp_path, collector):
  app, state = make_app_id('rerun-kept'), tmp_path / 'state'
  args = _args(job_server, broker, app, state, ['--keep_runner_topics'])
  p = beam.Pipeline(options=PipelineOptions(args))
  _counts(p, ('Record', collector.recorder()))
  assert p.run().wait_until_finish() == PipelineState.DONE
  assert len(collector.lines()) == 3

  p = beam.Pipeline(options=PipelineOptions(args))
  _counts(p, ('Record', collector.recorder()))
  again = p.run()
  with pytest.raises(RuntimeError, match='ran to the end'):
    again.wait_until_finish()
  assert len(collector.lines()) == 3, 'the second run did nothing and said so'
