#!/usr/bin/env bash
# How long topic creation takes per partition (docs/benchmarks.md section 20): starts a broker
# (--cores 1 on CPU 0) on a fresh data directory, times `borges topic create x --partitions N`
# (the CLI on CPU 1), records the broker's CPU-seconds, stops the broker; ROUNDS times.
#
#   scripts/bench-partition-create.sh N [DATA_PARENT]     ROUNDS=4, BORGES_BENCH_BIN, BORGES_BENCH_BIN_B
#
# DATA_PARENT (default: a new directory under /var/tmp) chooses the file system: the disk, or a
# tmpfs such as /dev/shm to take the disk out. With BORGES_BENCH_BIN_B, the two binaries
# alternate (A B, then B A). Each run gets its own data directory and all of them are removed
# only at the end: deleting thousands of preallocated segments on a file system mounted with
# `discard` keeps the disk busy for minutes and would slow the next run.
set -euo pipefail
cd "$(dirname "$0")/.."
N="${1:?usage: scripts/bench-partition-create.sh N [DATA_PARENT]}"
PARENT="${2:-}"
ROUNDS="${ROUNDS:-4}"
PORT=19292
BIN="${BORGES_BENCH_BIN:-target/release/borges}"
BIN_B="${BORGES_BENCH_BIN_B:-}"
[ -n "${BORGES_BENCH_NO_BUILD:-}" ] || cargo build --release -p borges-cli >/dev/null
if [ -n "$PARENT" ]; then
    WORK="$(mktemp -d "$PARENT/borges-create.XXXXXX")"
else
    WORK="$(mktemp -d /var/tmp/borges-create.XXXXXX)"
fi
BROKER=""
cleanup() {
    [ -z "$BROKER" ] || kill "$BROKER" 2>/dev/null || true
    rm -rf "$WORK"
}
trap cleanup EXIT

run() {
    local label="$1" bin="$2" round="$3" data started ended cpu_s
    data="$WORK/$round-$label"
    mkdir -p "$data"
    taskset -c 0 "$bin" broker --data-dir "$data" --listen "127.0.0.1:$PORT" --core-port-base 0 \
        --metrics-listen "" --cores 1 --ready-file "$data.ready" >"$data.log" 2>&1 &
    BROKER=$!
    for _ in $(seq 1 100); do [ -s "$data.ready" ] && break; sleep 0.1; done
    started=$(date +%s.%N)
    taskset -c 1 "$bin" --bootstrap "127.0.0.1:$PORT" topic create x --partitions "$N" >/dev/null
    ended=$(date +%s.%N)
    # utime + stime of the broker, in clock ticks.
    cpu_s=$(awk -v hz="$(getconf CLK_TCK)" '{printf "%.2f", ($14 + $15) / hz}' "/proc/$BROKER/stat")
    kill "$BROKER"
    wait "$BROKER" 2>/dev/null || true
    BROKER=""
    printf '%s\t%s\t%s\t%.3f\t%s\t%s\n' "$round" "$label" "$N" "$(echo "$ended - $started" | bc)" \
        "$cpu_s" "$(cut -d' ' -f1 /proc/loadavg)"
    sleep 5
}

printf 'round\tbuild\tpartitions\tcreate_s\tbroker_cpu_s\tload1\n'
for round in $(seq 1 "$ROUNDS"); do
    if [ -z "$BIN_B" ]; then
        run A "$BIN" "$round"
    elif (( round % 2 )); then
        run A "$BIN" "$round"; run B "$BIN_B" "$round"
    else
        run B "$BIN_B" "$round"; run A "$BIN" "$round"
    fi
done
