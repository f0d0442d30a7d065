#!/usr/bin/env bash
# Replicated against single-node (issue 14 item 8): the same workloads on one broker with
# replication factor 1 and on three brokers (scripts/cluster.sh, every one a controller voter)
# with replication factor 3 and min.insync.replicas 2, in the same run, alternating.
# Like for like in CPU: the broker side gets CPU 0 in both cases (the one broker, or all three),
# the load generator CPU 1 (this machine has two). acks=all, durability none, 16 partitions of
# 1 KiB records. Per variant and round: one unthrottled run (throughput, produce + consume) and
# one at 20,000 records/s (publish latency); the summary gives medians over rounds and the ratio.
#
#   scripts/bench-replication.sh [OUT_DIR]   (default results/replication-<date>)
#   ROUNDS=3 RUN_S=20; BORGES_BENCH_NO_BUILD=1 uses the binaries as built;
#   BORGES_BENCH_BIN / BORGES_BENCH_LOADGEN name other binaries.
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT="$(pwd)"
OUT="${1:-results/replication-$(date +%Y-%m-%d)}"
mkdir -p "$OUT"
OUT="$(cd "$OUT" && pwd)"
PORT=19750
ROUNDS="${ROUNDS:-3}"
RUN_S="${RUN_S:-20}"
BIN="$(realpath "${BORGES_BENCH_BIN:-target/release/borges}")"
LG="$(realpath "${BORGES_BENCH_LOADGEN:-target/release/borges-loadgen}")"
[ -n "${BORGES_BENCH_NO_BUILD:-}" ] || cargo build --release -p borges-cli -p borges-loadgen >/dev/null
: >"$OUT/commands.txt"
: >"$OUT/rows.tsv"
log() { printf '%s\n' "$*" | tee -a "$OUT/commands.txt" >&2; }
field() { grep -m1 "^$2=" "$1" | cut -d= -f2; }

# Workload files in $OUT: the shipped ones with the measured duration (and replication).
workload() { # SOURCE_NAME RF NAME
    sed -e "s/^duration_s = .*/duration_s = $RUN_S/" -e "s/^warmup_s = .*/warmup_s = 5/" \
        -e "s/^name = .*/name = \"$3\"/" "loadgen/workloads/$1.toml" >"$OUT/$3.toml"
    if [ "$2" -gt 1 ]; then
        sed -i "s/^durability = \"none\"/durability = \"none\"\nreplication_factor = $2\nmin_insync_replicas = 2/" \
            "$OUT/$3.toml"
    fi
}
for rf in 1 3; do
    workload 1-topic-16-partitions-1kb-acks-all "$rf" "max-rf$rf"
    workload latency-16-partitions-1kb-20k "$rf" "rate-rf$rf"
done

PIDS=""
BDIR=""
BOOT=""
start_single() {
    BDIR=$(mktemp -d /tmp/borges-bench-repl.XXXXXX)
    taskset -c 0 "$BIN" broker --data-dir "$BDIR/data" --cores 1 --listen "127.0.0.1:$PORT" \
        --metrics-listen "" --ready-file "$BDIR/ready.json" >"$BDIR/broker.log" 2>&1 &
    PIDS=$!
    BOOT="127.0.0.1:$PORT"
    for _ in $(seq 1 300); do [ -f "$BDIR/ready.json" ] && return 0; sleep 0.1; done
    echo "broker did not start; log:" >&2
    cat "$BDIR/broker.log" >&2
    exit 1
}
start_cluster() {
    BDIR=$(mktemp -d /tmp/borges-bench-repl.XXXXXX)
    CLUSTER_DIR="$BDIR" BORGES="$BIN" taskset -c 0 "$ROOT/scripts/cluster.sh" start >&2
    PIDS="$(cat "$BDIR"/n1.pid "$BDIR"/n2.pid "$BDIR"/n3.pid | tr '\n' ' ')"
    BOOT="127.0.0.1:9291,127.0.0.1:9292,127.0.0.1:9293"
}
stop_brokers() {
    if [ -n "$BDIR" ] && [ -f "$BDIR/n1.pid" ]; then
        CLUSTER_DIR="$BDIR" BORGES="$BIN" "$ROOT/scripts/cluster.sh" stop >/dev/null 2>&1 || true
    fi
    for p in $PIDS; do kill -TERM "$p" 2>/dev/null || true; done
    for p in $PIDS; do while kill -0 "$p" 2>/dev/null; do sleep 0.1; done; done
    PIDS=""
    [ -n "$BDIR" ] && rm -rf "$BDIR"
    BDIR=""
}
trap stop_brokers EXIT

one() { # RF ROUND
    local f
    for kind in max rate; do
        if [ "$1" = 1 ]; then start_single; else start_cluster; fi
        f="$OUT/$kind-rf$1-$2.txt"
        log "taskset -c 1 $LG run --workload $OUT/$kind-rf$1.toml --driver borges --bootstrap $BOOT"
        # --broker-pid: the first broker's CPU (of three on the cluster side).
        taskset -c 1 "$LG" run --workload "$OUT/$kind-rf$1.toml" --driver borges \
            --bootstrap "$BOOT" --broker-pid "${PIDS%% *}" --quiet >"$f" 2>&1 || {
            echo "loadgen failed ($f):" >&2; tail -5 "$f" >&2; }
        if [ "$kind" = max ]; then
            for k in throughput_mb_s consume_throughput_mb_s; do
                printf 'rf%s\t%s\t%s\t%s\n' "$1" "$2" "$k" "$(field "$f" "$k")" >>"$OUT/rows.tsv"
            done
        else
            for q in p50 p99 p999; do
                printf 'rf%s\t%s\t%s_ms\t%s\n' "$1" "$2" "$q" "$(field "$f" "publish_${q}_ms")" \
                    >>"$OUT/rows.tsv"
            done
        fi
        stop_brokers
    done
}

log "# $BIN ($(git rev-parse --short HEAD)), $ROUNDS rounds of $RUN_S s, load average at start: $(cut -d' ' -f1-3 /proc/loadavg)"
for r in $(seq 1 "$ROUNDS"); do
    if [ $((r % 2)) = 1 ]; then one 1 "$r"; one 3 "$r"; else one 3 "$r"; one 1 "$r"; fi
done

python3 - "$OUT/rows.tsv" "$(cut -d' ' -f1-3 /proc/loadavg)" >"$OUT/summary.md" <<'PY'
import collections, statistics, sys
rows = collections.defaultdict(list)
for line in open(sys.argv[1]):
    v, r, k, x = line.rstrip("\n").split("\t")
    try:
        rows[(v, k)].append(float(x))
    except ValueError:
        pass
med = lambda v, k: statistics.median(rows[(v, k)]) if rows[(v, k)] else float("nan")
keys = ["throughput_mb_s", "consume_throughput_mb_s", "p50_ms", "p99_ms", "p999_ms"]
print("| metric | RF 1, one broker | RF 3, three brokers | RF 3 / RF 1 | rounds (RF 1; RF 3) |")
print("|---|---|---|---|---|")
for k in keys:
    a, b = med("rf1", k), med("rf3", k)
    ra = ", ".join(f"{x:g}" for x in rows[("rf1", k)])
    rb = ", ".join(f"{x:g}" for x in rows[("rf3", k)])
    print(f"| {k} | {a:g} | {b:g} | {b / a:.3f} | {ra}; {rb} |")
print(f"\nload average at the end: {sys.argv[2]}")
PY
cat "$OUT/summary.md"
