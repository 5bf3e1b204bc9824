"""The defaults KafkaStreamsRunnerOptions declares are the ones the job
server advertises: a Python program sends its options' defaults with every
submission, so a default changed on one side only would silently win over
the other."""

import argparse

import grpc
from apache_beam.portability.api import beam_job_api_pb2
from apache_beam.portability.api import beam_job_api_pb2_grpc

from beam_kafka.options import KafkaStreamsRunnerOptions


# Options the Python runner uses itself, before a job server exists.
CLIENT_ONLY = {'beam_kafka_binary'}


def _python_defaults():
  parser = argparse.ArgumentParser()
  KafkaStreamsRunnerOptions._add_argparse_args(parser)  # pylint: disable=protected-access
  return {a.dest: a.default for a in parser._actions if a.dest != 'help'}  # pylint: disable=protected-access


def test_every_python_default_is_the_one_the_job_server_advertises(job_server):
  stub = beam_job_api_pb2_grpc.JobServiceStub(grpc.insecure_channel(job_server.endpoint))
  described = {o.name: o for o in stub.DescribePipelineOptions(
      beam_job_api_pb2.DescribePipelineOptionsRequest(), timeout=10).options}
  ours = _python_defaults()
  assert {'max_bundle_size', 'max_bundle_time_ms', 'commit_interval_ms'} <= set(ours)
  compared = 0
  missing = sorted(set(ours) - set(described))
  assert set(missing) <= CLIENT_ONLY, 'the job server does not advertise %s' % missing
  for name, default in ours.items():
    if name in CLIENT_ONLY:
      continue
    if default is None:
      continue  # left to the runner
    advertised = described[name].default_value
    if isinstance(default, bool):
      assert advertised.lower() == str(default).lower(), (name, default, advertised)
    else:
      assert advertised == str(default), (name, default, advertised)
    compared += 1
  assert compared >= 10, 'fewer defaults compared than options declare them'
