#!/usr/bin/env bash
# Runs workloads against Borges and Apache Kafka on this machine, alternately, each broker pinned
# to the same cores and the load generator to the others, and writes a side-by-side report.
#
#   scripts/bench-vs-kafka.sh [options] WORKLOAD...
#
# WORKLOAD: a file, or a name from loadgen/workloads/ (with or without .toml).
# Options:
#   --duration-s N      measured seconds per run (overrides the workloads'; warm-up <= N/2)
#   --broker-cpus LIST  CPUs for the broker under test (taskset -c)   [0]
#   --loadgen-cpus LIST CPUs for the load generator                   [1]
#   --broker-cores N    Borges executor cores (--cores)                [1]
#   --rounds N          run each pair N times, alternating who goes first [1]
#   --only borges|kafka run one system only
#   --out DIR           output directory                             [results/<date>]
#   --kafka-heap SIZE   Kafka JVM heap                                [1G]
#   --min-free-gb N     skip a run when the data directory's file system has less free
#                       space than this (Borges preallocates segments per partition) [20]
#   --report-only       only (re)write notes.md and report.md from DIR/raw/*.json
#                       (needs --out DIR)
#   --no-build          use the release binaries already in the target directory
#   --kafka-tools yes|no after each Kafka run of a maximum-rate workload, also run Kafka's own
#                       ProducerPerformance (and ConsumerPerformance when the workload has a
#                       consumer) on a fresh Kafka with the same settings and placement [yes]
#
# Writes DIR/raw/<workload>-<system>[-<round>].{json,txt} (system: borges, kafka, and
# kafkatools for Kafka's own tools), DIR/runs.tsv (load average before and after each run),
# DIR/commands.txt, DIR/notes.md and, through `borges-loadgen report`, DIR/report.md with SVG
# charts; the tools' figures go beside the Kafka driver's at the top of the report.
#
# Like against like: each workload's `[topic] durability` is applied to both systems:
#   fsync -> Borges topic config durability=fsync (group-commit fdatasync before acks=all);
#            Kafka flush.messages=1 on the topic and log.flush.interval.messages=1 on the broker
#            (fsync of every append before the produce response).
#   none  -> Borges durability=none; Kafka's default (no fsync, page cache only).
#   interval -> Borges durability=interval + flush.ms; Kafka flush.ms (same interval).
#
# Environment: BORGES_LOADGEN_KAFKA_CONFIG=KEY=VALUE,... adds librdkafka properties to the Kafka
# driver (`producer.`/`consumer.` prefixes for one client; see loadgen/src/driver/kafka.rs).
#
# Needs: a Rust toolchain; Debian packages cmake and libcurl4-openssl-dev (librdkafka is built
# from the rdkafka crate's bundled sources); Java 17+ and Maven for scripts/kafka.sh.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"

invocation="$(printf '%q ' "$0" "$@")"
duration_s=""
broker_cpus=0
loadgen_cpus=1
broker_cores=1
rounds=1
only=""
out=""
kafka_heap=1G
min_free_gb=20
report_only=0
kafka_tools=yes
build=1
workloads=()
while [ $# -gt 0 ]; do
    case "$1" in
        --duration-s) duration_s="$2"; shift 2 ;;
        --broker-cpus) broker_cpus="$2"; shift 2 ;;
        --loadgen-cpus) loadgen_cpus="$2"; shift 2 ;;
        --broker-cores) broker_cores="$2"; shift 2 ;;
        --rounds) rounds="$2"; shift 2 ;;
        --only) only="$2"; shift 2 ;;
        --out) out="$2"; shift 2 ;;
        --kafka-heap) kafka_heap="$2"; shift 2 ;;
        --min-free-gb) min_free_gb="$2"; shift 2 ;;
        --report-only) report_only=1; shift ;;
        --kafka-tools) kafka_tools="$2"; shift 2 ;;
        --no-build) build=0; shift ;;
        -h|--help) sed -n '2,45p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
        -*) echo "unknown option $1" >&2; exit 2 ;;
        *) workloads+=("$1"); shift ;;
    esac
done
if [ "$report_only" = 1 ]; then
    [ -n "$out" ] || { echo "--report-only needs --out DIR" >&2; exit 2; }
else
    [ ${#workloads[@]} -gt 0 ] || { echo "usage: $0 [options] WORKLOAD..." >&2; exit 2; }
fi

log() { echo "bench-vs-kafka: $*" >&2; }

ensure_build_deps() {
    local missing=()
    command -v cmake >/dev/null || missing+=(cmake)
    [ -e /usr/include/curl/curl.h ] || [ -e /usr/include/x86_64-linux-gnu/curl/curl.h ] ||
        missing+=(libcurl4-openssl-dev)
    if [ ${#missing[@]} -gt 0 ]; then
        log "installing ${missing[*]} (needed to build librdkafka)"
        apt-get install -y "${missing[@]}" >&2 || {
            apt-get update >&2 && apt-get install -y "${missing[@]}" >&2
        }
    fi
}

resolve_workload() {
    local w="$1"
    for f in "$w" "loadgen/workloads/$w" "loadgen/workloads/$w.toml"; do
        [ -f "$f" ] && { echo "$f"; return 0; }
    done
    echo "workload not found: $w" >&2
    return 1
}

toml_value() { # file key -> first value of `key = "v"` or `key = v`
    awk -F'=' -v k="$2" '$1 ~ "^[ \t]*"k"[ \t]*$" {gsub(/[ \t"]/, "", $2); sub(/#.*/, "", $2); print $2; exit}' "$1"
}

free_port() {
    python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'
}

free_gb() { # free GiB on the file system of $1
    df -P -k "$1" | awk 'NR == 2 {print int($4 / 1048576)}'
}

write_notes() {
    local load_before load_after kafka_heap_used
    load_before="$(cat "$out/load_before" 2>/dev/null || echo unknown)"
    load_after="$(cat "$out/load_after" 2>/dev/null || echo unknown)"
    {
        echo "## How this was run"
        echo
        echo "- date: $(cat "$out/started" 2>/dev/null || date -u +%Y-%m-%dT%H:%M:%SZ)," \
            "git $(git rev-parse --short HEAD 2>/dev/null || echo unknown)$(git diff --quiet HEAD -- broker storage runtime client 2>/dev/null || echo ' (with uncommitted changes in broker/storage/runtime/client)')"
        echo "- brokers pinned to CPUs \`$broker_cpus\` (taskset), load generator to CPUs \`$loadgen_cpus\`;" \
            "Borges with \`--cores $broker_cores\`; Kafka $(grep -o '<kafka.version>[^<]*' scripts/kafka/pom.xml | cut -d'>' -f2)" \
            "(KRaft, combined broker+controller, $(java -version 2>&1 | head -1))"
        kafka_heap_used="$(cat "$out/kafka_heap" 2>/dev/null || echo "$kafka_heap")"
        echo "- Kafka broker JVM: \`$(scripts/kafka.sh broker-jvm-options "$kafka_heap_used")\`;" \
            "Kafka's tools (ProducerPerformance, ConsumerPerformance) JVM:" \
            "\`$(scripts/kafka.sh tool-jvm-options)\`, pinned to the load generator's CPUs"
        echo "- load average before: $load_before; after: $load_after (other processes on the machine add noise)"
        echo "- each run uses a freshly started broker with an empty temporary data directory"
        echo "- durability, like against like: \`fsync\` = Borges \`durability=fsync\` (group-commit fdatasync" \
            "before acks=all) vs Kafka \`flush.messages=1\` + \`log.flush.interval.messages=1\` (fsync per append" \
            "before the response); \`none\` = Borges \`durability=none\` vs Kafka defaults (no fsync)"
        echo "- throughput at \`rate=max\` is found by rate discovery or unthrottled sending (see each workload);" \
            "latency is measured from the intended send time (no coordinated omission); MB = 2^20 bytes of record values"
        echo
        if [ -s "$out/runs.tsv" ]; then
            echo "Load average (1, 5, 15 min, from /proc/loadavg) before and after each run:"
            echo
            echo "| run | started (UTC) | load before | load after |"
            echo "|---|---|---|---|"
            awk -F'\t' '{printf "| %s | %s | %s | %s |\n", $1, $2, $3, $4}' "$out/runs.tsv"
            echo
        fi
        echo "Commands:"
        echo
        echo '```'
        cat "$out/commands.txt" 2>/dev/null
        echo '```'
        echo
        python3 scripts/kafka/perf_tools.py table "$out"
    } >"$out/notes.md"
}

make_report() {
    shopt -s nullglob
    local jsons=("$out"/raw/*.json)
    if [ ${#jsons[@]} -eq 0 ]; then
        log "no results in $out/raw"
        return 1
    fi
    write_notes
    "$loadgen" report --out "$out" --notes "$out/notes.md" "${jsons[@]}"
    log "report: $out/report.md"
}

target_dir="${CARGO_TARGET_DIR:-$ROOT/target}"
loadgen="$target_dir/release/borges-loadgen"
borges="$target_dir/release/borges"
if [ "$report_only" = 1 ]; then
    cargo build --release -p borges-loadgen >&2
    make_report
    exit $?
fi

if [ "$build" = 1 ]; then
    ensure_build_deps
    log "building release binaries (target dir $target_dir)"
    packages=(-p borges-loadgen)
    [ "$only" = kafka ] || packages+=(-p borges-cli)
    cargo build --release "${packages[@]}" >&2
fi

files=()
for w in "${workloads[@]}"; do files+=("$(resolve_workload "$w")"); done
"$loadgen" validate "${files[@]}" >&2

out="${out:-results/$(date +%Y-%m-%d-%H%M%S)}"
mkdir -p "$out/raw"
commands="$out/commands.txt"
touch "$commands"
echo "# $invocation" >>"$commands"
date -u +%Y-%m-%dT%H:%M:%SZ >"$out/started"
echo "$kafka_heap" >"$out/kafka_heap"
cut -d' ' -f1-3 /proc/loadavg >"$out/load_before"
data_root="${TMPDIR:-/tmp}"

borges_pid=""
borges_tmp=""
stop_borges() {
    if [ -n "$borges_pid" ] && kill -0 "$borges_pid" 2>/dev/null; then
        kill -TERM "$borges_pid" 2>/dev/null || true
        for _ in $(seq 1 100); do kill -0 "$borges_pid" 2>/dev/null || break; sleep 0.1; done
        kill -KILL "$borges_pid" 2>/dev/null || true
        wait "$borges_pid" 2>/dev/null || true
    fi
    borges_pid=""
    [ -n "$borges_tmp" ] && rm -rf "$borges_tmp"
    borges_tmp=""
}
cleanup() {
    stop_borges
    scripts/kafka.sh stop >/dev/null 2>&1 || true
}
trap cleanup EXIT

record() { # the command line, shell-quoted, into commands.txt
    printf '%q ' "$@" >>"$commands"
    echo >>"$commands"
}

start_borges() {
    local port="$1"
    borges_tmp="$(mktemp -d "$data_root/borges-bench.XXXXXX")"
    local cmd=(taskset -c "$broker_cpus" "$borges" broker --data-dir "$borges_tmp/data"
        --listen "127.0.0.1:$port" --cores "$broker_cores" --core-port-base 0
        --metrics-listen "" --ready-file "$borges_tmp/ready.json")
    record "${cmd[@]}"
    RUST_LOG="${RUST_LOG:-warn}" "${cmd[@]}" >"$borges_tmp/broker.log" 2>&1 </dev/null &
    borges_pid=$!
    for _ in $(seq 1 600); do
        [ -s "$borges_tmp/ready.json" ] && return 0
        kill -0 "$borges_pid" 2>/dev/null || { cat "$borges_tmp/broker.log" >&2; return 1; }
        sleep 0.1
    done
    log "borges not ready after 60 s"
    return 1
}

run_loadgen() { # system file port pid tag
    local system="$1" file="$2" port="$3" pid="$4" tag="$5"
    local cmd=()
    # Extra librdkafka properties (experiments) are part of the recorded command.
    [ "$system" = kafka ] && [ -n "${BORGES_LOADGEN_KAFKA_CONFIG:-}" ] &&
        cmd=(env "BORGES_LOADGEN_KAFKA_CONFIG=$BORGES_LOADGEN_KAFKA_CONFIG")
    cmd+=(taskset -c "$loadgen_cpus" "$loadgen" run --workload "$file" --driver "$system"
        --bootstrap "127.0.0.1:$port" --broker-pid "$pid" --json "$out/raw/$tag.json")
    [ -n "$duration_s" ] && cmd+=(--duration-s "$duration_s")
    record "${cmd[@]}"
    "${cmd[@]}" | tee "$out/raw/$tag.txt"
}

run_borges() { # file tag
    local port
    port="$(free_port)"
    if start_borges "$port"; then
        run_loadgen borges "$1" "$port" "$borges_pid" "$2" || log "borges run failed: $2"
        [ -s "$borges_tmp/broker.log" ] && cp "$borges_tmp/broker.log" "$out/raw/$2-broker.log"
    else
        log "borges did not start: $2"
    fi
    stop_borges
}

run_kafka() { # file durability tag
    local port cport kdur
    port="$(free_port)"
    cport="$(free_port)"
    case "$2" in fsync) kdur=fsync ;; *) kdur=none ;; esac
    local cmd=(scripts/kafka.sh start --port "$port" --controller-port "$cport" --cpus "$broker_cpus"
        --heap "$kafka_heap" --durability "$kdur")
    record "${cmd[@]}"
    if "${cmd[@]}" >/dev/null; then
        run_loadgen kafka "$1" "$port" "$(scripts/kafka.sh pid)" "$3" || log "kafka run failed: $3"
    else
        log "kafka did not start: $3"
    fi
    scripts/kafka.sh stop || true
}

loadavg() { cut -d' ' -f1-3 /proc/loadavg; }

timed() { # tag command...: runs the command, appends tag, start time and load to runs.tsv
    local tag="$1" started before
    shift
    started="$(date -u +%H:%M:%S)"
    before="$(loadavg)"
    "$@"
    printf '%s\t%s\t%s\t%s\n' "$tag" "$started" "$before" "$(loadavg)" >>"$out/runs.tsv"
}

tool_run() { # command...: records the command, runs it, its output on stdout
    record "$@"
    local a class=""
    for a in "$@"; do [[ "$a" == org.apache.kafka.* ]] && class="${a##*.}"; done
    echo "## $class: load average $(loadavg)"
    "$@" 2>&1 | grep -v -e '^\s' -e 'AbstractConfig)$' -e '^\*' -e 'KIP-848' || true
}

run_kafka_tools() { # loadgen-kafka-result.json tag
    local json="$1" tag="$2" port cport topic=perf-tools txt="$out/raw/$2.txt"
    [ -s "$json" ] || { log "no Kafka driver result $json: tools skipped"; return 0; }
    local TOOL_PARTITIONS TOOL_RECORD_SIZE TOOL_RECORDS TOOL_WARMUP_RECORDS TOOL_CONSUMERS
    local TOOL_BACKLOG TOOL_TOPIC_CONFIG TOOL_PRODUCER_PROPS TOOL_CONSUMER_PROPS TOOL_NOTES
    eval "$(python3 scripts/kafka/perf_tools.py plan "$json")"
    port="$(free_port)"
    cport="$(free_port)"
    local kdur=none
    [[ "$TOOL_TOPIC_CONFIG" == flush.messages=* ]] && kdur=fsync
    local cmd=(scripts/kafka.sh start --port "$port" --controller-port "$cport" --cpus "$broker_cpus"
        --heap "$kafka_heap" --durability "$kdur")
    record "${cmd[@]}"
    if ! "${cmd[@]}" >/dev/null; then
        log "kafka did not start: $tag"
        return 0
    fi
    local bs="127.0.0.1:$port" t=(scripts/kafka.sh tool --cpus "$loadgen_cpus")
    local create=("${t[@]}" org.apache.kafka.tools.TopicCommand --bootstrap-server "$bs" --create
        --topic "$topic" --partitions "$TOOL_PARTITIONS" --replication-factor 1)
    [ -n "$TOOL_TOPIC_CONFIG" ] && create+=(--config "$TOOL_TOPIC_CONFIG")
    local prod=("${t[@]}" org.apache.kafka.tools.ProducerPerformance --topic "$topic"
        --num-records "$TOOL_RECORDS" --record-size "$TOOL_RECORD_SIZE" --throughput -1)
    [ "$TOOL_WARMUP_RECORDS" -gt 0 ] && prod+=(--warmup-records "$TOOL_WARMUP_RECORDS")
    # shellcheck disable=SC2206 # the properties are words
    prod+=(--command-property "bootstrap.servers=$bs" $TOOL_PRODUCER_PROPS)
    local cons=("${t[@]}" org.apache.kafka.tools.ConsumerPerformance --bootstrap-server "$bs"
        --topic "$topic" --num-records "$TOOL_RECORDS" --timeout 60000 --group perf-tools)
    local p
    for p in $TOOL_CONSUMER_PROPS; do cons+=(--command-property "$p"); done
    {
        [ -n "$TOOL_NOTES" ] && echo "## note: $TOOL_NOTES"
        tool_run "${create[@]}"
        if [ "$TOOL_BACKLOG" = 1 ]; then
            tool_run "${prod[@]}"
            tool_run "${cons[@]}"
        elif [ "$TOOL_CONSUMERS" = 1 ]; then
            tool_run "${cons[@]}" >"$txt.consumer" &
            local cpid=$!
            tool_run "${prod[@]}"
            wait "$cpid" || true
            cat "$txt.consumer"
            rm -f "$txt.consumer"
        else
            tool_run "${prod[@]}"
        fi
        echo "load average: $(loadavg)"
    } | tee "$txt"
    scripts/kafka.sh stop || true
}

for round in $(seq 1 "$rounds"); do
    for file in "${files[@]}"; do
        name="$(basename "$file" .toml)"
        durability="$(toml_value "$file" durability)"
        durability="${durability:-none}"
        suffix=""
        [ "$rounds" -gt 1 ] && suffix="-$round"
        order=(borges kafka)
        [ $((round % 2)) -eq 0 ] && order=(kafka borges)
        for system in "${order[@]}"; do
            [ -n "$only" ] && [ "$only" != "$system" ] && continue
            if [ "$(free_gb "$data_root")" -lt "$min_free_gb" ]; then
                log "skipping $name on $system: less than $min_free_gb GiB free in $data_root"
                continue
            fi
            log "round $round: $name on $system (durability=$durability)"
            if [ "$system" = borges ]; then
                timed "$name-borges$suffix" run_borges "$file" "$name-borges$suffix"
            else
                timed "$name-kafka$suffix" run_kafka "$file" "$durability" "$name-kafka$suffix"
                if [ "$kafka_tools" = yes ] && [ "$(toml_value "$file" rate_records_s)" = 0 ]; then
                    log "round $round: $name with Kafka's own perf tools"
                    timed "$name-kafkatools$suffix" run_kafka_tools \
                        "$out/raw/$name-kafka$suffix.json" "$name-kafkatools$suffix"
                fi
            fi
        done
    done
done

cut -d' ' -f1-3 /proc/loadavg >"$out/load_after"
make_report
