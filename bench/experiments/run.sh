#!/usr/bin/env bash
# Build and run the kernel-variant experiment on a Hopper machine.
# Usage: bench/experiments/run.sh [bytes...]   (default: 1 GiB and 256 MiB)
# Output goes to stdout and, when $OUT is set, to $OUT/variants.log.
set -euo pipefail
cd "$(dirname "$0")"
export PATH=/usr/local/cuda/bin:$PATH
nvcc -O3 -std=c++17 -arch=sm_90 -Xptxas -v -o /tmp/tma_variants tma_variants.cu -lcuda 2>&1 |
  grep -E "registers|spill" | head -8
log=${OUT:+$OUT/variants.log}
for b in ${@:-1073741824 268435456}; do
  /tmp/tma_variants $b
done 2>&1 | tee ${log:-/dev/null}
