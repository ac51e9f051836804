#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# Turn p2pt-bench's CSV (p2pt-bench --csv FILE) into PNG figures with gnuplot.
#
#   usage: bench/plot.sh results.csv outdir
#
# Writes, for what the CSV holds:
#   bandwidth_<path>.png  GB/s vs copy size (log x), one line per transport
#                         (ce, tma, auto)
#   ratio.png             tma/ce bandwidth vs copy size, one line per path
#   auto_best.png         auto over the faster of ce and tma (bandwidth), one
#                         line per path (when the CSV has all three)
#   sweep_<path>.png      TMA GB/s vs chunk size, one line per stages x CTA cap,
#                         the copy engine as a dashed line
#   ctas_<path>.png       TMA GB/s vs CTA cap, one line per chunk x stages
#                         (when the sweep had two or more CTA caps besides auto)
#   latency_<path>.png    microseconds vs copy size: b2b, b2b_gpu, host, dev per transport
#   batch.png             GB/s of one operation per batch shape: tma host and
#                         device descriptors, ce batch, auto (host
#                         descriptors), ref_kernel, one contiguous copy
#   batch_time.png        GPU time of one operation per batch shape (log y),
#                         the same rows
#   batch_ctas.png        GB/s of tma_host and tma_device against the CTA cap
#                         (p2pt-bench --ctas), one line per row x shape
#
# Columns are found by name in the header line, so the column order of the
# CSV does not matter.
set -euo pipefail

die() { echo "plot.sh: $*" >&2; exit 1; }

if [ $# -ne 2 ] || [ "${1:-}" = "-h" ] || [ "${1:-}" = "--help" ]; then
  echo "usage: bench/plot.sh results.csv outdir" >&2
  exit 2
fi
csv=$1
out=$2

command -v gnuplot >/dev/null 2>&1 ||
  die "gnuplot is not installed, so no PNG was written (Debian/Ubuntu: apt-get install gnuplot-nox)"
[ -r "$csv" ] || die "cannot read $csv"
for c in mode path transport bytes gbps time_us; do
  head -n 1 "$csv" | tr -d '\r' | tr ',' '\n' | grep -qx "$c" ||
    die "$csv has no \"$c\" column: is it a p2pt-bench --csv file?"
done
[ "$(wc -l <"$csv")" -gt 1 ] || die "$csv holds no measurements"
mkdir -p "$out" || die "cannot create $out"

tmp=$(mktemp -d) || die "mktemp failed"
trap 'rm -rf "$tmp"' EXIT

# pngcairo draws smoother lines; the plain png terminal is the fallback.
if gnuplot -e 'set terminal pngcairo' >/dev/null 2>&1; then
  term='set terminal pngcairo size 960,600 font ",11"'
else
  term='set terminal png size 960,600'
fi

# sel FILTER FIELDS: the rows of the CSV matching FILTER (an awk condition on
# named columns, e.g. c["mode"]=="table"), printing FIELDS (space-separated
# column names), sorted numerically on the first field.
sel() {
  awk -F, -v filter="$1" -v fields="$2" '
    NR == 1 {
      gsub(/\r/, "")
      for (i = 1; i <= NF; i++) idx[$i] = i
      nf = split(fields, f, " ")
      nc = split(filter, conds, "&")
      next
    }
    {
      gsub(/\r/, "")
      for (k in idx) c[k] = $(idx[k])
      ok = 1
      for (j = 1; j <= nc; j++) {
        split(conds[j], kv, "=")
        if (!(kv[1] in idx) || c[kv[1]] != kv[2]) ok = 0
      }
      if (!ok) next
      line = ""
      for (j = 1; j <= nf; j++) line = line (j > 1 ? " " : "") c[f[j]]
      print line
    }' "$csv" | sort -g -k1,1
}

# values COLUMN FILTER: the distinct values of COLUMN among matching rows.
values() { sel "$2" "$1" | sort -u -g; }

# human BYTES: 1073741824 -> 1G, 49152 -> 48K.
human() {
  awk -v b="$1" 'BEGIN {
    split("G M K", u, " "); split("1073741824 1048576 1024", m, " ")
    for (i = 1; i <= 3; i++) if (b >= m[i] && b % m[i] == 0) { print b / m[i] u[i]; exit }
    print b }'
}

count=0
plot() { # plot FILE TITLE XLABEL YLABEL LOGX(0|1|2) PLOTCMD [KEY]
  local file=$1 title=$2 xl=$3 yl=$4 logx=$5 cmd=$6 key=${7:-left top} xfmt=""
  # 1: log x with binary-prefixed byte labels; 2: log x with plain numbers.
  [ "$logx" = 1 ] && xfmt='set logscale x 2; set format x "%.0b%B"'
  [ "$logx" = 2 ] && xfmt='set logscale x 2'
  gnuplot <<GP || die "gnuplot failed on $file"
$term
set termoption noenhanced
set output "$out/$file"
set title "$title" noenhanced
set xlabel "$xl"; set ylabel "$yl"
$xfmt
set grid; set key $key noenhanced; set yrange [0:*]
plot $cmd
GP
  echo "wrote $out/$file"
  count=$((count + 1))
}

have_kind=0
head -n 1 "$csv" | tr -d '\r' | tr ',' '\n' | grep -qx kind && have_kind=1

# ---- bandwidth per path, and the tma/ce ratio
ratio_cmd=""
best_cmd=""
for path in local push pull bidir; do
  cmd=""
  for t in ce tma auto; do
    sel "mode=table&path=$path&transport=$t" "bytes gbps" >"$tmp/bw.$path.$t"
    [ -s "$tmp/bw.$path.$t" ] || continue
    name=$t; [ "$t" = ce ] && name="ce (cuMemcpyAsync)"; [ "$t" = tma ] && name="tma (cp.async.bulk)"
    [ "$t" = auto ] && name="auto (table's choice)"
    cmd="$cmd \"$tmp/bw.$path.$t\" using 1:2 with linespoints lw 2 pt 7 ps 0.8 title \"$name\","
  done
  [ -n "$cmd" ] || continue
  extra=""; [ "$path" = bidir ] && extra=", both directions"
  plot "bandwidth_$path.png" "p2pt $path copy bandwidth (payload GB/s$extra)" \
    "copy size (bytes)" "GB/s" 1 "${cmd%,}"
  if [ -s "$tmp/bw.$path.ce" ] && [ -s "$tmp/bw.$path.tma" ]; then
    join <(sort -k1,1 "$tmp/bw.$path.ce") <(sort -k1,1 "$tmp/bw.$path.tma") |
      awk '$2 > 0 {print $1, $3 / $2}' | sort -g -k1,1 >"$tmp/ratio.$path"
    [ -s "$tmp/ratio.$path" ] &&
      ratio_cmd="$ratio_cmd \"$tmp/ratio.$path\" using 1:2 with linespoints lw 2 pt 7 ps 0.8 title \"$path\","
  fi
  if [ -s "$tmp/bw.$path.ce" ] && [ -s "$tmp/bw.$path.tma" ] && [ -s "$tmp/bw.$path.auto" ]; then
    join <(join <(sort -k1,1 "$tmp/bw.$path.ce") <(sort -k1,1 "$tmp/bw.$path.tma")) \
      <(sort -k1,1 "$tmp/bw.$path.auto") |
      awk '{b = $2 > $3 ? $2 : $3; if (b > 0) print $1, $4 / b}' | sort -g -k1,1 >"$tmp/best.$path"
    [ -s "$tmp/best.$path" ] &&
      best_cmd="$best_cmd \"$tmp/best.$path\" using 1:2 with linespoints lw 2 pt 7 ps 0.8 title \"$path\","
  fi
done
if [ -n "$best_cmd" ]; then
  plot auto_best.png "p2pt: auto / max(ce, tma) bandwidth (1 = the faster engine)" \
    "copy size (bytes)" "auto / best" 1 "$best_cmd 1 with lines dt 2 lc rgb \"gray\" notitle, 0.97 with lines dt 3 lc rgb \"red\" title \"0.97\""
fi
if [ -n "$ratio_cmd" ]; then
  plot ratio.png "p2pt: tma/ce bandwidth ratio (1 = equal)" "copy size (bytes)" "tma / ce" 1 \
    "$ratio_cmd 1 with lines dt 2 lc rgb \"gray\" notitle"
fi

# ---- sweep: GB/s vs chunk, one line per stages x CTA cap
for path in local push; do
  rows=$(sel "mode=sweep&path=$path&transport=tma" "chunk stages max_ctas gbps")
  [ -n "$rows" ] || continue
  echo "$rows" >"$tmp/sweep.$path"
  cmd=""
  i=0
  while read -r st m; do
    awk -v s="$st" -v m="$m" '$2 == s && $3 == m {print $1, $4}' "$tmp/sweep.$path" |
      sort -g -k1,1 >"$tmp/sweep.$path.$i"
    cap=$m; [ "$m" = 0 ] && cap=auto
    cmd="$cmd \"$tmp/sweep.$path.$i\" using 1:2 with linespoints lw 2 pt 7 ps 0.8 title \"$st stages, CTAs $cap\","
    i=$((i + 1))
  done < <(awk '{print $2, $3}' "$tmp/sweep.$path" | sort -u -k2,2g -k1,1g)
  ce=$(sel "mode=sweep&path=$path&transport=ce" "gbps" | head -n 1)
  [ -n "$ce" ] && cmd="$cmd $ce with lines dt 2 lw 2 lc rgb \"black\" title \"ce\","
  bytes=$(human "$(sel "mode=sweep&path=$path&transport=tma" "bytes" | head -n 1)")
  plot "sweep_$path.png" "p2pt TMA chunk-size sweep, $path, $bytes copies" \
    "chunk (bytes)" "GB/s" 1 "${cmd%,}" "outside right top"

  # CTA curve: needs at least two explicit caps.
  if [ "$(awk '$3 > 0 {print $3}' "$tmp/sweep.$path" | sort -u | wc -l)" -ge 2 ]; then
    cmd=""
    i=0
    while read -r ch st; do
      awk -v c="$ch" -v s="$st" '$1 == c && $2 == s && $3 > 0 {print $3, $4}' "$tmp/sweep.$path" |
        sort -g -k1,1 >"$tmp/ctas.$path.$i"
      cmd="$cmd \"$tmp/ctas.$path.$i\" using 1:2 with linespoints lw 2 pt 7 ps 0.8 title \"$(human "$ch") x $st stages\","
      i=$((i + 1))
    done < <(awk '$3 > 0 {print $1, $2}' "$tmp/sweep.$path" | sort -u -k1,1g -k2,2g)
    [ -n "$ce" ] && cmd="$cmd $ce with lines dt 2 lw 2 lc rgb \"black\" title \"ce\","
    plot "ctas_$path.png" "p2pt TMA bandwidth vs CTA cap, $path, $bytes copies" \
      "CTAs (P2P_TRANSPORT_MAX_CTAS)" "GB/s" 2 "${cmd%,}" "outside right top"
  fi
done

# ---- latency
if [ "$have_kind" = 1 ]; then
  for path in local push pull; do
    cmd=""
    for t in ce tma auto; do
      for k in b2b b2b_gpu host dev device; do # "device": older CSVs
        sel "mode=latency&path=$path&transport=$t&kind=$k" "bytes time_us" >"$tmp/lat.$path.$t.$k"
        [ -s "$tmp/lat.$path.$t.$k" ] || continue
        dt=1; [ "$t" = tma ] && dt=2; [ "$t" = auto ] && dt=3
        cmd="$cmd \"$tmp/lat.$path.$t.$k\" using 1:2 with linespoints lw 2 dt $dt pt 7 ps 0.8 title \"$t $k\","
      done
    done
    [ -n "$cmd" ] || continue
    plot "latency_$path.png" \
      "p2pt small copies, $path: b2b (b2b_gpu: queued), host (enqueue to sync), dev (events)" \
      "copy size (bytes)" "microseconds" 1 "${cmd%,}" "outside right top"
  done
fi

# ---- batches: one group of bars per shape (kind is "row:shape"; rows of the
# --ctas sweep are "row@cap:shape")
batch_rows="contig_ce ref_kernel tma_device tma_host ce_batch auto_host"
batch_table() { # FIELD (gbps or time_us) -> shape, then one column per row
  awk -F, -v field="$1" -v rows="$batch_rows" '
    NR == 1 { gsub(/\r/, ""); for (i = 1; i <= NF; i++) idx[$i] = i; next }
    { gsub(/\r/, "") }
    $(idx["mode"]) == "batch" && $(idx["kind"]) !~ /_enq:/ && $(idx["kind"]) !~ /@/ {
      split($(idx["kind"]), rk, ":"); v[rk[2], rk[1]] = $(idx[field])
      if (!(rk[2] in seen)) { seen[rk[2]] = 1; order[++n] = rk[2] } }
    END {
      if (n == 0) exit
      nr = split(rows, r, " ")
      printf "shape"; for (j = 1; j <= nr; j++) printf " %s", r[j]; print ""
      for (i = 1; i <= n; i++) { s = order[i]; printf "%s", s
        for (j = 1; j <= nr; j++) printf " %s", ((s, r[j]) in v ? v[s, r[j]] : "NaN")
        print "" } }' "$csv"
}
if [ "$have_kind" = 1 ]; then
  batch_table gbps >"$tmp/batch"
  batch_table time_us >"$tmp/batch_time"
  bars='using 2:xtic(1) title columnheader, "" using 3 title columnheader, "" using 4 title columnheader, "" using 5 title columnheader, "" using 6 title columnheader, "" using 7 title columnheader'
  if [ -s "$tmp/batch" ]; then
    gnuplot <<GP || die "gnuplot failed on batch.png"
$term
set termoption noenhanced
set output "$out/batch.png"
set title "p2pt batches: payload GB/s of one operation, scattered destinations" noenhanced
set ylabel "GB/s"; set grid ytics; set yrange [0:*]
set datafile missing "NaN"
set style data histograms; set style histogram clustered gap 1; set style fill solid 0.8 border -1
set key left top noenhanced
plot "$tmp/batch" $bars
GP
    echo "wrote $out/batch.png"
    count=$((count + 1))
    gnuplot <<GP || die "gnuplot failed on batch_time.png"
$term
set termoption noenhanced
set output "$out/batch_time.png"
set title "p2pt batches: GPU time of one operation (lower is better)" noenhanced
set ylabel "microseconds"; set grid ytics; set logscale y
set datafile missing "NaN"
set style data histograms; set style histogram clustered gap 1; set style fill solid 0.8 border -1
set key left top noenhanced
plot "$tmp/batch_time" $bars
GP
    echo "wrote $out/batch_time.png"
    count=$((count + 1))
  fi
  # The CTA-cap sweep: one block per row x shape, cap then GB/s.
  awk -F, 'NR == 1 { gsub(/\r/, ""); for (i = 1; i <= NF; i++) idx[$i] = i; next }
    { gsub(/\r/, "") }
    $(idx["mode"]) == "batch" && $(idx["kind"]) ~ /@/ && $(idx["kind"]) !~ /_enq:/ {
      split($(idx["kind"]), rk, ":"); split(rk[1], rc, "@")
      print rc[1] ":" rk[2], rc[2], $(idx["gbps"]) }' "$csv" | sort -k1,1 -k2,2g >"$tmp/ctas_all"
  if [ -s "$tmp/ctas_all" ]; then
    cmd="" i=0
    for key in $(cut -d" " -f1 "$tmp/ctas_all" | uniq); do
      i=$((i + 1))
      awk -v k="$key" '$1 == k { print $2, $3 }' "$tmp/ctas_all" >"$tmp/ctas_$i"
      cmd="$cmd \"$tmp/ctas_$i\" using 1:2 with linespoints title \"$key\","
    done
    gnuplot <<GP || die "gnuplot failed on batch_ctas.png"
$term
set termoption noenhanced
set output "$out/batch_ctas.png"
set title "p2pt batches: GB/s against the CTA cap (P2P_TRANSPORT_MAX_CTAS; 0 = automatic)" noenhanced
set xlabel "CTA cap"; set ylabel "GB/s"; set grid; set yrange [0:*]
set key outside right top noenhanced
plot ${cmd%,}
GP
    echo "wrote $out/batch_ctas.png"
    count=$((count + 1))
  fi
fi

[ "$count" -gt 0 ] || die "no table, sweep, latency or batch rows in $csv: nothing to plot"
echo "plot.sh: $count PNG file(s) in $out"
