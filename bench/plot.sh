#!/usr/bin/env bash
# Turn p2pt-bench's CSV (--csv FILE) into PNG figures with gnuplot:
#   OUTDIR/bandwidth_<path>.png   GB/s vs copy size (log x), one line per transport
#   OUTDIR/sweep_<path>.png       TMA GB/s vs chunk size, one line per stage count
#   OUTDIR/latency_<path>.png     single-copy host latency vs size
# usage: bench/plot.sh results.csv outdir
set -euo pipefail
if [ $# -ne 2 ]; then echo "usage: $0 results.csv outdir" >&2; exit 2; fi
csv=$1; out=$2
command -v gnuplot >/dev/null || { echo "plot.sh: gnuplot is not installed (apt-get install gnuplot-nox)" >&2; exit 1; }
[ -r "$csv" ] || { echo "plot.sh: cannot read $csv" >&2; exit 1; }
mkdir -p "$out"
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
term='set terminal pngcairo size 900,560 font ",11"'
gnuplot -e 'set terminal' 2>&1 | grep -q pngcairo || term='set terminal png size 900,560'

# columns: mode,path,transport,kind,bytes,chunk,stages,max_ctas,time_us,gbps
for path in local push pull bidir; do
  n=0
  for t in ce tma; do
    awk -F, -v p="$path" -v t="$t" '$1=="table" && $2==p && $3==t {print $5, $10}' "$csv" >"$tmp/$path.$t"
    [ -s "$tmp/$path.$t" ] && n=$((n+1))
  done
  [ $n -gt 0 ] || continue
  gnuplot <<GP
$term
set output "$out/bandwidth_$path.png"
set title "p2pt: $path copy bandwidth (payload GB/s)"
set logscale x 2
set format x "%.0s%cB"
set xlabel "copy size"; set ylabel "GB/s"; set key left top; set grid; set yrange [0:*]
plot "$tmp/$path.ce" using 1:2 with linespoints lw 2 title "ce (cuMemcpyAsync)", \
     "$tmp/$path.tma" using 1:2 with linespoints lw 2 title "tma (cp.async.bulk)"
GP
  echo "wrote $out/bandwidth_$path.png"
done

for path in local push; do
  # chunk sweep at the automatic CTA count (max_ctas 0)
  awk -F, -v p="$path" '$1=="sweep" && $2==p && $3=="tma" && $8==0 {print $7, $6, $10}' "$csv" | sort -n -k1,1 -k2,2 >"$tmp/sweep.$path"
  [ -s "$tmp/sweep.$path" ] || continue
  ce=$(awk -F, -v p="$path" '$1=="sweep" && $2==p && $3=="ce" {print $10; exit}' "$csv")
  plots=""
  for st in $(cut -d' ' -f1 "$tmp/sweep.$path" | sort -un); do
    awk -v s="$st" '$1==s {print $2, $3}' "$tmp/sweep.$path" >"$tmp/sweep.$path.$st"
    plots="$plots \"$tmp/sweep.$path.$st\" using 1:2 with linespoints lw 2 title \"$st stages\","
  done
  [ -n "$ce" ] && plots="$plots $ce with lines dt 2 lw 2 title \"ce\","
  gnuplot <<GP
$term
set output "$out/sweep_$path.png"
set title "p2pt: TMA chunk-size sweep, $path (GB/s)"
set logscale x 2
set format x "%.0s%cB"
set xlabel "chunk size"; set ylabel "GB/s"; set key right bottom; set grid; set yrange [0:*]
plot ${plots%,}
GP
  echo "wrote $out/sweep_$path.png"

  # CTA curve: bandwidth vs the CTA cap, 48 KiB chunks, one line per stage count
  awk -F, -v p="$path" '$1=="sweep" && $2==p && $3=="tma" && $6==49152 && $8>0 {print $7, $8, $10}' "$csv" | sort -n -k1,1 -k2,2 >"$tmp/ctas.$path"
  [ -s "$tmp/ctas.$path" ] || continue
  plots=""
  for st in $(cut -d' ' -f1 "$tmp/ctas.$path" | sort -un); do
    awk -v s="$st" '$1==s {print $2, $3}' "$tmp/ctas.$path" >"$tmp/ctas.$path.$st"
    plots="$plots \"$tmp/ctas.$path.$st\" using 1:2 with linespoints lw 2 title \"48K x $st stages\","
  done
  [ -n "$ce" ] && plots="$plots $ce with lines dt 2 lw 2 title \"ce\","
  gnuplot <<GP
$term
set output "$out/ctas_$path.png"
set title "p2pt: TMA bandwidth vs CTA cap, $path (GB/s)"
set logscale x 2
set xlabel "CTAs (P2P_TRANSPORT_MAX_CTAS)"; set ylabel "GB/s"; set key right bottom; set grid; set yrange [0:*]
plot ${plots%,}
GP
  echo "wrote $out/ctas_$path.png"
done

for path in local push pull; do
  for t in ce tma; do
    awk -F, -v p="$path" -v t="$t" '$1=="latency" && $2==p && $3==t && $4=="host" {print $5, $9}' "$csv" >"$tmp/lat.$path.$t"
  done
  [ -s "$tmp/lat.$path.ce" ] || continue
  gnuplot <<GP
$term
set output "$out/latency_$path.png"
set title "p2pt: single-copy latency, $path (enqueue to completion, host)"
set logscale x 2
set format x "%.0s%cB"
set xlabel "copy size"; set ylabel "microseconds"; set key left top; set grid
plot "$tmp/lat.$path.ce" using 1:2 with linespoints lw 2 title "ce", \
     "$tmp/lat.$path.tma" using 1:2 with linespoints lw 2 title "tma"
GP
  echo "wrote $out/latency_$path.png"
done
