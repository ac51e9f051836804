#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# Build and run an experiment of this folder on a Hopper machine.
#   bench/experiments/run.sh variants [bytes...]  issuing patterns vs CE at large
#                                                 sizes (default 1 GiB, 256 MiB)
#   bench/experiments/run.sh small                small-copy start/exit variants
#   bench/experiments/run.sh local [bytes...]     SM-issued same-device copy patterns
#                                                 vs cuMemcpyAsync (default 64 MiB,
#                                                 256 MiB, 1 GiB), single launches
#   bench/experiments/run.sh b2b [bytes...]       the same, one copy alone and 8 back to
#                                                 back (programmatic dependent launch
#                                                 for p2pt's kernel, as the library does)
#   bench/experiments/run.sh probe [bytes]        how many free SMs the driver's
#                                                 device-to-device copy needs
#   bench/experiments/run.sh ncu [bytes]          ncu counters of cuMemcpyAsync, p2pt's
#                                                 streaming kernel and the best-guess vector
#                                                 copy, 8, 7 and 6 back to back
#                                                 (default 256 MiB; needs access to the
#                                                 GPU performance counters: root, or the
#                                                 driver's NVreg_RestrictProfilingToAdminUsers=0)
#   bench/experiments/run.sh enqueue BUILD        host time of one batch enqueue,
#                                                 validation off / in windows /
#                                                 without windows (BUILD: a cmake
#                                                 build dir of the repo)
#   bench/experiments/run.sh batch               the batch kernel built with other tile
#                                                 sizes, CTAs per SM and cache operators,
#                                                 on device batches vs one contiguous copy
#   bench/experiments/run.sh shapes [SHAPE]      grid shapes on uniform pieces (batch_shapes.cu),
#                                                 8 KiB and 4 KiB warp tiles, vs one contiguous copy
#   bench/experiments/run.sh trace [--shapes LIST]  device batches CTA by CTA (batch_trace.cu):
#                                                 when each CTA waited, planned and ended, on
#                                                 p2pt-bench's layouts, with the plain kernel
#                                                 and one contiguous copy timed beside
#   bench/experiments/run.sh cub [--shift N] [--shapes LIST]
#                                                 CUB's DeviceMemcpy::Batched on p2pt-bench's
#                                                 batch layouts (default: every shape, at
#                                                 shift 0 and at shift 7), then a Markdown
#                                                 table of the lines; p2pt-bench --mode batch
#                                                 --cub $OUT/cub.log takes them as its CUB anchor
#   bench/experiments/run.sh peer                scattered rows over NVLink (peer_batch.cu): the batch
#                                                 kernel at several grids, built as is and with plain
#                                                 stores (BATCH_ST_PLAIN), against a plain warp-per-row kernel and one
#                                                 contiguous copy-engine copy; push, pull, both (2 GPUs)
#   bench/experiments/run.sh peer-ncu [bytes]     ncu sections of one push batch of each kernel
#   bench/experiments/run.sh peer-split           one 512 MiB copy over NVLink split between the copy
#                                                 engine and the batch kernel, push, pull, bidir
#   bench/experiments/run.sh alltoall [gpus]      an alltoall of scattered rows between every GPU
#                                                 (peer_alltoall.cu): the copy engine per pair, the
#                                                 batch kernel and a plain kernel pushing, pulling, and
#                                                 pushing half of each pair's rows while the
#                                                 destination pulls the other half,
#                                                 at several grids; built as is and with 4 KiB tiles
#                                                 (A2A_VARIANTS="name|nvcc flags;...": other builds)
#   bench/experiments/run.sh ipc                  what imported memory answers the driver, and which
#                                                 engine reaches it (ipc_probe.c; 2 GPUs)
#   bench/experiments/run.sh beside               what may share an SM with the overlap mode's
#                                                 cuBLAS GEMM (beside_gemm.cu): spinners of
#                                                 other threads, registers and shared memory
# Output goes to stdout and, when $OUT is set, to $OUT/<experiment>.log.
set -euo pipefail
cd "$(dirname "$0")"
export PATH=/usr/local/cuda/bin:$PATH
what=${1:-variants}
shift || true
case "$what" in
  batch)
    # name|nvcc flags; one binary per variant (the kernel is included as is).
    variants=('default|'
              'ld-plain|-DBATCH_LD_PLAIN'
              'st-plain|-DBATCH_ST_PLAIN'
              'tile-4K-ctas-4|-DP2PT_BATCH_TILE=4096u -DP2PT_BATCH_CTAS_PER_SM=4'
              'grid-4|-DBATCH_GRID_PER_SM=4'
              'grid-8|-DBATCH_GRID_PER_SM=8'
              'ctas-3-tile-4K|-DP2PT_BATCH_TILE=4096u -DP2PT_BATCH_CTAS_PER_SM=3')
    log=${OUT:+$OUT/batch.log}
    log=${log:-/tmp/p2pt-batch-variants.log}
    : >"$log"
    for v in "${variants[@]}"; do
      name=${v%%|*}
      # BATCH_VARIANTS="default groups-2": only those
      case " ${BATCH_VARIANTS:-$name} " in *" $name "*) ;; *) continue ;; esac
      read -r -a flags <<<"${v#*|}"
      nvcc -O3 -std=c++17 -arch=sm_90 -I../../kernels -DVARIANT="\"$name\"" "${flags[@]}" \
        -o "/tmp/p2pt-batch-$name" batch_variants.cu 2>&1 | grep -E "error|warning" || true
      "/tmp/p2pt-batch-$name" 2>&1 | tee -a "$log"
    done
    # The baseline again: the machine's drift between the first and last.
    case " ${BATCH_VARIANTS:-default} " in *" default "*) "/tmp/p2pt-batch-default" 2>&1 | tee -a "$log" ;; esac
    exit 0 ;;
  peer)
    log=${OUT:+$OUT/peer.log}
    log=${log:-/tmp/p2pt-peer.log}
    : >"$log"
    for v in 'default|' 'st-plain|-DBATCH_ST_PLAIN'; do
      name=${v%%|*}
      read -r -a flags <<<"${v#*|}"
      nvcc -O3 -std=c++17 -arch=sm_90 -I../../kernels -DVARIANT="\"$name\"" "${flags[@]}" \
        -o "/tmp/p2pt-peer-$name" peer_batch.cu 2>&1 | grep -E "error|warning" || true
      "/tmp/p2pt-peer-$name" 2>&1 | tee -a "$log"
    done
    exit 0 ;;
  peer-split)
    nvcc -O3 -std=c++17 -arch=sm_90 -I../../kernels -o /tmp/p2pt-peer-split peer_batch.cu 2>&1 |
      grep -E "error|warning" || true
    /tmp/p2pt-peer-split split 2>&1 | tee ${OUT:+$OUT/peer-split.log}
    exit ;;
  alltoall)
    log=${OUT:+$OUT/alltoall.log}
    log=${log:-/tmp/p2pt-alltoall.log}
    : >"$log"
    # A2A_VARIANTS: name|nvcc flags, separated by ';'
    IFS=';' read -r -a variants <<<"${A2A_VARIANTS:-default|;tile-4K|-DP2PT_BATCH_TILE=4096u -DP2PT_BATCH_CTAS_PER_SM=4}"
    for v in "${variants[@]}"; do
      name=${v%%|*}
      read -r -a flags <<<"${v#*|}"
      nvcc -O3 -std=c++17 -arch=sm_90 -I../../kernels "${flags[@]}" \
        -o "/tmp/p2pt-a2a-$name" peer_alltoall.cu 2>&1 | grep -E "error|warning" || true
      echo "== $name" | tee -a "$log"
      "/tmp/p2pt-a2a-$name" "$@" 2>&1 | tee -a "$log"
    done
    exit 0 ;;
  peer-ncu)
    nvcc -O3 -std=c++17 -arch=sm_90 -lineinfo -I../../kernels -o /tmp/p2pt-peer-ncu peer_batch.cu 2>&1 |
      grep -E "error|warning" || true
    log=${OUT:+$OUT/peer-ncu.log}
    ncu --section SpeedOfLight --section MemoryWorkloadAnalysis --section WarpStateStats \
      --section LaunchStats --section Occupancy --section SchedulerStats \
      /tmp/p2pt-peer-ncu ncu "${1:-14336}" 2>&1 | tee "${log:-/dev/null}"
    exit 0 ;;
  beside)
    nvcc -O3 -std=c++17 -arch=sm_90 -Xptxas -v -o /tmp/p2pt-beside-gemm beside_gemm.cu -lcublas 2>&1 |
      grep -E "error|warning|registers" || true
    /tmp/p2pt-beside-gemm 2>&1 | tee ${OUT:+$OUT/beside.log}
    exit ;;
  ipc)
    cc -std=c11 -O2 -I/usr/local/cuda/include -o /tmp/p2pt-ipc-probe ipc_probe.c \
      -L/usr/local/cuda/lib64/stubs -lcuda
    /tmp/p2pt-ipc-probe 2>&1 | tee ${OUT:+$OUT/ipc.log}
    exit ;;
  shapes)
    log=${OUT:+$OUT/shapes.log}
    log=${log:-/tmp/p2pt-batch-shapes.log}
    : >"$log"
    for v in 'tile-8K|' 'tile-4K-ctas-4|-DP2PT_BATCH_TILE=4096u -DP2PT_BATCH_CTAS_PER_SM=4'; do
      name=${v%%|*}
      read -r -a flags <<<"${v#*|}"
      nvcc -O3 -std=c++17 -arch=sm_90 -I../../kernels "${flags[@]}" \
        -o "/tmp/p2pt-shapes-$name" batch_shapes.cu 2>&1 | grep -E "error|warning" || true
      echo "== $name" | tee -a "$log"
      "/tmp/p2pt-shapes-$name" "$@" 2>&1 | tee -a "$log"
    done
    exit 0 ;;
  trace)
    nvcc -O3 -std=c++17 -arch=sm_90 -I../../kernels -o /tmp/p2pt-batch-trace batch_trace.cu 2>&1 |
      grep -E "error|warning" || true
    /tmp/p2pt-batch-trace "$@" 2>&1 | tee ${OUT:+$OUT/trace.log}
    exit ;;
  variants) src=tma_variants.cu ;;
  small) src=small_copies.cu ;;
  local | b2b | probe | ncu) src=local_copy.cu ;;
  cub)
    # CUB is header-only and comes with the toolkit; nothing else to link.
    nvcc -O3 -std=c++17 -arch=sm_90 -o /tmp/p2pt-cub_batched cub_batched.cu
    log=${OUT:+$OUT/cub.log}
    if [ $# -eq 0 ]; then set -- --shift 0; again=(--shift 7); else again=(); fi
    log=${log:-/tmp/p2pt-cub.log} table=${OUT:+$OUT/cub-table.md}
    rc=0
    { r=0; /tmp/p2pt-cub_batched "$@" || r=1
      if [ ${#again[@]} -gt 0 ]; then /tmp/p2pt-cub_batched "${again[@]}" || r=1; fi
      exit $r; } 2>&1 | tee "$log" || rc=1
    echo
    echo "| shape | shift | pieces | bytes | CUB DeviceMemcpy::Batched, µs | GB/s | check |"
    echo "| --- | --- | --- | --- | --- | --- | --- |"
    awk '/^cub_batched / { for (i = 2; i <= NF; i++) { split($i, kv, "="); v[kv[1]] = kv[2] }
           printf "| %s | %s | %s | %s | %s | %s | %s |\n", v["shape"], v["shift"], v["pieces"],
                  v["bytes"], v["gpu_us"], v["gbps"], v["check"] }' "$log" |
      tee "${table:-/dev/null}"
    exit "$rc" ;;
  enqueue)
    build=$(cd "../../${1:?run.sh enqueue BUILD}" && pwd)
    cc -O2 -std=c11 -D_GNU_SOURCE -I../../src -I../../kernels -I../../include -I../../support \
      -I/usr/local/cuda/include -o /tmp/p2pt-enqueue batch_enqueue.c "$build/libp2pt_support.a" \
      "$build/libp2pt.a" -ldl -lpthread -lm
    /tmp/p2pt-enqueue | tee ${OUT:+$OUT/enqueue.log}
    exit ;;
  *) echo "run.sh: unknown experiment '$what' (variants, small, local, b2b, probe, ncu, enqueue, batch, shapes, trace, cub, peer, peer-ncu, peer-split, alltoall, ipc, beside)" >&2
     exit 2 ;;
esac
bin=/tmp/p2pt-${src%.cu}
# The first 8 register/spill lines, any spill that is not zero, any error or
# warning (awk reads everything: no SIGPIPE for nvcc under pipefail).
nvcc -O3 -std=c++17 -arch=sm_90 -Xptxas -v -o "$bin" "$src" -lcuda 2>&1 |
  awk '/error|warning/ || (/registers|spill/ && (++n <= 8 || (/spill/ && !/ 0 bytes spill stores, 0 bytes spill loads/)))'
log=${OUT:+$OUT/$what.log}
if [ "$what" = ncu ]; then
  # One ncu run per metric group, so that a metric this ncu or range replay
  # does not support loses only its group. The program marks three profiler
  # ranges (cuMemcpyAsync, p2pt's streaming kernel, the vector copy), in that order,
  # of 8, 7 and 6 copies: their DRAM bytes tell them apart if ncu drops one.
  command -v ncu >/dev/null || { echo "run.sh: ncu not found" >&2; exit 2; }
  dir=${OUT:-/tmp/p2pt-ncu}
  mkdir -p "$dir"
  declare -A groups=(
    [dram]="dram__bytes_read.sum,dram__bytes_write.sum,dram__throughput.avg.pct_of_peak_sustained_elapsed,gpu__time_duration.sum"
    [lts]="lts__t_sectors_srcunit_tex_op_read.sum,lts__t_sectors_srcunit_tex_op_write.sum,lts__t_sectors_op_read.sum,lts__t_sectors_op_write.sum,lts__t_sector_hit_rate.pct"
    [sm]="sm__warps_active.avg.pct_of_peak_sustained_active,sm__cycles_active.avg,sm__cycles_elapsed.avg,smsp__inst_executed.sum"
    [launch]="sm__ctas_launched.sum,smsp__warps_launched.sum"
  )
  : >"$dir/ncu.csv"
  for g in dram lts sm launch; do
    echo "== ncu group $g: ${groups[$g]}"
    ncu --replay-mode range --print-units base --csv \
      --metrics "${groups[$g]}" --log-file "$dir/ncu_$g.csv" "$bin" ncu "${1:-268435456}" ||
      echo "ncu group $g failed (exit $?)"
    { echo "# group $g"; cat "$dir/ncu_$g.csv" 2>/dev/null || true; } >>"$dir/ncu.csv"
  done 2>&1 | tee "${log:-/dev/null}"
  cat "$dir/ncu.csv"
  exit 0
fi
case "$what" in
  variants)
    [ $# -gt 0 ] || set -- 1073741824 268435456
    for b in "$@"; do "$bin" "$b"; done ;;
  local) "$bin" "$@" ;;
  b2b) "$bin" b2b "$@" ;;
  probe) "$bin" probe "$@" ;;
  *) "$bin" ;;
esac 2>&1 | tee "${log:-/dev/null}"
