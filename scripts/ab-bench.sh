#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# p2pt-bench of an older commit against this tree, on one GPU machine, the
# two run alternately (old first) so that the machine's drift falls on both.
# Two steps, because a tree copied to a GPU machine carries no .git:
#
#   scripts/ab-bench.sh prepare COMMIT
#       here, in a git checkout: COMMIT's source (less bench/results) into
#       build-ab/old, its name into build-ab/old/COMMIT
#   scripts/ab-bench.sh run ROUNDS -- P2PT-BENCH ARGS...
#       on the GPU machine (build-ab carried with the tree): builds both
#       trees' p2pt-bench, then runs each ROUNDS times with the same
#       arguments and P2P_TRANSPORT_CACHE_DIR=off, writing
#       $OUT/ab-<round>-<old|new>.csv (--csv, or --overlap-csv with
#       --mode overlap) and .log; a round's CSVs compare row by row.
#   scripts/ab-bench.sh summary DIR
#       each row's time_us over the rounds in DIR: old and new, the median
#       and the range, and new / old of the medians.
set -euo pipefail
cd "$(dirname "$0")/.."
usage() {
  sed -n '3,18p' "$0" | sed 's/^# \{0,1\}//' >&2
  exit 2
}
case "${1:-}" in
  prepare)
    [ $# -eq 2 ] || usage
    commit=$(git rev-parse --short "$2^{commit}") || {
      echo "ab-bench.sh: $2 is not a commit here" >&2
      exit 2
    }
    rm -rf build-ab # builds from an earlier run too: what is carried stays small
    mkdir -p build-ab/old
    git archive "$commit" | tar -x -C build-ab/old
    rm -rf build-ab/old/bench/results
    echo "$commit" >build-ab/old/COMMIT
    echo "ab-bench.sh: $commit in build-ab/old ($(du -sh build-ab/old | cut -f1)); carry build-ab"
    ;;
  run)
    [ $# -ge 3 ] && [ "$3" = "--" ] || usage
    rounds=$2
    shift 3
    case "$rounds" in '' | *[!0-9]*) echo "ab-bench.sh: ROUNDS $rounds: expected a count" >&2; exit 2 ;; esac
    [ -f build-ab/old/COMMIT ] || {
      echo "ab-bench.sh: no build-ab/old: run 'scripts/ab-bench.sh prepare COMMIT' first and carry build-ab" >&2
      exit 2
    }
    OUT=${OUT:-$PWD/gpu-out}
    mkdir -p "$OUT"
    export PATH=/usr/local/cuda/bin:$PATH P2P_TRANSPORT_CACHE_DIR=off
    csv=--csv
    for a in "$@"; do [ "$a" = overlap ] && csv=--overlap-csv; done
    for side in new old; do
      src=.
      [ $side = old ] && src=build-ab/old
      { cmake -S $src -B build-ab/build-$side && cmake --build build-ab/build-$side -j"$(nproc)" \
        --target p2pt-bench; } >build-ab/build-$side.log 2>&1 || {
        tail -20 build-ab/build-$side.log
        exit 1
      }
    done
    echo "ab-bench.sh: old $(cat build-ab/old/COMMIT), new this tree; p2pt-bench $*"
    for ((r = 1; r <= rounds; r++)); do
      for side in old new; do
        s=$(date +%s)
        rc=0
        build-ab/build-$side/p2pt-bench "$@" $csv "$OUT/ab-$r-$side.csv" >"$OUT/ab-$r-$side.log" 2>&1 || rc=$?
        echo "round $r $side: rc $rc, $(($(date +%s) - s)) s"
      done
    done
    ;;
  summary)
    [ $# -eq 2 ] || usage
    python3 - "$2" <<'PY'
import csv, glob, os, statistics, sys
t = {}
for f in sorted(glob.glob(os.path.join(sys.argv[1], "ab-*-*.csv"))):
    side = f.rsplit("-", 1)[1][:-4]
    for r in csv.DictReader(open(f)):
        key = r.get("kind") or r.get("way") or r.get("row")
        t.setdefault(key, {}).setdefault(side, []).append(float(r["time_us"]))
print(f"{'row':<28} {'old median [range]':>28} {'new median [range]':>28} {'new/old':>8}")
for k, v in t.items():
    if len(v) < 2:
        continue
    o, n = v.get("old", []), v.get("new", [])
    mo, mn = statistics.median(o), statistics.median(n)
    print(f"{k:<28} {mo:10.2f} [{min(o):.2f}-{max(o):.2f}] {mn:10.2f} [{min(n):.2f}-{max(n):.2f}] "
          f"{mn / mo if mo else 0:8.3f}")
PY
    ;;
  *) usage ;;
esac
