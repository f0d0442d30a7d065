#!/usr/bin/env bash
# One blast-produce run for A/B comparisons of broker builds (docs/benchmarks.md section 18):
# the broker (--cores 1, durability none) on CPU 0, `borges-loadgen blast produce` (1 MiB
# requests of 16 x 64 KiB batches, --in-flight INF, default 8) on CPU 1; prints the rate, the
# broker's and the loadgen's CPU over 10 s, the device's write rate (/proc/diskstats, vda) and
# the steal time of all CPUs, and leaves a metrics sample in $OUT/metrics.txt.
#   BIN=/tmp/old/borges scripts/blast-ab.sh ; BIN=target/release/borges scripts/blast-ab.sh
set -euo pipefail
cd "$(dirname "$0")/.."
BIN=${BIN:-target/release/borges}; LG=${LG:-target/release/borges-loadgen}
OUT=${OUT:-/tmp/blast-ab}; mkdir -p "$OUT"
printf '[log]\ndurability = "none"\n' > "$OUT/cfg.toml"
D=$OUT/data; rm -rf "$D"; mkdir -p "$D"
PORT=${PORT:-19400}; DISK=${DISK:-vda}
taskset -c 0 "$BIN" broker --data-dir "$D" --cores 1 --listen 127.0.0.1:$PORT \
    --config "${CFG:-$OUT/cfg.toml}" >"$OUT/broker.log" 2>&1 &
BPID=$!
for _ in $(seq 50); do
    "$BIN" topic list --bootstrap 127.0.0.1:$PORT >/dev/null 2>&1 && break
    sleep 0.2
done
"$BIN" topic create blast --partitions 1 --bootstrap 127.0.0.1:$PORT >/dev/null
taskset -c 1 "$LG" blast produce --topic blast --batch-bytes "${BATCH:-65536}" \
    --batches-per-request "${BPR:-16}" --in-flight "${INF:-8}" --connections "${CONNS:-1}" \
    --duration-s 14 --target 127.0.0.1:$((PORT + 1)) >"$OUT/blast.txt" 2>&1 &
LPID=$!
sleep 3
cpu() { awk '{print $14+$15}' "/proc/$1/stat"; }
dsk() { awk -v d="$DISK" '$3==d{print $10}' /proc/diskstats; }
steal() { awk '/^cpu /{print $9}' /proc/stat; }
b0=$(cpu $BPID); l0=$(cpu $LPID); d0=$(dsk); s0=$(steal)
sleep 5
curl -s 127.0.0.1:9464/metrics | grep -E "unflushed|request_latency_seconds_(sum|count)" \
    | grep -v "^#" >"$OUT/metrics.txt" || true
sleep 5
b1=$(cpu $BPID); l1=$(cpu $LPID); d1=$(dsk); s1=$(steal)
wait $LPID || true
kill $BPID; wait $BPID 2>/dev/null || true
grep throughput "$OUT/blast.txt"
echo "broker_cpu=$((b1 - b0))cs/10s loadgen_cpu=$((l1 - l0))cs/10s" \
    "disk_write_MiB_s=$(((d1 - d0) * 512 / 1048576 / 10)) steal_all_cpus=$((s1 - s0))cs"
