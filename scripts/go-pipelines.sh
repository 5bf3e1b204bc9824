#!/usr/bin/env bash
# Builds one of the Go test pipelines (itests/go/<name>, Beam's Go SDK at the
# version go.sum pins, fetched from the Go module proxy) into the cache and
# prints the binary's path. `go-pipelines.sh prism github.com/apache/beam/sdks/v2/go/cmd/prism`
# builds Beam's Prism runner at the same version (a benchmark peer);
# `go-pipelines.sh otelcol . itests/otelcol` builds the OpenTelemetry Collector
# of the telemetry itests from its own module. Incremental: quick once built. Without a Go
# toolchain of 1.21 or later (which fetch the one go.mod asks for by
# themselves), the toolchain itself comes from the Go module proxy.
source "$(dirname "${BASH_SOURCE[0]}")/common.sh"
name="${1:?usage: go-pipelines.sh <pipeline directory under itests/go> [go package] [module directory]}"
package="${2:-./$name}"
module="${3:-itests/go}"


cache_lock go-toolchain
GO="$(go_command)"
cache_lock "go-bin-$name"
out="$BEAM_KAFKA_CACHE/go-bin"
mkdir -p "$out"
(cd "$REPO_ROOT/$module" && GOFLAGS=-mod=readonly "$GO" build -o "$out/$name" "$package" >&2) \
  || die "building the Go program $name (in $module) failed"
echo "$out/$name"
