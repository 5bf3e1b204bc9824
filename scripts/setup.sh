#!/usr/bin/env bash
# Installs what the project needs beyond the toolchains (Rust, Python 3, Java,
# Maven): Debian packages for building rdkafka, rocksdb and the protos. Only
# missing packages are installed, so a second run is quick.
#   scripts/setup.sh           what building and running the demo need
#   scripts/setup.sh --tests   and what the tests need besides (Chromium)
source "$(dirname "${BASH_SOURCE[0]}")/common.sh"

PACKAGES=(
  cmake             # the bundled librdkafka is built with cmake
  libcurl4-openssl-dev  # librdkafka's cmake build wants curl headers even with curl off
  zlib1g-dev        # gzip compression in librdkafka
  libssl-dev        # librdkafka links the system's OpenSSL (the wheel builds its own: feature vendored-openssl)
  perl              # OpenSSL's build for the wheel (openssl-src)
  openssl           # the test broker's throwaway CA and certificates (kafka.sh secure)
  libclang-dev      # bindgen for rocksdb
  clang             # compiles rocksdb's C++ (.cargo/config.toml): ~40% less time than g++ at -O0
  g++ make pkg-config
  protobuf-compiler libprotobuf-dev  # protoc and the well-known types for tonic/prost
  unzip             # extracting Beam's protos from their jars
  maven default-jdk-headless  # fetching jars; running the test broker; javac for the Kafka Streams benchmark peer
  curl              # the Go toolchain from the Go module proxy when none is installed
)
if [[ "${1:-}" == "--tests" ]]; then
  PACKAGES+=(chromium chromium-driver)  # itests/test_status_page.py opens the status page in headless Chromium
fi
missing=()
for p in "${PACKAGES[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
# A JDK or Maven installed outside Debian's packages is fine.
if command -v javac >/dev/null; then missing=("${missing[@]/default-jdk-headless}"); fi
if command -v mvn >/dev/null; then missing=("${missing[@]/maven}"); fi
read -r -a missing <<<"${missing[*]}"
if ((${#missing[@]})); then
  log "installing Debian packages: ${missing[*]}"
  SUDO=""; [[ $(id -u) -ne 0 ]] && SUDO="sudo"
  $SUDO apt-get update -qq >&2
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}" >&2
fi
# The tests check formatting and lints: rustup's minimal profile lacks both.
if command -v rustup >/dev/null && ! { cargo fmt --version && cargo clippy --version; } >/dev/null 2>&1; then
  log "adding the rustfmt and clippy components"
  rustup component add rustfmt clippy >&2 || log "warning: could not add rustfmt and clippy; the lint step of scripts/test.sh will fail"
fi
for tool in cargo python3 java javac mvn; do
  command -v "$tool" >/dev/null || die "$tool is needed and not installed (Rust from rustup, Python 3.9+, Java 17+, Maven)"
done
