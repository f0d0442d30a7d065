#!/usr/bin/env python3
"""Kafka's own perf tools beside loadgen's Kafka driver, for scripts/bench-vs-kafka.sh.

  perf_tools.py plan RESULT.json
      Shell assignments (eval them) for running org.apache.kafka.tools.ProducerPerformance and
      ConsumerPerformance with the settings of the workload in RESULT.json (a `borges-loadgen
      run --json` result of the kafka driver, so the tools get exactly the resolved workload and
      enough records to run about as long as the driver did).
  perf_tools.py table DIR
      A markdown section comparing DIR/raw/<workload>-kafkatools[-<round>].txt (the tools'
      output) with DIR/raw/<workload>-kafka[-<round>].json (the driver's result).

MB = 2^20 bytes in both: ProducerPerformance and ConsumerPerformance divide by 1024*1024.
"""
import glob
import json
import math
import os
import re
import shlex
import sys

# Neither tool runs without a record count; the count is the driver's rate times the run's
# length, at least this many records and at most this many bytes.
RECORDS_MIN = 200_000
BYTES_MAX = 4 << 30
# A driver slower than this (records/s) is planned at this rate, so that a tool much faster
# than the driver still runs for a while.
PLAN_RATE_MIN_RECORDS_S = 20_000


def plan(path):
    r = json.load(open(path))
    w = r["workload"]
    p, c, t = w["producer"], w["consumer"], w["topic"]
    size = int(w["record_size_bytes"])
    warm, dur = int(w["run"]["warmup_s"]), int(w["run"]["duration_s"])
    notes = []
    if int(w["topics"]) != 1:
        notes.append(f"{w['topics']} topics: the tools use the first topic only")
    if int(p["producers_per_topic"]) != 1:
        notes.append(f"{p['producers_per_topic']} producers: the tools run one")
    if w["keys"].get("distribution", "none") != "none":
        notes.append("keyed workload: the tools send records without keys")
    backlog_records = 0
    if int(c["backlog_size_bytes"]) > 0:
        backlog_records = math.ceil(int(c["backlog_size_bytes"]) / size)
        total = backlog_records
        warmup_records = 0
    else:
        rate = max(float(r["summary"]["throughput_records_s"]), PLAN_RATE_MIN_RECORDS_S)
        total = max(math.ceil(rate * (warm + dur)), RECORDS_MIN)
        total = min(total, BYTES_MAX // size)
        warmup_records = math.ceil(total * warm / (warm + dur)) if warm + dur > 0 else 0
    topic_config = {"fsync": "flush.messages=1", "none": ""}.get(t["durability"], "")
    if t["durability"] == "interval":
        topic_config = f"flush.ms={t.get('flush_interval_ms') or 1000}"
    producer_props = [
        f"acks={'all' if p['acks'] == 'all' else p['acks']}",
        f"linger.ms={p['linger_ms']}",
        f"batch.size={p['batch_size_bytes']}",
        f"compression.type={p['compression']}",
        f"buffer.memory={p['buffer_memory_bytes_max']}",
        f"max.in.flight.requests.per.connection={p['in_flight_requests_max']}",
        "enable.idempotence=false",
    ]
    consumer_props = [
        f"fetch.max.wait.ms={c['fetch_max_wait_ms']}",
        f"max.partition.fetch.bytes={c['partition_fetch_bytes_max']}",
    ]
    out = {
        "TOOL_PARTITIONS": w["partitions_per_topic"],
        "TOOL_RECORD_SIZE": size,
        "TOOL_RECORDS": total,
        "TOOL_WARMUP_RECORDS": warmup_records,
        "TOOL_CONSUMERS": 1 if int(c["subscriptions_per_topic"]) > 0 else 0,
        "TOOL_BACKLOG": 1 if backlog_records else 0,
        "TOOL_TOPIC_CONFIG": topic_config,
        "TOOL_PRODUCER_PROPS": " ".join(producer_props),
        "TOOL_CONSUMER_PROPS": " ".join(consumer_props),
        "TOOL_NOTES": "; ".join(notes),
    }
    for k, v in out.items():
        print(f"{k}={shlex.quote(str(v))}")


PRODUCER_RE = re.compile(
    r"^(\d+) (steady state )?records sent, ([\d.]+) records/sec \(([\d.]+) MB/sec\), "
    r"([\d.]+) ms avg latency, ([\d.]+) ms max latency, (\d+) ms 50th, (\d+) ms 95th, "
    r"(\d+) ms 99th, (\d+) ms 99.9th"
)
# ConsumerPerformance's CSV line: start, end, MB, MB.sec, nMsg, nMsg.sec, rebalance.time.ms,
# fetch.time.ms, fetch.MB.sec, fetch.nMsg.sec.
CONSUMER_RE = re.compile(r"^\d{4}-\d\d-\d\d [\d:]+, \d{4}-\d\d-\d\d [\d:]+, (.*)$")


def parse_tools(text):
    prod = {}
    cons = None
    load = ""
    for line in text.splitlines():
        m = PRODUCER_RE.match(line.strip())
        if m:
            key = "steady" if m.group(2) else "all"
            prod[key] = {
                "records": int(m.group(1)),
                "records_s": float(m.group(3)),
                "mb_s": float(m.group(4)),
                "avg": float(m.group(5)),
                "max": float(m.group(6)),
                "p50": float(m.group(7)),
                "p95": float(m.group(8)),
                "p99": float(m.group(9)),
                "p999": float(m.group(10)),
            }
            continue
        m = CONSUMER_RE.match(line.strip())
        if m:
            f = [x.strip() for x in m.group(1).split(",")]
            cons = {"mb": float(f[0]), "mb_s": float(f[1]), "fetch_mb_s": float(f[6])}
            continue
        if line.startswith("load average:"):
            load = line.split(":", 1)[1].strip()
    return prod.get("steady") or prod.get("all"), cons, load


def fmt(v):
    if v is None:
        return "-"
    return f"{v:.1f}" if abs(v) >= 10 else f"{v:.2f}"


def table(out_dir):
    rows = []
    for path in sorted(glob.glob(os.path.join(out_dir, "raw", "*-kafkatools*.txt"))):
        base = os.path.basename(path)[: -len(".txt")]
        m = re.match(r"^(.*)-kafkatools(-\d+)?$", base)
        if not m:
            continue
        name, suffix = m.group(1), m.group(2) or ""
        prod, cons, load = parse_tools(open(path).read())
        drv = None
        jpath = os.path.join(out_dir, "raw", f"{name}-kafka{suffix}.json")
        if os.path.exists(jpath):
            drv = json.load(open(jpath))
        rows.append((name, suffix.lstrip("-") or "1", prod, cons, load, drv, jpath))
    if not rows:
        return ""
    md = [
        "## Kafka's own perf tools beside loadgen's Kafka driver",
        "",
        "Each maximum-rate workload is also run with `org.apache.kafka.tools.ProducerPerformance`"
        " (and `ConsumerPerformance` where the workload has a consumer: concurrently, or after the"
        " backlog for catch-up) from the same Kafka jars, against a fresh Kafka broker with the"
        " same placement, the workload's producer settings (acks, linger.ms, batch.size,"
        " compression, buffer.memory, in-flight) and fetch settings, pinned to the load"
        " generator's CPUs. Producer figures are the tool's steady-state line (after"
        " `--warmup-records`, the workload's warm-up share); its latency is the Java client's"
        " send-to-ack time for records sent as fast as possible (queueing, not comparable with"
        " fixed-rate latency). Consumer MB/s is ConsumerPerformance's `fetch.MB.sec` (without"
        " the group join). `driver / tool` below 1 means loadgen's Kafka driver (librdkafka)"
        " underrates Kafka.",
        "",
        "| workload | round | loadgen kafka driver publish MB/s | ProducerPerformance MB/s "
        "| driver / tool | driver consume MB/s | ConsumerPerformance MB/s "
        "| tool latency avg / p50 / p95 / p99 / p99.9 ms | load average (tools run) |",
        "|---|---|---:|---:|---:|---:|---:|---|---|",
    ]
    for name, rnd, prod, cons, load, drv, _ in rows:
        d_pub = d_con = None
        if drv:
            s = drv["summary"]
            d_pub = s["throughput_mb_s"]
            d_con = s["consume_throughput_mb_s"] or None
        t_pub = prod["mb_s"] if prod else None
        ratio = f"{d_pub / t_pub:.2f}x" if d_pub and t_pub else "-"
        lat = "-"
        if prod:
            lat = " / ".join(
                f"{prod[k]:.0f}" if prod[k] >= 10 else f"{prod[k]:.1f}"
                for k in ("avg", "p50", "p95", "p99", "p999")
            )
        md.append(
            f"| {name} | {rnd} | {fmt(d_pub)} | {fmt(t_pub)} | {ratio} | {fmt(d_con)} "
            f"| {fmt(cons['fetch_mb_s'] if cons else None)} | {lat} | {load or '-'} |"
        )
    md.append("")
    return "\n".join(md) + "\n"


def main():
    if len(sys.argv) == 3 and sys.argv[1] == "plan":
        plan(sys.argv[2])
    elif len(sys.argv) == 3 and sys.argv[1] == "table":
        sys.stdout.write(table(sys.argv[2]))
    else:
        sys.stderr.write(__doc__)
        sys.exit(2)


if __name__ == "__main__":
    main()
