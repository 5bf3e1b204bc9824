"""The probes an orchestrator asks of a copy, on its status port: /healthz
(the process answers) and /readyz (every job runs every task the group gave
this copy, restored; 503 with the reasons until then)."""

import json
import time
import urllib.error
import urllib.request

from conftest import make_app_id
from kafka_topics import unique_topic
from observed import ObservedServer
from observed import StreamingJob


def _get(url):
  try:
    with urllib.request.urlopen(url, timeout=10) as r:
      return r.status, r.read().decode()
  except urllib.error.HTTPError as e:
    return e.code, e.read().decode()


def _tasks(url, job_id):
  status, body = _get(url + 'api/jobs/' + job_id)
  assert status == 200, body
  return [t['state'] for t in json.loads(body)['tasks']]


def test_a_copy_is_ready_once_every_task_it_owns_runs(binary, broker, tmp_path):
  server = ObservedServer(binary, tmp_path / 'server', extra=['--ui-port', '0'])
  try:
    url = server.status_url()
    assert _get(url + 'healthz') == (200, 'ok\n')
    assert _get(url + 'readyz') == (200, 'ready\n'), 'no job: nothing to wait for'
    app_id = make_app_id('probes')
    job = StreamingJob(server, broker, app_id, tmp_path, unique_topic('probe-in'),
                       unique_topic('probe-out')).start()
    try:
      _, body = _get(url + 'api/jobs')
      job_id = [j['id'] for j in json.loads(body)['jobs'] if j['application_id'] == app_id][0]
      answers = []
      deadline = time.monotonic() + 90
      while time.monotonic() < deadline:
        status, body = _get(url + 'readyz')
        if status == 200:
          tasks = _tasks(url, job_id)
          break
        answers.append(body)
        time.sleep(0.02)
      else:
        raise AssertionError('never ready; last answers: %s' % answers[-3:])
      # Ready means every task the copy owns runs (this copy owns them all).
      assert tasks and all(t == 'Running' for t in tasks), tasks
      for body in answers:
        assert body.startswith('not ready: job %s: ' % job_id), body
      assert _get(url + 'healthz') == (200, 'ok\n')
    finally:
      job.cancel()
    assert _get(url + 'readyz') == (200, 'ready\n'), 'a cancelled job is nothing to wait for'
  finally:
    server.stop()
