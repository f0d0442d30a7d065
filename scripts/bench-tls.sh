#!/usr/bin/env bash
# TLS against plaintext in the same run: produce and fetch throughput and broker CPU per GiB
# with pre-encoded requests (`borges-loadgen blast`), the broker on CPU 0 (--cores 1), the load
# generator on CPU 1. Plaintext and TLS brokers alternate ROUNDS times; the ratios use the
# medians. Fetches are of recent data (the broker's memory) and of file data (page cache:
# sendfile in plaintext, the copy path under TLS, and plaintext `fetch.send_mode = "copy"` to
# separate the copy from the encryption).
#
#   scripts/bench-tls.sh [OUT_DIR]     (default results/tls-<date>); ROUNDS=3 BLAST_S=10
#
# A/B of two broker builds: BORGES_BENCH_BIN_B=/path/to/borges MODES="copy copy-b tls tls-b"
# (a mode ending in -b runs the B binary; every mode of a round runs before the next round).
#
# Certificates are generated into a temporary directory (openssl, EC P-256); nothing is kept.
set -euo pipefail
cd "$(dirname "$0")/.."
OUT="${1:-results/tls-$(date +%Y-%m-%d)}"
mkdir -p "$OUT"
OUT="$(cd "$OUT" && pwd)"
PORT=19600
ROUNDS="${ROUNDS:-3}"
BLAST_S="${BLAST_S:-10}"
BIN="${BORGES_BENCH_BIN:-target/release/borges}"
BIN_B="${BORGES_BENCH_BIN_B:-}"
MODES="${MODES:-plain copy tls}"
LG="${BORGES_BENCH_LOADGEN:-target/release/borges-loadgen}"
[ -n "${BORGES_BENCH_NO_BUILD:-}" ] || cargo build --release -p borges-cli -p borges-loadgen >/dev/null
: >"$OUT/commands.txt"
log() { printf '%s\n' "$*" | tee -a "$OUT/commands.txt" >&2; }

PKI=$(mktemp -d /tmp/borges-bench-tls-pki.XXXXXX)
openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -days 2 \
    -subj "/CN=bench-ca" -keyout "$PKI/ca.key" -out "$PKI/ca.pem" 2>/dev/null
openssl req -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -subj "/CN=broker" \
    -keyout "$PKI/broker.key" -out "$PKI/broker.csr" 2>/dev/null
printf 'subjectAltName=IP:127.0.0.1,DNS:localhost\n' >"$PKI/ext.cnf"
openssl x509 -req -in "$PKI/broker.csr" -CA "$PKI/ca.pem" -CAkey "$PKI/ca.key" -CAcreateserial \
    -days 2 -extfile "$PKI/ext.cnf" -out "$PKI/broker.pem" 2>/dev/null

BPID=""
BDIR=""
start_broker() { # BIN [extra broker args...]
    local bin=$1
    shift
    BDIR=$(mktemp -d /tmp/borges-bench-tls.XXXXXX)
    log "taskset -c 0 $bin broker --data-dir $BDIR/data --cores 1 --listen 127.0.0.1:$PORT --metrics-listen '' $*"
    taskset -c 0 "$bin" broker --data-dir "$BDIR/data" --cores 1 --listen "127.0.0.1:$PORT" \
        --metrics-listen "" --ready-file "$BDIR/ready.json" "$@" >"$BDIR/broker.log" 2>&1 &
    BPID=$!
    for _ in $(seq 1 300); do [ -f "$BDIR/ready.json" ] && return 0; sleep 0.1; done
    echo "broker did not start; log:" >&2
    cat "$BDIR/broker.log" >&2
    exit 1
}
stop_broker() {
    [ -n "$BPID" ] && kill -TERM "$BPID" 2>/dev/null || true
    [ -n "$BPID" ] && wait "$BPID" 2>/dev/null || true
    BPID=""
    [ -n "$BDIR" ] && rm -rf "$BDIR"
    BDIR=""
}
trap 'stop_broker; rm -rf "$PKI"' EXIT

field() { grep -m1 "^$2=" "$OUT/$1.txt" | cut -d= -f2; }
cpu_ticks() { awk '{print $14+$15}' "/proc/$BPID/stat"; }

blast() { # NAME [blast args...]: to core 0's own port; appends broker CPU-s per GiB
    local name=$1
    shift
    log "taskset -c 1 $LG blast $* --target 127.0.0.1:$((PORT + 1))"
    local t0 t1 mb
    t0=$(cpu_ticks)
    taskset -c 1 "$LG" blast "$@" --target "127.0.0.1:$((PORT + 1))" >"$OUT/$name.txt" 2>&1
    t1=$(cpu_ticks)
    mb=$(field "$name" throughput_mb_s)
    echo "broker_cpu_s_per_gib=$(python3 -c "mb=$mb; print(round(($t1-$t0)/100/max(mb*$BLAST_S/1024,1e-9),3))")" >>"$OUT/$name.txt"
}

for round in $(seq 1 "$ROUNDS"); do
    for mode in $MODES; do
        bin=$BIN
        if [[ $mode == *-b ]]; then
            bin=${BIN_B:?"mode $mode needs BORGES_BENCH_BIN_B"}
        fi
        cfg=$(mktemp /tmp/borges-bench-tls-cfg.XXXXXX.toml)
        # Retention keeps the disk use near 2 GiB (the produce runs write ~1 GiB/s).
        printf '[log]\ndurability = "none"\nsegment_size_bytes = 67108864\nretention_bytes = 2147483648\n[storage]\nretention_check_interval_ms = 1000\n' >"$cfg"
        extra=()
        client=()
        admin=(--bootstrap "127.0.0.1:$PORT")
        case ${mode%-b} in
            copy) printf '[fetch]\nsend_mode = "copy"\n' >>"$cfg" ;;
            tls)
                extra=(--tls-cert "$PKI/broker.pem" --tls-key "$PKI/broker.key")
                client=(--tls-ca "$PKI/ca.pem")
                admin+=(--tls-ca "$PKI/ca.pem")
                ;;
        esac
        start_broker "$bin" --config "$cfg" "${extra[@]}"
        "$BIN" topic create blast --partitions 1 "${admin[@]}" >/dev/null
        blast "produce-$mode-$round" produce --topic blast --batch-bytes 65536 --batches-per-request 16 --duration-s "$BLAST_S" "${client[@]}"
        blast "fetch-recent-$mode-$round" fetch --topic blast --offset-from-end 100000 --fetch-bytes 1048576 --in-flight 4 --duration-s "$BLAST_S" --bootstrap "127.0.0.1:$PORT" "${client[@]}"
        # ~1 GB behind the end: past the 256 MiB tail cache, in segment files (page cache).
        blast "fetch-file-$mode-$round" fetch --topic blast --offset-from-end 1000000 --fetch-bytes 1048576 --in-flight 4 --duration-s "$BLAST_S" --bootstrap "127.0.0.1:$PORT" "${client[@]}"
        stop_broker
        rm -f "$cfg"
    done
done

median() { # RUN MODE FIELD
    local v=()
    for round in $(seq 1 "$ROUNDS"); do v+=("$(field "$1-$2-$round" "$3")"); done
    python3 -c "import statistics,sys; print(statistics.median(float(x) for x in sys.argv[1:]))" "${v[@]}"
}
{
    echo "# TLS vs plaintext ($(date -u +%Y-%m-%dT%H:%MZ), git $(git rev-parse --short HEAD))"
    echo
    echo "Broker on CPU 0 (--cores 1), blast on CPU 1, durability none, ${ROUNDS} alternating rounds of ${BLAST_S} s, medians."
    echo "A: $BIN${BIN_B:+; B (modes *-b): $BIN_B}"
    echo
    if [[ " $MODES " == *" plain "* && " $MODES " == *" copy "* && " $MODES " == *" tls "* ]]; then
        echo "| run | plaintext MiB/s | plaintext copy MiB/s | TLS MiB/s | TLS / plaintext | broker CPU-s/GiB plain / copy / TLS |"
        echo "|---|---:|---:|---:|---:|---|"
        for r in produce fetch-recent fetch-file; do
            p=$(median "$r" plain throughput_mb_s)
            c=$(median "$r" copy throughput_mb_s)
            t=$(median "$r" tls throughput_mb_s)
            echo "| $r | $p | $c | $t | $(python3 -c "print(round($t/$p,2))") | $(median "$r" plain broker_cpu_s_per_gib) / $(median "$r" copy broker_cpu_s_per_gib) / $(median "$r" tls broker_cpu_s_per_gib) |"
        done
        echo
    fi
    echo "| run | mode | MiB/s | broker CPU-s/GiB |"
    echo "|---|---|---:|---:|"
    for r in produce fetch-recent fetch-file; do
        for mode in $MODES; do
            echo "| $r | $mode | $(median "$r" "$mode" throughput_mb_s) | $(median "$r" "$mode" broker_cpu_s_per_gib) |"
        done
    done
    echo
    echo "Every run (MiB/s):"
    echo
    for r in produce fetch-recent fetch-file; do
        for mode in $MODES; do
            printf '%s %s:' "$r" "$mode"
            for round in $(seq 1 "$ROUNDS"); do printf ' %s' "$(field "$r-$mode-$round" throughput_mb_s)"; done
            echo
        done
    done
} >"$OUT/summary.md"
cat "$OUT/summary.md"
