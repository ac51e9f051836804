#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# Build p2pt and run its checks, installing what they need on a fresh
# Debian/Ubuntu machine (as root: cmake, gcc, binutils, pkg-config,
# libcriterion-dev, clang, valgrind, python3, python3-venv). This is what CI
# runs. Phases, in order:
#
#   1. ASan + UBSan build (build-asan/), CPU tests under the sanitizers, with
#      a count of the skipped ones by reason, then the fault-injection loop
#      (tests/fault/): the whole API over a fake driver and NVRTC failing each
#      call in turn, and a damaged cubin cache
#   2. libFuzzer (build-fuzz/, clang): config parsing, chunk planning, batch planning
#      and auto-table parsing, 20 s each
#   3. plain build (build/): Release (-O3, plus -g for valgrind), -Werror,
#      library, tests, example and benchmark
#   4. valgrind memcheck: the CPU tests of the plain build (those that skip
#      for want of a GPU, and those that only read the tree's text, left out)
#   5. install: with prefix /usr under DESTDIR (multiarch libdir), the
#      benchmark in bin/, a cc consumer through pkg-config, shared and
#      static; relocated to another prefix, CMake consumers through
#      find_package (p2pt::p2pt and p2pt::p2pt_static) and pkg_check_modules
#   6. Python: pip install . into a fresh venv, then pytest tests/python
#   7. plain suite: every test of the plain build, with a count of the
#      skipped ones by reason and Criterion's "Synthesis:" line
#   8. elsewhere: the tree copied under a hidden folder named like a build
#      folder ($TMPDIR/.../.hidden/builds/p2pt), built there (no benchmark)
#      and its CPU suite run, so that no test depends on where the checkout is
#
# On a 2-core CPU machine without a GPU the whole script took 6 min 9 s
# once the packages were installed, 15 min 42 s on a slower one (the runs
# that docs/TESTING.md gives), half of it in the valgrind phase. On a machine
# without a GPU the GPU tests skip with their reason; on a GPU machine they
# run for real.
#
#   scripts/test.sh                             all phases
#   scripts/test.sh --help                      this text
#   scripts/test.sh -- --filter 'config/*'      arguments after -- go to the
#                                               Criterion binary (every suite run)
#   P2PT_TEST_SANITIZE=0 scripts/test.sh        skip phase 1
#   P2PT_TEST_FUZZ_SECONDS=0 scripts/test.sh    skip phase 2 (or N seconds each)
#   P2PT_TEST_VALGRIND=0 scripts/test.sh        skip phase 4
#   P2PT_TEST_PYTHON=0 scripts/test.sh          skip phase 6 (1: fail when pip
#                                               or pytest cannot be had)
#   P2PT_BUILD_ROOT=/tmp/x scripts/test.sh      build directories under /tmp/x
#                                               instead of the source tree
#   P2PT_TEST_HIDDEN=0 scripts/test.sh          skip phase 8
#
# Any other argument is refused (exit 2). A phase that runs no test fails.
# The last line is the count over every phase, "total: N passed, N failed,
# N skipped"; the line before it names the phases and the skip reasons.
set -euo pipefail
usage() { sed -n '3,/^set -euo pipefail/p' "$0" | sed -e '$d' -e 's/^# \{0,1\}//'; }
criterion_args=()
while [ $# -gt 0 ]; do
  case "$1" in
    -h | --help) usage; exit 0 ;;
    --) shift; criterion_args=("$@"); break ;;
    *) echo "test.sh: unknown argument '$1' (Criterion arguments go after --)" >&2
       usage >&2
       exit 2 ;;
  esac
done
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
if [ "${P2PT_TEST_PYTHON:-auto}" != 0 ]; then
  command -v python3 >/dev/null || need_pkgs+=(python3)
  # Debian keeps venv's pip (ensurepip) in its own package.
  if command -v dpkg >/dev/null && ! dpkg -s python3-venv >/dev/null 2>&1; then
    need_pkgs+=(python3-venv)
  fi
fi
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

# The counts of every phase, printed when the script ends however it ends, so
# that its last line is always the closing count. A phase that fails outside
# a test suite (a build, the install consumers) counts as one failed check.
total_pass=0 total_fail=0 total_skip=0
phase_counts=""
phase="" phase_counted=1
SKIPS=$(mktemp)
begin_phase() { phase=$1; phase_counted=0; }
# header TEXT: a phase's first line, with the seconds since the start.
header() { echo "== $1 [${SECONDS} s]"; }
# count NAME PASSED FAILED SKIPPED
count() {
  total_pass=$((total_pass + $2)) total_fail=$((total_fail + $3)) total_skip=$((total_skip + $4))
  phase_counts="$phase_counts${phase_counts:+, }$1 $2/$3/$4"
  phase_counted=1
}
finish() {
  local rc=$?
  if [ "$rc" != 0 ] && [ "$phase_counted" = 0 ]; then count "$phase" 0 1 0; fi
  # Reasons are grouped by their text before the first ": " (tests word a
  # missing resource as "no CUDA device: why", "needs 2 CUDA devices: ...").
  local reasons
  reasons=$(awk '{ i = index($0, ": "); r = i ? substr($0, 1, i - 1) : $0; n[r]++ }
    END { for (r in n) printf "%d %s\n", n[r], r }' "$SKIPS" | sort -rn |
    awk '{ n = $1; sub(/^[0-9]+ /, ""); printf "%s%d %s", (NR > 1 ? "; " : ""), n, $0 }')
  rm -f "$SKIPS"
  echo "test.sh: ${SECONDS} s"
  echo "test.sh: passed/failed/skipped by phase: ${phase_counts:-none}; skipped by reason: ${reasons:-none}"
  echo "total: $total_pass passed, $total_fail failed, $total_skip skipped"
  exit "$rc"
}
trap finish EXIT

# A suite runs with --verbose into a log, so that every skipped test
# and its reason is known; what is streamed is what needs reading (failures,
# crashes, the tests' own output), not the RUN/PASS/SKIP lines.
# suite_counts NAME LOG RC: its skips by reason, its Synthesis line, its counts
# added to the total; fails when the suite failed or ran no test.
suite_counts() {
  local name=$1 log=$2 rc=$3 synthesis passed failed crashed skipped
  # "[SKIP] suite::test: reason": count by reason, naming the suites. Tests
  # that --filter leaves out read "Test is disabled": counted in one line
  # (a filtered run leaves out hundreds), not listed among the skips.
  awk -v skips="$SKIPS" '
    /^\[(RUN |SKIP)\] / {
      line = substr($0, 8)
      i = index(line, ": ")
      name = i ? substr(line, 1, i - 1) : line
      if (!(name in seen)) { seen[name] = 1; tests++ }
    }
    /^\[SKIP\] / {
      why = i ? substr(line, i + 2) : "no reason given"
      suite = name; sub(/::.*/, "", suite)
      if (why == "Test is disabled") {
        left_out++
        if (!(suite in out_suite)) { out_suite[suite] = 1; out_suites++ }
        next
      }
      print why >> skips
      n[why]++; skipped++
      if (index(" " suites[why] " ", " " suite " ") == 0)
        suites[why] = suites[why] (suites[why] == "" ? "" : " ") suite
    }
    END {
      if (left_out > 0)
        printf "test.sh: %d tests of %d suites left out by --filter (or .disabled)\n", left_out, out_suites
      if (skipped == 0) { print "test.sh: no test skipped"; exit }
      printf "test.sh: %d of %d tests skipped, by reason (and their suites):\n", skipped, tests - left_out
      fflush()
      for (w in n) printf "  %3d  %s  [%s]\n", n[w], w, suites[w] | "sort -rn"
      close("sort -rn")
    }' "$log"
  synthesis=$(grep -E '^\[====\] Synthesis:' "$log" | tail -1 || true)
  if [ -z "$synthesis" ]; then
    echo "test.sh: $name printed no Synthesis line (exit status $rc; log: $log)" >&2
    return $((rc == 0 ? 1 : rc))
  fi
  echo "$synthesis"
  # "Synthesis: Tested: N | Passing: N | Failing: N | Crashing: N"; a crash
  # is counted among the failing ones.
  passed=$(sed -n 's/.*Passing: \([0-9]*\).*/\1/p' <<<"$synthesis")
  failed=$(sed -n 's/.*Failing: \([0-9]*\).*/\1/p' <<<"$synthesis")
  crashed=$(sed -n 's/.*Crashing: \([0-9]*\).*/\1/p' <<<"$synthesis")
  # Tests that --filter leaves out read "Test is disabled": not run, not skipped.
  skipped=$(grep '^\[SKIP\] ' "$log" | grep -vc ': Test is disabled$' || true)
  [ "${crashed:-0}" -le "${failed:-0}" ] || failed=$crashed
  if [ "$rc" = 0 ] && [ "${passed:-0}" = 0 ]; then
    # Counted as one failure, so that the closing count agrees with the status.
    echo "test.sh: $name ran no test (log: $log)" >&2
    count "$name" 0 1 "${skipped:-0}"
    return 1
  fi
  count "$name" "${passed:-0}" "${failed:-0}" "${skipped:-0}"
  return "$rc"
}

# run_suite NAME LOG COMMAND...: the suite, streamed as said above.
run_suite() {
  local name=$1 log=$2 rc
  shift 2
  set +e
  "$@" --verbose 2>&1 | tee "$log" |
    grep --line-buffered -vE '^\[(RUN |PASS|SKIP)\] |^\[====\] (Running [0-9]+ tests? from |Synthesis:)|^\[----\] Criterion v'
  rc=${PIPESTATUS[0]}
  set -e
  suite_counts "$name" "$log" "$rc"
}

if [ "${P2PT_TEST_SANITIZE:-1}" != 0 ]; then
  header "ASan + UBSan build: CPU tests (GPU tests skip under the sanitizers)"
  begin_phase asan
  cmake -S . -B "$ASAN_DIR" -DP2PT_SANITIZE=ON -DP2PT_BUILD_BENCH=OFF "${cmake_args[@]}" >/dev/null
  cmake --build "$ASAN_DIR" -j"$jobs" >/dev/null
  ASAN_OPTIONS=detect_leaks=1:abort_on_error=0 P2PT_TEST_NO_GPU=1 \
    run_suite asan "$ASAN_DIR/suite.log" "$ASAN_DIR/p2pt-tests" --jobs "$jobs" "${criterion_args[@]}"
  # fault_loop NAME LOG COMMAND...: each failure point the loop tried counts
  # as one check; a loop that tried none fails.
  fault_loop() {
    local name=$1 log=$2 points
    shift 2
    begin_phase "$name"
    "$@" | tee "$log"
    points=$(sed -n 's/^fault-injection: \([0-9]*\) points,.*/\1/p' "$log" | tail -1)
    if [ "${points:-0}" = 0 ]; then
      echo "test.sh: $name tried no failure point ($log)" >&2
      return 1
    fi
    count "$name" "$points" 0 0
  }
  header "fault injection: every driver, NVRTC and cubin-cache failure point, under the sanitizers"
  ASAN_OPTIONS=detect_leaks=1:abort_on_error=0 fault_loop fault "$ASAN_DIR/fault.log" \
    "$ASAN_DIR/p2pt-fault-loop" "$ASAN_DIR/p2pt-fault-workload" "$ASAN_DIR/libp2pt_fake_cuda.so" \
    "$ASAN_DIR/libp2pt_fake_nvrtc.so" "$jobs"
  header "the same loop through the GPU shim (libp2pt_fault_cuda.so), here over the fake driver"
  ASAN_OPTIONS=detect_leaks=1:abort_on_error=0 P2PT_FAULT_SKIP=cuda \
    P2PT_FAULT_REAL_CUDA="$ASAN_DIR/libp2pt_fake_cuda.so" fault_loop fault-shim \
    "$ASAN_DIR/fault-shim.log" "$ASAN_DIR/p2pt-fault-loop" \
    "$ASAN_DIR/p2pt-fault-workload" "$ASAN_DIR/libp2pt_fault_cuda.so" \
    "$ASAN_DIR/libp2pt_fake_nvrtc.so" "$jobs"
  header "sticky errors over the fake driver (a kernel that faults poisons its context)"
  begin_phase sticky
  ASAN_OPTIONS=detect_leaks=1:abort_on_error=0 P2P_CUDA_LIBRARY="$ASAN_DIR/libp2pt_fake_cuda.so" \
    P2P_NVRTC_LIBRARY="$ASAN_DIR/libp2pt_fake_nvrtc.so" run_suite sticky \
    "$ASAN_DIR/sticky.log" "$ASAN_DIR/p2pt-tests" --filter 'sticky_error/*'
fi

if [ "$fuzz_seconds" != 0 ]; then
  header "libFuzzer: config parsing, chunk planning, batch planning, auto-table parsing and share blobs, ${fuzz_seconds}s each"
  begin_phase fuzz
  CC=clang cmake -S . -B "$FUZZ_DIR" -DP2PT_FUZZ=ON -DP2PT_SANITIZE=ON -DP2PT_BUILD_TESTS=OFF \
    -DP2PT_BUILD_BENCH=OFF -DP2PT_WERROR=ON >/dev/null
  cmake --build "$FUZZ_DIR" -j"$jobs" \
    --target fuzz_config fuzz_chunk_plan fuzz_batch_plan fuzz_auto_table fuzz_share_blobs >/dev/null
  # Each target is one process on one core: $jobs of them run at a time.
  fuzz_one() {
    "$FUZZ_DIR/$1" -max_total_time="$fuzz_seconds" -artifact_prefix="$FUZZ_DIR/" \
      >"$FUZZ_DIR/$1.log" 2>&1
  }
  fuzz_targets=(fuzz_config fuzz_chunk_plan fuzz_batch_plan fuzz_auto_table fuzz_share_blobs)
  for ((i = 0; i < ${#fuzz_targets[@]}; i += jobs)); do
    pids=()
    for f in "${fuzz_targets[@]:i:jobs}"; do
      fuzz_one "$f" &
      pids+=("$!")
    done
    for j in "${!pids[@]}"; do
      f=${fuzz_targets[i + j]}
      if ! wait "${pids[j]}"; then
        kill "${pids[@]}" 2>/dev/null || true
        tail -40 "$FUZZ_DIR/$f.log"
        echo "test.sh: $f found a failure (input saved under $FUZZ_DIR/)" >&2
        exit 1
      fi
    done
  done
  for f in "${fuzz_targets[@]}"; do
    grep -E "^Done" "$FUZZ_DIR/$f.log" | sed "s/^/$f: /"
    if ! grep -qE '^Done [1-9][0-9]* runs' "$FUZZ_DIR/$f.log"; then
      echo "test.sh: $f ran no input ($FUZZ_DIR/$f.log)" >&2
      exit 1
    fi
  done
  count fuzz "${#fuzz_targets[@]}" 0 0
fi

# Release is what users ship; -g only adds debug info for valgrind's reports
# and changes no warning.
header "plain build: Release, -Werror"
begin_phase build
cmake -S . -B "$BUILD" -DCMAKE_BUILD_TYPE=Release -DCMAKE_C_FLAGS_RELEASE="-O3 -DNDEBUG -g" \
  -DCMAKE_INSTALL_PREFIX=/usr "${cmake_args[@]}" >/dev/null
cmake --build "$BUILD" -j"$jobs" >/dev/null

if [ "$use_valgrind" != 0 ]; then
  # Criterion's own runner keeps some blocks "possibly lost"; p2pt must have
  # no memory error and no definite leak. Children that the tests popen (sh,
  # nm) are not followed: a forked shell's copy of the test's heap reads as
  # leaked at exec, and nm's plugin loading trips a known ld.so false report.
  header "valgrind memcheck: CPU tests"
  begin_phase valgrind
  # Each test starts its own valgrind (~1 s of CPU before and after its
  # own work), so two kinds are left out: the suites that only read the
  # tree's text (docs, README, CHANGELOG, licence lines, this script), and
  # the tests that skipped under ASan for want of a GPU, which would skip
  # here too, by name, grouped by suite (Criterion's filter matches nothing
  # once one group holds about a hundred names).
  vg_args=("${criterion_args[@]}")
  if [ ${#criterion_args[@]} = 0 ]; then
    left_out="changelog/*|doc_paths/*|docs/*|license/*|readme/*|test_script/*"
    if [ -f "$ASAN_DIR/suite.log" ] && [ "${P2PT_TEST_SANITIZE:-1}" != 0 ]; then
      gpu_only=$(sed -n 's/^\[SKIP\] \([A-Za-z0-9_]*\)::\([A-Za-z0-9_]*\): no CUDA device.*/\1 \2/p' \
        "$ASAN_DIR/suite.log" |
        awk '{ t[$1] = t[$1] (t[$1] == "" ? "" : "|") $2 }
          END { for (s in t) printf "|%s/@(%s)", s, t[s] }')
      left_out=$left_out$gpu_only
    fi
    vg_args=(--filter "!(@($left_out))")
  fi
  set +e
  P2PT_TEST_NO_GPU=1 P2PT_TEST_UNDER_VALGRIND=1 valgrind --trace-children=yes --trace-children-skip='*/sh,*/nm' \
    --error-exitcode=9 --leak-check=full \
    --errors-for-leak-kinds=definite --show-leak-kinds=definite -q \
    "$BUILD/p2pt-tests" --jobs "$jobs" --verbose "${vg_args[@]}" >"$BUILD/valgrind.log" 2>&1
  rc=$?
  set -e
  if [ $rc != 0 ]; then
    grep -v '^\[' "$BUILD/valgrind.log" | head -60
    echo "test.sh: valgrind found errors ($BUILD/valgrind.log)" >&2
  fi
  # Its skips are the plain suite's; they are counted, not listed twice.
  suite_counts valgrind "$BUILD/valgrind.log" "$rc" >/dev/null
  grep -E "Synthesis" "$BUILD/valgrind.log" | sed 's/^/valgrind: /'
fi

header "install: pkg-config and find_package consumers build and run"
begin_phase install
# As a distribution packages it: prefix /usr (so a multiarch libdir on
# Debian) under DESTDIR; pkg-config is pointed at the staged tree.
libdir=$(sed -n 's/^CMAKE_INSTALL_LIBDIR:PATH=//p' "$BUILD/CMakeCache.txt")
stage=$BUILD/install-destdir
rm -rf "$stage" "$BUILD/install-test" "$BUILD/install-consumer"
DESTDIR=$stage cmake --install "$BUILD" >/dev/null
test -f "$stage/usr/share/doc/p2pt/LICENSE" || { echo "test.sh: LICENSE not installed" >&2; exit 1; }
# README sends users to an installed p2pt-bench for `--mode calibrate`.
if ! "$stage/usr/bin/p2pt-bench" --help >/dev/null; then
  echo "test.sh: p2pt-bench is not installed in usr/bin, or its --help fails" >&2
  exit 1
fi
echo "install: usr/bin/p2pt-bench --help exits 0"
export PKG_CONFIG_PATH="$stage/usr/$libdir/pkgconfig"
pc_libdir=$(pkg-config --variable=libdir p2pt)
cc -o "$BUILD/consumer_cc_shared" tests/install_consumer/main.c -DCONSUMER='"cc $(pkg-config --cflags --libs p2pt)"' \
  $(pkg-config --cflags --libs p2pt)
# Static: the archive, then what Libs.private says it needs.
cc -o "$BUILD/consumer_cc_static" tests/install_consumer/main.c -DCONSUMER='"cc libp2pt.a $(pkg-config --static --libs p2pt)"' \
  $(pkg-config --cflags p2pt) "$pc_libdir/libp2pt.a" $(pkg-config --static --libs p2pt | sed 's/-lp2pt\b//')
LD_LIBRARY_PATH="$pc_libdir${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}" "$BUILD/consumer_cc_shared"
"$BUILD/consumer_cc_static"
# Relocated: the same files installed to another prefix.
cmake --install "$BUILD" --prefix "$BUILD/install-test" >/dev/null
PKG_CONFIG_PATH="$BUILD/install-test/$libdir/pkgconfig" cmake -S tests/install_consumer \
  -B "$BUILD/install-consumer" -DCMAKE_PREFIX_PATH="$BUILD/install-test" >/dev/null
cmake --build "$BUILD/install-consumer" >/dev/null
unset PKG_CONFIG_PATH
for c in consumer_cmake consumer_cmake_static consumer_pkgconfig; do
  LD_LIBRARY_PATH="$BUILD/install-test/$libdir${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}" \
    "$BUILD/install-consumer/$c"
done
count install 6 0 0

# The Python package, installed the way a user installs it (pip install . into
# a fresh venv; scikit-build-core comes from the package index), then the
# pytest suite against that installation: import, version, struct layouts
# against p2pt-struct-layout, errors with no driver; the PyTorch tests run
# where torch and a GPU are (the venv sees the system's packages).
# P2PT_TEST_PYTHON=1 (CI) makes a missing index or pytest an error; the
# default skips the phase then, saying why; 0 skips it.
python_mode=${P2PT_TEST_PYTHON:-auto}
if [ "$python_mode" != 0 ]; then
  header "Python package: pip install . into a fresh venv, then pytest tests/python"
  begin_phase pytest
  PYDIR=$BUILD_ROOT/build-python
  rm -rf "$PYDIR" && mkdir -p "$PYDIR"
  why=""
  if ! python3 -m venv --system-site-packages "$PYDIR/venv" >"$PYDIR/venv.log" 2>&1; then
    why="python3 -m venv failed ($PYDIR/venv.log)"
  elif ! "$PYDIR/venv/bin/python" -m pip install -q pytest >"$PYDIR/pip.log" 2>&1 &&
      ! "$PYDIR/venv/bin/python" -c 'import pytest' 2>/dev/null; then
    why="no pytest: pip could not install it ($PYDIR/pip.log)"
  elif ! "$PYDIR/venv/bin/python" -m pip install -q "$ROOT" >>"$PYDIR/pip.log" 2>&1; then
    why="pip install . failed ($PYDIR/pip.log)"
  fi
  if [ -n "$why" ]; then
    if [ "$python_mode" = 1 ]; then
      tail -30 "$PYDIR/pip.log" "$PYDIR/venv.log" 2>/dev/null || true
      echo "test.sh: Python phase: $why" >&2
      exit 1
    fi
    echo "test.sh: Python phase skipped: $why"
    echo "Python phase skipped: $why" >>"$SKIPS"
    count pytest 0 0 1
  else
    "$PYDIR/venv/bin/python" -c 'import p2pt; print("pip install .: p2pt", p2pt.__version__, "from", p2pt.library_path())'
    set +e
    (cd "$PYDIR" && P2PT_LAYOUT_PROBE="$BUILD/p2pt-struct-layout" \
      "$PYDIR/venv/bin/python" -m pytest -q -rs -p no:cacheprovider "$ROOT/tests/python" \
      >"$PYDIR/pytest.log" 2>&1)
    prc=$?
    set -e
    # pytest's last line is its summary ("12 passed, 1 skipped in 0.2s").
    if [ $prc != 0 ]; then cat "$PYDIR/pytest.log"; else grep -E '^SKIPPED' "$PYDIR/pytest.log" || true; fi
    echo "pytest: $(tail -1 "$PYDIR/pytest.log")"
    # "SKIPPED [2] tests/python/test_x.py:12: reason" counts 2 under reason.
    sed -n 's/^SKIPPED \[\([0-9]*\)\] [^ ]*:[0-9]*: \(.*\)/\1 \2/p' "$PYDIR/pytest.log" |
      while read -r n why; do for _ in $(seq "$n"); do echo "$why"; done; done >>"$SKIPS"
    pytest_n() { tail -1 "$PYDIR/pytest.log" | grep -oE "[0-9]+ $1" | grep -oE '^[0-9]+' || echo 0; }
    count pytest "$(pytest_n passed)" $(($(pytest_n failed) + $(pytest_n error))) "$(pytest_n skipped)"
    if [ $prc != 0 ]; then
      echo "test.sh: pytest exited $prc ($PYDIR/pytest.log; 5 means it collected no test)" >&2
      exit 1
    fi
  fi
fi

header "plain suite"
begin_phase plain
run_suite plain "$BUILD/suite.log" "$BUILD/p2pt-tests" --jobs "$jobs" "${criterion_args[@]}"

if [ "${P2PT_TEST_HIDDEN:-1}" != 0 ]; then
  header "elsewhere: the tree under a hidden folder, its CPU suite"
  begin_phase elsewhere
  if ! git -C "$ROOT" rev-parse --git-dir >/dev/null 2>&1; then
    echo "test.sh: phase 8 skipped: $ROOT is not a git checkout (its file list comes from git)"
    echo "elsewhere phase skipped: not a git checkout" >>"$SKIPS"
    count elsewhere 0 0 1
  else
    away=$(mktemp -d)
    copy=$away/.hidden/builds/p2pt
    mkdir -p "$copy"
    # The files a checkout of this tree has, changes not yet committed included.
    git -C "$ROOT" ls-files -z --cached --others --exclude-standard |
      (cd "$ROOT" && tar --null -T - --ignore-failed-read -cf - 2>/dev/null) | tar -xf - -C "$copy"
    (cd "$copy" && cmake -S . -B build -DP2PT_BUILD_BENCH=OFF "${cmake_args[@]}" >/dev/null &&
      cmake --build build -j"$jobs" >/dev/null)
    P2PT_TEST_NO_GPU=1 run_suite elsewhere "$copy/build/suite.log" "$copy/build/p2pt-tests" \
      --jobs "$jobs" "${criterion_args[@]}"
    rm -rf "$away"
  fi
fi
