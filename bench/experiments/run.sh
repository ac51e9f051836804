#!/usr/bin/env bash
# Build and run an experiment of this folder on a Hopper machine.
#   bench/experiments/run.sh variants [bytes...]  issuing patterns vs CE at large
#                                                 sizes (default 1 GiB, 256 MiB)
#   bench/experiments/run.sh small                small-copy start/exit variants
#   bench/experiments/run.sh enqueue BUILD        host time of one batch enqueue,
#                                                 validation off / in windows /
#                                                 without windows (BUILD: a cmake
#                                                 build dir of the repo)
# Output goes to stdout and, when $OUT is set, to $OUT/<experiment>.log.
set -euo pipefail
cd "$(dirname "$0")"
export PATH=/usr/local/cuda/bin:$PATH
what=${1:-variants}
shift || true
case "$what" in
  variants) src=tma_variants.cu ;;
  small) src=small_copies.cu ;;
  enqueue)
    build=$(cd "../../${1:?run.sh enqueue BUILD}" && pwd)
    cc -O2 -std=c11 -D_GNU_SOURCE -I../../src -I../../kernels -I../../include -I../../support \
      -I/usr/local/cuda/include -o /tmp/p2pt-enqueue batch_enqueue.c "$build/libp2pt_support.a" \
      "$build/libp2pt.a" -ldl -lpthread -lm
    /tmp/p2pt-enqueue | tee ${OUT:+$OUT/enqueue.log}
    exit ;;
  *) echo "run.sh: unknown experiment '$what' (variants, small, enqueue)" >&2; exit 2 ;;
esac
nvcc -O3 -std=c++17 -arch=sm_90 -Xptxas -v -o "/tmp/p2pt-$what" "$src" -lcuda 2>&1 |
  grep -E "registers|spill" | head -8
log=${OUT:+$OUT/$what.log}
if [ "$what" = variants ]; then
  for b in ${@:-1073741824 268435456}; do "/tmp/p2pt-$what" "$b"; done
else
  "/tmp/p2pt-$what"
fi 2>&1 | tee "${log:-/dev/null}"
