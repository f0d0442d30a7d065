#!/usr/bin/env bash
# Runs a real Apache Kafka 4.x on this machine for the benchmark suite: one broker, or a cluster
# of N nodes on loopback.
#
#   scripts/kafka.sh install            resolve the broker jars from Maven Central (cached)
#   scripts/kafka.sh start [options]    format KRaft storage and start N combined
#                                       broker+controller nodes (default one) on loopback;
#                                       waits until every node serves and, for N > 1, until
#                                       the cluster's metadata lists N brokers
#   scripts/kafka.sh stop               stop every node cleanly (SIGTERM to all, then SIGKILL
#                                       after a timeout)
#   scripts/kafka.sh status             say whether every node runs; exit 1 if not
#   scripts/kafka.sh pid                print the nodes' process ids, one a line, node 1 first
#   scripts/kafka.sh tool [--cpus LIST] CLASS ARGS...
#                                       run one of Kafka's own tools from the same jars, e.g.
#                                       org.apache.kafka.tools.ProducerPerformance; JVM as in
#                                       kafka-producer-perf-test.sh (-Xmx512M [KAFKA_TOOL_HEAP]),
#                                       logging at WARN
#
# Options for `start` (or the environment variables in brackets):
#   --brokers N          number of nodes, ids 1..N, each a broker and a controller voter (a
#                        static quorum of N voters, controller.quorum.voters); internal topics
#                        get replication factor min(N, 3), min.insync.replicas min(N, 2)
#                                                                   [KAFKA_BROKERS, 1]
#   --port N             client listener of node 1 on 127.0.0.1:N; node i on N+i-1
#                                                                   [KAFKA_PORT, 9092]
#   --controller-port N  KRaft controller listener of node 1 on 127.0.0.1:N; node i on N+i-1
#                        [KAFKA_CONTROLLER_PORT; 9093 for one node, PORT+N for N nodes]
#   --data-dir DIR       log directory (one node), or the parent of node-1/..node-N/ (N nodes)
#                        (default: a new temporary directory, removed on stop) [KAFKA_DATA_DIR]
#   --heap SIZE          JVM heap of each node, -Xms and -Xmx       [KAFKA_HEAP, 1G]
#   --cpus LIST          pin every node's JVM with `taskset -c LIST` [KAFKA_CPUS, unpinned]
#   --durability MODE    none: Kafka's default, no fsync before acks (page cache only);
#                        fsync: log.flush.interval.messages=1, every append is fsync'd before
#                        it is acknowledged                          [KAFKA_DURABILITY, none]
#
# Files are in .kafka/run/: for one node server.properties and kafka.log; for N nodes
# server-<i>.properties and kafka-<i>.log; kafka.pid holds the pids, one a line.
#
# Only Maven Central is used: scripts/kafka/pom.xml lists org.apache.kafka:kafka_2.13,
# kafka-server, kafka-tools and a log4j2 backend; `mvn dependency:copy-dependencies` copies them
# with their runtime dependencies into .kafka/lib-<version>/ (gitignored). Needs Java 17+ and
# Maven (Debian: `apt-get install -y openjdk-17-jre-headless maven`).
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
KAFKA_VERSION="${KAFKA_VERSION:-4.4.0}"
KAFKA_HOME_DIR="${KAFKA_HOME_DIR:-$ROOT/.kafka}"
LIB_DIR="$KAFKA_HOME_DIR/lib-$KAFKA_VERSION"
RUN_DIR="$KAFKA_HOME_DIR/run"
START_TIMEOUT_S="${KAFKA_START_TIMEOUT_S:-120}"
STOP_TIMEOUT_S="${KAFKA_STOP_TIMEOUT_S:-60}"

die() { echo "kafka.sh: $*" >&2; exit 1; }
log() { echo "kafka.sh: $*" >&2; }

check_java() {
    command -v java >/dev/null || die "java not found (Kafka 4.x needs Java 17+)"
    local v
    v="$(java -version 2>&1 | awk -F'"' '/version/ {print $2; exit}')"
    local major="${v%%.*}"
    [ "$major" -ge 17 ] 2>/dev/null || die "Java $v found; Kafka 4.x needs Java 17+"
}

install() {
    check_java
    if [ -f "$LIB_DIR/.complete" ]; then
        return 0
    fi
    command -v mvn >/dev/null || die "mvn not found (apt-get install -y maven)"
    log "resolving Apache Kafka $KAFKA_VERSION from Maven Central into $LIB_DIR"
    rm -rf "$LIB_DIR"
    mkdir -p "$LIB_DIR"
    mvn -q -B -f "$ROOT/scripts/kafka/pom.xml" \
        -Dkafka.version="$KAFKA_VERSION" \
        dependency:copy-dependencies \
        -DincludeScope=runtime \
        -DoutputDirectory="$LIB_DIR" >&2
    ls "$LIB_DIR"/kafka_2.13-"$KAFKA_VERSION".jar >/dev/null || die "kafka_2.13 jar missing"
    touch "$LIB_DIR/.complete"
}

# The recorded node pids, one a line (node 1 first); nothing when none was started.
recorded_pids() {
    local f="$RUN_DIR/kafka.pid"
    [ -f "$f" ] && cat "$f"
    return 0
}

# Prints the nodes' pids when every recorded node runs; exit 1 otherwise.
pid_of() {
    local pids pid
    pids="$(recorded_pids)"
    [ -n "$pids" ] || return 1
    for pid in $pids; do kill -0 "$pid" 2>/dev/null || return 1; done
    echo "$pids"
}

# Whether any recorded node still runs.
any_running() {
    local pid
    for pid in $(recorded_pids); do kill -0 "$pid" 2>/dev/null && return 0; done
    return 1
}

write_config() { # FILE LOG_DIR DURABILITY NODE_ID NODES
    local cfg="$1" data_dir="$2" durability="$3" id="$4" nodes="$5"
    local port=$((PORT + id - 1)) cport=$((CONTROLLER_PORT + id - 1))
    local voters="" i what="single node"
    for i in $(seq 1 "$nodes"); do
        voters="${voters:+$voters,}$i@127.0.0.1:$((CONTROLLER_PORT + i - 1))"
    done
    [ "$nodes" -gt 1 ] && what="node $id of $nodes"
    # Internal topics as Kafka's defaults (3 replicas, min.insync 2), capped at the nodes.
    local internal_rf=$((nodes < 3 ? nodes : 3)) internal_isr=$((nodes < 2 ? nodes : 2))
    cat >"$cfg" <<EOF
# Generated by scripts/kafka.sh: $what, combined broker+controller (KRaft), loopback.
process.roles=broker,controller
node.id=$id
controller.quorum.voters=$voters
listeners=PLAINTEXT://127.0.0.1:$port,CONTROLLER://127.0.0.1:$cport
advertised.listeners=PLAINTEXT://127.0.0.1:$port
controller.listener.names=CONTROLLER
inter.broker.listener.name=PLAINTEXT
listener.security.protocol.map=CONTROLLER:PLAINTEXT,PLAINTEXT:PLAINTEXT
log.dirs=$data_dir
num.partitions=1
default.replication.factor=1
offsets.topic.replication.factor=$internal_rf
transaction.state.log.replication.factor=$internal_rf
transaction.state.log.min.isr=$internal_isr
share.coordinator.state.topic.replication.factor=$internal_rf
share.coordinator.state.topic.min.isr=$internal_isr
group.initial.rebalance.delay.ms=0
auto.create.topics.enable=false
# Large enough for the benchmark's 1000-partition workloads.
socket.request.max.bytes=104857600
EOF
    case "$durability" in
        none) echo "# durability=none: Kafka's default, acks do not wait for fsync" >>"$cfg" ;;
        fsync)
            cat >>"$cfg" <<EOF
# durability=fsync: every append is fsync'd before the produce request is answered.
log.flush.interval.messages=1
EOF
            ;;
        *) die "unknown durability '$durability' (none|fsync)" ;;
    esac
}

write_log4j() {
    cat >"$1" <<'EOF'
status = warn
appender.out.type = Console
appender.out.name = STDOUT
appender.out.layout.type = PatternLayout
appender.out.layout.pattern = [%d] %p %m (%c)%n
rootLogger.level = INFO
rootLogger.appenderRef.out.ref = STDOUT
logger.kafka.name = kafka
logger.kafka.level = INFO
logger.apache.name = org.apache.kafka
logger.apache.level = INFO
EOF
}

# Returns 1 (after printing the log's tail) when the node exits or does not serve in time.
wait_serving() { # PID LOG PORT DEADLINE
    local pid="$1" logf="$2" port="$3" deadline="$4"
    while [ $SECONDS -lt "$deadline" ]; do
        if ! kill -0 "$pid" 2>/dev/null; then
            tail -n 40 "$logf" >&2
            log "broker (pid $pid) exited during start-up"
            return 1
        fi
        if grep -q "Kafka Server started" "$logf" 2>/dev/null &&
            (exec 3<>"/dev/tcp/127.0.0.1/$port") 2>/dev/null; then
            return 0
        fi
        sleep 0.5
    done
    tail -n 40 "$logf" >&2
    log "broker not serving on 127.0.0.1:$port after ${START_TIMEOUT_S}s"
    return 1
}

# Waits until the cluster's metadata lists N unfenced brokers, through Kafka's `kafka-cluster.sh
# list-endpoints` (ClusterTool): one line per registered broker, its state in column 5.
wait_registered() { # N DEADLINE
    local n="$1" deadline="$2" got=0
    while [ $SECONDS -lt "$deadline" ]; do
        # shellcheck disable=SC2046 # the options are words
        got="$(java $(tool_jvm_options) -Dlog4j2.configurationFile="$RUN_DIR/log4j2.properties" \
            -cp "$LIB_DIR/*" org.apache.kafka.tools.ClusterTool list-endpoints \
            --bootstrap-server "127.0.0.1:$PORT" 2>/dev/null | awk '$5 == "unfenced"' | wc -l)"
        [ "$got" -ge "$n" ] && return 0
        sleep 1
    done
    log "the cluster lists $got of $n unfenced brokers after ${START_TIMEOUT_S}s"
    return 1
}

start() {
    PORT="${KAFKA_PORT:-9092}"
    CONTROLLER_PORT="${KAFKA_CONTROLLER_PORT:-}"
    local data_dir="${KAFKA_DATA_DIR:-}" heap="${KAFKA_HEAP:-1G}" cpus="${KAFKA_CPUS:-}"
    local durability="${KAFKA_DURABILITY:-none}" nodes="${KAFKA_BROKERS:-1}"
    while [ $# -gt 0 ]; do
        case "$1" in
            --brokers) nodes="$2"; shift 2 ;;
            --port) PORT="$2"; shift 2 ;;
            --controller-port) CONTROLLER_PORT="$2"; shift 2 ;;
            --data-dir) data_dir="$2"; shift 2 ;;
            --heap) heap="$2"; shift 2 ;;
            --cpus) cpus="$2"; shift 2 ;;
            --durability) durability="$2"; shift 2 ;;
            *) die "unknown option $1" ;;
        esac
    done
    [[ "$nodes" =~ ^[1-9][0-9]*$ ]] || die "--brokers needs a positive number, not '$nodes'"
    if [ -z "$CONTROLLER_PORT" ]; then
        if [ "$nodes" = 1 ]; then CONTROLLER_PORT=9093; else CONTROLLER_PORT=$((PORT + nodes)); fi
    fi
    if [ "$CONTROLLER_PORT" -lt $((PORT + nodes)) ] && [ "$PORT" -lt $((CONTROLLER_PORT + nodes)) ]; then
        die "client ports $PORT.. and controller ports $CONTROLLER_PORT.. overlap for $nodes nodes"
    fi
    if any_running; then die "already running (pids $(recorded_pids | paste -sd' ')); run: $0 stop"; fi
    install
    mkdir -p "$RUN_DIR"
    local remove_data=0
    if [ -z "$data_dir" ]; then
        data_dir="$(mktemp -d "${TMPDIR:-/tmp}/kafka-data.XXXXXX")"
        remove_data=1
    fi
    mkdir -p "$data_dir"
    write_log4j "$RUN_DIR/log4j2.properties"
    echo "$data_dir" >"$RUN_DIR/data_dir"
    echo "$remove_data" >"$RUN_DIR/remove_data"
    seq -s, "$PORT" $((PORT + nodes - 1)) >"$RUN_DIR/port"
    : >"$RUN_DIR/kafka.pid"

    local cp="$LIB_DIR/*"
    local jvm_log=(-Dlog4j2.configurationFile="$RUN_DIR/log4j2.properties")
    local cluster_id
    cluster_id="$(java -cp "$cp" "${jvm_log[@]}" kafka.tools.StorageTool random-uuid 2>/dev/null | tail -n1)"
    [ -n "$cluster_id" ] || die "could not make a cluster id"
    # Per node: config, log directory and log (one node keeps the original names); one
    # cluster id for all. The previous start's files go first.
    rm -f "$RUN_DIR"/server-*.properties "$RUN_DIR"/kafka-*.log
    local cfgs=() logs=() i cfg logf dir
    for i in $(seq 1 "$nodes"); do
        cfg="$RUN_DIR/server-$i.properties" logf="$RUN_DIR/kafka-$i.log" dir="$data_dir/node-$i"
        if [ "$nodes" = 1 ]; then
            cfg="$RUN_DIR/server.properties" logf="$RUN_DIR/kafka.log" dir="$data_dir"
        fi
        mkdir -p "$dir"
        write_config "$cfg" "$dir" "$durability" "$i" "$nodes"
        java -cp "$cp" "${jvm_log[@]}" kafka.tools.StorageTool format \
            -t "$cluster_id" -c "$cfg" --ignore-formatted >"$RUN_DIR/format.log" 2>&1 ||
            { cat "$RUN_DIR/format.log" >&2; die "storage format failed (node $i)"; }
        cfgs+=("$cfg")
        logs+=("$logf")
    done

    local pin=()
    [ -n "$cpus" ] && pin=(taskset -c "$cpus")
    # JVM options as in Kafka's kafka-server-start.sh / kafka-run-class.sh.
    local jvm
    # shellcheck disable=SC2207 # the options are words
    jvm=($(broker_jvm_options "$heap") "${jvm_log[@]}")
    # Every node first: with N voters, none finishes starting before a majority runs.
    local pids=()
    for i in $(seq 1 "$nodes"); do
        : >"${logs[i - 1]}"
        # setsid: the broker gets its own session so that it outlives this script.
        setsid "${pin[@]}" java "${jvm[@]}" -cp "$cp" kafka.Kafka "${cfgs[i - 1]}" \
            >>"${logs[i - 1]}" 2>&1 </dev/null &
        pids+=($!)
        echo "$!" >>"$RUN_DIR/kafka.pid"
    done
    local deadline=$((SECONDS + START_TIMEOUT_S))
    for i in $(seq 1 "$nodes"); do
        wait_serving "${pids[i - 1]}" "${logs[i - 1]}" $((PORT + i - 1)) "$deadline" ||
            { stop >/dev/null 2>&1; die "node $i did not start (log ${logs[i - 1]})"; }
    done
    if [ "$nodes" -gt 1 ]; then
        wait_registered "$nodes" "$deadline" || { stop >/dev/null 2>&1; die "cluster incomplete"; }
        log "Apache Kafka $KAFKA_VERSION: $nodes nodes serving on 127.0.0.1:$(cat "$RUN_DIR/port")" \
            "(pids ${pids[*]}, durability=$durability, heap=$heap each, cpus=${cpus:-all}," \
            "data=$data_dir, logs=$RUN_DIR/kafka-<i>.log)"
    else
        log "Apache Kafka $KAFKA_VERSION serving on 127.0.0.1:$PORT (pid ${pids[0]}," \
            "durability=$durability, heap=$heap, cpus=${cpus:-all}, data=$data_dir, log=${logs[0]})"
    fi
    printf '%s\n' "${pids[@]}"
}

stop() {
    local pid live=()
    for pid in $(recorded_pids); do kill -0 "$pid" 2>/dev/null && live+=("$pid"); done
    if [ ${#live[@]} -eq 0 ]; then
        log "not running"
        rm -f "$RUN_DIR/kafka.pid"
        return 0
    fi
    # All at once: each node's controlled shutdown then still finds a controller quorum.
    kill -TERM "${live[@]}" 2>/dev/null || true
    local deadline=$((SECONDS + STOP_TIMEOUT_S))
    for pid in "${live[@]}"; do
        while kill -0 "$pid" 2>/dev/null; do
            if [ $SECONDS -ge $deadline ]; then
                log "no clean exit of pid $pid after ${STOP_TIMEOUT_S}s; SIGKILL"
                kill -KILL "$pid" 2>/dev/null || true
                break
            fi
            sleep 0.2
        done
    done
    rm -f "$RUN_DIR/kafka.pid"
    if [ "$(cat "$RUN_DIR/remove_data" 2>/dev/null || echo 0)" = 1 ]; then
        rm -rf "$(cat "$RUN_DIR/data_dir")"
    fi
    log "stopped (pid ${live[*]})"
}

# The broker's JVM options, as in Kafka's kafka-server-start.sh / kafka-run-class.sh.
broker_jvm_options() {
    echo "-Xms$1 -Xmx$1 -server -XX:+UseG1GC -XX:MaxGCPauseMillis=20" \
        "-XX:InitiatingHeapOccupancyPercent=35 -XX:+ExplicitGCInvokesConcurrent" \
        "-XX:MaxInlineLevel=15 -Djava.awt.headless=true"
}

# Kafka's perf scripts (kafka-producer-perf-test.sh, kafka-consumer-perf-test.sh) set
# KAFKA_HEAP_OPTS=-Xmx512M; kafka-run-class.sh adds the G1 options used for the broker.
tool_jvm_options() {
    echo "-Xmx${KAFKA_TOOL_HEAP:-512M} -server -XX:+UseG1GC -XX:MaxGCPauseMillis=20" \
        "-XX:InitiatingHeapOccupancyPercent=35 -XX:+ExplicitGCInvokesConcurrent" \
        "-XX:MaxInlineLevel=15 -Djava.awt.headless=true"
}

tool() {
    local cpus=""
    if [ "${1:-}" = --cpus ]; then cpus="$2"; shift 2; fi
    [ $# -gt 0 ] || die "tool needs a class name"
    install
    mkdir -p "$RUN_DIR"
    local log4j="$RUN_DIR/tool-log4j2.properties"
    printf '%s\n' 'status = warn' 'appender.err.type = Console' 'appender.err.name = STDERR' \
        'appender.err.target = SYSTEM_ERR' 'appender.err.layout.type = PatternLayout' \
        'appender.err.layout.pattern = [%d] %p %m (%c)%n' 'rootLogger.level = WARN' \
        'rootLogger.appenderRef.err.ref = STDERR' >"$log4j"
    local pin=()
    [ -n "$cpus" ] && pin=(taskset -c "$cpus")
    # shellcheck disable=SC2046 # the options are words
    exec "${pin[@]}" java $(tool_jvm_options) -Dlog4j2.configurationFile="$log4j" \
        -cp "$LIB_DIR/*" "$@"
}

status() {
    local pids
    if pids="$(pid_of)"; then
        echo "running pid=$(echo "$pids" | paste -sd,) port=$(cat "$RUN_DIR/port")" \
            "data_dir=$(cat "$RUN_DIR/data_dir")"
    elif any_running; then
        echo "partly running: some of pids $(recorded_pids | paste -sd,) have exited; run: $0 stop"
        return 1
    else
        echo "not running"
        return 1
    fi
}

cmd="${1:-}"
[ $# -gt 0 ] && shift
case "$cmd" in
    install) install ;;
    start) start "$@" ;;
    stop) stop ;;
    status) status ;;
    pid) pid_of ;;
    tool) tool "$@" ;;
    tool-jvm-options) tool_jvm_options ;;
    broker-jvm-options) broker_jvm_options "${1:-${KAFKA_HEAP:-1G}}" ;;
    *) sed -n '2,43p' "$0" | sed 's/^# \{0,1\}//'; exit 2 ;;
esac
