#!/usr/bin/env bash
# Broker benchmarks: produce and fetch limits next to the loopback TCP limit and the disk's
# sequential O_DIRECT write rate measured in the same run (iperf3, fio), publish latency at half
# the maximum rate, sendfile vs copy for file-backed fetches, direct vs forwarded (cross-core)
# paths, and RSS with 10,000 idle partitions.
#
#   scripts/bench-broker.sh [OUT_DIR]        (default results/broker-<date>)
#   BORGES_BENCH_BIN=/tmp/old/borges scripts/bench-broker.sh OUT_DIR   (another broker build)
#
# The broker is pinned to CPU 0 (--cores 1) and the load generator to CPU 1, except for the
# direct-vs-forwarded runs, where the broker uses both CPUs (--cores 2) and shares them with the
# load generator. Every command is appended to OUT_DIR/commands.txt; summary.md collects the
# figures.
set -euo pipefail
cd "$(dirname "$0")/.."
OUT="${1:-results/broker-$(date +%Y-%m-%d)}"
mkdir -p "$OUT"
OUT="$(cd "$OUT" && pwd)"
PORT=19500
METRICS_PORT=19550
# BORGES_BENCH_BIN / BORGES_BENCH_LOADGEN run other builds (A/B comparisons of two binaries).
BIN="${BORGES_BENCH_BIN:-target/release/borges}"
LG="${BORGES_BENCH_LOADGEN:-target/release/borges-loadgen}"

command -v iperf3 >/dev/null || apt-get install -y -qq iperf3 >/dev/null
command -v fio >/dev/null || apt-get install -y -qq fio >/dev/null
cargo build --release -p borges-cli -p borges-loadgen >/dev/null
: >"$OUT/commands.txt"

log() { printf '%s\n' "$*" | tee -a "$OUT/commands.txt" >&2; }

BPID=""
BDIR=""
start_broker() { # CPUS CORES [extra broker args...]; METRICS=1 serves metrics on METRICS_PORT
    local cpus=$1 cores=$2
    shift 2
    local metrics=""
    [ "${METRICS:-}" = 1 ] && metrics="127.0.0.1:$METRICS_PORT"
    BDIR=$(mktemp -d /tmp/borges-bench-broker.XXXXXX)
    log "taskset -c $cpus $BIN broker --data-dir $BDIR/data --cores $cores --listen 127.0.0.1:$PORT --metrics-listen '$metrics' $*"
    taskset -c "$cpus" "$BIN" broker --data-dir "$BDIR/data" --cores "$cores" \
        --listen "127.0.0.1:$PORT" --metrics-listen "$metrics" --ready-file "$BDIR/ready.json" "$@" \
        >"$BDIR/broker.log" 2>&1 &
    BPID=$!
    for _ in $(seq 1 300); do [ -f "$BDIR/ready.json" ] && return 0; sleep 0.1; done
    echo "broker did not start; log:" >&2
    cat "$BDIR/broker.log" >&2
    exit 1
}

stop_broker() {
    kill -TERM "$BPID" 2>/dev/null || true
    wait "$BPID" 2>/dev/null || true
    rm -rf "$BDIR"
}
trap 'stop_broker' EXIT

loadgen() { # NAME CPUS WORKLOAD [extra loadgen args...]
    local name=$1 cpus=$2 workload=$3
    shift 3
    log "taskset -c $cpus $LG run --workload $workload --driver borges --bootstrap 127.0.0.1:$PORT --broker-pid $BPID --json $OUT/$name.json $*"
    taskset -c "$cpus" "$LG" run --workload "$workload" --driver borges \
        --bootstrap "127.0.0.1:$PORT" --broker-pid "$BPID" --json "$OUT/$name.json" --quiet "$@" \
        >"$OUT/$name.txt" 2>&1
}

field() { grep -m1 "^$2=" "$OUT/$1.txt" | cut -d= -f2; }

# 1. The loopback TCP limit, same pinning as the broker runs.
log "taskset -c 0 iperf3 -s -1 -p 5301 & taskset -c 1 iperf3 -c 127.0.0.1 -p 5301 -t 10 -J"
taskset -c 0 iperf3 -s -1 -p 5301 >/dev/null 2>&1 &
sleep 1
taskset -c 1 iperf3 -c 127.0.0.1 -p 5301 -t 10 -J >"$OUT/iperf3.json"
LOOPBACK_MB_S=$(python3 -c "import json;d=json.load(open('$OUT/iperf3.json'));print(round(d['end']['sum_received']['bits_per_second']/8/2**20,1))")

# 1b. The disk's sequential O_DIRECT write rate on the file system of the broker's data
#     directories (/tmp), pinned like the broker: one writer with 4 MiB writes at queue depth 1
#     (the shape of one partition's flusher, whose writes are at most 4 MiB) and 1 MiB writes at
#     queue depth 4 (what the device gives a deeper queue). The better of the two is the
#     device's rate that blast produce is compared with.
fio_write() { # NAME BS IODEPTH
    local dir
    dir=$(mktemp -d /tmp/borges-bench-fio.XXXXXX)
    log "taskset -c 0 fio --name=$1 --directory=$dir --rw=write --bs=$2 --iodepth=$3 --direct=1 --ioengine=io_uring --size=4G --time_based --runtime=15 --output-format=json"
    taskset -c 0 fio --name="$1" --directory="$dir" --rw=write --bs="$2" --iodepth="$3" \
        --direct=1 --ioengine=io_uring --size=4G --time_based --runtime=15 \
        --output-format=json >"$OUT/$1.json"
    rm -rf "$dir"
    python3 -c "import json;d=json.load(open('$OUT/$1.json'));print(round(d['jobs'][0]['write']['bw_bytes']/2**20,1))"
}
FIO_QD1_MB_S=$(fio_write fio-seq-write-4m-qd1 4M 1)
FIO_QD4_MB_S=$(fio_write fio-seq-write-1m-qd4 1M 4)
DISK_MB_S=$(python3 -c "print(max($FIO_QD1_MB_S, $FIO_QD4_MB_S))")

cpu_ticks() { awk '{print $14+$15}' "/proc/$BPID/stat"; }

blast() { # NAME [blast args...]: pre-encoded requests to core 0's own port; broker CPU-s per GiB
    local name=$1
    shift
    local core_port=$((PORT + 1))
    log "taskset -c 1 $LG blast $* --target 127.0.0.1:$core_port"
    local t0
    t0=$(cpu_ticks)
    taskset -c 1 "$LG" blast "$@" --target "127.0.0.1:$core_port" >"$OUT/$name.txt" 2>&1
    local t1 mb
    t1=$(cpu_ticks)
    mb=$(field "$name" throughput_mb_s)
    # ticks are 1/100 s; the run lasts 1 s warm-up + duration.
    echo "broker_cpu_s_per_gib=$(python3 -c "d=$BLAST_S+1; mb=$mb; print(round(($t1-$t0)/100/max(mb*$BLAST_S/1024,1e-9),3))")" >>"$OUT/$name.txt"
}
BLAST_S=15

# 2a. Broker limits without client overhead (`borges-loadgen blast`): produce 1 KiB records in
#     64 KiB and 1 MiB batches (acks=1), then fetch recent data (memory) and file data with
#     sendfile and with copy.
for mode in sendfile copy; do
    cfg=$(mktemp /tmp/borges-bench-cfg.XXXXXX.toml)
    printf '[fetch]\nsend_mode = "%s"\n[log]\ndurability = "none"\n' "$mode" >"$cfg"
    start_broker 0 1 --config "$cfg"
    "$BIN" topic create blast --partitions 1 --bootstrap "127.0.0.1:$PORT" >/dev/null
    if [ "$mode" = sendfile ]; then
        blast blast-produce-64k produce --topic blast --batch-bytes 65536 --batches-per-request 16 --duration-s $BLAST_S
        blast blast-produce-1m produce --topic blast --batch-bytes 1048576 --batches-per-request 1 --duration-s $BLAST_S
    else
        blast blast-produce-fill produce --topic blast --batch-bytes 1048576 --batches-per-request 1 --duration-s 5
    fi
    # Recent data: the newest ~200 MB are in the broker's tail cache (memory).
    blast "blast-fetch-recent-$mode" fetch --topic blast --offset-from-end 200000 --fetch-bytes 1048576 --in-flight 4 --duration-s $BLAST_S --bootstrap "127.0.0.1:$PORT"
    # File data: offset 0, far behind the tail cache (page cache after the first pass).
    blast "blast-fetch-file-$mode" fetch --topic blast --offset 0 --fetch-bytes 1048576 --in-flight 4 --duration-s $BLAST_S
    stop_broker
    rm -f "$cfg"
done

# 2b. Produce limits through the SDK (1 partition, 1 KiB records, 64 KiB and 1 MiB batches).
for w in produce-1p-1kb-64k produce-1p-1kb-1m; do
    start_broker 0 1
    loadgen "$w" 1 "loadgen/workloads/broker/$w.toml"
    stop_broker
done

# 3. Fetch of recent data (served from the broker's memory) and from segment files, sendfile
#    and copy.
start_broker 0 1
loadgen fetch-recent-1p-1kb 1 loadgen/workloads/broker/fetch-recent-1p-1kb.toml
stop_broker
for mode in sendfile copy; do
    cfg=$(mktemp /tmp/borges-bench-cfg.XXXXXX.toml)
    printf '[fetch]\nsend_mode = "%s"\n' "$mode" >"$cfg"
    start_broker 0 1 --config "$cfg"
    loadgen "fetch-file-1p-1kb-$mode" 1 loadgen/workloads/broker/fetch-file-1p-1kb.toml
    stop_broker
    rm -f "$cfg"
done

# 4. Publish latency at half the maximum rate measured in step 2 (64 KiB batches), linger 0.
MAX_RECORDS=$(field produce-1p-1kb-64k throughput_records_s | cut -d. -f1)
HALF=$((MAX_RECORDS / 2))
LAT="$OUT/latency-1p-1kb-half.toml"
sed -e "s/^name = .*/name = \"latency-1p-1kb-half\"/" \
    -e "s/^description = .*/description = \"Publish latency at half the measured maximum ($HALF records\/s), linger 0, acks=1.\"/" \
    -e "s/^rate_records_s = .*/rate_records_s = $HALF/" -e "/^max_rate_mode/d" \
    -e "s/^linger_ms = .*/linger_ms = 0/" loadgen/workloads/broker/produce-1p-1kb-64k.toml >"$LAT"
METRICS=1 start_broker 0 1
loadgen latency-1p-1kb-half 1 "$LAT"
# The broker's own view of the same requests: decode to response ready (whole broker lifetime,
# warm-up included), from its Prometheus endpoint.
log "curl -s http://127.0.0.1:$METRICS_PORT/metrics | grep 'borges_request_latency_seconds_bucket{.*api=\"Produce\"'"
python3 - "$METRICS_PORT" >"$OUT/latency-1p-1kb-half-broker.txt" <<'PY'
import re, sys, urllib.request
# A Prometheus histogram: cumulative bucket counts; a quantile is the upper bound of the first
# bucket that holds it (so each figure is an upper bound at the bucket's resolution).
text = urllib.request.urlopen(f"http://127.0.0.1:{sys.argv[1]}/metrics", timeout=10).read().decode()
buckets = []
for line in text.splitlines():
    if line.startswith("borges_request_latency_seconds_bucket{") and 'api="Produce"' in line:
        le = re.search(r'le="([^"]+)"', line).group(1)
        buckets.append((float("inf") if le == "+Inf" else float(le), float(line.split()[-1])))
buckets.sort()
total = buckets[-1][1] if buckets else 0
for name, q in (("p50", 0.5), ("p99", 0.99), ("p999", 0.999)):
    bound = next((le for le, n in buckets if total and n >= q * total), float("nan"))
    print(f"broker_produce_{name}_ms={bound * 1000:.3f}")
PY
stop_broker

# 5. Direct vs forwarded: 16 partitions on 2 broker cores.
for path in direct forwarded; do
    extra=()
    [ "$path" = forwarded ] && extra=(--no-shard-aware)
    start_broker 0,1 2
    loadgen "paths-$path" 0,1 loadgen/workloads/broker/produce-16p-1kb-paths.toml "${extra[@]}"
    stop_broker
done

# 6. RSS with 10,000 idle partitions.
start_broker 0 1
RSS_EMPTY=$(awk '/VmRSS/ {print $2}' "/proc/$BPID/status")
for i in $(seq 0 9); do
    log "$BIN topic create idle-$i --partitions 1000 --bootstrap 127.0.0.1:$PORT"
    "$BIN" topic create "idle-$i" --partitions 1000 --bootstrap "127.0.0.1:$PORT" >/dev/null
done
sleep 5
RSS_10K=$(awk '/VmRSS/ {print $2}' "/proc/$BPID/status")
FDS_10K=$(ls "/proc/$BPID/fd" | wc -l)
stop_broker

{
    echo "# Broker benchmarks ($(date -u +%Y-%m-%dT%H:%MZ))"
    echo
    echo "Machine: $(nproc) CPUs, $(awk '/MemTotal/ {printf "%.0f GiB", $2/1048576}' /proc/meminfo), $(uname -r). Broker on CPU 0 (--cores 1), load generator on CPU 1, unless noted."
    echo
    echo "Loopback TCP limit (iperf3, one stream, same pinning): **$LOOPBACK_MB_S MiB/s**"
    echo
    echo "Disk, sequential O_DIRECT writes on the data directories' file system (fio, io_uring, CPU 0): 4 MiB at queue depth 1 **$FIO_QD1_MB_S MiB/s**, 1 MiB at queue depth 4 **$FIO_QD4_MB_S MiB/s**."
    echo
    echo "| run | throughput MiB/s | % of loopback | records/s | publish p50 / p99 / p99.9 ms | broker CPU % |"
    echo "|---|---:|---:|---:|---|---:|"
    for r in produce-1p-1kb-64k produce-1p-1kb-1m latency-1p-1kb-half paths-direct paths-forwarded; do
        mb=$(field "$r" throughput_mb_s)
        echo "| $r | $mb | $(python3 -c "print(round(100*$mb/$LOOPBACK_MB_S,1))") | $(field "$r" throughput_records_s) | $(field "$r" publish_p50_ms) / $(field "$r" publish_p99_ms) / $(field "$r" publish_p999_ms) | $(field "$r" broker_cpu_pct_avg) |"
    done
    echo
    echo "Broker side of latency-1p-1kb-half (\`borges_request_latency_seconds{api=\"Produce\"}\`, decode to response ready; bucket upper bounds): p50 $(field latency-1p-1kb-half-broker broker_produce_p50_ms) ms, p99 $(field latency-1p-1kb-half-broker broker_produce_p99_ms) ms, p99.9 $(field latency-1p-1kb-half-broker broker_produce_p999_ms) ms."
    echo
    echo "Broker limits with pre-encoded requests (\`borges-loadgen blast\`, no client-library work):"
    echo
    echo "| blast run | MiB/s | % of loopback | % of the disk's write rate | requests/s | broker CPU-s per GiB |"
    echo "|---|---:|---:|---:|---:|---:|"
    for r in blast-produce-64k blast-produce-1m blast-fetch-recent-sendfile blast-fetch-file-sendfile blast-fetch-recent-copy blast-fetch-file-copy; do
        mb=$(field "$r" throughput_mb_s)
        disk="-"
        case $r in blast-produce-*) disk=$(python3 -c "print(round(100*$mb/$DISK_MB_S,1))") ;; esac
        echo "| $r | $mb | $(python3 -c "print(round(100*$mb/$LOOPBACK_MB_S,1))") | $disk | $(field "$r" requests_s) | $(field "$r" broker_cpu_s_per_gib) |"
    done
    echo
    echo "| fetch run | consume MiB/s | % of loopback | catch-up s | broker CPU % |"
    echo "|---|---:|---:|---:|---:|"
    for r in fetch-recent-1p-1kb fetch-file-1p-1kb-sendfile fetch-file-1p-1kb-copy; do
        mb=$(field "$r" consume_throughput_mb_s)
        echo "| $r | $mb | $(python3 -c "print(round(100*$mb/$LOOPBACK_MB_S,1))") | $(field "$r" catch_up_s) | $(field "$r" broker_cpu_pct_avg) |"
    done
    echo
    echo "RSS with no topics: $((RSS_EMPTY / 1024)) MiB; with 10,000 idle partitions: **$((RSS_10K / 1024)) MiB** ($FDS_10K open descriptors)."
} >"$OUT/summary.md"
cat "$OUT/summary.md"
