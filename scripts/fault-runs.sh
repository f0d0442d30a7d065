#!/usr/bin/env bash
# Long runs of the fault suite (issue 15 item 4; results go to docs/reliability.md):
#
#   scripts/fault-runs.sh [--faults "kill-leader pause-leader ..."] [--runs 10]
#                         [--duration-s 300] [--first-seed 1] [--out DIR] [-- fault-suite args]
#
# Runs scripts/fault-suite.sh once per fault and seed (seeds first-seed .. first-seed+runs-1),
# keeps every run's output in DIR/<fault>-<seed>.txt (and the run's files when it failed), and
# prints one markdown table row per run, then per fault: runs, acknowledged writes, anomalies,
# runs with anomalies and the largest failover_ms_max. Exit 1 if any run had anomalies.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
FAULTS="none kill-leader pause-leader kill-controller partition-leader partition-majority bridge kill-all rolling-restart mix"
RUNS=10 DURATION_S=300 FIRST_SEED=1 OUT="" EXTRA=()
while [[ $# -gt 0 ]]; do
  case "$1" in
    --faults) FAULTS="${2:?}"; shift 2 ;;
    --runs) RUNS="${2:?}"; shift 2 ;;
    --duration-s) DURATION_S="${2:?}"; shift 2 ;;
    --first-seed) FIRST_SEED="${2:?}"; shift 2 ;;
    --out) OUT="${2:?}"; shift 2 ;;
    --) shift; EXTRA=("$@"); break ;;
    *) sed -n '2,11p' "$0"; exit 2 ;;
  esac
done
OUT="${OUT:-$(mktemp -d "${TMPDIR:-/tmp}/borges-fault-runs.XXXXXX")}"
mkdir -p "$OUT"
field() { sed -n "s/.*\b$1=\([0-9]*\).*/\1/p" <<< "$2"; }

echo "| fault | seed | acked | anomalies | lost | duplicates | inconsistent | skips | divergent | failover_ms_max | exit |"
echo "|---|---|---|---|---|---|---|---|---|---|---|"
failed=0
declare -A runs acked anomalies bad failover
for fault in $FAULTS; do
  runs[$fault]=0 acked[$fault]=0 anomalies[$fault]=0 bad[$fault]=0 failover[$fault]=0
  for ((seed = FIRST_SEED; seed < FIRST_SEED + RUNS; seed++)); do
    log="$OUT/$fault-$seed.txt"
    rc=0
    "$ROOT/scripts/fault-suite.sh" --fault "$fault" --duration-s "$DURATION_S" --seed "$seed" \
      "${EXTRA[@]}" > "$log" 2>&1 || rc=$?
    last="$(tail -1 "$log")"
    if [[ "$last" != anomalies=* ]]; then
      echo "| $fault | $seed | - | - | - | - | - | - | - | - | $rc ($last) |"
      [[ "$last" == *SKIP* ]] || failed=1
      continue
    fi
    k="$(field anomalies "$last")" n="$(field acked "$last")" f="$(field failover_ms_max "$last")"
    echo "| $fault | $seed | $n | $k | $(field lost "$last") | $(field duplicates "$last") | $(field inconsistent "$last") | $(field skips "$last") | $(field divergent_replicas "$last") | $f | $rc |"
    runs[$fault]=$((runs[$fault] + 1)) acked[$fault]=$((acked[$fault] + n))
    anomalies[$fault]=$((anomalies[$fault] + k))
    ((k == 0)) || { bad[$fault]=$((bad[$fault] + 1)); failed=1; }
    ((f <= failover[$fault])) || failover[$fault]=$f
  done
done
echo
echo "| fault | runs | acked | anomalies | runs with anomalies | failover_ms_max |"
echo "|---|---|---|---|---|---|"
for fault in $FAULTS; do
  echo "| $fault | ${runs[$fault]} | ${acked[$fault]} | ${anomalies[$fault]} | ${bad[$fault]} | ${failover[$fault]} |"
done
echo
echo "outputs in $OUT"
exit "$failed"
