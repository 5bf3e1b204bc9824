"""One view of an application across its copies: two `beam-kafka run` copies
share a streaming job's tasks, and either copy's status page (in a real
browser), its JSON API and `beam-kafka status` list the tasks of both, each
under the copy that runs it. A copy that stops says so, and the view follows
its tasks to the copy left."""

import json
import re
import signal
import socket
import subprocess
import urllib.request

from conftest import make_app_id
from test_copies import Copy
from test_copies import _produce_words
from test_copies import _setup
from test_copies import _wait
from test_status_page import browser  # noqa: F401  (a fixture)


def _hostname():
  try:
    with open('/proc/sys/kernel/hostname') as f:
      return f.read().strip() or socket.gethostname()
  except OSError:
    return socket.gethostname()


def _status_url(copy):
  found = re.findall(r'status page on (http://\S+/)', '\n'.join(copy.lines))
  return found[-1] if found else None


def _api(url, path):
  with urllib.request.urlopen(url + path, timeout=10) as r:
    return json.loads(r.read())


def _job(url):
  """The one job of a `run` copy, as its status API has it."""
  jobs = _api(url, 'api/jobs')['jobs']
  return _api(url, 'api/jobs/%s' % jobs[0]['id']) if jobs else None


def _status(binary, broker, app_id, *flags):
  out = subprocess.run(
      [binary, 'status', *flags, '--application_id=%s' % app_id,
       '--bootstrap_servers=%s' % broker],
      capture_output=True, text=True, timeout=60)
  assert out.returncode == 0, out.stderr
  return out.stdout


def test_each_copys_page_and_the_status_command_show_every_copys_tasks(
    job_server, binary, broker, tmp_path, browser):  # noqa: F811
  from selenium.webdriver.common.by import By
  source, _, pipeline = _setup(job_server, broker, tmp_path, 'view')
  app_id = make_app_id('view')
  ui = ['--ui-port', '0']
  a = Copy(binary, pipeline, broker, app_id, tmp_path / 'a', run_flags=ui)
  b = None
  try:
    _wait(lambda: a.tasks_running() > 0, 120, 'copy a running its tasks', [a])
    b = Copy(binary, pipeline, broker, app_id, tmp_path / 'b', run_flags=ui)
    _wait(lambda: a.tasks() and b.tasks() and
          len(set(a.tasks()) | set(b.tasks())) == len(a.tasks()) + len(b.tasks()),
          120, 'both copies sharing the tasks', [a, b])
    _produce_words(broker, source, 0, 40)
    name_a = '%s:%d' % (_hostname(), a.proc.pid)
    name_b = '%s:%d' % (_hostname(), b.proc.pid)
    url_a, url_b = _status_url(a), _status_url(b)
    assert url_a and url_b, 'each copy serves a status page'

    def split(url):
      job = _job(url)
      if not job:
        return None
      return {t['task']: t['copy'] for t in job['tasks']}

    want = dict([(t, name_a) for t in a.tasks()] + [(t, name_b) for t in b.tasks()])
    # Each copy's API shows every task of the application under its copy.
    _wait(lambda: split(url_a) == want and split(url_b) == want, 60,
          'both pages showing %s' % want, [a, b])
    copies = {c['copy']: c for c in _job(url_a)['copies']}
    assert set(copies) == {name_a, name_b}, copies
    assert copies[name_a]['this'] and copies[name_b]['presence'] == 'running'
    assert copies[name_b]['tasks'] == len(b.tasks())
    assert copies[name_b]['status_address'] == url_b[len('http://'):-1]

    # The page in a browser: copy a's page lists copy b's tasks under b.
    browser.get(url_a + '#job=%s' % _job(url_a)['id'])

    def page_rows():
      rows = browser.find_elements(By.CSS_SELECTOR, '#tasks tr[data-task]')
      return {r.get_attribute('data-task'): r.find_element(By.CLASS_NAME, 'copy').text
              for r in rows}
    _wait(lambda: page_rows() == want, 30, 'copy a\'s page listing every task')
    copy_rows = {r.get_attribute('data-copy'): r.find_element(By.CLASS_NAME, 'presence').text
                 for r in browser.find_elements(By.CSS_SELECTOR, '#copies tr[data-copy]')}
    assert copy_rows == {name_a: 'this copy', name_b: 'running'}, copy_rows
    browser.save_screenshot(str(tmp_path / 'copies-view.png'))

    # `beam-kafka status`: both copies, every task under its copy.
    text = _status(binary, broker, app_id)
    assert '2 running copies' in text, text
    for task, copy in want.items():
      assert re.search(r'^%s\s+%s\s' % (re.escape(task), re.escape(copy)), text, re.M), (task, copy, text)
    listed = json.loads(_status(binary, broker, app_id, '--json'))
    assert {t['task']: t['copy'] for t in listed['tasks']} == want, listed

    # Copy b stops: it says it left, and its tasks show under copy a.
    assert b.stop() == 0
    everything = set(want)
    _wait(lambda: split(url_a) == {t: name_a for t in everything}, 90,
          'copy a\'s page showing every task as its own', [a])
    gone = {c['copy']: c['presence'] for c in _job(url_a)['copies']}
    assert gone == {name_a: 'running', name_b: 'left'}, gone
    text = _status(binary, broker, app_id)
    assert '1 running copy (2 reported)' in text and 'left' in text, text
  finally:
    for c in (b, a):
      if c:
        c.stop(signal.SIGKILL)


def test_the_status_command_names_an_application_that_is_not_running(
    binary, broker):
  text = _status(binary, broker, make_app_id('never-ran'))
  assert 'is not running' in text, text


def test_the_status_command_names_brokers_that_do_not_answer(binary):
  out = subprocess.run(
      [binary, 'status', '--application_id=any',
       '--bootstrap_servers=localhost:1'],
      capture_output=True, text=True, timeout=60)
  assert out.returncode != 0
  assert 'cannot reach Kafka at localhost:1' in out.stderr, out.stderr
