#!/usr/bin/env bash
# Checks the Go package users import (go/, beamkafka.dev/go/beamkafka):
# gofmt-clean, go vet, and its tests. Uses the Go toolchain go_command finds
# (or fetches).
source "$(dirname "${BASH_SOURCE[0]}")/common.sh"
GO="$(go_command)"
cd "$REPO_ROOT/go"
unformatted="$("$("$GO" env GOROOT)/bin/gofmt" -l .)"
[[ -z "$unformatted" ]] || die "not gofmt-clean: $unformatted"
GOFLAGS=-mod=readonly "$GO" vet ./...
GOFLAGS=-mod=readonly "$GO" test -count=1 ./...
