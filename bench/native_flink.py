"""Beam on Flink as a peer in bench/native.py (system `beam-flink`): the same
Python pipeline a Beam user runs today, through PortableRunner to Beam's
Flink job server (a local mini cluster in one JVM), with Beam's Java KafkaIO
expanded by Beam's expansion service and run inside the Flink JVM (the
EMBEDDED environment), and the Python steps in one LOOPBACK harness.

Versions: the Flink job server of bench/peers/flink.sh (Beam 2.62.0 / Flink
1.19 here: bench/PEERS.md), KafkaIO and the expansion service at the same
Beam version (bench/peers/flink_kafka.sh). KafkaIO reads through its
UnboundedSource (the expansion service runs with use_deprecated_read) and
unbounded in both parts: its SDF read and its bounded read (max_num_records)
both crawled or stalled on this Flink (bench/PEERS.md), so the bench's reader
says when every output arrived and the job is cancelled then. Flink runs
without checkpoints, and its Kafka writes are not transactional (Beam's
Python WriteToKafka has no exactly-once mode): this is an at-least-once
peer. Runner CPU and RSS are the two JVMs' together.
"""

import os
import subprocess
import time
import uuid

import procstat
from portable_job import PortableJob
from compare import FLINK_HEAP, FLINK_OPENS, REPO, _fetch_flink, _flink_versions

FLINK_JOB_SERVER = 'org.apache.beam.runners.flink.FlinkJobServerDriver'
EXPANSION_SERVICE = 'org.apache.beam.sdk.expansion.service.ExpansionService'


def _kafka_libs(beam_version):
  fetched = subprocess.run(['bash', str(REPO / 'bench' / 'peers' / 'flink_kafka.sh'), beam_version],
                           stdout=subprocess.PIPE, text=True, check=True)
  return fetched.stdout.strip().splitlines()[-1]


def _older_kafka_read(args, src, max_records, expansion_service):
  """ReadFromKafka as an older KafkaIO takes it: the Python SDK's own
  sends fields (dynamic_read_poll_interval_seconds, consumer_factory_fn_*)
  that KafkaIO before them refuses. Values as bytes: KafkaIO infers no coder
  for a StringDeserializer when expanded for Python."""
  from apache_beam.io.kafka import ReadFromKafka
  from apache_beam.transforms.external import ExternalTransform, ImplicitSchemaPayloadBuilder
  config = {'consumer_config': {'bootstrap.servers': args.bootstrap_servers, 'auto.offset.reset': 'earliest'},
            'topics': [src], 'key_deserializer': ReadFromKafka.byte_array_deserializer,
            'value_deserializer': ReadFromKafka.byte_array_deserializer,
            'timestamp_policy': ReadFromKafka.create_time_policy, 'commit_offset_in_finalize': False}
  if max_records:
    config['max_num_records'] = max_records
  return ExternalTransform(ReadFromKafka.URN_WITHOUT_METADATA, ImplicitSchemaPayloadBuilder(config),
                           expansion_service)


class BeamFlinkJob(PortableJob):
  """Two JVMs (the expansion service and the Flink job server) per run,
  and the pipeline submitted through PortableRunner with LOOPBACK."""

  def __init__(self, name, src, dst, max_records, args, workdir, proc_class, wait_port, count_pipeline):
    from apache_beam.options.pipeline_options import PipelineOptions
    flink_libs = _fetch_flink()
    beam_version, flink_version = _flink_versions(flink_libs)
    # KafkaIO at the job server's Beam version: a newer Beam core breaks
    # its runner, and coders serialized by another version do not load.
    kafka_libs = _kafka_libs(beam_version)
    kafka_jars = [os.path.join(kafka_libs, j) for j in sorted(os.listdir(kafka_libs))
                  if j.startswith(('beam-sdks-java-io-kafka-', 'beam-sdks-java-extensions-avro-', 'avro-',
                                   'kafka-clients-', 'jamm-', 'spring-'))]
    print('%s: Beam %s Flink job server and KafkaIO (EMBEDDED), Flink %s, LOOPBACK, parallelism %d' % (
        name, beam_version, flink_version, args.partitions), flush=True)
    exp, port = procstat.free_port(), procstat.free_port()
    self.expansion = proc_class(name + '-expansion', [
        'java', '-Xmx512m', '-cp', os.path.join(kafka_libs, '*'), EXPANSION_SERVICE, str(exp),
        '--defaultEnvironmentType=EMBEDDED', '--experiments=use_deprecated_read'], workdir)
    self.proc = proc_class(name, ['java', FLINK_HEAP] + FLINK_OPENS + [
        '-cp', ':'.join([os.path.join(flink_libs, '*')] + kafka_jars), FLINK_JOB_SERVER,
        '--flink-master=[local]', '--job-port=%d' % port, '--artifact-port=%d' % procstat.free_port(),
        '--expansion-port=-1', '--artifacts-dir=%s' % (workdir / (name + '-artifacts'))], workdir)
    wait_port(exp, self.expansion)
    wait_port(port, self.proc)
    self.prefixes = []
    app = 'bench-%s-%s' % (name, uuid.uuid4().hex[:8])
    opts = PipelineOptions([
        '--runner=PortableRunner', '--job_endpoint=localhost:%d' % port, '--environment_type=LOOPBACK',
        '--job_name=%s' % app, '--streaming',
        '--parallelism=%d' % args.partitions])
    # Unbounded even in the backlog part: KafkaIO's bounded read
    # (max_num_records) runs as a split step whose splits stalled part-way
    # on Flink (bench/PEERS.md); the reader's count says when all arrived.
    p = count_pipeline(opts, args, src, dst, None, 'localhost:%d' % exp,
                       read=_older_kafka_read(args, src, None, 'localhost:%d' % exp))
    self.cpu0 = self._runner_cpu()
    self.sdk0 = time.process_time()  # the LOOPBACK harness runs in this process
    self.submit(p, 'Flink log')

  def finish(self):
    pass  # an unbounded job: it is cancelled in stop()

  def _runner_cpu(self):
    return self.proc.cpu_seconds() + self.expansion.cpu_seconds()

  def stop(self):
    m = {'runner_cpu_s': self._runner_cpu() - self.cpu0,
         'runner_peak_rss_mb': self.proc.peak_rss_mb() + self.expansion.peak_rss_mb(),
         'sdk_cpu_s': time.process_time() - self.sdk0,
         'runner_rss_series_mb': self.proc.rss_summary()}
    self.cancel_unless_done()
    self.proc.stop()
    self.expansion.stop()
    return m
