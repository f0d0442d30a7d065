#!/usr/bin/env bash
# Focused A/B of the produce path: before (main 4c8a5d3) vs after (record validation), alternating.
# Same commands as scripts/bench-broker.sh steps 2a/2b, on other ports (another engineer's
# bench-broker.sh uses 19500), shorter runs, plus an SDK run with zstd.
set -uo pipefail
cd /work/wt/validate
OUT=/tmp/validate-ab/ab2; mkdir -p $OUT
PORT=19700
LG=/tmp/validate-ab/borges-loadgen
cpu_ticks() { awk '{print $14+$15}' "/proc/$1/stat"; }
start() { # BIN
  D=$(mktemp -d /tmp/validate-ab/broker.XXXXXX)
  printf '[log]\ndurability = "none"\n' > $D/cfg.toml
  taskset -c 0 $1 broker --data-dir $D/data --cores 1 --listen 127.0.0.1:$PORT --metrics-listen '' --config $D/cfg.toml --ready-file $D/ready.json > $D/log 2>&1 &
  BPID=$!
  for _ in $(seq 1 300); do [ -f $D/ready.json ] && return 0; sleep 0.1; done
  echo "no start"; cat $D/log; return 1
}
stop() { kill -TERM $BPID; wait $BPID; rm -rf $D; }
sed -e 's/^compression = .*/compression = "zstd"/' -e 's/^name = .*/name = "produce-1p-1kb-64k-zstd"/' loadgen/workloads/broker/produce-1p-1kb-64k.toml > $OUT/zstd.toml
for round in 1 2 3; do
  for build in before after; do
    BIN=/tmp/validate-ab/borges-$build
    start $BIN || exit 1
    $BIN topic create blast --partitions 1 --bootstrap 127.0.0.1:$PORT >/dev/null
    for b in 65536:16 1048576:1; do
      t0=$(cpu_ticks $BPID)
      taskset -c 1 $LG blast produce --topic blast --batch-bytes ${b%:*} --batches-per-request ${b#*:} --duration-s 10 --target 127.0.0.1:$((PORT+1)) > $OUT/blast-${b%:*}-$round-$build.txt 2>&1
      t1=$(cpu_ticks $BPID)
      mb=$(grep -m1 throughput_mb_s $OUT/blast-${b%:*}-$round-$build.txt | cut -d= -f2)
      echo "blast ${b%:*} round $round $build: ${mb} MiB/s, broker CPU-s/GiB $(python3 -c "print(round(($t1-$t0)/100/max($mb*10/1024,1e-9),3))") load $(cut -d' ' -f1 /proc/loadavg)"
    done
    stop
    for w in loadgen/workloads/broker/produce-1p-1kb-64k.toml $OUT/zstd.toml; do
      start $BIN || exit 1
      n=$(basename $w .toml)
      taskset -c 1 $LG run --workload $w --driver borges --bootstrap 127.0.0.1:$PORT --broker-pid $BPID --duration-s 15 --json $OUT/$n-$round-$build.json --quiet > $OUT/$n-$round-$build.txt 2>&1
      echo "sdk $n round $round $build: $(grep -h -E '^(throughput_mb_s|broker_cpu_pct_avg|publish_p50_ms|publish_p99_ms)=' $OUT/$n-$round-$build.txt | tr '\n' ' ') load $(cut -d' ' -f1 /proc/loadavg)"
      stop
    done
  done
done
echo done
