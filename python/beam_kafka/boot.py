"""An SDK harness boot program for PROCESS environments: `python -m beam_kafka.boot`.

Beam's Python wheel ships no boot binary, so this does what Beam's container
boot does, in Python: take --id and the endpoints from the command line the
runner passes, ask the runner's ProvisionService for the pipeline options, and
start the SDK harness with them. Use it with `beam-kafka run
--sdk-worker-command "python -m beam_kafka.boot"` or a PROCESS environment
(`--environment_type=PROCESS --environment_config='{"command": "..."}'`);
the Python running it needs the pipeline's dependencies installed.
"""

import argparse
import json
import os
import sys

import grpc
from google.protobuf import json_format
from google.protobuf import text_format

from apache_beam.portability.api import beam_provision_api_pb2
from apache_beam.portability.api import beam_provision_api_pb2_grpc
from apache_beam.portability.api import endpoints_pb2


def main():
  parser = argparse.ArgumentParser()
  # The runner also passes the worker id (its secret on the Fn API) as
  # WORKER_ID in the environment.
  parser.add_argument('--id', default=os.environ.get('WORKER_ID'))
  for flag in ('provision_endpoint', 'control_endpoint', 'logging_endpoint',
               'artifact_endpoint'):
    parser.add_argument('--' + flag, required=True)
  args = parser.parse_args()

  channel = grpc.insecure_channel(args.provision_endpoint)
  stub = beam_provision_api_pb2_grpc.ProvisionServiceStub(channel)
  info = stub.GetProvisionInfo(
      beam_provision_api_pb2.GetProvisionInfoRequest(),
      metadata=[('worker_id', args.id)],
      timeout=30).info

  def descriptor(url):
    return text_format.MessageToString(
        endpoints_pb2.ApiServiceDescriptor(url=url))

  options = json_format.MessageToDict(info.pipeline_options)
  os.environ.update({
      'WORKER_ID': args.id,
      'PIPELINE_OPTIONS': json.dumps({'options': {
          k.split(':')[2] if k.startswith('beam:option:') else k: v
          for k, v in options.items()}}),
      'CONTROL_API_SERVICE_DESCRIPTOR': descriptor(
          info.control_endpoint.url or args.control_endpoint),
      'LOGGING_API_SERVICE_DESCRIPTOR': descriptor(
          info.logging_endpoint.url or args.logging_endpoint),
  })
  from apache_beam.runners.worker import sdk_worker_main
  sdk_worker_main.main(sys.argv[:1])


if __name__ == '__main__':
  main()
