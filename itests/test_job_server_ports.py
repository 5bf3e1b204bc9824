"""The runner's own job server when a port it chose is taken meanwhile.

`PortableRunner`-style start-up chooses free ports and hands them to the
server; another process can bind one of them first. The runner then chooses
again instead of failing the user's pipeline.
"""

import socket

from beam_kafka import runner as beam_kafka_runner

from conftest import free_ports


def test_the_runner_chooses_other_ports_when_a_chosen_one_is_taken(
    binary, monkeypatch):
  taken = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
  taken.bind(('127.0.0.1', 0))
  taken.listen(1)
  taken_port = taken.getsockname()[1]
  # The first attempt gets the taken port for its job port; later ones free.
  choices = iter([taken_port] + free_ports(5))
  monkeypatch.setattr(beam_kafka_runner, '_free_port', lambda: next(choices))
  server = beam_kafka_runner.KafkaStreamsJobServer(binary)
  try:
    server.start()
    assert server._endpoint != 'localhost:%d' % taken_port
    assert 'Address already in use' not in server.log_tail()
    assert server.is_running()
  finally:
    server.stop()
    taken.close()


def test_a_port_the_user_asked_for_that_is_taken_is_an_error(binary):
  taken = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
  taken.bind(('127.0.0.1', 0))
  taken.listen(1)
  port = taken.getsockname()[1]
  server = beam_kafka_runner.KafkaStreamsJobServer(
      binary, job_port=port, expansion_port=free_ports(1)[0])
  try:
    try:
      server.start()
    except RuntimeError as e:
      assert 'Address already in use' in str(e)
      assert str(port) in str(e)
    else:
      raise AssertionError('started on a taken port %d' % port)
  finally:
    server.stop()
    taken.close()
