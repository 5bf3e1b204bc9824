"""Secrets given as client properties never show: not in the job server's
log, not in what the Job API answers."""

import grpc

import apache_beam as beam
from apache_beam.options.pipeline_options import PipelineOptions
from apache_beam.portability.api import beam_job_api_pb2
from apache_beam.portability.api import beam_job_api_pb2_grpc
from apache_beam.runners.runner import PipelineState

from conftest import kafka_args
from conftest import portable_args

PLANTED = 'planted-Pa55word-4d1f'


def test_a_planted_password_is_in_no_log_and_no_answer(job_server, broker,
                                                        app_id, tmp_path):
  log_start = len(job_server.log_text())
  args = portable_args(job_server) + kafka_args(broker, app_id, tmp_path /
                                                'state') + [
      # Ignored by a PLAINTEXT client, but carried to every client.
      '--kafka_property=sasl.password=%s' % PLANTED,
      '--kafka_property=sasl.username=alice',
  ]
  p = beam.Pipeline(options=PipelineOptions(args))
  _ = p | beam.Create([1, 2, 3]) | beam.Map(lambda x: x * 2)
  result = p.run()
  assert result.wait_until_finish() == PipelineState.DONE
  with grpc.insecure_channel(job_server.endpoint) as channel:
    stub = beam_job_api_pb2_grpc.JobServiceStub(channel)
    jobs = stub.GetJobs(beam_job_api_pb2.GetJobsRequest(), timeout=30)
  answers = str(jobs)
  assert 'alice' in answers, 'the options are answered'
  assert PLANTED not in answers
  assert PLANTED not in job_server.log_text(log_start)
