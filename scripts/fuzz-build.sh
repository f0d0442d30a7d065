#!/usr/bin/env bash
# Builds the libFuzzer targets in fuzz/ (frame decoder, batch decoder, produce validation,
# message verification, SCRAM message parsing).
#
#   scripts/fuzz-build.sh            build every target (what CI runs)
#   scripts/fuzz-build.sh run [SECS] build, then run each target for SECS seconds (default 60)
#
# Installs what it needs: cargo-fuzz (from crates.io) and, through rustup, a nightly toolchain
# when none is installed. cargo-fuzz instruments with -Zsanitizer, which needs nightly. If no
# nightly toolchain can be had, it falls back to a plain stable build of the fuzz crate, which
# checks that every target compiles and links (but is not instrumented for fuzzing), and says
# SKIPPED; BORGES_REQUIRE_NIGHTLY=1 makes that a failure.
set -euo pipefail

cd "$(dirname "$0")/.."
CARGO_FUZZ_VERSION=0.13.2
TARGETS=(frame_decoder batch_decoder produce_validate message_verify scram_messages)
TARGET_DIR="${FUZZ_TARGET_DIR:-$PWD/fuzz/target}"
mode="${1:-build}"
seconds="${2:-60}"

have_nightly() {
    rustup run nightly rustc --version >/dev/null 2>&1
}

if ! have_nightly; then
    echo "fuzz-build: installing the nightly toolchain" >&2
    rustup toolchain install nightly --profile minimal >&2 || true
fi

if ! have_nightly; then
    if [ "${BORGES_REQUIRE_NIGHTLY:-0}" = 1 ]; then
        echo "fuzz-build: no nightly toolchain (BORGES_REQUIRE_NIGHTLY=1)" >&2
        exit 1
    fi
    # CI cannot have nightly (no toolchain downloads there), so it does not set the variable.
    echo "fuzz-build: SKIPPED: instrumented build: no nightly toolchain; building the targets uninstrumented with stable (set BORGES_REQUIRE_NIGHTLY=1 to make this a failure)"
    cargo build --manifest-path fuzz/Cargo.toml --release --target-dir "$TARGET_DIR" --bins
    [ "$mode" = run ] && { echo "fuzz-build: cannot run without nightly" >&2; exit 1; }
    exit 0
fi

if ! cargo fuzz --version 2>/dev/null | grep -q "$CARGO_FUZZ_VERSION"; then
    echo "fuzz-build: installing cargo-fuzz $CARGO_FUZZ_VERSION" >&2
    cargo install cargo-fuzz --version "$CARGO_FUZZ_VERSION" --locked
fi

cargo +nightly fuzz build -O --target-dir "$TARGET_DIR"
echo "fuzz-build: built ${TARGETS[*]}"

if [ "$mode" = run ]; then
    for target in "${TARGETS[@]}"; do
        echo "fuzz-build: running $target for ${seconds}s" >&2
        mkdir -p "fuzz/corpus/$target"
        # The first corpus directory collects new inputs; fuzz/seeds/ holds committed seeds
        # (real Kafka batches, a valid frame and message).
        cargo +nightly fuzz run -O --target-dir "$TARGET_DIR" "$target" \
            "fuzz/corpus/$target" "fuzz/seeds/$target" -- \
            -max_total_time="$seconds" -rss_limit_mb=2048
    done
fi
