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
GO_TOOLCHAIN="1.26.1"

go_command() {
  if command -v go >/dev/null && go version | grep -qE 'go1\.(2[1-9]|[3-9][0-9])'; then
    echo go
    return
  fi
  local dir="$BEAM_KAFKA_CACHE/go-toolchain/go$GO_TOOLCHAIN"
  if [[ ! -x "$dir/bin/go" ]]; then
    local arch
    case "$(uname -m)" in x86_64) arch=amd64 ;; aarch64|arm64) arch=arm64 ;; *) die "no Go toolchain for $(uname -m)" ;; esac
    local mod="golang.org/toolchain@v0.0.1-go$GO_TOOLCHAIN.linux-$arch"
    log "fetching the Go toolchain $GO_TOOLCHAIN from the Go module proxy"
    local tmp; tmp="$(mktemp -d)"
    curl -fsSL -o "$tmp/go.zip" "https://proxy.golang.org/golang.org/toolchain/@v/v0.0.1-go$GO_TOOLCHAIN.linux-$arch.zip" \
      || die "cannot fetch the Go toolchain from proxy.golang.org"
    unzip -q "$tmp/go.zip" -d "$tmp"
    mkdir -p "$(dirname "$dir")"
    rm -rf "$dir" && mv "$tmp/$mod" "$dir" && rm -rf "$tmp"
    chmod +x "$dir/bin/"* "$dir/pkg/tool/"*/* 2>/dev/null || true
  fi
  echo "$dir/bin/go"
}

GO="$(go_command)"
out="$BEAM_KAFKA_CACHE/go-bin"
mkdir -p "$out"
(cd "$REPO_ROOT/$module" && GOFLAGS=-mod=readonly "$GO" build -o "$out/$name" "$package" >&2) \
  || die "building the Go program $name (in $module) failed"
echo "$out/$name"
