#!/usr/bin/env bash
# The cluster fault suite (issue 15; docs/reliability.md "The fault suite").
#
#   scripts/fault-suite.sh --fault NAME --duration-s N --seed S [--keep DIR]
#                          [--partitions P] [--min-insync N] [--if-unreplicated run|skip|leader-only]
#
# Starts three brokers (topic with replication factor 3, min.insync.replicas=2,
# durability=fsync), runs the workload driver (borges-fault-driver: acks=all producers with
# unique values recorded ok / failed / unknown, assign-mode consumers with seeks, group-mode
# consumers) for N seconds while injecting the fault, heals, waits for a full ISR, reads every
# partition back through fresh consumers, stops the brokers and runs borges-checker on the
# histories, every broker's partition logs and metadata logs. The last line is the checker's:
#   anomalies=K acked=N lost=L duplicates=D inconsistent=I skips=S divergent_replicas=R failover_ms_max=F
# Exit 0 without anomalies, 1 with anomalies, 2 when the run or the check failed; a failing run
# keeps its directory (histories, broker logs, data directories), --keep DIR keeps it always.
#
# Faults: none, kill-leader (kill -9 the leader of a random partition every 10-20 s, restart
# after 2-10 s), pause-leader (SIGSTOP 2-15 s, past the 1.5 s session timeout, then SIGCONT),
# kill-controller (kill -9 the active controller, restart after 2-10 s), partition-leader (the
# leader of a random partition cut off from the other brokers, clients still reach it, 5-15 s),
# partition-majority (a random broker cut off from the other two, 5-15 s), bridge (a random
# broker in the middle: 1-2 and 2-3 connected, 1-3 cut, 5-15 s), kill-all (all three kill -9,
# restart after 2-10 s), rolling-restart (SIGTERM one by one, each restarted once it exited),
# mix (a random one of those per round). Every random choice comes from --seed.
#
# Network: as root with ip (iproute2) and nft (nftables), each broker runs in its own network
# namespace (10.77.0.1-3) and the driver in a fourth (10.77.0.10), joined by veth pairs to a
# bridge this script creates; links are cut with nftables rules inside the namespaces (no tc).
# Only addresses of these namespaces are used. Everything is removed on exit, failure and
# interrupt included. Without root (or with FAULT_SUITE_NETNS=0) the brokers run on loopback
# and the network faults are skipped with a `SKIPPED:` line (exit 0), unless
# BORGES_REQUIRE_NETNS=1 (CI sets it): then that is a failure (exit 2).
#
# --min-insync N sets the topic's min.insync.replicas (default 2; 1 lets a leader alone
# acknowledge acks=all writes, which is how the suite shows what an unreplicated leader loses).
#
# --if-unreplicated: the suite first checks that followers are fed (borges-fault-driver probe:
# one acks=all write to a probe topic must reach every broker's data directory within 5 s).
# If they are not: `run` (default) judges the run anyway (with --min-insync 1 it finds the
# acknowledged writes an unreplicated leader loses), `skip` skips it (exit 0), `leader-only`
# runs it with min.insync.replicas=1 and without comparing replica logs (the leaders alone).
# BORGES_REQUIRE_REPLICATED=1 (CI sets it) makes unfed followers a failure (exit 2) under
# `skip` and `leader-only`.
#
# Binaries: target/debug (borges, borges-checker, borges-fault-driver) or $FAULT_SUITE_BIN_DIR;
# build them with `cargo build --workspace --bins`.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
BIN_DIR="${FAULT_SUITE_BIN_DIR:-$ROOT/target/debug}"
BORGES="$BIN_DIR/borges"
CHECKER="$BIN_DIR/borges-checker"
DRIVER="$BIN_DIR/borges-fault-driver"

FAULT="" DURATION_S="" SEED="" KEEP="" PARTITIONS=4 IF_UNREPLICATED=run MIN_INSYNC=2
TOPIC=jepsen
SESSION_TIMEOUT_MS=1500
WARMUP_S=5   # workload before the first fault
TAIL_S=12    # every fault healed at least this long before the workload ends (liveness)
FAULTS="none kill-leader pause-leader kill-controller partition-leader partition-majority bridge kill-all rolling-restart mix"
NET_FAULTS="partition-leader partition-majority bridge"

say() { echo "fault-suite: $*"; }
die() { echo "fault-suite: $*" >&2; exit 2; }
usage() { sed -n '2,40p' "$0"; exit 2; }

while [[ $# -gt 0 ]]; do
  case "$1" in
    --fault) FAULT="${2:?}"; shift 2 ;;
    --duration-s) DURATION_S="${2:?}"; shift 2 ;;
    --seed) SEED="${2:?}"; shift 2 ;;
    --keep) KEEP="${2:?}"; shift 2 ;;
    --partitions) PARTITIONS="${2:?}"; shift 2 ;;
    --min-insync) MIN_INSYNC="${2:?}"; shift 2 ;;
    --if-unreplicated) IF_UNREPLICATED="${2:?}"; shift 2 ;;
    -h|--help) usage ;;
    *) echo "fault-suite: unknown argument $1" >&2; usage ;;
  esac
done
[[ -n "$FAULT" && -n "$DURATION_S" && -n "$SEED" ]] || usage
[[ " $FAULTS " == *" $FAULT "* ]] || die "unknown fault '$FAULT' (one of: $FAULTS)"
[[ "$DURATION_S" =~ ^[0-9]+$ && "$DURATION_S" -ge 20 ]] || die "--duration-s must be at least 20"
[[ "$SEED" =~ ^[0-9]+$ ]] || die "--seed must be a number"
[[ "$IF_UNREPLICATED" =~ ^(run|skip|leader-only)$ ]] || die "bad --if-unreplicated"
for b in "$BORGES" "$CHECKER" "$DRIVER"; do
  [[ -x "$b" ]] || die "no $b: run cargo build --workspace --bins first"
done
RANDOM=$SEED
rand() { echo $(($1 + RANDOM % ($2 - $1 + 1))); }

# --- network mode ------------------------------------------------------------------------
netns_problem() {
  [[ "${FAULT_SUITE_NETNS:-1}" == 0 ]] && { echo "FAULT_SUITE_NETNS=0"; return; }
  [[ "$(id -u)" -eq 0 ]] || { echo "not root (network namespaces and nftables need root)"; return; }
  command -v ip >/dev/null || { echo "no ip command (install iproute2)"; return; }
  command -v nft >/dev/null || { echo "no nft command (install nftables)"; return; }
  local probe="bfprobe$$"
  if ! ip netns add "$probe" 2>/dev/null; then
    echo "ip netns add failed (no CAP_SYS_ADMIN / CAP_NET_ADMIN here?)"; return
  fi
  if ! ip netns exec "$probe" nft list ruleset >/dev/null 2>&1; then
    ip netns del "$probe"; echo "nft does not work in a network namespace here"; return
  fi
  ip netns del "$probe"
  echo ""
}
NETNS_PROBLEM="$(netns_problem)"
if [[ -z "$NETNS_PROBLEM" ]]; then MODE=netns; else MODE=loopback; fi
if [[ " $NET_FAULTS " == *" $FAULT "* && "$MODE" != netns ]]; then
  [[ "${BORGES_REQUIRE_NETNS:-0}" == 1 ]] &&
    die "--fault $FAULT needs network namespaces: $NETNS_PROBLEM (BORGES_REQUIRE_NETNS=1)"
  say "SKIPPED: --fault $FAULT cuts network links and needs network namespaces: $NETNS_PROBLEM (set BORGES_REQUIRE_NETNS=1 to make this a failure)"
  exit 0
fi

# --- run directory and cleanup -----------------------------------------------------------
if [[ -n "$KEEP" ]]; then mkdir -p "$KEEP"; RUN="$(cd "$KEEP" && pwd)"
else RUN="$(mktemp -d "${TMPDIR:-/tmp}/borges-faults.XXXXXX")"; fi
TAG="bf$(printf '%04d' $(($$ % 10000)))"   # prefix of every namespace and link: bf1234...
declare -a PIDS=(0 0 0 0)
DRIVER_PID=0
CLEANED=0

cleanup() {
  [[ "$CLEANED" == 1 ]] && return
  CLEANED=1
  [[ "$DRIVER_PID" != 0 ]] && kill -KILL "$DRIVER_PID" 2>/dev/null || true
  for n in 1 2 3; do
    if [[ "${PIDS[$n]}" != 0 ]]; then
      kill -CONT "${PIDS[$n]}" 2>/dev/null || true
      kill -KILL "${PIDS[$n]}" 2>/dev/null || true
      wait "${PIDS[$n]}" 2>/dev/null || true
      PIDS[$n]=0
    fi
  done
  if [[ "$MODE" == netns ]]; then
    for n in 1 2 3 c; do
      ip link del "${TAG}v$n" 2>/dev/null || true   # both ends of the veth pair
    done
    for ns in "${TAG}n1" "${TAG}n2" "${TAG}n3" "${TAG}c"; do
      ip netns del "$ns" 2>/dev/null || true   # and its nft table
    done
    ip link del "${TAG}br" 2>/dev/null || true
  fi
}
on_exit() {
  local rc=$?
  cleanup
  if [[ $rc -ne 0 ]]; then echo "fault-suite: failed (exit $rc); files kept in $RUN" >&2; fi
}
trap on_exit EXIT
trap 'exit 130' INT TERM

# --- addresses ---------------------------------------------------------------------------
if [[ "$MODE" == netns ]]; then
  host() { echo "10.77.0.$1"; }
  CLIENT_HOST=10.77.0.10
  port() { case "$1" in main) echo 9292 ;; core) echo 9293 ;; ctl) echo 9393 ;; esac; }
  in_node() { local n="$1"; shift; ip netns exec "${TAG}n$n" "$@"; }
  in_client() { ip netns exec "${TAG}c" "$@"; }
else
  host() { echo 127.0.0.1; }
  PORT_BASE=$((21000 + ($$ % 400) * 16))
  port_of() { local off; case "$2" in main) off=0 ;; core) off=1 ;; ctl) off=2 ;; esac
              echo $((PORT_BASE + $1 * 4 + off)); }
  in_node() { shift; "$@"; }
  in_client() { "$@"; }
fi
main_addr() { if [[ "$MODE" == netns ]]; then echo "$(host "$1"):$(port main)"; else echo "127.0.0.1:$(port_of "$1" main)"; fi; }
ctl_addr() { if [[ "$MODE" == netns ]]; then echo "$(host "$1"):$(port ctl)"; else echo "127.0.0.1:$(port_of "$1" ctl)"; fi; }
core_port() { if [[ "$MODE" == netns ]]; then port core; else port_of "$1" core; fi; }
BOOTSTRAP="$(main_addr 1),$(main_addr 2),$(main_addr 3)"
CONTROLLERS="$(ctl_addr 1),$(ctl_addr 2),$(ctl_addr 3)"
VOTERS="1@$(ctl_addr 1),2@$(ctl_addr 2),3@$(ctl_addr 3)"

setup_netns() {
  ip link add "${TAG}br" type bridge
  ip link set "${TAG}br" up
  local n ns addr
  for n in 1 2 3 c; do
    if [[ "$n" == c ]]; then ns="${TAG}c" addr="$CLIENT_HOST"; else ns="${TAG}n$n" addr="$(host "$n")"; fi
    ip netns add "$ns"
    ip link add "${TAG}v$n" type veth peer name eth0 netns "$ns"
    ip link set "${TAG}v$n" master "${TAG}br" up
    ip netns exec "$ns" ip addr add "$addr/24" dev eth0
    ip netns exec "$ns" ip link set eth0 up
    ip netns exec "$ns" ip link set lo up
  done
}

# --- brokers -----------------------------------------------------------------------------
format_all() {
  local id; id="$("$BORGES" storage random-cluster-id)"
  cat > "$RUN/broker.toml" <<EOF
[cluster]
heartbeat_interval_ms = 100
session_timeout_ms = $SESSION_TIMEOUT_MS
EOF
  for n in 1 2 3; do
    mkdir -p "$RUN/n$n"
    "$BORGES" storage format --data-dir "$RUN/n$n/data" --cluster-id="$id" --node-id "$n" \
      --ignore-formatted > /dev/null
  done
}

start_broker() {
  local n="$1"
  rm -f "$RUN/n$n/ready.json"
  local netns=(); [[ "$MODE" == netns ]] && netns=(ip netns exec "${TAG}n$n")
  # exec: the pid is the broker's own (ip netns exec execs too), so signals reach it.
  ( export RUST_LOG="${RUST_LOG:-info,openraft=warn}"
    exec "${netns[@]}" "$BORGES" broker --node-id "$n" \
    --data-dir "$RUN/n$n/data" --listen "$(main_addr "$n")" --core-port-base "$(core_port "$n")" \
    --metrics-listen "" --cores 1 --controller-listen "$(ctl_addr "$n")" \
    --controller-voters "$VOTERS" --ready-file "$RUN/n$n/ready.json" \
    --config "$RUN/broker.toml" < /dev/null >> "$RUN/n$n/broker.log" 2>&1 ) &
  PIDS[$n]=$!
}

alive() { [[ "${PIDS[$1]}" != 0 ]] && kill -0 "${PIDS[$1]}" 2>/dev/null; }

wait_ready() {
  local n="$1"
  for _ in $(seq 1 600); do
    [[ -s "$RUN/n$n/ready.json" ]] && return 0
    alive "$n" || die "broker $n exited; see $RUN/n$n/broker.log"
    sleep 0.1
  done
  die "broker $n not serving after 60 s; see $RUN/n$n/broker.log"
}

kill9() { kill -KILL "${PIDS[$1]}" 2>/dev/null || true; wait "${PIDS[$1]}" 2>/dev/null || true; PIDS[$1]=0; }

stop_broker() {   # SIGTERM, then SIGKILL after 20 s
  local n="$1"
  alive "$n" || { PIDS[$n]=0; return 0; }
  kill -TERM "${PIDS[$n]}" 2>/dev/null || true
  for _ in $(seq 1 200); do alive "$n" || break; sleep 0.1; done
  kill9 "$n"
}

# --- fault injection ---------------------------------------------------------------------
fault_event() { "$CHECKER" fault --history "$RUN/faults.jsonl" "$@"; }

leader_of() {   # the leader of a random partition (-1: none)
  in_client "$DRIVER" leader --bootstrap "$BOOTSTRAP" --topic "$TOPIC" \
    --partition "$(rand 0 $((PARTITIONS - 1)))" --wait-s 5 2>/dev/null || echo -1
}

controller_of() {
  in_client "$BORGES" cluster describe --bootstrap-controller "$CONTROLLERS" 2>/dev/null \
    | awk '/^LeaderId:/ {print $2}' || echo -1
}

cut() {   # cut node $1 from nodes $2...: nftables in $1's namespace, both directions
  local n="$1"; shift
  local peers=""; for p in "$@"; do peers+="${peers:+, }$(host "$p")"; done
  in_node "$n" nft -f - <<EOF
table inet fault {
  chain input { type filter hook input priority 0; policy accept; ip saddr { $peers } drop; }
  chain output { type filter hook output priority 0; policy accept; ip daddr { $peers } drop; }
}
EOF
}

heal_net() { for n in 1 2 3; do in_node "$n" nft delete table inet fault 2>/dev/null || true; done; }

# Sleeps $1 seconds, but not past the end of the fault window.
hold() { local s="$1" left=$((FAULT_UNTIL - SECONDS)); ((left < s)) && s=$((left > 1 ? left : 1)); sleep "$s"; }

ROUND=0
one_round() {   # one fault of kind $1, injected and healed
  local kind="$1" id target
  ROUND=$((ROUND + 1)); id="$kind-$ROUND"
  case "$kind" in
    kill-leader|kill-controller)
      if [[ "$kind" == kill-leader ]]; then target="$(leader_of)"; else target="$(controller_of)"; fi
      [[ "$target" =~ ^[1-3]$ ]] || { say "round $ROUND: no $kind target"; sleep 1; return; }
      fault_event start --id "$id" --fault "$kind" --target "node $target"
      kill9 "$target"; say "round $ROUND: kill -9 node $target"
      hold "$(rand 2 10)"
      start_broker "$target"; wait_ready "$target"
      fault_event end --id "$id" ;;
    pause-leader)
      target="$(leader_of)"
      [[ "$target" =~ ^[1-3]$ ]] || { say "round $ROUND: no leader"; sleep 1; return; }
      fault_event start --id "$id" --fault "$kind" --target "node $target"
      kill -STOP "${PIDS[$target]}"; say "round $ROUND: SIGSTOP node $target"
      hold "$(rand 2 15)"
      kill -CONT "${PIDS[$target]}"
      fault_event end --id "$id" ;;
    partition-leader|partition-majority)
      if [[ "$kind" == partition-leader ]]; then target="$(leader_of)"; else target="$(rand 1 3)"; fi
      [[ "$target" =~ ^[1-3]$ ]] || { say "round $ROUND: no leader"; sleep 1; return; }
      local others=(); for p in 1 2 3; do [[ "$p" == "$target" ]] || others+=("$p"); done
      # Recorded once the rules are in place (nft takes tens of ms to start): the failover
      # time then counts from the cut itself, not from sends the leader completed before it.
      cut "$target" "${others[@]}"
      fault_event start --id "$id" --fault "$kind" --target "node $target | ${others[*]}"
      say "round $ROUND: node $target cut from ${others[*]}"
      hold "$(rand 5 15)"
      heal_net
      fault_event end --id "$id" ;;
    bridge)
      local middle ends=(); middle="$(rand 1 3)"
      for p in 1 2 3; do [[ "$p" == "$middle" ]] || ends+=("$p"); done
      cut "${ends[0]}" "${ends[1]}"; cut "${ends[1]}" "${ends[0]}"
      fault_event start --id "$id" --fault "$kind" --target "${ends[0]}-$middle-${ends[1]}"
      say "round $ROUND: bridge ${ends[0]}-$middle-${ends[1]} (${ends[0]}-${ends[1]} cut)"
      hold "$(rand 5 15)"
      heal_net
      fault_event end --id "$id" ;;
    kill-all)
      fault_event start --id "$id" --fault "$kind" --target "nodes 1 2 3"
      for n in 1 2 3; do kill9 "$n"; done; say "round $ROUND: kill -9 nodes 1 2 3"
      hold "$(rand 2 10)"
      for n in 1 2 3; do start_broker "$n"; done
      for n in 1 2 3; do wait_ready "$n"; done
      fault_event end --id "$id" ;;
    rolling-restart)
      for n in 1 2 3; do
        ((SECONDS < FAULT_UNTIL)) || break
        fault_event start --id "$id-n$n" --fault "$kind" --target "node $n"
        stop_broker "$n"; say "round $ROUND: SIGTERM node $n, restarting"
        start_broker "$n"; wait_ready "$n"
        fault_event end --id "$id-n$n"
        sleep 2
      done ;;
  esac
}

MIX_KINDS="kill-leader pause-leader kill-controller kill-all rolling-restart"
[[ "$MODE" == netns ]] && MIX_KINDS+=" $NET_FAULTS"

fault_schedule() {
  [[ "$FAULT" == none ]] && return
  local kinds=($MIX_KINDS) kind started gap
  while ((SECONDS < FAULT_UNTIL - 2)); do
    kind="$FAULT"; [[ "$FAULT" == mix ]] && kind="${kinds[$((RANDOM % ${#kinds[@]}))]}"
    started=$SECONDS
    one_round "$kind"
    # Kills and pauses start every 10-20 s; network faults leave 3-8 s between them.
    case "$kind" in
      partition-*|bridge|rolling-restart) gap="$(rand 3 8)" ;;
      *) gap=$(($(rand 10 20) - (SECONDS - started))) ;;
    esac
    # Not `((gap > 0)) && hold`: when a round outlasts its gap at the end of the window,
    # that list's status 1 would become the loop's and the function's, and `set -e` would
    # end the run (seen in a long kill-leader run whose last restart was slow).
    if ((gap > 0)); then hold "$gap"; fi
  done
  return 0
}

# --- the run -----------------------------------------------------------------------------
say "fault $FAULT, ${DURATION_S} s, seed $SEED, $MODE mode${NETNS_PROBLEM:+ ($NETNS_PROBLEM)}, files in $RUN"
[[ "$MODE" == netns ]] && setup_netns
format_all
for n in 1 2 3; do start_broker "$n"; done
for n in 1 2 3; do wait_ready "$n"; done
REPLICATED=1
probe_dirs=(); for n in 1 2 3; do probe_dirs+=(--data-dir "$n=$RUN/n$n/data"); done
if PROBE="$(in_client "$DRIVER" probe --bootstrap "$BOOTSTRAP" "${probe_dirs[@]}" --wait-s 5)"
then :; else
  [[ $? -eq 3 ]] || die "the replication probe failed: $PROBE"
  REPLICATED=0
fi
say "$PROBE"
if [[ "$REPLICATED" == 0 && "$IF_UNREPLICATED" != run && "${BORGES_REQUIRE_REPLICATED:-0}" == 1 ]]; then
  die "followers are not fed (the replication probe), and BORGES_REQUIRE_REPLICATED=1 makes --if-unreplicated $IF_UNREPLICATED a failure"
fi
if [[ "$REPLICATED" == 0 && "$IF_UNREPLICATED" == skip ]]; then
  say "SKIPPED: --fault $FAULT: followers are not fed (the replication probe; set BORGES_REQUIRE_REPLICATED=1 to make this a failure)"
  cleanup; rm -rf "$RUN"; exit 0
fi
if [[ "$REPLICATED" == 0 && "$IF_UNREPLICATED" == leader-only ]]; then
  MIN_INSYNC=1
  say "followers are not fed: min.insync.replicas=1 and no replica comparison (--if-unreplicated leader-only)"
fi
in_client "$DRIVER" setup --bootstrap "$BOOTSTRAP" --topic "$TOPIC" --partitions "$PARTITIONS" \
  --replication-factor 3 --min-insync-replicas "$MIN_INSYNC" --durability fsync \
  | sed 's/^/fault-suite: /'

START=$SECONDS
FAULT_UNTIL=$((START + DURATION_S - TAIL_S))
client_netns=(); [[ "$MODE" == netns ]] && client_netns=(ip netns exec "${TAG}c")
( exec "${client_netns[@]}" "$DRIVER" run --bootstrap "$BOOTSTRAP" --topic "$TOPIC" \
  --partitions "$PARTITIONS" --history "$RUN/workload.jsonl" --duration-s "$DURATION_S" \
  --seed "$SEED" > "$RUN/driver.log" 2>&1 ) &
DRIVER_PID=$!
sleep "$WARMUP_S"
fault_schedule
driver_rc=0; wait "$DRIVER_PID" || driver_rc=$?
DRIVER_PID=0
grep '^workload ' "$RUN/driver.log" | sed 's/^/fault-suite: /' || true
((driver_rc == 0)) || say "the workload driver exited with $driver_rc (see $RUN/driver.log)"

# Heal whatever is left, then read back.
[[ "$MODE" == netns ]] && heal_net
for n in 1 2 3; do
  if alive "$n"; then kill -CONT "${PIDS[$n]}" 2>/dev/null || true; else start_broker "$n"; fi
done
for n in 1 2 3; do wait_ready "$n"; done
read_rc=0
isr_wait_s=30; [[ "$REPLICATED" == 1 ]] || isr_wait_s=5   # an ISR without followers never fills
in_client "$DRIVER" read --bootstrap "$BOOTSTRAP" --topic "$TOPIC" --partitions "$PARTITIONS" \
  --isr-wait-s "$isr_wait_s" --history "$RUN/final.jsonl" > "$RUN/read.log" 2>&1 || read_rc=$?
sed 's/^/fault-suite: /' "$RUN/read.log"
for n in 1 2 3; do stop_broker "$n"; done

checks=(--history "$RUN/workload.jsonl" --history "$RUN/final.jsonl")
[[ -f "$RUN/faults.jsonl" ]] && checks+=(--history "$RUN/faults.jsonl")
for n in 1 2 3; do
  [[ "$REPLICATED" == 1 || "$IF_UNREPLICATED" != leader-only ]] \
    && checks+=(--replica "$n=$RUN/n$n/data")
  checks+=(--metadata-dir "$n=$RUN/n$n/data")
done
check_rc=0
"$CHECKER" check "${checks[@]}" > "$RUN/check.txt" 2>&1 || check_rc=$?
CHECK_OUT="$(cat "$RUN/check.txt" 2>/dev/null || true)"
cleanup
trap - EXIT
if ((check_rc != 0 || read_rc != 0 || driver_rc != 0)) || [[ -n "$KEEP" ]]; then
  say "files kept in $RUN"
else
  rm -rf "$RUN"
fi
ANOMALY_LINES_SHOWN=40
{ grep '^anomaly ' <<< "$CHECK_OUT" | head -"$ANOMALY_LINES_SHOWN" || true
  shown_more=$(($(grep -c '^anomaly ' <<< "$CHECK_OUT" || true) - ANOMALY_LINES_SHOWN))
  ((shown_more > 0)) && echo "... $shown_more more anomalies in check.txt"
  grep -v '^anomaly\|^anomalies=' <<< "$CHECK_OUT" || true; } | sed 's/^/fault-suite: /'

SUMMARY="$(grep '^anomalies=' <<< "$CHECK_OUT" | tail -1 || true)"
if [[ -z "$SUMMARY" ]]; then
  echo "fault-suite: the checker could not check (exit $check_rc)" >&2
  exit 2
fi
if ((check_rc == 0 && (read_rc != 0 || driver_rc != 0))); then check_rc=2; fi
echo "$SUMMARY"
exit "$check_rc"
