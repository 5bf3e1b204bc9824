"""Checks of the Grafana dashboard ops/grafana/beam-kafka.json.

  "$(scripts/python-env.sh)" itests/dashboard_check.py   # prints problems, exit 1 if any

- schema_problems(): the dashboard against ops/grafana/dashboard.schema.json
  (JSON Schema 2020-12, with the `jsonschema` package), plus what a schema
  cannot say: unique panel ids and refIds, panels inside the 24-column grid
  and not overlapping, variables that exist, the $datasource variable on
  every panel, and every series selector filtering by $application_id (and
  by $task where the metric is per task).
- metric_names_in_queries(): the Prometheus metric names the queries use,
  read with a small PromQL lexer (functions, aggregations, keywords, label
  names, durations and Grafana variables are not metric names).
- prometheus_name(): the names an OpenTelemetry Collector's `prometheus`
  exporter gives an OTel metric with its default settings.
- unknown_metric_problems(): query metric names that no exported metric
  produces (a typo, or a metric the runner does not export).
"""

import collections
import dataclasses
import json
import re
import sys
from pathlib import Path
from typing import Dict, Iterator, List, Optional, Sequence, Set, Tuple

REPO_ROOT = Path(__file__).resolve().parent.parent
DASHBOARD_PATH = REPO_ROOT / 'ops' / 'grafana' / 'beam-kafka.json'
SCHEMA_PATH = REPO_ROOT / 'ops' / 'grafana' / 'dashboard.schema.json'

# ---------------------------------------------------------------------------
# The metrics the runner exports.


@dataclasses.dataclass(frozen=True)
class Exported:
  """An OTel metric of the runner, as it arrives over OTLP."""
  name: str
  kind: str  # OTLP data kind: 'sum', 'gauge' or 'histogram'
  unit: str
  monotonic: bool  # of a 'sum'; False otherwise
  # Attributes beside beam_kafka.application.id and beam_kafka.job.id:
  # 'task': beam_kafka.task, .sub_topology and .copy; 'copy': beam_kafka.copy.
  scope: str


# Every metric the runner exports over OTLP. The OTLP integration test runs a
# real job against itests/otlp_receiver.py and asserts that each of these
# arrives with this name, kind and unit, so this list cannot drift from the
# runner; the dashboard test then checks each query against it.
EXPORTED: Tuple[Exported, ...] = (
    Exported('messaging.client.consumed.messages', 'sum', '{message}', True, 'task'),
    Exported('messaging.client.sent.messages', 'sum', '{message}', True, 'task'),
    Exported('beam_kafka.task.consumer_lag', 'gauge', '{message}', False, 'task'),
    Exported('beam_kafka.task.consumer_lag.time', 'gauge', 's', False, 'task'),
    Exported('beam_kafka.task.input_watermark', 'gauge', 's', False, 'task'),
    Exported('beam_kafka.task.output_watermark', 'gauge', 's', False, 'task'),
    Exported('beam_kafka.task.watermark_lag', 'gauge', 's', False, 'task'),
    Exported('beam_kafka.task.commits', 'sum', '{commit}', True, 'task'),
    Exported('beam_kafka.task.commit.failures', 'sum', '{commit}', True, 'task'),
    Exported('beam_kafka.task.commit.duration', 'histogram', 's', False, 'task'),
    Exported('beam_kafka.stage.bundle.duration', 'histogram', 's', False, 'task'),
    Exported('beam_kafka.stage.bundle.size', 'histogram', '{element}', False, 'task'),
    Exported('beam_kafka.task.held_elements', 'gauge', '{element}', False, 'task'),
    Exported('beam_kafka.task.pending_timers', 'gauge', '{timer}', False, 'task'),
    Exported('beam_kafka.task.state.size', 'gauge', 'By', False, 'task'),
    Exported('beam_kafka.task.changelog.written', 'sum', 'By', True, 'task'),
    Exported('beam_kafka.task.restore.duration', 'histogram', 's', False, 'task'),
    Exported('beam_kafka.tasks.running', 'gauge', '{task}', False, 'copy'),
    Exported('beam_kafka.rebalances', 'sum', '{rebalance}', True, 'copy'),
    Exported('beam_kafka.job.state', 'gauge', '{state}', False, 'job'),
    Exported('beam_kafka.job.uptime', 'gauge', 's', False, 'job'),
)

APPLICATION_LABEL = 'beam_kafka_application_id'
TASK_LABEL = 'beam_kafka_task'

# ---------------------------------------------------------------------------
# OTel name -> Prometheus name, as the collector's prometheus exporter does it
# by default (escaping to underscores, with type and unit suffixes).

# UCUM units the translator spells out; any other unit is kept, cleaned up.
_UNIT_WORDS = {
    'd': 'days', 'h': 'hours', 'min': 'minutes', 's': 'seconds',
    'ms': 'milliseconds', 'us': 'microseconds', 'ns': 'nanoseconds',
    'By': 'bytes', 'KiBy': 'kibibytes', 'MiBy': 'mebibytes',
    'GiBy': 'gibibytes', 'TiBy': 'tibibytes', 'KBy': 'kilobytes',
    'MBy': 'megabytes', 'GBy': 'gigabytes', 'TBy': 'terabytes',
    'm': 'meters', 'V': 'volts', 'A': 'amperes', 'J': 'joules', 'W': 'watts',
    'g': 'grams', 'Cel': 'celsius', 'Hz': 'hertz', '%': 'percent',
    '1': '',  # dimensionless: no unit word (gauges get _ratio instead)
}
# The unit after a '/', as in By/s -> bytes_per_second.
_PER_UNIT_WORDS = {
    's': 'second', 'm': 'minute', 'h': 'hour', 'd': 'day', 'w': 'week',
    'mo': 'month', 'y': 'year',
}
_NOT_NAME_CHAR = re.compile(r'[^A-Za-z0-9:]+')


def _unit_word(unit: str, words: Dict[str, str]) -> str:
  unit = unit.strip()
  if not unit or '{' in unit or '}' in unit:  # {record}: an annotation only
    return ''
  word = words.get(unit, unit)
  return re.sub(r'_+', '_', re.sub(r'[^A-Za-z0-9:]', '_', word)).lstrip('_')


def prometheus_name(otel_name: str,
                    unit: str,
                    kind: str,
                    monotonic: bool = True) -> Tuple[str, ...]:
  """The Prometheus metric names of an OTel metric.

  kind is the OTLP data kind: 'sum' (or 'counter'), 'gauge' or 'histogram'.
  A monotonic sum is a Prometheus counter and ends in _total; a
  non-monotonic one (an UpDownCounter) becomes a gauge. A histogram gives its
  _bucket, _sum and _count series.
  """
  kind = {'counter': 'sum'}.get(kind, kind)
  if kind not in ('sum', 'gauge', 'histogram'):
    raise ValueError('unknown metric kind %r' % kind)
  is_counter = kind == 'sum' and monotonic
  tokens = [t for t in _NOT_NAME_CHAR.split(otel_name) if t]
  main, _, per = unit.partition('/')
  main_word = _unit_word(main, _UNIT_WORDS)
  per_word = _unit_word(per, _PER_UNIT_WORDS) if per else ''
  per_word = 'per_' + per_word if per_word else ''
  if main_word in tokens:  # "foo.seconds" in s stays foo_seconds
    main_word = ''
  if per_word:
    main_word = main_word.rstrip('_')
  for word in (main_word, per_word):
    if word:
      tokens.append(word)
  if is_counter:
    tokens = [t for t in tokens if t != 'total'] + ['total']
  if unit.strip() == '1' and (kind == 'gauge' or
                              (kind == 'sum' and not monotonic)):
    tokens = [t for t in tokens if t != 'ratio'] + ['ratio']
  name = '_'.join(tokens)
  if name[:1].isdigit():
    name = '_' + name
  if kind == 'histogram':
    return (name + '_bucket', name + '_sum', name + '_count')
  return (name,)


def exported_by_prometheus_name() -> Dict[str, Exported]:
  """Every Prometheus name the exported metrics produce, to its metric."""
  out = {}
  for metric in EXPORTED:
    for name in prometheus_name(metric.name, metric.unit, metric.kind,
                                metric.monotonic):
      out[name] = metric
  return out


# ---------------------------------------------------------------------------
# PromQL, as much as needed to find the series selectors of a query.

_AGGREGATIONS = {
    'sum', 'min', 'max', 'avg', 'group', 'stddev', 'stdvar', 'count',
    'count_values', 'bottomk', 'topk', 'quantile', 'limitk', 'limit_ratio',
}
_FUNCTIONS = {
    'abs', 'absent', 'absent_over_time', 'acos', 'acosh', 'asin', 'asinh',
    'atan', 'atanh', 'avg_over_time', 'ceil', 'changes', 'clamp',
    'clamp_max', 'clamp_min', 'cos', 'cosh', 'count_over_time',
    'day_of_month', 'day_of_week', 'day_of_year', 'days_in_month', 'deg',
    'delta', 'deriv', 'double_exponential_smoothing', 'exp', 'floor',
    'histogram_avg', 'histogram_count', 'histogram_fraction',
    'histogram_quantile', 'histogram_stddev', 'histogram_stdvar',
    'histogram_sum', 'holt_winters', 'hour', 'idelta', 'increase', 'info',
    'irate', 'label_join', 'label_replace', 'last_over_time', 'ln', 'log10',
    'log2', 'mad_over_time', 'max_over_time', 'min_over_time', 'minute',
    'month', 'pi', 'predict_linear', 'present_over_time',
    'quantile_over_time', 'rad', 'rate', 'resets', 'round', 'scalar', 'sgn',
    'sin', 'sinh', 'sort', 'sort_by_label', 'sort_by_label_desc',
    'sort_desc', 'sqrt', 'stddev_over_time', 'stdvar_over_time',
    'sum_over_time', 'tan', 'tanh', 'time', 'timestamp', 'vector', 'year',
}
# Keywords and binary operators spelt as words; `le` and other label names
# only appear inside {...} or in the label lists removed below.
_KEYWORDS = {
    'and', 'or', 'unless', 'atan2', 'by', 'without', 'on', 'ignoring',
    'group_left', 'group_right', 'offset', 'bool', 'inf', 'nan', 'start',
    'end',
}
_LABEL_LIST_KEYWORDS = {
    'by', 'without', 'on', 'ignoring', 'group_left', 'group_right',
}
_NOT_METRICS = _AGGREGATIONS | _FUNCTIONS | _KEYWORDS

Token = Tuple[str, str]  # (kind, text): ident, str, num, var, op


def _lex(expr: str) -> List[Token]:
  """Tokens of a PromQL expression with Grafana variables in it."""
  tokens: List[Token] = []
  i, n = 0, len(expr)
  while i < n:
    c = expr[i]
    if c.isspace():
      i += 1
    elif c == '#':  # a comment, to the end of the line
      while i < n and expr[i] != '\n':
        i += 1
    elif c in '"\'`':
      j = i + 1
      while j < n and expr[j] != c:
        j += 2 if expr[j] == '\\' and c != '`' else 1
      if j >= n:
        raise ValueError('unterminated string in %r' % expr)
      tokens.append(('str', expr[i + 1:j]))
      i = j + 1
    elif c == '$':  # $name, ${name}, ${name:format}
      m = re.compile(r'\$\{([A-Za-z0-9_]+)(?::[^}]*)?\}|\$([A-Za-z0-9_]+)').match(expr, i)
      if not m:
        raise ValueError('bad variable at %d in %r' % (i, expr))
      tokens.append(('var', m.group(1) or m.group(2)))
      i = m.end()
    elif c.isdigit() or (c == '.' and i + 1 < n and expr[i + 1].isdigit()):
      # numbers (0.99, 1e3, 0x1f) and durations (5m, 1h30m) alike
      m = re.compile(r'[0-9.]+(?:[eE][+-]?[0-9]+)?[A-Za-z0-9_.]*').match(expr, i)
      tokens.append(('num', m.group(0)))
      i = m.end()
    elif c.isalpha() or c in '_:':
      m = re.compile(r'[A-Za-z_:][A-Za-z0-9_:]*').match(expr, i)
      tokens.append(('ident', m.group(0)))
      i = m.end()
    else:
      two = expr[i:i + 2]
      if two in ('=~', '!~', '!=', '==', '>=', '<='):
        tokens.append(('op', two))
        i += 2
      else:
        tokens.append(('op', c))
        i += 1
  return tokens


@dataclasses.dataclass
class Selector:
  """A series selector: metric name (None for {__name__=...} alone) and matchers."""
  name: Optional[str]
  matchers: List[Tuple[str, str, str]]  # (label, op, value)

  def metric(self) -> Optional[str]:
    if self.name:
      return self.name
    for label, op, value in self.matchers:
      if label == '__name__' and op == '=':
        return value
    return None


def _skip_group(tokens: List[Token], i: int, open_: str, close: str) -> int:
  """The index after the token that closes the group opened at tokens[i]."""
  depth = 0
  while i < len(tokens):
    if tokens[i] == ('op', open_):
      depth += 1
    elif tokens[i] == ('op', close):
      depth -= 1
      if depth == 0:
        return i + 1
    i += 1
  raise ValueError('unbalanced %s%s' % (open_, close))


def _matchers(tokens: List[Token], i: int) -> Tuple[List[Tuple[str, str, str]], int]:
  """The label matchers of the {...} at tokens[i], and the index after it."""
  out = []
  end = _skip_group(tokens, i, '{', '}')
  body = tokens[i + 1:end - 1]
  j = 0
  while j < len(body):
    if body[j] == ('op', ','):
      j += 1
      continue
    if (j + 2 < len(body) and body[j][0] in ('ident', 'str') and
        body[j + 1][0] == 'op' and body[j + 2][0] == 'str'):
      value = body[j + 2][1]
      out.append((body[j][1], body[j + 1][1], value))
      j += 3
    elif body[j][0] == 'str':  # {"metric.name"}: a quoted metric name
      out.append(('__name__', '=', body[j][1]))
      j += 1
    else:
      raise ValueError('cannot read the label matchers %r' % (body,))
  return out, end


def selectors(expr: str) -> List[Selector]:
  """The series selectors of a PromQL expression."""
  tokens = _lex(expr)
  out: List[Selector] = []
  i = 0
  while i < len(tokens):
    kind, text = tokens[i]
    nxt = tokens[i + 1] if i + 1 < len(tokens) else ('', '')
    if kind == 'op' and text == '[':  # a range or subquery: [5m], [1h:1m]
      i = _skip_group(tokens, i, '[', ']')
    elif kind == 'op' and text == '{':
      matchers, i = _matchers(tokens, i)
      out.append(Selector(None, matchers))
    elif kind == 'op' and text == '@':  # @ 1700000000, @ start()
      i += 2
      while i < len(tokens) and tokens[i][0] == 'op' and tokens[i][1] in '()':
        i += 1
    elif kind != 'ident':
      i += 1
    elif text.lower() in _LABEL_LIST_KEYWORDS and nxt == ('op', '('):
      i = _skip_group(tokens, i + 1, '(', ')')
    elif text.lower() == 'offset':
      i += 1
      if i < len(tokens) and tokens[i] == ('op', '-'):
        i += 1
      i += 1  # the duration or variable
    elif nxt == ('op', '(') or text.lower() in _NOT_METRICS:
      i += 1  # a function or aggregation call, or a keyword
    else:
      if nxt == ('op', '{'):
        matchers, i = _matchers(tokens, i + 1)
      else:
        matchers, i = [], i + 1
      out.append(Selector(text, matchers))
  return out


def metric_names_in_expr(expr: str) -> Set[str]:
  """The Prometheus metric names a PromQL expression reads."""
  return {s.metric() for s in selectors(expr) if s.metric()}


_LABEL_VALUES = re.compile(
    r'^\s*label_values\s*\((.*),\s*([A-Za-z_][A-Za-z0-9_]*)\s*\)\s*$', re.S)
_QUERY_RESULT = re.compile(r'^\s*query_result\s*\((.*)\)\s*$', re.S)


def variable_query_expr(query: str) -> Optional[str]:
  """The PromQL inside a Prometheus template variable query, if any:
  label_values(SELECTOR, label) and query_result(EXPR) have one;
  label_values(label), label_names() and metrics(regex) have none."""
  for pattern in (_LABEL_VALUES, _QUERY_RESULT):
    m = pattern.match(query)
    if m:
      return m.group(1)
  return None


# ---------------------------------------------------------------------------
# Walking the dashboard.


def load_dashboard(path: Path = DASHBOARD_PATH) -> dict:
  with open(path, encoding='utf-8') as f:
    return json.load(f)


def load_schema(path: Path = SCHEMA_PATH) -> dict:
  with open(path, encoding='utf-8') as f:
    return json.load(f)


def _dicts(values) -> list:
  return [v for v in values if isinstance(v, dict)] if isinstance(values, list) else []


def all_panels(dashboard: dict) -> Iterator[dict]:
  """Every panel, including those inside (collapsed) rows."""
  for panel in _dicts(dashboard.get('panels')):
    yield panel
    yield from _dicts(panel.get('panels'))


def variables(dashboard: dict) -> List[dict]:
  return _dicts((dashboard.get('templating') or {}).get('list'))


def panel_exprs(dashboard: dict) -> Iterator[Tuple[dict, dict, str]]:
  """(panel, target, expr) of every query of every panel."""
  for panel in all_panels(dashboard):
    for target in _dicts(panel.get('targets')):
      if isinstance(target.get('expr'), str):
        yield panel, target, target['expr']


def variable_exprs(dashboard: dict) -> Iterator[Tuple[dict, str]]:
  """(variable, PromQL) of the query variables that have PromQL in them."""
  for var in variables(dashboard):
    if var.get('type') != 'query':
      continue
    query = var.get('query')
    if isinstance(query, dict):
      query = query.get('query')
    if isinstance(query, str):
      expr = variable_query_expr(query)
      if expr is not None:
        yield var, expr


def metric_names_in_queries(dashboard: dict) -> Set[str]:
  """The Prometheus metric names of all panel queries and variable queries."""
  names: Set[str] = set()
  for _, _, expr in panel_exprs(dashboard):
    names |= metric_names_in_expr(expr)
  for _, expr in variable_exprs(dashboard):
    names |= metric_names_in_expr(expr)
  return names


# ---------------------------------------------------------------------------
# Checks.


def _where(panel: dict) -> str:
  return 'panel %s (%r)' % (panel.get('id'), panel.get('title'))


def _grid(panel: dict) -> Optional[Tuple[int, int, int, int]]:
  pos = panel.get('gridPos')
  if not isinstance(pos, dict):
    return None
  values = [pos.get(k) for k in ('x', 'y', 'w', 'h')]
  if not all(isinstance(v, int) and not isinstance(v, bool) for v in values):
    return None
  return tuple(values)


def _layout_problems(panels: Sequence[dict]) -> List[str]:
  problems = []
  placed = []
  for panel in panels:
    grid = _grid(panel)
    if grid is None:
      continue  # the schema reports it
    x, y, w, h = grid
    if x + w > 24:
      problems.append('%s: gridPos x + w = %d is wider than the 24-column grid'
                      % (_where(panel), x + w))
    for other, (ox, oy, ow, oh) in placed:
      if x < ox + ow and ox < x + w and y < oy + oh and oy < y + h:
        problems.append('%s overlaps %s' % (_where(panel), _where(other)))
    placed.append((panel, grid))
  return problems


_VARIABLE_REF = re.compile(r'\$\{([A-Za-z0-9_]+)(?::[^}]*)?\}|\$([A-Za-z0-9_]+)|\[\[([A-Za-z0-9_]+)\]\]')


def _referenced_variables(text: str) -> Set[str]:
  return {next(g for g in m.groups() if g) for m in _VARIABLE_REF.finditer(text)}


def _is_variable(value: str, name: str) -> bool:
  return value in ('$' + name, '${%s}' % name)


def _filter_problems(where: str, expr: str, by_name: Dict[str, Exported]) -> List[str]:
  try:
    found = selectors(expr)
  except ValueError as e:
    return ['%s: cannot read %r: %s' % (where, expr, e)]
  if not found:
    return ['%s: %r reads no metric' % (where, expr)]
  problems = []
  for sel in found:
    metric = sel.metric() or '{...}'
    app = [(op, v) for label, op, v in sel.matchers if label == APPLICATION_LABEL]
    if not any(op in ('=', '=~') and _is_variable(v, 'application_id') for op, v in app):
      problems.append('%s: %s does not filter %s="$application_id" in %r'
                      % (where, metric, APPLICATION_LABEL, expr))
    exported = by_name.get(sel.metric() or '')
    if exported is not None and exported.scope == 'task':
      task = [(op, v) for label, op, v in sel.matchers if label == TASK_LABEL]
      if not any(op == '=~' and _is_variable(v, 'task') for op, v in task):
        problems.append('%s: per-task %s does not filter %s=~"$task" in %r'
                        % (where, metric, TASK_LABEL, expr))
  return problems


def schema_problems(dashboard) -> List[str]:
  """What is wrong with the dashboard: schema errors first, then the rest."""
  import jsonschema  # pylint: disable=import-outside-toplevel

  schema = load_schema()
  validator_class = jsonschema.validators.validator_for(schema)
  validator_class.check_schema(schema)
  validator = validator_class(schema)
  problems = []
  for error in sorted(validator.iter_errors(dashboard), key=lambda e: list(e.absolute_path)):
    path = '/'.join(str(p) for p in error.absolute_path) or '(top)'
    problems.append('schema: %s: %s' % (path, error.message))
  if not isinstance(dashboard, dict):
    return problems

  panels = list(all_panels(dashboard))
  ids = collections.Counter(p.get('id') for p in panels if 'id' in p)
  for panel_id, count in sorted(ids.items(), key=str):
    if count > 1:
      problems.append('panel id %s is used by %d panels' % (panel_id, count))

  # Panels on the dashboard share one grid; the panels of a collapsed row
  # have their own until it is expanded.
  top = _dicts(dashboard.get('panels'))
  problems += _layout_problems(top)
  for row in top:
    if row.get('type') == 'row' and row.get('collapsed'):
      problems += _layout_problems(_dicts(row.get('panels')))

  names = collections.Counter(v.get('name') for v in variables(dashboard))
  for name, count in sorted(names.items(), key=str):
    if count > 1:
      problems.append('variable %r is defined %d times' % (name, count))
  known = set(names)
  ds_variables = {v.get('name') for v in variables(dashboard) if v.get('type') == 'datasource'}

  def check_datasource(where, owner):
    ds = owner.get('datasource')
    uid = ds.get('uid') if isinstance(ds, dict) else None
    if ds_variables and not any(_is_variable(uid or '', n) for n in ds_variables):
      problems.append('%s: datasource uid %r is not the datasource variable (${%s})'
                      % (where, uid, sorted(ds_variables)[0]))

  by_name = exported_by_prometheus_name()
  for panel in panels:
    if panel.get('type') in ('row', 'text'):
      continue
    check_datasource(_where(panel), panel)
    targets = _dicts(panel.get('targets'))
    refs = collections.Counter(t.get('refId') for t in targets)
    for ref, count in sorted(refs.items(), key=str):
      if count > 1:
        problems.append('%s: refId %r is used by %d queries' % (_where(panel), ref, count))
    for target in targets:
      where = '%s query %s' % (_where(panel), target.get('refId'))
      if 'datasource' in target:
        check_datasource(where, target)
      expr = target.get('expr')
      if not isinstance(expr, str) or not expr.strip():
        continue  # the schema reports it
      for text in (expr, target.get('legendFormat') or ''):
        for name in sorted(_referenced_variables(text) - known):
          if not name.startswith('__'):  # Grafana's own: $__rate_interval, ...
            problems.append('%s: unknown variable $%s' % (where, name))
      problems += _filter_problems(where, expr, by_name)

  for var, expr in variable_exprs(dashboard):
    where = 'variable %r' % var.get('name')
    check_datasource(where, var)
    for name in sorted(_referenced_variables(expr) - known):
      if not name.startswith('__'):
        problems.append('%s: unknown variable $%s' % (where, name))
    try:
      selectors(expr)
    except ValueError as e:
      problems.append('%s: cannot read %r: %s' % (where, expr, e))
  return problems


def unknown_metric_problems(dashboard: dict) -> List[str]:
  """Query metric names that none of EXPORTED turns into."""
  known = exported_by_prometheus_name()
  try:
    used = metric_names_in_queries(dashboard)
  except ValueError as e:
    return ['cannot read the queries: %s' % e]
  return ['%s is not the Prometheus name of any exported metric' % name
          for name in sorted(used - set(known))]


def main(argv: Sequence[str] = ()) -> int:
  path = Path(argv[0]) if argv else DASHBOARD_PATH
  try:
    dashboard = load_dashboard(path)
  except (OSError, ValueError) as e:
    print('%s: %s' % (path, e))
    return 1
  problems = schema_problems(dashboard) + unknown_metric_problems(dashboard)
  for problem in problems:
    print('%s: %s' % (path, problem))
  if not problems:
    print('%s: ok (%d panels, metrics: %s)' % (
        path, len(list(all_panels(dashboard))),
        ', '.join(sorted(metric_names_in_queries(dashboard)))))
  return 1 if problems else 0


if __name__ == '__main__':
  sys.exit(main(sys.argv[1:]))
