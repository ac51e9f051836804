#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# The fault-injection loop on a GPU machine: the same workload and schedule
# as in CI (tests/fault/fault_loop.c), but the library under p2pt is the shim
# libp2pt_fault_cuda.so over the real driver, and NVRTC is the real one, so
# every failure path runs against real contexts, modules and launches.
# With two GPUs the workload copies between devices 0 and 1; with one, its
# peer steps run on device 0. Skips, with the reason and exit status 0, where
# there is no driver or no GPU.
#
#   tests/fault/run-gpu.sh [build-dir]     (default build-fault-gpu/)
#   P2PT_FAULT_JOBS=N tests/fault/run-gpu.sh   N runs at once (default: cores, at most 8)
#
# Record the summary line in tests/GPU_RUNS.md with the commit it ran at.
set -euo pipefail
cd "$(dirname "$0")/../.."
build=${1:-build-fault-gpu}
# Runs at once: P2PT_FAULT_JOBS, else the cores up to 8. Each run makes
# contexts on two GPUs and forks an exporter that makes its own; 64 at once on
# a four-GPU host outlasted the loop's 60 s in 192 runs of 196, 8 at once on a
# two-GPU host in none (tests/GPU_RUNS.md).
jobs=${P2PT_FAULT_JOBS:-$(n=$(nproc 2>/dev/null || echo 2); echo $((n < 8 ? n : 8)))}
cmake_args=(-DP2PT_BUILD_TESTS=ON -DP2PT_BUILD_BENCH=OFF)
if [ -d .gpudeps/include/criterion ]; then
  cmake_args+=(-DCRITERION_ROOT="$PWD/.gpudeps")
  export LD_LIBRARY_PATH="$PWD/.gpudeps/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
fi
cmake -S . -B "$build" "${cmake_args[@]}" >/dev/null
cmake --build "$build" -j"$jobs" --target p2pt-fault-loop >/dev/null
build=$(cd "$build" && pwd)

real=${P2PT_FAULT_REAL_CUDA:-libcuda.so.1}
nvrtc=${P2P_NVRTC_LIBRARY:-}
if [ -z "$nvrtc" ]; then
  for c in /usr/local/cuda/lib64/libnvrtc.so.13 /usr/local/cuda/lib64/libnvrtc.so.12; do
    [ -e "$c" ] && nvrtc=$c && break
  done
fi
# A plain run of the workload on the real driver first: it is the check
# that there is a driver and a GPU, and its output says why not.
if ! out=$(P2P_CUDA_LIBRARY="$real" P2P_NVRTC_LIBRARY="$nvrtc" P2P_TRANSPORT_CACHE_DIR=off \
    "$build/p2pt-fault-workload" 2>&1 >/dev/null); then
  echo "run-gpu.sh: skipped: the workload cannot run on this machine's driver: ${out:-no reason given}"
  exit 0
fi
P2PT_FAULT_GPU=1 P2PT_FAULT_REAL_CUDA="$real" "$build/p2pt-fault-loop" \
  "$build/p2pt-fault-workload" "$build/libp2pt_fault_cuda.so" "${nvrtc:-libnvrtc.so.13}" "$jobs"
