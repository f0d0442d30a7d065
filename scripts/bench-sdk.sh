#!/usr/bin/env bash
# The SDK producer in the load generator, two builds side by side (issue 19 items 1-2): load
# generator A (before) against load generator B (after), same broker binary, rounds alternating
# A/B (the order flips each round). A single-node broker (--cores 1) on CPU 0, the load generator
# on CPU 1. Per build and round: the unthrottled 16-partition 1 KiB acks=1 producer (throughput,
# load-generator CPU) and 20,000 rec/s acks=all with a consumer (publish latency).
#
#   scripts/bench-sdk.sh LOADGEN_A LOADGEN_B [OUT_DIR]   (default results/sdk-<date>)
#   ROUNDS=3 RUN_S=15 RATE=20000 BORGES_BENCH_BIN=target/release/borges
set -euo pipefail
cd "$(dirname "$0")/.."
LG_A="$(realpath "$1")"
LG_B="$(realpath "$2")"
OUT="${3:-results/sdk-$(date +%Y-%m-%d)}"
mkdir -p "$OUT"
OUT="$(cd "$OUT" && pwd)"
PORT=19720
ROUNDS="${ROUNDS:-3}"
RUN_S="${RUN_S:-15}"
RATE="${RATE:-20000}"
BIN="${BORGES_BENCH_BIN:-target/release/borges}"
: >"$OUT/commands.txt"
: >"$OUT/rows.tsv"
log() { printf '%s\n' "$*" | tee -a "$OUT/commands.txt" >&2; }
field() { grep -m1 "^$2=" "$1" | cut -d= -f2; }

BPID=""
BDIR=""
start_broker() {
    BDIR=$(mktemp -d /tmp/borges-bench-sdk.XXXXXX)
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

workload() { # NAME ACKS RATE CONSUMERS -> a workload file in $OUT
    local rate_lines='rate_records_s = 0
max_rate_mode = "unthrottled"'
    [ "$3" -gt 0 ] && rate_lines="rate_records_s = $3"
    cat >"$OUT/$1.toml" <<EOF
name = "$1"
description = "16 partitions, 1 KiB, acks=$2, rate $3 (0 = max), $4 consumer(s), linger 1 ms."
topics = 1
partitions_per_topic = 16
record_size_bytes = 1024

[producer]
producers_per_topic = 1
$rate_lines
batch_size_bytes = 131072
linger_ms = 1
compression = "none"
acks = "$2"

[consumer]
subscriptions_per_topic = $4
consumers_per_subscription = 1

[topic]
durability = "none"

[run]
duration_s = $RUN_S
warmup_s = 5
EOF
}
workload max 1 0 0
workload rate all "$RATE" 1

one() { # BUILD(A|B) ROUND
    local lg f
    lg="$LG_A"
    [ "$1" = B ] && lg="$LG_B"
    for kind in max rate; do
        start_broker
        f="$OUT/$kind-$1-$2.txt"
        log "taskset -c 1 $lg run --workload $OUT/$kind.toml --driver borges --bootstrap 127.0.0.1:$PORT  # load $(cut -d' ' -f1-3 /proc/loadavg)"
        taskset -c 1 "$lg" run --workload "$OUT/$kind.toml" --driver borges \
            --bootstrap "127.0.0.1:$PORT" --broker-pid "$BPID" --quiet >"$f" 2>&1
        if [ "$kind" = max ]; then
            printf '%s\t%s\tmax_mb_s\t%s\n' "$1" "$2" "$(field "$f" throughput_mb_s)" >>"$OUT/rows.tsv"
            printf '%s\t%s\tloadgen_cpu_pct\t%s\n' "$1" "$2" \
                "$(grep -m1 'loadgen: cpu' "$f" | sed 's/.*cpu \([0-9.]*\)%.*/\1/')" >>"$OUT/rows.tsv"
        else
            for q in p50 p99 p999 max; do
                printf '%s\t%s\t%s_ms\t%s\n' "$1" "$2" "$q" "$(field "$f" "publish_${q}_ms")" \
                    >>"$OUT/rows.tsv"
            done
        fi
        printf '%s\t%s\t%s_load1\t%s\n' "$1" "$2" "$kind" "$(cut -d' ' -f1 /proc/loadavg)" \
            >>"$OUT/rows.tsv"
        stop_broker
    done
}

log "# A=$LG_A B=$LG_B broker=$BIN ($(git rev-parse --short HEAD)), $ROUNDS rounds, load average at start: $(cut -d' ' -f1-3 /proc/loadavg)"
for r in $(seq 1 "$ROUNDS"); do
    if [ $((r % 2)) = 1 ]; then one A "$r"; one B "$r"; else one B "$r"; one A "$r"; fi
done

python3 - "$OUT/rows.tsv" "$(cut -d' ' -f1-3 /proc/loadavg)" >"$OUT/summary.md" <<'PY'
import collections, statistics, sys
rows = collections.defaultdict(lambda: collections.defaultdict(list))
for line in open(sys.argv[1]):
    build, rnd, metric, value = line.rstrip("\n").split("\t")
    try:
        rows[metric][build].append(float(value))
    except ValueError:
        pass
print("| metric | A (before) | B (after) | B / A |")
print("|---|---|---|---|")
for metric, by in rows.items():
    med = {b: statistics.median(by[b]) for b in "AB" if by[b]}
    cells = [f"{med[b]:g} ({', '.join(f'{x:g}' for x in by[b])})" for b in "AB" if b in med]
    ratio = med["B"] / med["A"] if med.get("A") else float("nan")
    print(f"| {metric} | " + " | ".join(cells) + f" | {ratio:.3f} |")
print()
print(f"Load average at the end: {sys.argv[2]}.")
PY
cat "$OUT/summary.md"
