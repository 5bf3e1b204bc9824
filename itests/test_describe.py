"""`beam-kafka describe` on a saved pipeline."""

import subprocess

import apache_beam as beam


def _save(tmp_path):
  p = beam.Pipeline()
  _ = (
      p
      | 'Start' >> beam.Impulse()
      | 'Numbers' >> beam.FlatMap(lambda _: [('a', 1), ('b', 2)])
      | 'Group' >> beam.GroupByKey()
      | 'Show' >> beam.Map(str))
  path = tmp_path / 'pipeline.pb'
  path.write_bytes(p.to_runner_api().SerializeToString())
  return path


def test_describe_prints_topics_and_sub_topologies(binary, tmp_path):
  out = subprocess.run(
      [binary, 'describe', '--pipeline', str(_save(tmp_path)),
       '--application-id', 'shop', '--internal-parallelism', '3'],
      check=True, capture_output=True, text=True, timeout=60).stdout
  assert '__beam_shop_impulse_0 (Impulse, 1 partition(s))' in out, out
  assert '__beam_shop_shuffle_0 (Shuffle, 3 partition(s))' in out, out
  assert 'sub-topology 1 [3 task(s)] reads __beam_shop_shuffle_0 via Group' in out, out


def test_describe_as_graphviz(binary, tmp_path):
  out = subprocess.run(
      [binary, 'describe', '--pipeline', str(_save(tmp_path)),
       '--format', 'dot'],
      check=True, capture_output=True, text=True, timeout=60).stdout
  assert out.startswith('digraph topology {'), out
  assert 't1 -> s1 [label="Group"];' in out, out


def test_describe_as_a_picture(binary, tmp_path):
  """The status page's picture, offline: SVG, and HTML around it."""
  import xml.etree.ElementTree as ET
  svg = subprocess.run(
      [binary, 'describe', '--pipeline', str(_save(tmp_path)),
       '--application-id', 'shop', '--format', 'svg'],
      check=True, capture_output=True, text=True, timeout=60).stdout
  root = ET.fromstring(svg)  # well-formed XML
  ns = '{http://www.w3.org/2000/svg}'
  assert root.tag == ns + 'svg'
  groups = {g.get('id'): g for g in root.iter(ns + 'g')}
  assert groups['topic-__beam_shop_shuffle_0'].get('class') == 'topic'
  sub1 = ''.join(groups['sub-1'].itertext())
  assert 'sub-topology 1' in sub1 and 'Show' in sub1, sub1
  assert len(root.findall(ns + 'path[@class="edge"]')) == 3, svg  # impulse, shuffle, group
  html = subprocess.run(
      [binary, 'describe', '--pipeline', str(_save(tmp_path)),
       '--format', 'html'],
      check=True, capture_output=True, text=True, timeout=60).stdout
  assert html.startswith('<!DOCTYPE html>') and '<svg' in html, html[:300]


def test_describe_of_a_non_pipeline_fails_clearly(binary, tmp_path):
  bogus = tmp_path / 'bogus.pb'
  bogus.write_bytes(b'\xff\xff\xff')
  done = subprocess.run(
      [binary, 'describe', '--pipeline', str(bogus)],
      capture_output=True, text=True, timeout=60)
  assert done.returncode == 1
  assert 'not a binary Beam Pipeline proto' in done.stderr, done.stderr
