#!/usr/bin/env bash
# Build p2pt and run its Criterion suite, installing what it needs on a fresh
# Debian/Ubuntu machine. On a machine without a GPU the GPU tests skip with
# their reason; on a GPU machine they run for real.
#
#   scripts/test.sh                  plain build, then an ASan+UBSan build (CPU tests)
#   P2PT_TEST_SANITIZE=0 scripts/test.sh   plain build only
#   extra arguments go to the Criterion binary (e.g. --filter 'config/*')
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD

need_pkgs=()
command -v cmake >/dev/null || need_pkgs+=(cmake)
command -v cc >/dev/null || need_pkgs+=(gcc)
command -v nm >/dev/null || need_pkgs+=(binutils)
command -v pkg-config >/dev/null || need_pkgs+=(pkg-config)
fuzz_seconds=${P2PT_TEST_FUZZ_SECONDS:-20}
use_valgrind=${P2PT_TEST_VALGRIND:-1}
if [ "$use_valgrind" != 0 ] && ! command -v valgrind >/dev/null; then need_pkgs+=(valgrind); fi
if [ "$fuzz_seconds" != 0 ] && ! command -v clang >/dev/null; then need_pkgs+=(clang); fi
if [ ! -f /usr/include/criterion/criterion.h ] && [ ! -d "$ROOT/.gpudeps/include/criterion" ]; then
  need_pkgs+=(libcriterion-dev)
fi
if [ ${#need_pkgs[@]} -gt 0 ]; then
  if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
    echo "test.sh: installing ${need_pkgs[*]}"
    export DEBIAN_FRONTEND=noninteractive
    apt-get update -qq && apt-get install -y -qq "${need_pkgs[@]}" >/dev/null
  else
    echo "test.sh: missing ${need_pkgs[*]}; install them (apt-get install ${need_pkgs[*]})" >&2
    exit 1
  fi
fi

cmake_args=()
if [ -d "$ROOT/.gpudeps/include/criterion" ]; then
  # A GPU machine without a package registry: Criterion travelled with the
  # tree (scripts/pack-gpu-deps.sh).
  cmake_args+=(-DCRITERION_ROOT="$ROOT/.gpudeps")
  export LD_LIBRARY_PATH="$ROOT/.gpudeps/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
fi
jobs=$(nproc 2>/dev/null || echo 2)

if [ "${P2PT_TEST_SANITIZE:-1}" != 0 ]; then
  echo "== ASan + UBSan build: CPU tests (GPU tests skip under the sanitizers)"
  cmake -S . -B build-asan -DP2PT_SANITIZE=ON -DP2PT_BUILD_BENCH=OFF "${cmake_args[@]}" >/dev/null
  cmake --build build-asan -j"$jobs" >/dev/null
  ASAN_OPTIONS=detect_leaks=1:abort_on_error=0 P2PT_TEST_NO_GPU=1 \
    ./build-asan/p2pt-tests --jobs "$jobs" "$@"
fi

if [ "$fuzz_seconds" != 0 ]; then
  echo "== libFuzzer: config parsing and chunk planning, ${fuzz_seconds}s each"
  CC=clang cmake -S . -B build-fuzz -DP2PT_FUZZ=ON -DP2PT_SANITIZE=ON -DP2PT_BUILD_TESTS=OFF \
    -DP2PT_BUILD_BENCH=OFF >/dev/null
  cmake --build build-fuzz -j"$jobs" --target fuzz_config fuzz_chunk_plan >/dev/null
  for f in fuzz_config fuzz_chunk_plan; do
    if ! ./build-fuzz/$f -max_total_time="$fuzz_seconds" -artifact_prefix=build-fuzz/ \
        >build-fuzz/$f.log 2>&1; then
      tail -40 build-fuzz/$f.log
      echo "test.sh: $f found a failure (input saved under build-fuzz/)" >&2
      exit 1
    fi
    grep -E "^Done" build-fuzz/$f.log | sed "s/^/$f: /"
  done
fi

echo "== plain build"
cmake -S . -B build -DP2PT_BUILD_TESTS=ON "${cmake_args[@]}" >/dev/null
cmake --build build -j"$jobs" >/dev/null

if [ "$use_valgrind" != 0 ]; then
  # Criterion's own runner keeps some blocks "possibly lost"; p2pt must have
  # no memory error and no definite leak. Children that the tests popen (sh,
  # nm) are not followed: a forked shell's copy of the test's heap reads as
  # leaked at exec, and nm's plugin loading trips a known ld.so false report.
  echo "== valgrind memcheck: CPU tests"
  if ! P2PT_TEST_NO_GPU=1 valgrind --trace-children=yes --trace-children-skip='*/sh,*/nm' \
      --error-exitcode=9 --leak-check=full \
      --errors-for-leak-kinds=definite --show-leak-kinds=definite -q \
      ./build/p2pt-tests --jobs "$jobs" "$@" >build/valgrind.log 2>&1; then
    grep -v '^\[' build/valgrind.log | head -60
    echo "test.sh: valgrind found errors (build/valgrind.log)" >&2
    exit 1
  fi
  grep -E "Synthesis" build/valgrind.log | sed 's/^/valgrind: /'
fi

echo "== install: a find_package and a pkg-config consumer build and run"
rm -rf build/install-test build/install-consumer
cmake --install build --prefix "$ROOT/build/install-test" >/dev/null
PKG_CONFIG_PATH="$ROOT/build/install-test/lib/pkgconfig" cmake -S tests/install_consumer \
  -B build/install-consumer -DCMAKE_PREFIX_PATH="$ROOT/build/install-test" >/dev/null
cmake --build build/install-consumer >/dev/null
for c in consumer_cmake consumer_pkgconfig; do
  LD_LIBRARY_PATH="$ROOT/build/install-test/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}" \
    ./build/install-consumer/$c
done

echo "== plain suite"
exec ./build/p2pt-tests --jobs "$jobs" "$@"
