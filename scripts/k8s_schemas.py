"""Writes one standalone, strict JSON schema per Kubernetes kind (named as
kubeconform looks them up: <kind>[-<group>]-<version>.json, lower case) from
the cluster API's OpenAPI v2 document (api/openapi-spec/swagger.json of the
k8s.io/kubernetes Go module), for scripts/k8s-validate.sh.

  python3 k8s_schemas.py SWAGGER_JSON OUT_DIR

Strict as `kubectl --validate` is: an object with declared properties takes no
other; int-or-string fields take either. References are inlined; a type that
contains itself (a CRD's schema) stops at its first repetition.
"""

import json
import sys
from pathlib import Path

REF = '#/definitions/'


def inline(node, definitions, seen):
  if isinstance(node, list):
    return [inline(n, definitions, seen) for n in node]
  if not isinstance(node, dict):
    return node
  if isinstance(node.get('$ref'), str):
    name = node['$ref'][len(REF):]
    if name in seen:
      return {}
    return inline(definitions[name], definitions, seen | {name})
  if node.get('format') == 'int-or-string':
    return {'oneOf': [{'type': 'string'}, {'type': 'integer'}]}
  out = {k: inline(v, definitions, seen) for k, v in node.items()}
  if 'properties' in out and 'additionalProperties' not in out:
    out['additionalProperties'] = False
  return out


def file_name(gvk):
  group = gvk['group'].split('.')[0]
  parts = [gvk['kind'].lower()] + ([group] if group else []) + [gvk['version']]
  return '-'.join(parts) + '.json'


def main(swagger, out):
  definitions = json.loads(Path(swagger).read_text())['definitions']
  out = Path(out)
  out.mkdir(parents=True, exist_ok=True)
  written = 0
  for name, schema in definitions.items():
    for gvk in schema.get('x-kubernetes-group-version-kind', []):
      standalone = inline(schema, definitions, {name})
      standalone['$schema'] = 'http://json-schema.org/schema#'
      (out / file_name(gvk)).write_text(json.dumps(standalone))
      written += 1
  print('%d schemas in %s' % (written, out))


if __name__ == '__main__':
  main(*sys.argv[1:])
