#!/usr/bin/env bash
# Build p2pt and run its checks, installing what they need on a fresh
# Debian/Ubuntu machine (as root: cmake, gcc, binutils, pkg-config,
# libcriterion-dev, clang, valgrind). This is what CI runs. Phases, in order:
#
#   1. ASan + UBSan build (build-asan/), CPU tests under the sanitizers
#   2. libFuzzer (build-fuzz/, clang): config parsing, chunk planning, batch planning
#      and auto-table parsing, 20 s each
#   3. plain build (build/): Release (-O3, plus -g for valgrind), -Werror,
#      library, tests, example and benchmark
#   4. valgrind memcheck: the CPU tests of the plain build
#   5. install: a find_package and a pkg-config consumer build and run
#   6. plain suite: every test of the plain build, with a count of the
#      skipped ones by reason; the last line printed is Criterion's
#      "Synthesis:" line and the exit status is the suite's
#
# On a 2-core CPU machine (no GPU) the whole script takes a few minutes once
# the packages are installed, most of it in phase 4 (the chunk-plan random
# test dominates under valgrind) and phase 2. On a machine without a GPU the
# GPU tests skip with their reason; on a GPU machine they run for real.
#
#   scripts/test.sh                             all phases
#   P2PT_TEST_SANITIZE=0 scripts/test.sh        skip phase 1
#   P2PT_TEST_FUZZ_SECONDS=0 scripts/test.sh    skip phase 2 (or N seconds each)
#   P2PT_TEST_VALGRIND=0 scripts/test.sh        skip phase 4
#   P2PT_BUILD_ROOT=/tmp/x scripts/test.sh      build directories under /tmp/x
#                                               instead of the source tree
#   extra arguments go to the Criterion binary (e.g. --filter 'config/*')
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD
mkdir -p "${P2PT_BUILD_ROOT:-.}"
BUILD_ROOT=$(cd "${P2PT_BUILD_ROOT:-.}" && pwd)
ASAN_DIR=$BUILD_ROOT/build-asan
FUZZ_DIR=$BUILD_ROOT/build-fuzz
BUILD=$BUILD_ROOT/build

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

# The tests are required here (-DP2PT_BUILD_TESTS=ON): a missing Criterion
# fails the configure step instead of silently building no tests.
cmake_args=(-DP2PT_BUILD_TESTS=ON -DP2PT_WERROR=ON)
if [ -d "$ROOT/.gpudeps/include/criterion" ]; then
  # A GPU machine without a package registry: Criterion travelled with the
  # tree (scripts/pack-gpu-deps.sh).
  cmake_args+=(-DCRITERION_ROOT="$ROOT/.gpudeps")
  export LD_LIBRARY_PATH="$ROOT/.gpudeps/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
fi
jobs=$(nproc 2>/dev/null || echo 2)

if [ "${P2PT_TEST_SANITIZE:-1}" != 0 ]; then
  echo "== ASan + UBSan build: CPU tests (GPU tests skip under the sanitizers)"
  cmake -S . -B "$ASAN_DIR" -DP2PT_SANITIZE=ON -DP2PT_BUILD_BENCH=OFF "${cmake_args[@]}" >/dev/null
  cmake --build "$ASAN_DIR" -j"$jobs" >/dev/null
  ASAN_OPTIONS=detect_leaks=1:abort_on_error=0 P2PT_TEST_NO_GPU=1 \
    "$ASAN_DIR/p2pt-tests" --jobs "$jobs" "$@"
fi

if [ "$fuzz_seconds" != 0 ]; then
  echo "== libFuzzer: config parsing, chunk planning, batch planning and auto-table parsing, ${fuzz_seconds}s each"
  CC=clang cmake -S . -B "$FUZZ_DIR" -DP2PT_FUZZ=ON -DP2PT_SANITIZE=ON -DP2PT_BUILD_TESTS=OFF \
    -DP2PT_BUILD_BENCH=OFF -DP2PT_WERROR=ON >/dev/null
  cmake --build "$FUZZ_DIR" -j"$jobs" \
    --target fuzz_config fuzz_chunk_plan fuzz_batch_plan fuzz_auto_table >/dev/null
  for f in fuzz_config fuzz_chunk_plan fuzz_batch_plan fuzz_auto_table; do
    if ! "$FUZZ_DIR/$f" -max_total_time="$fuzz_seconds" -artifact_prefix="$FUZZ_DIR/" \
        >"$FUZZ_DIR/$f.log" 2>&1; then
      tail -40 "$FUZZ_DIR/$f.log"
      echo "test.sh: $f found a failure (input saved under $FUZZ_DIR/)" >&2
      exit 1
    fi
    grep -E "^Done" "$FUZZ_DIR/$f.log" | sed "s/^/$f: /"
  done
fi

# Release is what users ship; -g only adds debug info for valgrind's reports
# and changes no warning.
echo "== plain build: Release, -Werror"
cmake -S . -B "$BUILD" -DCMAKE_BUILD_TYPE=Release -DCMAKE_C_FLAGS_RELEASE="-O3 -DNDEBUG -g" \
  "${cmake_args[@]}" >/dev/null
cmake --build "$BUILD" -j"$jobs" >/dev/null

if [ "$use_valgrind" != 0 ]; then
  # Criterion's own runner keeps some blocks "possibly lost"; p2pt must have
  # no memory error and no definite leak. Children that the tests popen (sh,
  # nm) are not followed: a forked shell's copy of the test's heap reads as
  # leaked at exec, and nm's plugin loading trips a known ld.so false report.
  echo "== valgrind memcheck: CPU tests"
  if ! P2PT_TEST_NO_GPU=1 valgrind --trace-children=yes --trace-children-skip='*/sh,*/nm' \
      --error-exitcode=9 --leak-check=full \
      --errors-for-leak-kinds=definite --show-leak-kinds=definite -q \
      "$BUILD/p2pt-tests" --jobs "$jobs" "$@" >"$BUILD/valgrind.log" 2>&1; then
    grep -v '^\[' "$BUILD/valgrind.log" | head -60
    echo "test.sh: valgrind found errors ($BUILD/valgrind.log)" >&2
    exit 1
  fi
  grep -E "Synthesis" "$BUILD/valgrind.log" | sed 's/^/valgrind: /'
fi

echo "== install: a find_package and a pkg-config consumer build and run"
rm -rf "$BUILD/install-test" "$BUILD/install-consumer"
cmake --install "$BUILD" --prefix "$BUILD/install-test" >/dev/null
PKG_CONFIG_PATH="$BUILD/install-test/lib/pkgconfig" cmake -S tests/install_consumer \
  -B "$BUILD/install-consumer" -DCMAKE_PREFIX_PATH="$BUILD/install-test" >/dev/null
cmake --build "$BUILD/install-consumer" >/dev/null
for c in consumer_cmake consumer_pkgconfig; do
  LD_LIBRARY_PATH="$BUILD/install-test/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}" \
    "$BUILD/install-consumer/$c"
done

# The plain suite runs with --verbose into a log, so that every skipped test
# and its reason is known; what is streamed is what needs reading (failures,
# crashes, the tests' own output), not the RUN/PASS/SKIP lines.
echo "== plain suite"
log=$BUILD/suite.log
set +e
"$BUILD/p2pt-tests" --jobs "$jobs" --verbose "$@" 2>&1 | tee "$log" |
  grep --line-buffered -vE '^\[(RUN |PASS|SKIP)\] |^\[====\] (Running [0-9]+ tests? from |Synthesis:)|^\[----\] Criterion v'
rc=${PIPESTATUS[0]}
set -e
# "[SKIP] suite::test: reason": count by reason, naming the suites.
awk '
  /^\[(RUN |SKIP)\] / {
    line = substr($0, 8)
    i = index(line, ": ")
    name = i ? substr(line, 1, i - 1) : line
    if (!(name in seen)) { seen[name] = 1; tests++ }
  }
  /^\[SKIP\] / {
    why = i ? substr(line, i + 2) : "no reason given"
    if (why == "Test is disabled") why = "Test is disabled (left out by --filter, or .disabled)"
    suite = name; sub(/::.*/, "", suite)
    n[why]++; skipped++
    if (index(" " suites[why] " ", " " suite " ") == 0)
      suites[why] = suites[why] (suites[why] == "" ? "" : " ") suite
  }
  END {
    if (skipped == 0) { print "test.sh: no test skipped"; exit }
    printf "test.sh: %d of %d tests skipped, by reason (and their suites):\n", skipped, tests
    fflush()
    for (w in n) printf "  %3d  %s  [%s]\n", n[w], w, suites[w] | "sort -rn"
    close("sort -rn")
  }' "$log"
synthesis=$(grep -E '^\[====\] Synthesis:' "$log" | tail -1 || true)
if [ -n "$synthesis" ]; then
  echo "$synthesis"
else
  echo "test.sh: the suite printed no Synthesis line (exit status $rc; log: $log)"
fi
exit "$rc"
