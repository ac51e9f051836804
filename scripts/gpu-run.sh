#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# One job on a GPU machine: build, run the whole suite once per
# transport, then the benchmark. Everything is logged under $OUT (or
# ./gpu-out). Usage:
#   scripts/gpu-run.sh [tests] [batch] [offload] [alltoall] [python] [bench -- <p2pt-bench args>]
#   batch: CUB's DeviceMemcpy::Batched (bench/experiments/run.sh cub), then
#          p2pt-bench --mode batch with every shape, at --shift 7, with
#          --memory host --dir h2d and d2h, and the --ctas sweep for
#          1024x14K and 16384x32K; batch*.log and batch*.csv under $OUT
#   offload: p2pt-bench --mode overlap (KV offload beside a cuBLAS GEMM), every
#          piece size, layout, engine and budgets default and 0; overlap.log and
#          overlap.csv under $OUT
#   alltoall: p2pt-bench --mode alltoall on every visible GPU (alltoall.log,
#          alltoall.csv), then with --gpus 2 when more than 2 are visible
#          (alltoall-gpus2.log, alltoall-gpus2.csv)
#   python: pytest tests/python with the system's PyTorch, on build/'s library,
#          then examples/kv_offload.py --overlap
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-$PWD/gpu-out}
mkdir -p "$OUT"
OUT=$(cd "$OUT" && pwd) # absolute, exported: bench/experiments/run.sh writes there too
export OUT
export LD_LIBRARY_PATH="$PWD/.gpudeps/lib:/usr/local/cuda/lib64${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
export PATH=/usr/local/cuda/bin:$PATH
{ nvidia-smi -L; nvidia-smi topo -m; git rev-parse HEAD 2>/dev/null; date -u; } >"$OUT/machine.txt" 2>&1
cat "$OUT/machine.txt"
cmake -S . -B build -DCRITERION_ROOT="$PWD/.gpudeps" ${P2PT_CMAKE_EXTRA:-} >"$OUT/build.log" 2>&1 &&
  cmake --build build -j"$(nproc)" >>"$OUT/build.log" 2>&1 || { tail -30 "$OUT/build.log"; exit 1; }
rc=0
want_tests=0; want_bench=0; want_batch=0; want_offload=0; want_alltoall=0; want_python=0
bench_args=()
while [ $# -gt 0 ]; do
  case "$1" in
    tests) want_tests=1 ;;
    batch) want_batch=1 ;;
    offload) want_offload=1 ;;
    alltoall) want_alltoall=1 ;;
    python) want_python=1 ;;
    bench) want_bench=1 ;;
    --) shift; bench_args=("$@"); break ;;
  esac
  shift
done
if [ $want_tests = 1 ]; then
  for t in ce tma auto; do
    echo "== p2pt-tests with P2P_TRANSPORT=$t"
    P2P_TRANSPORT=$t timeout 300 ./build/p2pt-tests --jobs 4 --verbose >"$OUT/tests-$t.log" 2>&1 || rc=1
    grep -E "Synthesis|FAIL|SKIP|CRASH|Crash|Warning|Assertion|failed" "$OUT/tests-$t.log" | head -60
  done
fi
if [ $want_batch = 1 ]; then
  echo "== bench/experiments/run.sh cub"
  bench/experiments/run.sh cub >"$OUT/cub-run.log" 2>&1 || rc=1
  cat "$OUT/cub-run.log"
  # name, then p2pt-bench's arguments besides --mode batch
  runs=("batch|--cub $OUT/cub.log"
        "batch-shift7|--shift 7 --cub $OUT/cub.log"
        "batch-h2d|--memory host --dir h2d"
        "batch-d2h|--memory host --dir d2h"
        "batch-ctas|--shapes 1024x14K,16384x32K --transport ce,tma --ctas 0,8,16,32,66,132 --cub $OUT/cub.log")
  for r in "${runs[@]}"; do
    name=${r%%|*}; read -r -a args <<<"${r#*|}"
    echo "== p2pt-bench --mode batch ${args[*]}"
    timeout 300 ./build/p2pt-bench --mode batch "${args[@]}" --csv "$OUT/$name.csv" \
      >"$OUT/$name.log" 2>&1 || rc=1
    cat "$OUT/$name.log"
  done
  if command -v gnuplot >/dev/null; then
    bench/plot.sh "$OUT/batch.csv" "$OUT/plots" || rc=1
  fi
fi
if [ $want_offload = 1 ]; then
  echo "== p2pt-bench --mode overlap"
  timeout 400 ./build/p2pt-bench --mode overlap --overlap-csv "$OUT/overlap.csv" \
    >"$OUT/overlap.log" 2>&1 || rc=1
  grep -v '^# p2pt counters' "$OUT/overlap.log"
fi
if [ $want_alltoall = 1 ]; then
  gpus=$(nvidia-smi -L 2>/dev/null | grep -c '^GPU')
  runs=("alltoall|")
  [ "${gpus:-0}" -gt 2 ] && runs+=("alltoall-gpus2|--gpus 2")
  for r in "${runs[@]}"; do
    name=${r%%|*}; read -r -a args <<<"${r#*|}"
    echo "== p2pt-bench --mode alltoall ${args[*]+${args[*]}}"
    timeout 500 ./build/p2pt-bench --mode alltoall ${args[@]+"${args[@]}"} --csv "$OUT/$name.csv" \
      >"$OUT/$name.log" 2>&1 || rc=1
    grep -v '^# p2pt counters' "$OUT/$name.log"
  done
fi
if [ $want_python = 1 ]; then
  echo "== pytest tests/python (p2pt.torch on the GPU)"
  P2PT_LIBRARY=$PWD/build/libp2pt.so P2PT_LAYOUT_PROBE=$PWD/build/p2pt-struct-layout \
    P2P_TRANSPORT_CACHE_DIR=off timeout 400 python3 -m pytest -v -rs -p no:cacheprovider \
    tests/python >"$OUT/pytest.log" 2>&1 || rc=1
  grep -E "PASSED|FAILED|SKIPPED|ERROR|passed|failed" "$OUT/pytest.log" | tail -40
  echo "== examples/kv_offload.py --overlap"
  PYTHONUNBUFFERED=1 P2PT_LIBRARY=$PWD/build/libp2pt.so timeout 300 python3 \
    examples/kv_offload.py --overlap >"$OUT/kv_offload.log" 2>&1 || rc=1
  cat "$OUT/kv_offload.log"
fi
if [ $want_bench = 1 ]; then
  echo "== p2pt-bench ${bench_args[*]}"
  timeout 400 ./build/p2pt-bench "${bench_args[@]}" 2>&1 | tee "$OUT/bench.log" || rc=1
fi
exit $rc
