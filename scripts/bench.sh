#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# Build p2pt-bench and run it on whatever device is here (arguments go to
# p2pt-bench; see `scripts/bench.sh --help`). With no GPU or no driver it
# says so in one line and exits non-zero.
set -euo pipefail
cd "$(dirname "$0")/.."
need_pkgs=()
command -v cmake >/dev/null || need_pkgs+=(cmake)
command -v cc >/dev/null || need_pkgs+=(gcc)
if [ ${#need_pkgs[@]} -gt 0 ]; then
  if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
    export DEBIAN_FRONTEND=noninteractive
    apt-get update -qq && apt-get install -y -qq "${need_pkgs[@]}" >/dev/null
  else
    echo "bench.sh: missing ${need_pkgs[*]}" >&2
    exit 1
  fi
fi
cmake -S . -B build-bench -DP2PT_BUILD_TESTS=OFF >/dev/null
cmake --build build-bench -j"$(nproc 2>/dev/null || echo 2)" --target p2pt-bench >/dev/null
exec ./build-bench/p2pt-bench "$@"
