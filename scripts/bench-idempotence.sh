#!/usr/bin/env bash
# The idempotent producer's cost (issue 16 item 5): SDK producer throughput and publish latency
# with idempotence on vs off and 5 vs 1 requests in flight per connection, in the same run.
# A single-node broker (--cores 1) on CPU 0, the load generator on CPU 1, acks=all (idempotence
# needs it), durability none, 16 partitions of 1 KiB records. Per variant and round: one
# unthrottled run (throughput) and one at RATE records/s (latency). Variants alternate within a
# round and the order rotates each round; the summary gives medians over the rounds.
#
#   scripts/bench-idempotence.sh [OUT_DIR]   (default results/idempotence-<date>)
#   ROUNDS=3 RUN_S=15 RATE=20000; BORGES_BENCH_NO_BUILD=1 uses target/release as built.
set -euo pipefail
cd "$(dirname "$0")/.."
OUT="${1:-results/idempotence-$(date +%Y-%m-%d)}"
mkdir -p "$OUT"
OUT="$(cd "$OUT" && pwd)"
PORT=19700
ROUNDS="${ROUNDS:-3}"
RUN_S="${RUN_S:-15}"
RATE="${RATE:-20000}"
BIN="${BORGES_BENCH_BIN:-target/release/borges}"
LG="${BORGES_BENCH_LOADGEN:-target/release/borges-loadgen}"
[ -n "${BORGES_BENCH_NO_BUILD:-}" ] || cargo build --release -p borges-cli -p borges-loadgen >/dev/null
: >"$OUT/commands.txt"
: >"$OUT/rows.tsv"
log() { printf '%s\n' "$*" | tee -a "$OUT/commands.txt" >&2; }
field() { grep -m1 "^$2=" "$1" | cut -d= -f2; }

BPID=""
BDIR=""
start_broker() {
    BDIR=$(mktemp -d /tmp/borges-bench-idem.XXXXXX)
    taskset -c 0 "$BIN" broker --data-dir "$BDIR/data" --cores 1 --listen "127.0.0.1:$PORT" \
        --metrics-listen "" --ready-file "$BDIR/ready.json" >"$BDIR/broker.log" 2>&1 &
    BPID=$!
    for _ in $(seq 1 300); do [ -f "$BDIR/ready.json" ] && return 0; sleep 0.1; done
    echo "broker did not start; log:" >&2
    cat "$BDIR/broker.log" >&2
    exit 1
}
stop_broker() {
    [ -n "$BPID" ] && kill -TERM "$BPID" 2>/dev/null || true
    [ -n "$BPID" ] && wait "$BPID" 2>/dev/null || true
    BPID=""
    [ -n "$BDIR" ] && rm -rf "$BDIR"
    BDIR=""
}
trap stop_broker EXIT

workload() { # NAME IDEMPOTENCE IN_FLIGHT RATE -> a workload file in $OUT
    local rate_lines='rate_records_s = 0
max_rate_mode = "unthrottled"'
    [ "$4" -gt 0 ] && rate_lines="rate_records_s = $4"
    cat >"$OUT/$1.toml" <<EOF
name = "$1"
description = "16 partitions, 1 KiB, acks=all, idempotence $2, $3 in flight, rate $4 (0 = max)."
topics = 1
partitions_per_topic = 16
record_size_bytes = 1024

[producer]
producers_per_topic = 1
$rate_lines
batch_size_bytes = 131072
linger_ms = 1
compression = "none"
acks = "all"
idempotence = $2
in_flight_requests_max = $3

[consumer]
subscriptions_per_topic = 0
consumers_per_subscription = 1

[topic]
durability = "none"

[run]
duration_s = $RUN_S
warmup_s = 5
EOF
}

VARIANTS=("on-5 true 5" "off-5 false 5" "on-1 true 1" "off-1 false 1")
for v in "${VARIANTS[@]}"; do
    read -r name idem inflight <<<"$v"
    workload "max-$name" "$idem" "$inflight" 0
    workload "rate-$name" "$idem" "$inflight" "$RATE"
done

one() { # VARIANT_NAME ROUND
    local f
    for kind in max rate; do
        start_broker
        f="$OUT/$kind-$1-$2.txt"
        log "taskset -c 1 $LG run --workload $OUT/$kind-$1.toml --driver borges --bootstrap 127.0.0.1:$PORT"
        taskset -c 1 "$LG" run --workload "$OUT/$kind-$1.toml" --driver borges \
            --bootstrap "127.0.0.1:$PORT" --broker-pid "$BPID" --quiet >"$f" 2>&1
        if [ "$kind" = max ]; then
            printf '%s\t%s\tmax_mb_s\t%s\n' "$1" "$2" "$(field "$f" throughput_mb_s)" >>"$OUT/rows.tsv"
        else
            for q in p50 p99 p999; do
                printf '%s\t%s\t%s_ms\t%s\n' "$1" "$2" "$q" "$(field "$f" "publish_${q}_ms")" \
                    >>"$OUT/rows.tsv"
            done
        fi
        stop_broker
    done
}

log "# $BIN ($(git rev-parse --short HEAD)), $ROUNDS rounds, load average at start: $(cut -d' ' -f1-3 /proc/loadavg)"
for r in $(seq 1 "$ROUNDS"); do
    n=${#VARIANTS[@]}
    for i in $(seq 0 $((n - 1))); do
        read -r name _ <<<"${VARIANTS[$(((i + r - 1) % n))]}"
        one "$name" "$r"
    done
done

python3 - "$OUT/rows.tsv" "$(cut -d' ' -f1-3 /proc/loadavg)" >"$OUT/summary.md" <<'PY'
import collections, statistics, sys
rows = collections.defaultdict(lambda: collections.defaultdict(list))
for line in open(sys.argv[1]):
    variant, rnd, metric, value = line.rstrip("\n").split("\t")
    try:
        rows[metric][variant].append(float(value))
    except ValueError:
        pass
variants = ["on-5", "off-5", "on-1", "off-1"]
print("| metric | " + " | ".join(variants) + " | on-5 / off-5 |")
print("|---" * (len(variants) + 2) + "|")
for metric, by in rows.items():
    med = {v: statistics.median(by[v]) for v in variants if by[v]}
    cells = [f"{med[v]:g} ({', '.join(f'{x:g}' for x in by[v])})" for v in variants]
    ratio = med["on-5"] / med["off-5"] if med.get("off-5") else float("nan")
    print(f"| {metric} | " + " | ".join(cells) + f" | {ratio:.3f} |")
print()
print(f"Load average at the end: {sys.argv[2]}.")
PY
cat "$OUT/summary.md"
