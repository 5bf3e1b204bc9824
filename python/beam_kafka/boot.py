"""An SDK harness boot program for PROCESS environments: `python -m beam_kafka.boot`.

Beam's Python wheel ships no boot binary, so this does what Beam's container
boot does, in Python: take --id and the endpoints from the command line the
runner passes, ask the runner's ProvisionService for the pipeline options, and
start the SDK harness with them. Use it with `beam-kafka run
--sdk-worker-command "python -m beam_kafka.boot"` or a PROCESS environment
(`--environment_type=PROCESS --environment_config='{"command": "..."}'`);
the Python running it needs the pipeline's dependencies installed.

Unlike Beam's boot, it turns the SDK's state cache on (100 MB unless
--max_cache_memory_usage_mb says otherwise; _state_cache_options) and makes
the harness's state costs smaller: the cache's sizing, and a bundle's state
writes sent together instead of one round trip after another
(beam_kafka.harness_tuning); the state of a chunk's new keys asked for at
once (beam_kafka.state_prefetch); and the runner's state socket instead of
gRPC (beam_kafka.state_socket).
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

from beam_kafka import harness_tuning, state_prefetch, state_socket

# The SDK's state cache for harnesses this boots (see _state_cache_options).
DEFAULT_STATE_CACHE_MB = 100
NO_STATE_CACHE = 'beam_kafka_no_state_cache'


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

  options = _state_cache_options({
      k.split(':')[2] if k.startswith('beam:option:') else k: _whole(v)
      for k, v in json_format.MessageToDict(info.pipeline_options).items()})
  os.environ.update({
      'WORKER_ID': args.id,
      'PIPELINE_OPTIONS': json.dumps({'options': options}),
      'CONTROL_API_SERVICE_DESCRIPTOR': descriptor(
          info.control_endpoint.url or args.control_endpoint),
      'LOGGING_API_SERVICE_DESCRIPTOR': descriptor(
          info.logging_endpoint.url or args.logging_endpoint),
  })
  harness_tuning.cheap_cache_sizing()
  harness_tuning.pipelined_state_commits()
  harness_tuning.prompt_state_sampler()
  state_prefetch.install()
  state_socket.install()
  from apache_beam.runners.worker import sdk_worker_main
  sdk_worker_main.main(sys.argv[:1])


def _whole(value):
  """A protobuf Struct holds every number as a double: a whole one goes back
  to an int, as the SDK's option parser wants for int options (a Go
  pipeline's `parallelism` -1 arrives as -1.0 in a Python transform's
  harness)."""
  if isinstance(value, float) and value.is_integer():
    return int(value)
  return value


def _state_cache_options(options):
  """The state cache on by default: `max_cache_memory_usage_mb` 0 (Beam's
  default, which the SDK sends even when nobody set it) becomes
  DEFAULT_STATE_CACHE_MB, unless the experiment `beam_kafka_no_state_cache`
  asks for Beam's behaviour. The runner's cache tokens keep the cache valid
  across bundles for as long as a task keeps its state."""
  key = 'max_cache_memory_usage_mb'
  experiments = options.get('experiments') or []
  if NO_STATE_CACHE in experiments:
    return options
  try:
    size = int(options.get(key) or 0)
  except (TypeError, ValueError):
    return options
  if size == 0:
    options = dict(options, **{key: DEFAULT_STATE_CACHE_MB})
  return options


def _run_and_exit(run):
  """Runs the harness, then ends the process with its status. The SDK
  leaves threads behind when it fails at start (its logging stream, for
  one: a Go job's options once failed its parser), and a process kept alive
  by them neither connects nor ends: the runner would wait its whole
  connect timeout. Ending here lets the runner see the failure at once."""
  code = 0
  try:
    run()
  except SystemExit as e:
    code = e.code if isinstance(e.code, int) else (0 if e.code is None else 1)
  except BaseException:  # pylint: disable=broad-except
    import traceback  # pylint: disable=import-outside-toplevel
    traceback.print_exc()
    code = 1
  sys.stdout.flush()
  sys.stderr.flush()
  os._exit(code)  # pylint: disable=protected-access


if __name__ == '__main__':
  _run_and_exit(main)
