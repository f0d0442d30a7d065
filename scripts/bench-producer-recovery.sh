#!/usr/bin/env bash
# Restart time after kill -9 with idempotent-producer state (issue 16 item 2: a 10 GiB log must
# be serving within 2 s). Fills one partition with GIB GiB from idempotent SDK producers
# (loadgen, several producer ids), kills the broker with SIGKILL mid-stream, restarts it and
# reports the time from exec to the ready file (partitions open, producer state rebuilt from the
# newest snapshot and the batches after it) and to the first answered ListOffsets.
#
#   scripts/bench-producer-recovery.sh [OUT_DIR]   (default results/producer-recovery-<date>)
#   GIB=10 ROUNDS=3 WRITE_S=5 (seconds of writing between restarts); BORGES_BENCH_NO_BUILD=1 uses target/release as built.
set -euo pipefail
cd "$(dirname "$0")/.."
OUT="${1:-results/producer-recovery-$(date +%Y-%m-%d)}"
mkdir -p "$OUT"
OUT="$(cd "$OUT" && pwd)"
PORT=19800
GIB="${GIB:-10}"
ROUNDS="${ROUNDS:-3}"
WRITE_S="${WRITE_S:-5}"
BIN="${BORGES_BENCH_BIN:-$PWD/target/release/borges}"
LG="${BORGES_BENCH_LOADGEN:-$PWD/target/release/borges-loadgen}"
[ -n "${BORGES_BENCH_NO_BUILD:-}" ] || cargo build --release -p borges-cli -p borges-loadgen >/dev/null
DIR=$(mktemp -d /tmp/borges-bench-precovery.XXXXXX)
BPID=""
LPID=""
trap '[ -n "$LPID" ] && kill -KILL "$LPID" 2>/dev/null; [ -n "$BPID" ] && kill -KILL "$BPID" 2>/dev/null; rm -rf "$DIR"' EXIT
log() { printf '%s\n' "$*" | tee -a "$OUT/summary.md" >&2; }
now_ms() { date +%s%3N; }

start_broker() {
    rm -f "$DIR/ready.json"
    taskset -c 0 "$BIN" broker --data-dir "$DIR/data" --cores 1 --listen "127.0.0.1:$PORT" \
        --metrics-listen "" --ready-file "$DIR/ready.json" >>"$DIR/broker.log" 2>&1 &
    BPID=$!
}
wait_ready() {
    for _ in $(seq 1 3000); do [ -f "$DIR/ready.json" ] && return 0; sleep 0.01; done
    echo "broker did not start; log:" >&2
    tail -50 "$DIR/broker.log" >&2
    exit 1
}

cat >"$DIR/fill.toml" <<EOF
name = "producer-recovery-fill"
description = "One partition, 1 KiB records, acks=1, 4 idempotent producers."
topics = 1
partitions_per_topic = 1
record_size_bytes = 1024

[producer]
producers_per_topic = 4
rate_records_s = 0
max_rate_mode = "unthrottled"
batch_size_bytes = 131072
linger_ms = 1
compression = "none"
acks = "1"
idempotence = true

[consumer]
subscriptions_per_topic = 0
consumers_per_subscription = 1

[topic]
durability = "none"

[run]
duration_s = 600
warmup_s = 0
EOF

: >"$OUT/summary.md"
log "# kill -9 restart with producer state, ${GIB} GiB in one partition ($(git rev-parse --short HEAD), load average $(cut -d' ' -f1-3 /proc/loadavg))"
log ""
start_broker
wait_ready
taskset -c 1 "$LG" run --workload "$DIR/fill.toml" --driver borges --bootstrap "127.0.0.1:$PORT" \
    --topic-prefix recovery --keep-topics --quiet >"$DIR/fill.txt" 2>&1 &
LPID=$!
target=$((GIB * 1024 * 1024 * 1024))
while [ "$(du -sb "$DIR/data" | cut -f1)" -lt "$target" ]; do sleep 1; done
for round in $(seq 1 "$ROUNDS"); do
    kill -KILL "$BPID"
    wait "$BPID" 2>/dev/null || true
    size=$(du -sb "$DIR/data" | cut -f1)
    t0=$(now_ms)
    start_broker
    wait_ready
    t1=$(now_ms)
    until "$BIN" topic offsets recovery-0 --bootstrap "127.0.0.1:$PORT" >"$DIR/offsets.txt" 2>&1; do
        sleep 0.01
    done
    t2=$(now_ms)
    log "- round $round: data $((size / 1024 / 1024)) MiB; ready after $((t1 - t0)) ms;" \
        "ListOffsets answered after $((t2 - t0)) ms"
    # The producers ride through the restart (SDK retries) and write on; the next kill is
    # mid-stream again.
    sleep "$WRITE_S"
done
kill -TERM "$LPID" 2>/dev/null || true
wait "$LPID" 2>/dev/null || true
LPID=""
cp "$DIR/offsets.txt" "$OUT/offsets.txt"
grep -E "recovery-0-0|opened [0-9]+ partitions|producer" "$DIR/broker.log" | tail -12 >"$OUT/broker-log-excerpt.txt" || true
cat "$OUT/summary.md"
