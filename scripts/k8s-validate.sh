#!/usr/bin/env bash
# Validates the Kubernetes manifests (ops/kubernetes/*.yaml, or the files
# given) with kubeconform, strictly (unknown fields are errors), against the
# JSON schemas of a pinned Kubernetes API. Both come from the Go module
# proxy: kubeconform itself, and the API's OpenAPI document (the
# k8s.io/kubernetes module's api/openapi-spec/swagger.json), from which
# scripts/k8s_schemas.py writes one schema per kind. Cached under
# $BEAM_KAFKA_CACHE/k8s.
#
#   scripts/k8s-validate.sh [FILE...]
source "$(dirname "${BASH_SOURCE[0]}")/common.sh"

KUBECONFORM_VERSION=v0.7.0
KUBERNETES_VERSION=v1.34.1

GO="$(go_command)"
work="$BEAM_KAFKA_CACHE/k8s"
export GOPATH="$work/gopath" GOMODCACHE="$work/gopath/pkg/mod" GOFLAGS=-modcacherw
bin="$work/bin/kubeconform-$KUBECONFORM_VERSION"
if [[ ! -x "$bin" ]]; then
  log "building kubeconform $KUBECONFORM_VERSION (Go module proxy)"
  GOBIN="$work/bin/tmp" "$GO" install "github.com/yannh/kubeconform/cmd/kubeconform@$KUBECONFORM_VERSION" \
    || die "cannot build kubeconform from the Go module proxy"
  mv "$work/bin/tmp/kubeconform" "$bin"
fi
schemas="$work/schemas-$KUBERNETES_VERSION"
if [[ ! -f "$schemas/.complete" ]]; then
  log "writing the JSON schemas of Kubernetes $KUBERNETES_VERSION"
  dir="$("$GO" mod download -json "k8s.io/kubernetes@$KUBERNETES_VERSION" | python3 -c 'import json,sys; print(json.load(sys.stdin)["Dir"])')" \
    || die "cannot fetch k8s.io/kubernetes@$KUBERNETES_VERSION from the Go module proxy"
  rm -rf "$schemas"
  python3 "$REPO_ROOT/scripts/k8s_schemas.py" "$dir/api/openapi-spec/swagger.json" "$schemas" >&2
  touch "$schemas/.complete"
fi
files=("$@")
[[ ${#files[@]} -gt 0 ]] || files=("$REPO_ROOT"/ops/kubernetes/*.yaml)
"$bin" -strict -summary -schema-location "$schemas/{{ .ResourceKind }}{{ .KindSuffix }}.json" "${files[@]}"
