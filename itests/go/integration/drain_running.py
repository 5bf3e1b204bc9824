"""Drains the first job that runs on a job server, as an operator would
(`beam-kafka drain`): for Beam's Go TestDrain, an unbounded splittable DoFn
that ends only when someone drains it. Waits for a RUNNING job, reads its
application id from the Job API, and drains it through Kafka.

  drain_running.py ENDPOINT BINARY BOOTSTRAP [TIMEOUT_SECS]
"""
import subprocess
import sys
import time

import grpc
from apache_beam.portability.api import beam_job_api_pb2 as job_api
from apache_beam.portability.api import beam_job_api_pb2_grpc as job_grpc

APP_ID = 'beam:option:application_id:v1'


def running_application(stub):
  for info in stub.GetJobs(job_api.GetJobsRequest()).job_info:
    if info.state == job_api.JobState.RUNNING:
      app = info.pipeline_options.fields.get(APP_ID)
      if app is not None and app.string_value:
        return app.string_value
  return None


def main(endpoint, binary, bootstrap, timeout='300'):
  stub = job_grpc.JobServiceStub(grpc.insecure_channel(endpoint))
  deadline = time.monotonic() + float(timeout)
  while time.monotonic() < deadline:
    app = running_application(stub)
    if app:
      # Some of its work done first, so the drain truncates a running restriction.
      time.sleep(3)
      return subprocess.run([binary, 'drain', '--', '--application_id=' + app,
                             '--bootstrap_servers=' + bootstrap], check=False).returncode
    time.sleep(0.5)
  print('no job ran within %s s' % timeout, file=sys.stderr)
  return 1


if __name__ == '__main__':
  sys.exit(main(*sys.argv[1:]))
