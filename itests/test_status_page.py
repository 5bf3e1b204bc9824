"""The live status page in a real browser (Debian's headless Chromium via
chromedriver) while a streaming job runs: the topology picture, the task
table, and a watermark cell that changes, without a reload, when new data
moves the watermark. A screenshot is saved under the test's directory."""

import json
import shutil
import time
import urllib.request

import pytest

from conftest import make_app_id
from kafka_topics import unique_topic
from observed import ObservedServer
from observed import StreamingJob
from observed import produce_words

CHROMIUM = shutil.which('chromium') or '/usr/bin/chromium'
CHROMEDRIVER = shutil.which('chromedriver') or '/usr/bin/chromedriver'


@pytest.fixture(scope='module')
def ui_server(binary, tmp_path_factory):
  s = ObservedServer(
      binary, tmp_path_factory.mktemp('status-page'), extra=['--ui-port', '0'])
  yield s
  s.stop()


@pytest.fixture
def browser():
  for path in (CHROMIUM, CHROMEDRIVER):
    assert shutil.which(path), (
        '%s is missing: scripts/setup.sh --tests installs Debian\'s chromium and '
        'chromium-driver' % path)
  from selenium import webdriver
  from selenium.webdriver.chrome.service import Service
  options = webdriver.ChromeOptions()
  options.binary_location = CHROMIUM
  for arg in ('--headless=new', '--no-sandbox', '--disable-gpu',
              '--disable-dev-shm-usage', '--window-size=1400,1000'):
    options.add_argument(arg)
  driver = webdriver.Chrome(service=Service(CHROMEDRIVER), options=options)
  yield driver
  driver.quit()


def _api(url, path):
  with urllib.request.urlopen(url + path, timeout=10) as r:
    return json.loads(r.read())


def _wait(what, predicate, timeout=90):
  deadline = time.monotonic() + timeout
  last = None
  while time.monotonic() < deadline:
    try:
      last = predicate()
      if last:
        return last
    except Exception as e:  # the page may be re-rendering
      last = e
    time.sleep(0.5)
  raise AssertionError('waited for %s; last: %r' % (what, last))


def test_status_page_shows_the_topology_and_live_tasks(
    ui_server, browser, broker, tmp_path):
  from selenium.webdriver.common.by import By
  url = ui_server.status_url()
  app_id = make_app_id('status-page')
  source = unique_topic('page-in')
  job = StreamingJob(ui_server, broker, app_id, tmp_path, source,
                     unique_topic('page-out')).start()
  try:
    # The JSON API first: the job, and its source task with a watermark.
    job_id = _wait('the job in the API', lambda: [
        j['id'] for j in _api(url, 'api/jobs')['jobs']
        if j['application_id'] == app_id])[0]
    detail = _wait('tasks with a watermark', lambda: (lambda d: d if any(
        t['output_watermark_ms'] for t in d['tasks']) else None)(
            _api(url, 'api/jobs/%s' % job_id)))
    assert detail['state'] == 'RUNNING'
    assert {t['state'] for t in detail['tasks']} == {'Running'}, detail

    browser.get(url + '#job=%s' % job_id)
    _wait('the page to render', lambda: browser.find_element(
        By.TAG_NAME, 'body').get_attribute('data-ready') == '1')
    # The topology picture: drawn by the runner, inline in the page.
    svg = browser.find_element(By.CSS_SELECTOR, '#topology svg')
    subs = svg.find_elements(By.CSS_SELECTOR, 'g.sub-topology')
    topics = svg.find_elements(By.CSS_SELECTOR, 'g.topic')
    assert len(subs) >= 2 and len(topics) >= 2, svg.get_attribute('outerHTML')[:2000]
    assert any(source in t.text for t in topics), [t.text for t in topics]
    assert svg.size['width'] > 100 and svg.size['height'] > 50
    # The task table: a row per task, with copy and watermarks.
    rows = browser.find_elements(By.CSS_SELECTOR, '#tasks tr[data-task]')
    assert {r.get_attribute('data-task') for r in rows} == {
        t['task'] for t in detail['tasks']}
    for r in rows:
      assert ':' in r.find_element(By.CLASS_NAME, 'copy').text
      assert r.find_element(By.CLASS_NAME, 'state').text == 'Running'

    def watermarks():
      return {
          r.get_attribute('data-task'): r.find_element(
              By.CLASS_NAME, 'output-watermark').text
          for r in browser.find_elements(By.CSS_SELECTOR, '#tasks tr[data-task]')
      }

    before = _wait('a watermark on the page', lambda: (lambda w: w if any(
        v.startswith('2023-') for v in w.values()) else None)(watermarks()))
    shots = tmp_path / 'screenshots'
    shots.mkdir()
    browser.save_screenshot(str(shots / 'status-page.png'))

    # New data moves the watermarks (event time): the page follows, unreloaded.
    marker = browser.execute_script('window.__same_page = 1; return 1')
    assert marker == 1
    produce_words(broker, source, 100, 20)
    after = _wait('the watermark cell to change', lambda: (lambda w: w if any(
        w.get(t, '') > before.get(t, '') for t in w) else None)(watermarks()))
    assert browser.execute_script('return window.__same_page') == 1, 'the page reloaded'
    browser.save_screenshot(str(shots / 'status-page-later.png'))
    print('status page screenshots in %s; watermarks %s -> %s' % (shots, before, after))
  finally:
    job.cancel()
