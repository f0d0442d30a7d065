#!/usr/bin/env bash
# Runs a three-broker Borges cluster on this machine (loopback), for trying it out.
#
#   scripts/cluster.sh start     format three data directories (once) and start brokers 1-3,
#                                every one a voter of the controller quorum; waits until all serve
#   scripts/cluster.sh stop      stop every broker (SIGTERM: controlled shutdown)
#   scripts/cluster.sh kill N    kill -9 broker N
#   scripts/cluster.sh restart N start broker N again on its directory
#   scripts/cluster.sh status    `borges cluster describe` and which brokers run
#   scripts/cluster.sh env       print the --bootstrap and --bootstrap-controller values
#
# Broker N listens on 127.0.0.1:929N for clients (its cores on 92N0, 92N1, ...), on
# 127.0.0.1:939N for the controller link. Files live in $CLUSTER_DIR (default .cluster/):
# nN/ (data), nN.log, nN.pid. Uses target/release/borges or target/debug/borges,
# whichever is newer (build with `cargo build --release --bins`), or $BORGES.
#
# A walk-through (README "A three-broker cluster"):
#   scripts/cluster.sh start
#   eval "$(scripts/cluster.sh env)"
#   borges topic create orders --partitions 3 --replication-factor 3
#   seq 1 10 | borges produce orders
#   borges topic describe orders
#   scripts/cluster.sh kill 2; sleep 2; borges topic describe orders   # leaders moved
#   scripts/cluster.sh restart 2; scripts/cluster.sh status
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
DIR="${CLUSTER_DIR:-$ROOT/.cluster}"
CORES="${CLUSTER_CORES:-1}"
if [[ -n "${BORGES:-}" ]]; then
  BIN="$BORGES"
elif [[ -x "$ROOT/target/release/borges" && "$ROOT/target/release/borges" -nt "$ROOT/target/debug/borges" ]]; then
  BIN="$ROOT/target/release/borges"
else
  BIN="$ROOT/target/debug/borges"
fi
VOTERS="1@127.0.0.1:9391,2@127.0.0.1:9392,3@127.0.0.1:9393"
BOOTSTRAP="127.0.0.1:9291,127.0.0.1:9292,127.0.0.1:9293"
CONTROLLERS="127.0.0.1:9391,127.0.0.1:9392,127.0.0.1:9393"

die() { echo "cluster.sh: $*" >&2; exit 1; }
[[ -x "$BIN" ]] || die "no borges binary at $BIN: run cargo build --bins first"

running() { [[ -f "$DIR/n$1.pid" ]] && kill -0 "$(cat "$DIR/n$1.pid")" 2>/dev/null; }

format_all() {
  mkdir -p "$DIR"
  [[ -f "$DIR/cluster-id" ]] || "$BIN" storage random-cluster-id > "$DIR/cluster-id"
  local id; id="$(cat "$DIR/cluster-id")"
  for n in 1 2 3; do
    "$BIN" storage format --data-dir "$DIR/n$n" --cluster-id="$id" --node-id "$n" \
      --ignore-formatted > /dev/null
  done
}

start_one() {
  local n="$1"
  running "$n" && { echo "broker $n runs already"; return; }
  rm -f "$DIR/n$n.ready"
  "$BIN" broker --node-id "$n" --data-dir "$DIR/n$n" --listen "127.0.0.1:929$n" \
    --core-port-base "92${n}0" --metrics-listen "127.0.0.1:946$n" --cores "$CORES" \
    --controller-listen "127.0.0.1:939$n" --controller-voters "$VOTERS" \
    --ready-file "$DIR/n$n.ready" >> "$DIR/n$n.log" 2>&1 &
  echo $! > "$DIR/n$n.pid"
}

wait_ready() {
  local n="$1"
  for _ in $(seq 1 600); do
    [[ -s "$DIR/n$n.ready" ]] && return 0
    running "$n" || die "broker $n exited; see $DIR/n$n.log"
    sleep 0.1
  done
  die "broker $n not serving after 60 s; see $DIR/n$n.log"
}

case "${1:-}" in
  start)
    format_all
    for n in 1 2 3; do start_one "$n"; done
    for n in 1 2 3; do wait_ready "$n"; done
    echo "three brokers serve; bootstrap $BOOTSTRAP"
    ;;
  stop)
    for n in 1 2 3; do running "$n" && kill -TERM "$(cat "$DIR/n$n.pid")"; done
    for n in 1 2 3; do
      for _ in $(seq 1 300); do running "$n" || break; sleep 0.1; done
      running "$n" && kill -KILL "$(cat "$DIR/n$n.pid")"
      rm -f "$DIR/n$n.pid"
    done
    echo "stopped"
    ;;
  kill)
    n="${2:?broker id}"
    running "$n" || die "broker $n does not run"
    kill -KILL "$(cat "$DIR/n$n.pid")"; rm -f "$DIR/n$n.pid"
    echo "killed broker $n"
    ;;
  restart)
    n="${2:?broker id}"
    start_one "$n"; wait_ready "$n"
    echo "broker $n serves again"
    ;;
  status)
    for n in 1 2 3; do
      if running "$n"; then echo "broker $n: running"; else echo "broker $n: stopped"; fi
    done
    "$BIN" cluster describe --bootstrap-controller "$CONTROLLERS"
    ;;
  env)
    echo "export BORGES_BOOTSTRAP=$BOOTSTRAP"
    echo "export BORGES_BOOTSTRAP_CONTROLLER=$CONTROLLERS"
    ;;
  *)
    sed -n '2,24p' "$0"; exit 2 ;;
esac
