#!/usr/bin/env bash
# A/B of two broker builds on one machine, alternating A and B round by round so that the
# machine's noise (it is shared) falls on both alike. Each round runs, for each build:
#   - blast produce: pre-encoded 64 KiB batches of 1 KiB records, acks=1, durability none
#     (`borges-loadgen blast`, no client-library work), MiB/s and broker CPU-s per GiB;
#   - blast fetch of file data (sendfile), MiB/s;
#   - publish latency through the SDK at a fixed rate (RATE records/s, 1 KiB, 1 partition,
#     linger 0, acks=1), p50 / p99 / p99.9.
# The broker runs on CPU 0 (--cores 1), the load generator on CPU 1; the same loadgen binary
# drives both builds. The summary gives per metric the median over rounds of A and of B and
# the ratio B/A.
#
#   scripts/ab-broker.sh A_BIN B_BIN [OUT_DIR]
#   ROUNDS=5 RATE=50000 BLAST_S=10 scripts/ab-broker.sh /tmp/old/borges target/release/borges
set -euo pipefail
cd "$(dirname "$0")/.."
A_BIN=$1
B_BIN=$2
OUT="${3:-results/ab-$(date +%Y-%m-%d-%H%M)}"
ROUNDS=${ROUNDS:-3}
RATE=${RATE:-50000}
BLAST_S=${BLAST_S:-10}
LG="${BORGES_BENCH_LOADGEN:-target/release/borges-loadgen}"
PORT=${AB_PORT:-19600}
mkdir -p "$OUT"
OUT="$(cd "$OUT" && pwd)"
: >"$OUT/commands.txt"
: >"$OUT/rows.tsv"
log() { printf '%s\n' "$*" | tee -a "$OUT/commands.txt" >&2; }

BPID=""
BDIR=""
start_broker() { # BIN
    BDIR=$(mktemp -d /tmp/borges-ab.XXXXXX)
    printf '[log]\ndurability = "none"\n' >"$BDIR/config.toml"
    # Builds from before the metrics endpoint have no --metrics-listen; later ones get it off.
    local metrics=()
    "$1" broker --help | grep -q -- --metrics-listen && metrics=(--metrics-listen "")
    log "taskset -c 0 $1 broker --data-dir $BDIR/data --cores 1 --listen 127.0.0.1:$PORT ${metrics[*]:+--metrics-listen ''} --config $BDIR/config.toml"
    taskset -c 0 "$1" broker --data-dir "$BDIR/data" --cores 1 --listen "127.0.0.1:$PORT" \
        "${metrics[@]}" --config "$BDIR/config.toml" --ready-file "$BDIR/ready.json" \
        >"$BDIR/broker.log" 2>&1 &
    BPID=$!
    for _ in $(seq 1 300); do [ -f "$BDIR/ready.json" ] && return 0; sleep 0.1; done
    echo "broker did not start; log:" >&2
    cat "$BDIR/broker.log" >&2
    exit 1
}
stop_broker() {
    [ -n "$BPID" ] && kill -TERM "$BPID" 2>/dev/null && wait "$BPID" 2>/dev/null
    BPID=""
    [ -n "$BDIR" ] && rm -rf "$BDIR"
    BDIR=""
}
trap 'stop_broker' EXIT

field() { grep -m1 "^$2=" "$1" | cut -d= -f2; }
cpu_ticks() { awk '{print $14+$15}' "/proc/$BPID/stat"; }
row() { printf '%s\t%s\t%s\t%s\n' "$1" "$2" "$3" "$4" >>"$OUT/rows.tsv"; } # build round metric value

one_round() { # LABEL BIN ROUND
    local label=$1 bin=$2 round=$3 f
    start_broker "$bin"
    "$bin" topic create ab --partitions 1 --bootstrap "127.0.0.1:$PORT" >/dev/null
    f="$OUT/$label-$round-produce.txt"
    log "taskset -c 1 $LG blast produce --topic ab --batch-bytes 65536 --batches-per-request 16 --duration-s $BLAST_S --target 127.0.0.1:$((PORT + 1))"
    local t0 t1
    t0=$(cpu_ticks)
    taskset -c 1 "$LG" blast produce --topic ab --batch-bytes 65536 --batches-per-request 16 \
        --duration-s "$BLAST_S" --target "127.0.0.1:$((PORT + 1))" >"$f" 2>&1
    t1=$(cpu_ticks)
    local mb
    mb=$(field "$f" throughput_mb_s)
    row "$label" "$round" blast_produce_mib_s "$mb"
    row "$label" "$round" broker_cpu_s_per_gib "$(python3 -c "print(round(($t1-$t0)/100/max($mb*$BLAST_S/1024,1e-9),3))")"
    f="$OUT/$label-$round-fetch.txt"
    log "taskset -c 1 $LG blast fetch --topic ab --offset 0 --fetch-bytes 1048576 --in-flight 4 --duration-s $BLAST_S --target 127.0.0.1:$((PORT + 1))"
    taskset -c 1 "$LG" blast fetch --topic ab --offset 0 --fetch-bytes 1048576 --in-flight 4 \
        --duration-s "$BLAST_S" --target "127.0.0.1:$((PORT + 1))" >"$f" 2>&1
    row "$label" "$round" blast_fetch_file_mib_s "$(field "$f" throughput_mb_s)"
    stop_broker
    start_broker "$bin"
    f="$OUT/$label-$round-latency.txt"
    log "taskset -c 1 $LG run --workload $OUT/latency.toml --driver borges --bootstrap 127.0.0.1:$PORT"
    taskset -c 1 "$LG" run --workload "$OUT/latency.toml" --driver borges \
        --bootstrap "127.0.0.1:$PORT" --broker-pid "$BPID" --quiet >"$f" 2>&1
    for q in p50 p99 p999; do row "$label" "$round" "publish_${q}_ms" "$(field "$f" "publish_${q}_ms")"; done
    stop_broker
}

sed -e 's/^name = .*/name = "ab-latency"/' \
    -e "s/^description = .*/description = \"A\/B publish latency at $RATE records\/s, linger 0, acks=1.\"/" \
    -e "s/^rate_records_s = .*/rate_records_s = $RATE/" -e '/^max_rate_mode/d' \
    -e 's/^linger_ms = .*/linger_ms = 0/' -e 's/^duration_s = .*/duration_s = 15/' \
    -e 's/^warmup_s = .*/warmup_s = 5/' loadgen/workloads/broker/produce-1p-1kb-64k.toml >"$OUT/latency.toml"

log "# A = $A_BIN ($(sha256sum "$A_BIN" | cut -c1-12)), B = $B_BIN ($(sha256sum "$B_BIN" | cut -c1-12)), $ROUNDS rounds, load average at start: $(cut -d' ' -f1-3 /proc/loadavg)"
for r in $(seq 1 "$ROUNDS"); do
    # Alternate which build goes first, so neither always follows the other.
    if ((r % 2)); then
        one_round A "$A_BIN" "$r"
        one_round B "$B_BIN" "$r"
    else
        one_round B "$B_BIN" "$r"
        one_round A "$A_BIN" "$r"
    fi
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
print("| metric | A median (all rounds) | B median (all rounds) | B / A |")
print("|---|---:|---:|---:|")
for metric, by in rows.items():
    a, b = statistics.median(by["A"]), statistics.median(by["B"])
    fmt = lambda xs: ", ".join(f"{x:g}" for x in xs)
    print(f"| {metric} | {a:g} ({fmt(by['A'])}) | {b:g} ({fmt(by['B'])}) | {b / a:.3f} |")
print()
print(f"Load average at the end: {sys.argv[2]}.")
PY
cat "$OUT/summary.md"
