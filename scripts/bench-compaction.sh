#!/usr/bin/env bash
# The log cleaner (issue 17 item 6): cleaner throughput (MB of log cleaned per second on one
# core) and its effect on produce latency while it runs.
#
# 1. Throughput: a broker (--cores 1, CPU 0) with the cleaner's I/O cap lifted; a topic filled
#    with FILL_MIB MiB of 1 KiB records over KEYS keys while its policy is `delete`, then altered
#    to `compact`: the first cleaning covers the whole log at once; its bytes in and wall time
#    come from the broker's metrics (borges_cleaner_bytes_in_total, borges_cleaner_last_run_ms).
# 2. Latency: the same fill and alter with the default cap (cleaner_io_bytes_per_s_max 64 MiB/s),
#    and a loadgen run at RATE records/s to another topic (CPU 1) started with the alter, so it
#    runs while the cleaner works; the same run again once the cleaner is idle, for comparison.
#
#   scripts/bench-compaction.sh [OUT_DIR]   (default results/compaction-<date>)
#   FILL_MIB=1024 KEYS=10000 RATE=20000 RUN_S=15; BORGES_BENCH_NO_BUILD=1 uses target/release.
set -euo pipefail
cd "$(dirname "$0")/.."
OUT="${1:-results/compaction-$(date +%Y-%m-%d)}"
mkdir -p "$OUT"
OUT="$(cd "$OUT" && pwd)"
PORT=19900
METRICS=19990
FILL_MIB="${FILL_MIB:-1024}"
KEYS="${KEYS:-10000}"
RATE="${RATE:-20000}"
RUN_S="${RUN_S:-15}"
BIN="${BORGES_BENCH_BIN:-$PWD/target/release/borges}"
LG="${BORGES_BENCH_LOADGEN:-$PWD/target/release/borges-loadgen}"
[ -n "${BORGES_BENCH_NO_BUILD:-}" ] || cargo build --release -p borges-cli -p borges-loadgen >/dev/null
DIR=$(mktemp -d /tmp/borges-bench-compaction.XXXXXX)
BPID=""
trap '[ -n "$BPID" ] && kill -KILL "$BPID" 2>/dev/null; rm -rf "$DIR"' EXIT
: >"$OUT/summary.md"
log() { printf '%s\n' "$*" | tee -a "$OUT/summary.md" >&2; }
now_ms() { date +%s%3N; }
metric() { # NAME: the sum of that metric's samples
    curl -s "http://127.0.0.1:$METRICS/metrics" |
        awk -v m="$1" '$1 == m || index($1, m "{") == 1 { s += $2 } END { printf "%.0f\n", s }'
}

start_broker() { # IO_CAP_BYTES_PER_S
    rm -rf "$DIR/data" "$DIR/ready.json"
    printf '[storage]\ncleaner_io_bytes_per_s_max = %s\ncleaner_backoff_ms = 200\n' "$1" \
        >"$DIR/broker.toml"
    taskset -c 0 "$BIN" broker --data-dir "$DIR/data" --cores 1 --listen "127.0.0.1:$PORT" \
        --metrics-listen "127.0.0.1:$METRICS" --config "$DIR/broker.toml" \
        --ready-file "$DIR/ready.json" >"$DIR/broker.log" 2>&1 &
    BPID=$!
    for _ in $(seq 1 300); do [ -f "$DIR/ready.json" ] && return 0; sleep 0.1; done
    echo "broker did not start; log:" >&2
    tail -30 "$DIR/broker.log" >&2
    exit 1
}
stop_broker() {
    kill -TERM "$BPID" 2>/dev/null || true
    wait "$BPID" 2>/dev/null || true
    BPID=""
}

fill() { # TOPIC: FILL_MIB MiB of KEY:VALUE lines, 1 KiB each, keys cycling over KEYS
    "$BIN" topic create "$1" --partitions 1 --bootstrap "127.0.0.1:$PORT" \
        --config segment.bytes=67108864 --config min.cleanable.dirty.ratio=0.01 >/dev/null
    python3 - "$FILL_MIB" "$KEYS" <<'PY' | taskset -c 1 "$BIN" produce "$1" --key-separator : \
        --acks 1 --linger-ms 5 --bootstrap "127.0.0.1:$PORT" -q
import sys
mib, keys = int(sys.argv[1]), int(sys.argv[2])
out = sys.stdout
for i in range(mib * 1024):
    key = f"key-{i % keys:08d}"
    out.write(f"{key}:{'v' * (1023 - len(key) - 1)}{i % 10}\n")
PY
}

wait_cleaned() { # RUNS_BEFORE: waits for a cleaning to finish and the cleaner to be idle
    local runs
    for _ in $(seq 1 3000); do
        runs=$(metric borges_cleaner_runs_total)
        if [ "$runs" -gt "$1" ] && [ "$(metric borges_cleaner_bytes_in_total)" -gt 0 ]; then
            DONE_MS=$(now_ms)
            return 0
        fi
        sleep 0.02
    done
    echo "no cleaning within 60 s" >&2
    exit 1
}

latency_run() { # NAME
    sed -e "s/^name = .*/name = \"compaction-$1\"/" -e "s/^rate_records_s = .*/rate_records_s = $RATE/" \
        -e '/^max_rate_mode/d' -e "s/^duration_s = .*/duration_s = $RUN_S/" \
        -e 's/^warmup_s = .*/warmup_s = 2/' \
        loadgen/workloads/1-topic-16-partitions-1kb-produce-only.toml >"$DIR/$1.toml"
    taskset -c 1 "$LG" run --workload "$DIR/$1.toml" --driver borges --bootstrap "127.0.0.1:$PORT" \
        --broker-pid "$BPID" --quiet >"$OUT/$1.txt" 2>&1
}

log "# Log cleaner ($(git rev-parse --short HEAD), $(date -u +%Y-%m-%dT%H:%MZ), load average $(cut -d' ' -f1-3 /proc/loadavg))"
log ""
log "Broker --cores 1 on CPU 0, producers on CPU 1; ${FILL_MIB} MiB of 1 KiB records over ${KEYS} keys."
log ""

# 1. Throughput, cap lifted (16 GiB/s).
start_broker $((16 << 30))
fill compacted
"$BIN" topic alter compacted --config cleanup.policy=compact --bootstrap "127.0.0.1:$PORT" >/dev/null
wait_cleaned 0
bytes_in=$(metric borges_cleaner_bytes_in_total)
bytes_out=$(metric borges_cleaner_bytes_out_total)
# borges_cleaner_last_run_ms is when the last cleaning started (epoch ms); it ended before
# DONE_MS, the first poll (every 20 ms) that saw its count.
run_ms=$((DONE_MS - $(metric borges_cleaner_last_run_ms)))
log "- uncapped cleaning: $((bytes_in / 1048576)) MiB in, $((bytes_out / 1048576)) MiB out, $run_ms ms" \
    "$(python3 -c "print(round($bytes_in / 1e6 / max($run_ms, 1) * 1000, 1))") MB/s cleaned on one core"
stop_broker

# 2. Produce latency while the default-capped cleaner works, then with it idle.
start_broker $((64 << 20))
fill compacted
runs=$(metric borges_cleaner_runs_total)
t0=$(now_ms)
"$BIN" topic alter compacted --config cleanup.policy=compact --bootstrap "127.0.0.1:$PORT" >/dev/null
latency_run during
t1=$(now_ms)
wait_cleaned "$runs"
t2=$(now_ms)
log "- capped cleaning (64 MiB/s): ended $((t2 - t0)) ms after the alter and lasted" \
    "$((DONE_MS - $(metric borges_cleaner_last_run_ms))) ms; the latency run took $((t1 - t0)) ms of it"
latency_run idle
stop_broker

log ""
log "| produce at $RATE records/s, 16 partitions, acks=1 | p50 ms | p99 ms | p99.9 ms | max ms |"
log "|---|---:|---:|---:|---:|"
for r in during idle; do
    f="$OUT/$r.txt"
    log "| $r | $(grep -m1 '^publish_p50_ms=' "$f" | cut -d= -f2) | $(grep -m1 '^publish_p99_ms=' "$f" | cut -d= -f2) |" \
        "$(grep -m1 '^publish_p999_ms=' "$f" | cut -d= -f2) | $(grep -m1 '^publish_max_ms=' "$f" | cut -d= -f2) |"
done
