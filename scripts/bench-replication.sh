#!/usr/bin/env bash
# Replicated against single-node (issue 14 item 8), for Borges and for Apache Kafka in the same
# run: the same workloads on one broker with replication factor 1 and on three brokers with
# replication factor 3 and min.insync.replicas 2, alternating.
#   Borges: one `borges broker`; three brokers by scripts/cluster.sh (every one a voter).
#   Kafka:  scripts/kafka.sh start (one KRaft combined broker+controller) and
#           scripts/kafka.sh start --brokers 3 (three, every one a voter); the load generator's
#           Kafka driver (librdkafka). Each JVM gets the heap KAFKA_HEAP (default 1G, so 3 GiB
#           for the three) and Kafka's defaults otherwise (no fsync, as Borges' durability none).
# Like for like in CPU: the broker side gets CPU 0 in every variant (the one broker, or all
# three), the load generator CPU 1 (this machine has two). acks=all, durability none, 16
# partitions of 1 KiB records. Per variant and round: one unthrottled run (throughput, produce +
# consume) and one at 20,000 records/s (publish latency), each on freshly started brokers with
# empty data directories; rounds alternate the order of the variants. The summary gives
# medians over rounds, RF 3 / RF 1 per system and Borges / Kafka at RF 3.
#
#   scripts/bench-replication.sh [OUT_DIR]   (default results/replication-<date>)
#   ROUNDS=3 RUN_S=20 WARMUP_S=5 (seconds measured, and of warm-up before, per run);
#   ONLY=borges or ONLY=kafka runs one system's variants;
#   KAFKA_HEAP=1G per Kafka JVM; BORGES_BENCH_NO_BUILD=1 uses the binaries as built;
#   BORGES_BENCH_BIN / BORGES_BENCH_LOADGEN name other binaries; REPORT_ONLY=1 only rewrites
#   rows.tsv and summary.md from OUT_DIR's results.
#
# Writes OUT_DIR/{max,rate}-{rf1,rf3}.toml (the workloads), {max,rate}-SYSTEM-rfN-ROUND.txt
# (loadgen's output; .json beside it with the per-second windows), rows.tsv, runs.tsv (load
# average before and after each run), commands.txt and summary.md.
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT="$(pwd)"
OUT="${1:-results/replication-$(date +%Y-%m-%d)}"
mkdir -p "$OUT"
OUT="$(cd "$OUT" && pwd)"
PORT=19750
KAFKA_PORT=19760 # nodes on 19760.., controllers on 19770..
ROUNDS="${ROUNDS:-3}"
RUN_S="${RUN_S:-20}"
WARMUP_S="${WARMUP_S:-5}"
ONLY="${ONLY:-}"
KAFKA_HEAP="${KAFKA_HEAP:-1G}"
case "$ONLY" in "" | borges | kafka) ;; *) echo "ONLY must be borges or kafka" >&2; exit 2 ;; esac
BIN="$(realpath "${BORGES_BENCH_BIN:-target/release/borges}")"
LG="$(realpath "${BORGES_BENCH_LOADGEN:-target/release/borges-loadgen}")"
[ -n "${BORGES_BENCH_NO_BUILD:-}${REPORT_ONLY:-}" ] || cargo build --release -p borges-cli -p borges-loadgen >/dev/null
if [ -z "${REPORT_ONLY:-}" ]; then
    : >"$OUT/commands.txt"
    : >"$OUT/runs.tsv"
fi
log() { printf '%s\n' "$*" | tee -a "$OUT/commands.txt" >&2; }
loadavg() { cut -d' ' -f1-3 /proc/loadavg; }

# Workload files in $OUT: the shipped ones with the measured duration (and replication).
workload() { # SOURCE_NAME RF NAME
    sed -e "s/^duration_s = .*/duration_s = $RUN_S/" -e "s/^warmup_s = .*/warmup_s = $WARMUP_S/" \
        -e "s/^name = .*/name = \"$3\"/" "loadgen/workloads/$1.toml" >"$OUT/$3.toml"
    if [ "$2" -gt 1 ]; then
        sed -i "s/^durability = \"none\"/durability = \"none\"\nreplication_factor = $2\nmin_insync_replicas = 2/" \
            "$OUT/$3.toml"
    fi
}

# The brokers under test: PIDS (first = the one whose CPU loadgen reports), BOOT, and for
# Borges BDIR; KAFKA_UP when scripts/kafka.sh runs nodes.
PIDS=""
BDIR=""
BOOT=""
KAFKA_UP=""
start_borges_single() {
    BDIR=$(mktemp -d /tmp/borges-bench-repl.XXXXXX)
    log "taskset -c 0 $BIN broker --data-dir $BDIR/data --cores 1 --listen 127.0.0.1:$PORT ..."
    taskset -c 0 "$BIN" broker --data-dir "$BDIR/data" --cores 1 --listen "127.0.0.1:$PORT" \
        --metrics-listen "" --ready-file "$BDIR/ready.json" >"$BDIR/broker.log" 2>&1 &
    PIDS=$!
    BOOT="127.0.0.1:$PORT"
    for _ in $(seq 1 300); do [ -f "$BDIR/ready.json" ] && return 0; sleep 0.1; done
    echo "broker did not start; log:" >&2
    cat "$BDIR/broker.log" >&2
    exit 1
}
start_borges_cluster() {
    BDIR=$(mktemp -d /tmp/borges-bench-repl.XXXXXX)
    log "CLUSTER_DIR=$BDIR BORGES=$BIN taskset -c 0 scripts/cluster.sh start"
    CLUSTER_DIR="$BDIR" BORGES="$BIN" taskset -c 0 "$ROOT/scripts/cluster.sh" start >&2
    PIDS="$(cat "$BDIR"/n1.pid "$BDIR"/n2.pid "$BDIR"/n3.pid | tr '\n' ' ')"
    BOOT="127.0.0.1:9291,127.0.0.1:9292,127.0.0.1:9293"
}
start_kafka() { # NODES
    local cmd=(scripts/kafka.sh start --brokers "$1" --port "$KAFKA_PORT"
        --controller-port $((KAFKA_PORT + 10)) --cpus 0 --heap "$KAFKA_HEAP" --durability none)
    log "${cmd[*]}"
    KAFKA_UP=1
    "${cmd[@]}" >/dev/null || { echo "kafka did not start (.kafka/run/)" >&2; exit 1; }
    PIDS="$(scripts/kafka.sh pid | tr '\n' ' ')"
    BOOT="$(seq -f "127.0.0.1:%g" "$KAFKA_PORT" $((KAFKA_PORT + $1 - 1)) | paste -sd,)"
}
stop_brokers() {
    if [ -n "$KAFKA_UP" ]; then
        scripts/kafka.sh stop >/dev/null 2>&1 || true
        KAFKA_UP=""
    fi
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

one() { # SYSTEM RF ROUND
    local sys="$1" rf="$2" round="$3" v="$1-rf$2" f before started
    for kind in max rate; do
        case "$v" in
            borges-rf1) start_borges_single ;;
            borges-rf3) start_borges_cluster ;;
            kafka-rf1) start_kafka 1 ;;
            kafka-rf3) start_kafka 3 ;;
        esac
        f="$OUT/$kind-$v-$round.txt"
        log "taskset -c 1 $LG run --workload $OUT/$kind-rf$rf.toml --driver $sys --bootstrap $BOOT"
        started="$(date -u +%H:%M:%S)"
        before="$(loadavg)"
        # --broker-pid: the first broker's CPU (of three on the RF 3 side).
        taskset -c 1 "$LG" run --workload "$OUT/$kind-rf$rf.toml" --driver "$sys" \
            --bootstrap "$BOOT" --broker-pid "${PIDS%% *}" --json "${f%.txt}.json" --quiet \
            >"$f" 2>&1 || {
            echo "loadgen failed ($f):" >&2; tail -5 "$f" >&2; }
        printf '%s-%s-%s\t%s\t%s\t%s\n' "$kind" "$v" "$round" "$started" "$before" "$(loadavg)" \
            >>"$OUT/runs.tsv"
        stop_brokers
    done
}

# Every variant, ROUNDS times; the workload files first.
run_all() {
    for rf in 1 3; do
        workload 1-topic-16-partitions-1kb-acks-all "$rf" "max-rf$rf"
        workload latency-16-partitions-1kb-20k "$rf" "rate-rf$rf"
    done
    VARIANTS=()
    [ "$ONLY" = kafka ] || VARIANTS+=("borges 1" "borges 3")
    [ "$ONLY" = borges ] || VARIANTS+=("kafka 1" "kafka 3")
    log "# $BIN ($(git rev-parse --short HEAD)), $ROUNDS rounds of $RUN_S s after $WARMUP_S s, variants:" \
        "$(printf '%s; ' "${VARIANTS[@]}")Kafka heap $KAFKA_HEAP per JVM, load average at start: $(loadavg)"
    for r in $(seq 1 "$ROUNDS"); do
        order=("${VARIANTS[@]}")
        if [ $((r % 2)) = 0 ]; then
            order=()
            for ((i = ${#VARIANTS[@]} - 1; i >= 0; i--)); do order+=("${VARIANTS[i]}"); done
        fi
        for v in "${order[@]}"; do
            # shellcheck disable=SC2086 # "SYSTEM RF"
            one $v "$r"
        done
    done
}
[ -n "${REPORT_ONLY:-}" ] || run_all

python3 - "$OUT" "$(loadavg)" "$KAFKA_HEAP" >"$OUT/summary.md" <<'PY'
import collections, glob, json, math, os, re, statistics, sys
out, load_end, heap = sys.argv[1:4]
RATE = 20000  # the latency workload's records/s
HELD = 0.95   # a run "held" the rate when it acked at least this share of it
# rows.tsv: variant, round, metric, value, from loadgen's JSON results.
rows = collections.defaultdict(list)
unheld = collections.defaultdict(list)  # variant -> acked records/s of rate runs that fell behind
tsv = []
for path in sorted(glob.glob(os.path.join(out, "*-rf[13]-*.json"))):
    m = re.match(r"(max|rate)-(\w+-rf\d)-(\d+)\.json$", os.path.basename(path))
    if not m:
        continue
    kind, v, rnd = m.groups()
    s = json.load(open(path))["summary"]
    vals = {}
    if kind == "max":
        vals["throughput_mb_s"] = s["throughput_mb_s"]
        vals["consume_throughput_mb_s"] = s["consume_throughput_mb_s"]
        vals["broker_cpu_pct"] = s.get("broker_cpu_pct_avg") or float("nan")
    else:
        vals["rate_records_s"] = s["throughput_records_s"]
        if s["throughput_records_s"] >= HELD * RATE and s["publish"]["count"] > 0:
            for q in ["p50", "p99", "p999"]:
                vals[f"{q}_ms"] = s["publish"][f"{q}_ms"]
        else:
            unheld[v].append(s["throughput_records_s"])
    for k, x in vals.items():
        rows[(v, k)].append(x)
        tsv.append(f"{v}\t{rnd}\t{k}\t{x:.3f}")
open(os.path.join(out, "rows.tsv"), "w").write("\n".join(tsv) + "\n")
med = lambda v, k: statistics.median(rows[(v, k)]) if rows[(v, k)] else float("nan")
div = lambda a, b: a / b if b and not math.isnan(a) and not math.isnan(b) else float("nan")
def cell(v, k):
    x = med(v, k)
    if k.endswith("_ms") and unheld[v]:
        held = len(rows[(v, k)])
        r = statistics.median(unheld[v])
        if held == 0:
            return f"rate not held ({r:,.0f} rec/s)"
        return f"{x:.4g} ({held} of {held + len(unheld[v])} rounds held the rate)"
    return f"{x:,.0f}" if k == "rate_records_s" else f"{x:.4g}"
names = {
    "throughput_mb_s": "produce MB/s, unthrottled",
    "consume_throughput_mb_s": "consume MB/s, same runs",
    "broker_cpu_pct": "first broker's CPU %, same runs",
    "rate_records_s": "acked rec/s at a 20,000 rec/s target",
    "p50_ms": "publish p50 at 20,000 rec/s, ms",
    "p99_ms": "publish p99, ms",
    "p999_ms": "publish p99.9, ms",
}
print("| metric (median) | Borges RF 1 | Borges RF 3 | RF 3 / RF 1 "
      "| Kafka RF 1 | Kafka RF 3 | RF 3 / RF 1 | Borges / Kafka, RF 3 |")
print("|---|---|---|---|---|---|---|---|")
for k, name in names.items():
    b1, b3 = med("borges-rf1", k), med("borges-rf3", k)
    k1, k3 = med("kafka-rf1", k), med("kafka-rf3", k)
    print(f"| {name} | {cell('borges-rf1', k)} | {cell('borges-rf3', k)} | {div(b3, b1):.2f} "
          f"| {cell('kafka-rf1', k)} | {cell('kafka-rf3', k)} | {div(k3, k1):.2f} "
          f"| {div(b3, k3):.2f} |")
print(f"\nA rate run holds the rate when it acks >= {HELD:.0%} of {RATE:,} rec/s; latency of one "
      "that does not grows with the run (measured from the intended send time), so it is not "
      "given.\n\nRounds:\n")
for v in ["borges-rf1", "borges-rf3", "kafka-rf1", "kafka-rf3"]:
    per = "; ".join(f"{k} " + " / ".join(f"{x:g}" for x in rows[(v, k)])
                    for k in names if rows[(v, k)])
    if per:
        print(f"- {v}: {per}")
print(f"\nKafka heap per JVM: {heap}; load average at the end: {load_end}")
PY
cat "$OUT/summary.md"
