# busbw against size, one panel per collective, one line per library and transport, from the
# busbw-<collective>.dat files that bench/collect.py writes.
#
#   gnuplot -e "dir='build/bench-all'; out='docs/bench-busbw.png'" bench/plot.gp
#
# dir: where the .dat files are; out: the PNG; colls (optional): the collectives, one panel
# each (default "allreduce broadcast allgather"); title (optional): a line above the panels;
# last (optional): the last column plotted (default 7).
if (!exists("dir")) dir = "build/bench-all"
if (!exists("out")) out = dir . "/busbw.png"
if (!exists("colls")) colls = "allreduce broadcast allgather"
if (!exists("last")) last = 7  # the last column to plot (one line per column from 2)
if (!exists("title")) title = "busbw against size: 2 ranks, f32; allreduce and allgather out-of-place, broadcast in-place"

set terminal pngcairo size (500 * words(colls)),520 font "DejaVu Sans,10" noenhanced
set output out
set datafile separator "\t"
set datafile missing "NaN"
set key autotitle columnhead
set logscale x 2
set xtics ("8" 8, "128" 128, "2K" 2048, "32K" 32768, "512K" 524288, "8M" 8388608, \
           "128M" 134217728) nomirror
set mxtics 4
set xlabel "message size (bytes)"
set ylabel "busbw (GB/s)"
set grid xtics ytics lc rgb "#dddddd"
set yrange [0:*]
set key top left font ",9" spacing 1.1

# shm: solid; TCP: dashed. Same colour per library.
set linetype 1 lc rgb "#d62728" lw 2.5 pt 7 ps 0.7 dt 1
set linetype 2 lc rgb "#1f77b4" lw 1.5 pt 5 ps 0.6 dt 1
set linetype 3 lc rgb "#2ca02c" lw 1.5 pt 9 ps 0.7 dt 1
set linetype 4 lc rgb "#d62728" lw 2.5 pt 6 ps 0.7 dt 2
set linetype 5 lc rgb "#1f77b4" lw 1.5 pt 4 ps 0.6 dt 2
set linetype 6 lc rgb "#9467bd" lw 1.5 pt 8 ps 0.7 dt 2

set multiplot layout 1,words(colls) title title font ",12"
do for [coll in colls] {
  set title coll
  file = dir . "/busbw-" . coll . ".dat"
  plot for [i=2:last] file using 1:i with linespoints lt (i-1)
}
unset multiplot
