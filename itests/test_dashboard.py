"""The Grafana dashboard ops/grafana/beam-kafka.json: its schema and checks,
and that every metric it queries is one the runner exports.

Fast and offline: no broker, no binary (no fixture of conftest.py but the
autouse time limit).
"""

import copy

import pytest

import dashboard_check
from dashboard_check import EXPORTED
from dashboard_check import exported_by_prometheus_name
from dashboard_check import load_dashboard
from dashboard_check import metric_names_in_expr
from dashboard_check import metric_names_in_queries
from dashboard_check import prometheus_name
from dashboard_check import schema_problems


@pytest.fixture(name='dashboard')
def dashboard_fixture():
  return load_dashboard()


def _data_panels(dashboard):
  return [p for p in dashboard_check.all_panels(dashboard) if p['type'] != 'row']


def test_the_dashboard_passes_its_checks(dashboard):
  assert schema_problems(dashboard) == []
  assert dashboard_check.unknown_metric_problems(dashboard) == []
  assert dashboard_check.main([]) == 0


def test_the_dashboard_has_what_an_import_needs(dashboard):
  assert dashboard['schemaVersion'] == 39
  variables = {v['name']: v for v in dashboard['templating']['list']}
  assert variables['datasource']['type'] == 'datasource'
  assert variables['datasource']['query'] == 'prometheus'
  assert variables['application_id']['query']['query'] == (
      'label_values(beam_kafka_job_uptime_seconds, beam_kafka_application_id)')
  assert variables['task']['multi'] and variables['task']['includeAll']
  types = {p['type'] for p in _data_panels(dashboard)}
  assert types == {'timeseries', 'stat'}


def test_a_broken_copy_fails(dashboard):
  broken = copy.deepcopy(dashboard)
  panels = _data_panels(broken)
  del panels[0]['gridPos']
  panels[2]['id'] = panels[1]['id']
  problems = schema_problems(broken)
  assert any("'gridPos' is a required property" in p for p in problems), problems
  assert any('panel id %d is used by 2 panels' % panels[1]['id'] in p
             for p in problems), problems


def _first_expr_panel(dashboard, metric_prefix):
  for panel in _data_panels(dashboard):
    if metric_prefix in panel['targets'][0]['expr']:
      return panel
  raise AssertionError('no panel queries %s' % metric_prefix)


@pytest.mark.parametrize('break_it, expected', [
    (lambda d: d.update(pannels=[]), "'pannels' was unexpected"),
    (lambda d: d.update(schemaVersion='39'), "'39' is not of type 'integer'"),
    (lambda d: _data_panels(d)[0].update(type='graph'), "'graph' is not one of"),
    (lambda d: _data_panels(d)[0]['gridPos'].update(x=20, w=12),
     'wider than the 24-column grid'),
    (lambda d: _data_panels(d)[1]['gridPos'].update(_data_panels(d)[0]['gridPos']),
     'overlaps'),
    (lambda d: _data_panels(d)[0]['targets'][0].pop('refId'),
     "'refId' is a required property"),
    (lambda d: _data_panels(d)[0].update(datasource={'type': 'prometheus', 'uid': 'abc'}),
     'is not the datasource variable'),
    (lambda d: _first_expr_panel(d, 'consumer_lag{')['targets'][0].update(
        expr='max(beam_kafka_task_consumer_lag{beam_kafka_task=~"$task"})'),
     'does not filter beam_kafka_application_id="$application_id"'),
    (lambda d: _first_expr_panel(d, 'consumer_lag{')['targets'][0].update(
        expr='max(beam_kafka_task_consumer_lag{beam_kafka_application_id="$application_id"})'),
     'does not filter beam_kafka_task=~"$task"'),
    (lambda d: _data_panels(d)[0]['targets'][0].update(
        expr=_data_panels(d)[0]['targets'][0]['expr'].replace('$application_id', '$app')),
     'unknown variable $app'),
])
def test_each_kind_of_mistake_is_caught(dashboard, break_it, expected):
  broken = copy.deepcopy(dashboard)
  break_it(broken)
  problems = schema_problems(broken)
  assert any(expected in p for p in problems), problems


def test_every_queried_metric_is_exported(dashboard):
  exported = exported_by_prometheus_name()
  used = metric_names_in_queries(dashboard)
  assert used, 'no metric names found in the queries'
  assert used <= set(exported), sorted(used - set(exported))
  # The dashboard shows most of what the runner exports.
  shown = {exported[name].name for name in used}
  assert len(shown) >= len(EXPORTED) - 2, sorted({m.name for m in EXPORTED} - shown)


def test_a_typo_in_a_metric_name_is_caught(dashboard):
  broken = copy.deepcopy(dashboard)
  target = _first_expr_panel(broken, 'consumer_lag{')['targets'][0]
  target['expr'] = target['expr'].replace('consumer_lag{', 'consumer_lags{')
  assert dashboard_check.unknown_metric_problems(broken) == [
      'beam_kafka_task_consumer_lags is not the Prometheus name of any '
      'exported metric'
  ]


@pytest.mark.parametrize('otel, expected', [
    (('messaging.client.consumed.messages', '{message}', 'sum', True),
     ('messaging_client_consumed_messages_total',)),
    (('beam_kafka.task.consumer_lag', '{message}', 'gauge', False),
     ('beam_kafka_task_consumer_lag',)),
    (('beam_kafka.task.consumer_lag.time', 's', 'gauge', False),
     ('beam_kafka_task_consumer_lag_time_seconds',)),
    (('beam_kafka.task.changelog.written', 'By', 'counter', True),
     ('beam_kafka_task_changelog_written_bytes_total',)),
    (('beam_kafka.task.commit.duration', 's', 'histogram', False),
     ('beam_kafka_task_commit_duration_seconds_bucket',
      'beam_kafka_task_commit_duration_seconds_sum',
      'beam_kafka_task_commit_duration_seconds_count')),
    (('beam_kafka.stage.bundle.size', '{element}', 'histogram', False),
     ('beam_kafka_stage_bundle_size_bucket', 'beam_kafka_stage_bundle_size_sum',
      'beam_kafka_stage_bundle_size_count')),
    # Not ours, but the translator's rules: the unit is not repeated, _total
    # moves to the end, "1" gauges are ratios, up-down counters are gauges,
    # per-units are spelt out.
    (('http.server.duration.seconds', 's', 'histogram', False),
     ('http_server_duration_seconds_bucket', 'http_server_duration_seconds_sum',
      'http_server_duration_seconds_count')),
    (('requests.total.count', '{request}', 'sum', True), ('requests_count_total',)),
    (('cpu.utilization', '1', 'gauge', False), ('cpu_utilization_ratio',)),
    (('queue.depth', '{item}', 'sum', False), ('queue_depth',)),
    (('net.io', 'By/s', 'gauge', False), ('net_io_bytes_per_second',)),
])
def test_prometheus_name(otel, expected):
  assert prometheus_name(*otel) == expected


@pytest.mark.parametrize('expr, expected', [
    ('histogram_quantile(0.99, sum by (le, beam_kafka_task) '
     '(rate(foo_seconds_bucket{a="b", le=~".+"}[$__rate_interval])))',
     {'foo_seconds_bucket'}),
    ('time() - max by (x) (bar{y="$task"})', {'bar'}),
    ('sum(rate(a_total[5m] offset 1h)) by (job) / on (job) group_left(instance) '
     'B:recorded:rate5m', {'a_total', 'B:recorded:rate5m'}),
    ('SUM BY (le) (increase(x_count{k="sum(rate(y[1m]))"}[1h:5m] @ end()))',
     {'x_count'}),
    ('label_replace(up, "dst", "$1", "src", "(.*)") > bool 0.5e1 and inf',
     {'up'}),
    ('{__name__="quoted", a="b"} or count_values("v", z)', {'quoted', 'z'}),
    ('vector(1) + scalar(topk(3, w))  # a comment naming not_a_metric',
     {'w'}),
])
def test_metric_names_in_expr(expr, expected):
  assert metric_names_in_expr(expr) == expected


def test_variable_queries_are_read_too():
  dashboard = {'templating': {'list': [
      {'name': 'a', 'type': 'query',
       'query': {'query': 'label_values(m1{x="y"}, some_label)'}},
      {'name': 'b', 'type': 'query', 'query': 'label_values(only_a_label)'},
      {'name': 'c', 'type': 'query', 'query': 'query_result(max(m2))'},
  ]}, 'panels': []}
  assert metric_names_in_queries(dashboard) == {'m1', 'm2'}
