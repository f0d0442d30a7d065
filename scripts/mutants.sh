#!/usr/bin/env bash
# Mutation testing of the critical code with cargo-mutants (issue 21; docs/testing.md records
# the scores, the survivors and why each is harmless or killed).
#
#   scripts/mutants.sh SET [extra cargo-mutants arguments]
#   scripts/mutants.sh list          the sets and their files
#   scripts/mutants.sh ci            CI's bounded, changing subset (below)
#
# Each SET names source files and the tests that judge them (cargo-mutants builds every mutant
# and runs those tests; a mutant is "caught" when a test fails, "missed" when all pass):
#   sync       storage/src/writer/sync.rs (fdatasync, the synced point, the recovery checkpoint)
#   retention  storage/src/maintenance.rs, the functions of retention
#   index      storage/src/index.rs (offset and time indexes)
#   frame      protocol/src/frame.rs (the frame header codec and decoder)
#   message    protocol/src/message.rs (message envelope and payload ranges)
#   varint     protocol/src/varint.rs (Kafka's zigzag varints, in every record)
#   partitioner protocol/src/partitioner.rs (murmur2, Kafka's keyed partitioning)
#   accumulator client/src/producer/accumulator.rs (the SDK producer's batches), client --lib
#   groups     broker/src/groups/assignor.rs and state.rs (assignment, membership), broker --lib
#
# Equivalent mutants are excluded in .cargo/mutants.toml, each with its reason.
#
# Installs cargo-mutants $CARGO_MUTANTS_VERSION from crates.io when it is missing. Runs one job
# (-j 1) in a copy of the tree (never --in-place), builds in this tree's target directory
# (CARGO_TARGET_DIR, so dependencies are not rebuilt; the workspace crates are rebuilt from
# the copy, so the next build here rebuilds them too), with a per-mutant timeout. Results go
# to mutants.out/ (ignored by git). Exit status: cargo-mutants' own (0 all caught, 2 some
# missed, 3 timeouts, 4 the unmutated tree failed).
#
# `ci` (scripts/test.sh runs it): one shard of one set of CI_SETS, both chosen from the commit
# count, so that successive commits walk every mutant of those sets: set = CI_SETS[n % k] (k
# sets), shard (n / k) % N of N = ceil(mutants / CI_MUTANTS_PER_SHARD). CI_SETS holds only
# sets that have been run to the end with every survivor killed or excluded as equivalent
# (docs/testing.md): CI's job is to catch a new weak test, and a set not yet run whole would
# fail it for an old one. It skips the unmutated baseline (the
# suite has just passed) and is stopped after MUTANTS_CI_S_MAX seconds (default 300); a missed
# mutant fails it, one not reached in time does not. The cargo-mutants install, when missing,
# is outside that bound.
set -euo pipefail
cd "$(dirname "$0")/.."

CARGO_MUTANTS_VERSION=27.1.0
TIMEOUT_S="${MUTANTS_TIMEOUT_S:-300}"
BUILD_TIMEOUT_S="${MUTANTS_BUILD_TIMEOUT_S:-900}"

set_args() {
    case "$1" in
        sync)
            # Not the model test (storage/tests/model.rs): it took 63 of the 91 s of each
            # mutant's tests; the sync contract is judged by the fault seam's tests.
            ARGS=(--file storage/src/writer/sync.rs --test-package borges-storage
                --cargo-test-arg=--test=checked_faults --cargo-test-arg=--test=log
                --cargo-test-arg=--test=crash --cargo-test-arg=--test=recovery
                --cargo-test-arg=--test=faults --cargo-test-arg=--lib) ;;
        retention)
            ARGS=(--file storage/src/maintenance.rs --re 'retention' --test-package borges-storage
                --cargo-test-arg=--test=model --cargo-test-arg=--test=log
                --cargo-test-arg=--lib) ;;
        index)
            ARGS=(--file storage/src/index.rs --test-package borges-storage
                --cargo-test-arg=--test=model --cargo-test-arg=--test=log
                --cargo-test-arg=--test=recovery --cargo-test-arg=--lib) ;;
        frame)
            ARGS=(--file protocol/src/frame.rs --test-package borges-protocol) ;;
        message)
            ARGS=(--file protocol/src/message.rs --test-package borges-protocol) ;;
        varint)
            ARGS=(--file protocol/src/varint.rs --test-package borges-protocol) ;;
        partitioner)
            ARGS=(--file protocol/src/partitioner.rs --test-package borges-protocol) ;;
        accumulator)
            ARGS=(--file client/src/producer/accumulator.rs --test-package borges-client
                --cargo-test-arg=--lib) ;;
        groups)
            ARGS=(--file broker/src/groups/assignor.rs --file broker/src/groups/state.rs
                --test-package borges-broker --cargo-test-arg=--lib) ;;
        *) return 1 ;;
    esac
}

SETS="sync retention index frame message varint partitioner accumulator groups"
CI_SETS="sync retention frame message partitioner"
CI_MUTANTS_PER_SHARD=3

install_mutants() {
    if ! cargo mutants --version 2>/dev/null | grep -qx "cargo-mutants $CARGO_MUTANTS_VERSION"; then
        echo "mutants: installing cargo-mutants $CARGO_MUTANTS_VERSION" >&2
        cargo install --locked cargo-mutants --version "$CARGO_MUTANTS_VERSION"
    fi
}

# CI's subset: one shard of one set, chosen from the commit count; bounded in time.
ci_run() {
    local n sets count shards k out rc=0
    n=$(git rev-list --count HEAD)
    read -ra sets <<< "$CI_SETS"
    set="${sets[n % ${#sets[@]}]}"
    set_args "$set"
    install_mutants
    count=$(cargo mutants --list "${ARGS[@]}" | wc -l)
    shards=$(( (count + CI_MUTANTS_PER_SHARD - 1) / CI_MUTANTS_PER_SHARD ))
    (( shards > 0 )) || { echo "mutants: set $set has no mutants"; return 0; }
    k=$(( (n / ${#sets[@]}) % shards ))
    out="mutants.out/ci"
    rm -rf "$out"
    mkdir -p mutants.out
    echo "mutants: CI subset: set $set, shard $k/$shards (of $count mutants), bound ${CI_S_MAX} s"
    export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-$PWD/target}"
    timeout --signal=INT "$CI_S_MAX" cargo mutants --no-shuffle -j 1 --baseline=skip \
        --timeout "$TIMEOUT_S" --build-timeout "$BUILD_TIMEOUT_S" --shard "$k/$shards" \
        --output "$out" "${ARGS[@]}" || rc=$?
    local missed="$out/mutants.out/missed.txt"
    if [[ -s "$missed" ]]; then
        echo "mutants: missed (a test should fail on each; see docs/testing.md):" >&2
        cat "$missed" >&2
        return 2
    fi
    if (( rc == 124 || rc == 130 )); then
        echo "mutants: stopped at the ${CI_S_MAX} s bound; nothing missed among those tested"
        return 0
    fi
    return "$rc"
}

set="${1:-}"
if [[ "$set" == ci ]]; then
    CI_S_MAX="${MUTANTS_CI_S_MAX:-300}"
    ci_run
    exit $?
fi
if [[ -z "$set" || "$set" == list ]]; then
    for s in $SETS; do set_args "$s"; echo "$s: ${ARGS[*]}"; done
    [[ -n "$set" ]] && exit 0
    echo "usage: scripts/mutants.sh SET [cargo-mutants arguments]" >&2
    exit 1
fi
shift
set_args "$set" || { echo "mutants: no set '$set' (sets: $SETS)" >&2; exit 1; }

install_mutants

mkdir -p mutants.out
export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-$PWD/target}"
start=$(date +%s)
rc=0
cargo mutants --no-shuffle -j 1 --timeout "$TIMEOUT_S" --build-timeout "$BUILD_TIMEOUT_S" \
    --output "mutants.out/$set" "${ARGS[@]}" "$@" || rc=$?
echo "mutants: set $set took $(( $(date +%s) - start )) s, exit $rc (outcomes in mutants.out/$set/mutants.out/)"
exit "$rc"
