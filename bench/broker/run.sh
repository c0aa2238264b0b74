#!/bin/sh
# run.sh BUILD OUT: headroomd beside redis-server, both on a Unix socket
# in a temporary folder (no TCP port), in one run; then the memory of a
# daemon holding 1,000 clients and the cost of the client's hot-path read.
# Writes a Markdown report to OUT and prints it. `make bench-broker`.
#
#   BENCH_SECONDS (5)    measured seconds per run (after 0.5 s of warm-up)
#   BENCH_CLIENTS ("1 16 256")
#
# With two or more CPUs the servers run on CPU 1 and the load generator on
# CPU 0 (taskset), so each server has one core to itself.
set -eu
build=$1
out=$2
secs=${BENCH_SECONDS:-5}
levels=${BENCH_CLIENTS:-1 16 256}
top=$(pwd)
bench=$top/$build/tests/bench_broker
hot=$top/$build/tests/bench_hotpath
for t in redis-server redis-benchmark valgrind strace taskset; do
  if ! command -v $t >/dev/null 2>&1; then
    echo "make bench-broker: $t not found (Debian: apt-get install redis-server redis-tools valgrind strace util-linux)"
    exit 1
  fi
done

dir=$(mktemp -d /tmp/hr-bench-XXXXXX)
hd_pid=
rd_pid=
cleanup() {
  [ -n "$hd_pid" ] && kill "$hd_pid" 2>/dev/null
  [ -n "$rd_pid" ] && kill "$rd_pid" 2>/dev/null
  wait 2>/dev/null
  rm -rf "$dir"
}
trap cleanup EXIT INT TERM

if [ "$(nproc)" -ge 2 ]; then
  srv="taskset -c 1"; cli="taskset -c 0"
  placement="servers on CPU 1, load generator on CPU 0"
else
  srv=""; cli=""
  placement="one CPU: servers and load generator share it"
fi

# The daemon as deployed, except: no per-request log lines (info logs each
# lease), and a message rate far above what one benchmark client sends
# (the limiter still runs on every message).
cat > "$dir/headroomd.conf" <<EOC
topology = config
gpus = 2
log_level = warning
max_clients = 2048
max_messages_per_second = 1000000
max_message_burst = 1000000
EOC
$srv "$top/$build/bin/headroomd" --config "$dir/headroomd.conf" \
  --socket "$dir/hd.sock" --state-dir "$dir/state" 2>"$dir/headroomd.log" &
hd_pid=$!
$srv redis-server --port 0 --unixsocket "$dir/redis.sock" --save "" \
  --appendonly no --daemonize no --loglevel warning >"$dir/redis.log" 2>&1 &
rd_pid=$!
for i in $(seq 100); do
  [ -S "$dir/hd.sock" ] && [ -S "$dir/redis.sock" ] && break
  sleep 0.05
done
sleep 0.2

field() { echo "$1" | awk -v k="$2" -v n="$3" '{ for(i = 1; i <= NF; i++) if($i == k) { print $(i + n); exit } }'; }
ratio() { awk -v a="$1" -v b="$2" 'BEGIN { if(b > 0) printf "%.2f", a / b; else print "-" }'; }

rows=""
goal_p99=met
best_rps=0
for c in $levels; do
  h=$($cli "$bench" headroom "$dir/hd.sock" "$c" "$secs")
  r=$($cli "$bench" redis "$dir/redis.sock" "$c" "$secs")
  n=$(awk -v s="$secs" -v c="$c" 'BEGIN { print (c == 1 ? 20000 : 120000) * s }')
  rb=$($cli redis-benchmark -s "$dir/redis.sock" -c "$c" -n "$n" -t set --csv -q 2>/dev/null |
       awk -F'"' '$2 == "SET" { printf "%.0f %.1f %.1f", $4, $10 * 1000, $14 * 1000 }')
  h_rps=$(field "$h" rps 1); r_rps=$(field "$r" rps 1)
  h50=$(field "$h" first_us 1); h99=$(field "$h" first_us 2); h999=$(field "$h" first_us 3)
  r50=$(field "$r" first_us 1); r99=$(field "$r" first_us 2); r999=$(field "$r" first_us 3)
  p99r=$(ratio "$h99" "$r99")
  awk -v x="$p99r" 'BEGIN { exit !(x <= 1.5) }' || goal_p99=missed
  best_rps=$(awk -v a="$best_rps" -v b="$h_rps" 'BEGIN { print (b > a ? b : a) }')
  rows="$rows| $c | $h50 / $h99 / $h999 | $r50 / $r99 / $r999 | $(ratio "$h50" "$r50") | **$p99r** | $(ratio "$h999" "$r999") | $h_rps | $r_rps | **$(ratio "$h_rps" "$r_rps")** | $(echo $rb | awk '{ print $1 " (p50 " $2 ", p99 " $3 ")" }') |
"
done

# RSS of the daemon holding 1,000 clients, each with a footprint and a lease.
rss_before=$(awk '/^VmRSS:/ { print $2 }' /proc/$hd_pid/status)
"$bench" hold "$dir/hd.sock" 1000 3 > "$dir/hold.out" &
hold_pid=$!
for i in $(seq 200); do
  grep -q ready "$dir/hold.out" 2>/dev/null && break
  sleep 0.05
done
rss_held=$(awk '/^VmRSS:/ { print $2 }' /proc/$hd_pid/status)
wait $hold_pid
rss_peak=$(awk '/^VmHWM:/ { print $2 }' /proc/$hd_pid/status)

# The hot path: instructions per hr_lease_grid, and system calls.
calls=1000000
valgrind --tool=callgrind --callgrind-out-file="$dir/cg.out" \
  --toggle-collect=hr_lease_grid "$hot" $calls >/dev/null 2>"$dir/cg.log"
ir=$(awk '/^(summary|totals):/ { print $2; exit }' "$dir/cg.out")
per_call=$(awk -v a="$ir" -v n=$calls 'BEGIN { printf "%.1f", a / n }')
strace -o "$dir/st" "$hot" 10000000 >/dev/null
between=$(awk '/^getppid\(/ { m++; next } m == 1 { n++ } END { print (m == 2 ? n + 0 : "no markers") }' "$dir/st")

model=$(lscpu | sed -n 's/^Model name: *//p' | head -1)
{
  echo "# headroomd beside Redis: $(date -u +%Y-%m-%d)"
  echo
  echo "- machine: $model, $(nproc) CPUs ($placement); Linux $(uname -r)"
  echo "- command: \`make bench-broker\` (bench/broker/run.sh; BENCH_SECONDS=$secs)"
  echo "- servers: headroomd $("$top/$build/bin/headroomd" --version | awk '{ print $2 }') (log_level warning), $(redis-server --version | awk '{ print $1, $2, $3 }') (no persistence); both on a Unix socket, one thread each"
  echo "- load: bench/broker/bench_broker.c, the same generator for both: N connections, one request in flight on each, ${secs} s after 0.5 s of warm-up. headroomd: lease then release (GPU 0, cluster 2); Redis: SET then DEL. Latency is of the first of each pair (lease; SET), in microseconds; requests/s counts both."
  echo
  echo "| clients | headroomd lease p50 / p99 / p99.9 | Redis SET p50 / p99 / p99.9 | p50 ratio | p99 ratio | p99.9 ratio | headroomd req/s | Redis req/s | throughput ratio | redis-benchmark -t set req/s (us) |"
  echo "|---|---|---|---|---|---|---|---|---|---|"
  printf "%s" "$rows"
  echo
  echo "Ratios are headroomd / Redis (latency: lower is better; throughput: higher is better)."
  echo
  echo "| goal | result | |"
  echo "|---|---|---|"
  echo "| p99 at most 1.5x Redis's at every concurrency | see the p99 ratio column | $goal_p99 |"
  echo "| at least 100k requests/s on one core | best $best_rps req/s | $(awk -v a="$best_rps" 'BEGIN { print (a >= 100000 ? "met" : "missed") }') |"
  echo "| hot-path read under 100 instructions | $per_call instructions per hr_lease_grid (callgrind, $calls calls) | $(awk -v a="$per_call" 'BEGIN { print (a < 100 ? "met" : "missed") }') |"
  echo "| the hot-path read makes no system call | strace of the calling thread: $between system calls between the markers around 10,000,000 calls (and tests/hardening/test_hotpath, under seccomp, in \`make test\`) | $( [ "$between" = 0 ] && echo met || echo missed) |"
  echo "| daemon RSS under 16 MiB with 1,000 clients | $rss_held KiB holding 1,000 clients with a footprint and a lease each (idle: $rss_before KiB; peak over the whole run: $rss_peak KiB) | $(awk -v a="$rss_held" 'BEGIN { print (a < 16384 ? "met" : "missed") }') |"
} > "$out"
cat "$out"
