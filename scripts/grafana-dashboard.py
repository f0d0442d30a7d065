#!/usr/bin/env python3
# Generates docs/grafana/borges.json (python3 scripts/grafana-dashboard.py > docs/grafana/borges.json).
# broker/tests/metrics.rs checks that every metric the dashboard queries exists on a real broker.
import json
R = "[$__rate_interval]"
panels = []
y = 0
pid = 0
def row(title):
    global y, pid
    pid += 1
    panels.append({"type": "row", "title": title, "id": pid, "collapsed": False,
                   "gridPos": {"h": 1, "w": 24, "x": 0, "y": y}})
    y += 1
x = 0
def panel(title, exprs, unit="short", kind="timeseries", w=8, h=8, desc=""):
    global x, y, pid
    pid += 1
    if x + w > 24:
        x = 0; y += h
    targets = [{"refId": chr(65 + i), "expr": e, "legendFormat": l,
                "datasource": {"type": "prometheus", "uid": "${datasource}"}}
               for i, (e, l) in enumerate(exprs)]
    p = {"type": kind, "title": title, "id": pid, "description": desc,
         "datasource": {"type": "prometheus", "uid": "${datasource}"},
         "gridPos": {"h": h, "w": w, "x": x, "y": y},
         "fieldConfig": {"defaults": {"unit": unit}, "overrides": []},
         "options": {}, "targets": targets}
    panels.append(p)
    x += w
def newrow(title):
    global x, y
    if x != 0:
        y += 8
    x = 0
    row(title)

I = 'instance=~"$instance"'
newrow("Overview")
for t, e, u in [
    ("Brokers up", f'count(borges_build_info{{{I}}})', "short"),
    ("Active controllers", f'sum(borges_cluster_active_controller{{{I}}})', "short"),
    ("Under-replicated partitions", f'sum(borges_partitions_under_replicated{{{I}}})', "short"),
    ("Under min ISR", f'sum(borges_partitions_under_min_isr{{{I}}})', "short"),
    ("Offline partitions", f'sum(borges_partitions_offline{{{I}}})', "short"),
    ("Log dirs not writable", f'sum(borges_log_dir_state{{{I},state!="writable"}})', "short"),
    ("Uptime (min)", f'min(borges_uptime_seconds{{{I}}})', "s"),
    ("Series omitted", f'sum(borges_metrics_series_omitted{{{I}}}) or vector(0)', "short"),
]:
    panel(t, [(e, "")], unit=u, kind="stat", w=3, h=4)
y += 4; x = 0
newrow("Throughput")
panel("Records in / s by topic", [(f'sum by (topic) (rate(borges_topic_records_in_total{{{I}}}{R}))', "{{topic}}")], "rps")
panel("Bytes in / s by topic", [(f'sum by (topic) (rate(borges_topic_bytes_in_total{{{I}}}{R}))', "{{topic}}")], "Bps")
panel("Bytes out / s by topic", [(f'sum by (topic) (rate(borges_topic_bytes_out_total{{{I}}}{R}))', "{{topic}}")], "Bps")
panel("Requests / s by API", [(f'sum by (api) (rate(borges_requests_total{{{I}}}{R}))', "{{api}}")], "reqps")
panel("Refused requests / s by API", [(f'sum by (api) (rate(borges_requests_refused_total{{{I}}}{R}))', "{{api}}")], "reqps")
panel("Socket bytes / s", [(f'sum(rate(borges_bytes_received_total{{{I}}}{R}))', "received"),
                           (f'sum(rate(borges_bytes_sent_total{{{I}}}{R}))', "sent"),
                           (f'sum(rate(borges_bytes_sendfile_total{{{I}}}{R}))', "sent with sendfile")], "Bps")
newrow("Latency and sizes")
for q in ["0.5", "0.99", "0.999"]:
    panel(f"Request latency p{float(q)*100:g} by API",
          [(f'histogram_quantile({q}, sum by (le, api) (rate(borges_request_latency_seconds_bucket{{{I}}}{R})))', "{{api}}")], "s")
panel("Mean request latency by API",
      [(f'sum by (api) (rate(borges_request_latency_seconds_sum{{{I}}}{R})) / sum by (api) (rate(borges_request_latency_seconds_count{{{I}}}{R}))', "{{api}}")], "s")
panel("fdatasync latency", [(f'histogram_quantile({q}, sum by (le) (rate(borges_storage_fsync_seconds_bucket{{{I}}}{R})))', f"p{float(q)*100:g}") for q in ["0.5", "0.99"]]
      + [(f'sum(rate(borges_storage_fsync_seconds_count{{{I}}}{R}))', "fsyncs / s")], "s")
panel("Produce request / fetch response size", [
    (f'histogram_quantile(0.5, sum by (le) (rate(borges_produce_request_bytes_bucket{{{I}}}{R})))', "produce p50"),
    (f'histogram_quantile(0.99, sum by (le) (rate(borges_produce_request_bytes_bucket{{{I}}}{R})))', "produce p99"),
    (f'histogram_quantile(0.5, sum by (le) (rate(borges_fetch_response_bytes_bucket{{{I}}}{R})))', "fetch p50"),
    (f'sum(rate(borges_fetch_response_bytes_sum{{{I}}}{R})) / sum(rate(borges_fetch_response_bytes_count{{{I}}}{R}))', "fetch mean")], "bytes")
panel("Produced bytes / s (all topics)", [(f'sum by (instance) (rate(borges_produce_bytes_total{{{I}}}{R}))', "{{instance}} batches"),
                                          (f'sum by (instance) (rate(borges_fetch_bytes_total{{{I}}}{R}))', "{{instance}} fetched"),
                                          (f'sum by (instance) (rate(borges_produce_records_total{{{I}}}{R}))', "{{instance}} records")], "short")
newrow("Consumers")
panel("Consumer lag by group and topic", [(f'sum by (group, topic) (borges_consumer_group_lag{{{I}}})', "{{group}} / {{topic}}")], "short", w=12)
panel("Partitions per topic / topic size", [(f'sum by (topic) (borges_topic_size_bytes{{{I}}})', "{{topic}}")], "bytes", w=12)
newrow("Cores")
panel("Cross-core forwards / s by core", [(f'sum by (instance, core) (rate(borges_cross_core_forwards_total{{{I}}}{R}))', "{{instance}} core {{core}}")], "ops")
panel("Connections by core", [(f'borges_connections{{{I}}}', "{{instance}} core {{core}}"),
                              (f'sum(rate(borges_connections_opened_total{{{I}}}{R}))', "opened / s"),
                              (f'sum(rate(borges_connections_closed_total{{{I}}}{R}))', "closed / s")], "short")
panel("Partitions by core", [(f'borges_partitions{{{I}}}', "{{instance}} core {{core}}"),
                             (f'sum by (topic) (borges_topic_partitions{{{I}}})', "{{topic}}")], "short")
panel("Unflushed bytes by core", [(f'borges_storage_unflushed_bytes{{{I}}}', "{{instance}} core {{core}}")], "bytes")
panel("Tail cache by core", [(f'borges_storage_tail_cache_bytes{{{I}}}', "{{instance}} core {{core}}")], "bytes")
panel("Request memory available by core", [(f'borges_request_memory_available_bytes{{{I}}}', "{{instance}} core {{core}}")], "bytes")
newrow("Storage")
panel("Log directory free space", [(f'borges_log_dir_free_bytes{{{I}}} / borges_log_dir_total_bytes{{{I}}}', "{{instance}} {{dir}}")], "percentunit")
panel("Log directory state", [(f'borges_log_dir_state{{{I}}} == 1', "{{instance}} core {{core}} {{state}}")], "short")
panel("Storage descriptors by core", [(f'borges_storage_open_descriptors{{{I}}}', "{{instance}} core {{core}}")], "short")
panel("Partition size (largest 10)", [(f'topk(10, borges_partition_size_bytes{{{I}}})', "{{topic}}-{{partition}}"),
                                      (f'topk(10, borges_partition_segments{{{I}}})', "{{topic}}-{{partition}} segments")], "bytes")
panel("Log cleaner", [(f'sum(rate(borges_cleaner_runs_total{{{I}}}{R}))', "cleanings / s"),
                      (f'sum(rate(borges_cleaner_bytes_in_total{{{I}}}{R}))', "bytes replaced / s"),
                      (f'sum(rate(borges_cleaner_bytes_out_total{{{I}}}{R}))', "bytes written / s"),
                      (f'max(borges_partition_cleaner_dirty_ratio{{{I}}})', "max dirty ratio"),
                      (f'time() - max(borges_cleaner_last_run_ms{{{I}}}) / 1000', "s since last cleaning")], "short")
panel("Idempotent producers remembered", [(f'sum by (topic) (borges_partition_producers{{{I}}})', "{{topic}}")], "short")
newrow("Errors")
panel("Bad input / s", [(f'sum(rate(borges_malformed_frames_total{{{I}}}{R}))', "malformed frames"),
                        (f'sum(rate(borges_frames_timed_out_total{{{I}}}{R}))', "frames timed out"),
                        (f'sum(rate(borges_produce_rejected_total{{{I}}}{R}))', "produce rejected")], "ops")
panel("Failures / s", [(f'sum(rate(borges_produce_failed_total{{{I}}}{R}))', "produce failed"),
                       (f'sum(rate(borges_connections_refused_total{{{I}}}{R}))', "connections refused"),
                       (f'sum(rate(borges_accept_descriptor_errors_total{{{I}}}{R}))', "accepts out of descriptors")], "ops")
panel("Partition offsets (largest 10)", [(f'topk(10, borges_partition_high_watermark{{{I}}} - borges_partition_log_start_offset{{{I}}})', "{{topic}}-{{partition}} records kept"),
                                         (f'topk(10, borges_partition_log_end_offset{{{I}}} - borges_partition_high_watermark{{{I}}})', "{{topic}}-{{partition}} not yet committed")], "short")
newrow("Cluster")
panel("Partition leaders by broker", [(f'borges_partitions_leader{{{I}}}', "{{instance}}")], "short")
panel("Brokers by state", [(f'max by (state) (borges_cluster_brokers{{{I}}})', "{{state}}"),
                           (f'max(borges_cluster_member{{{I}}})', "cluster member")], "short")
panel("Active controller id", [(f'max(borges_cluster_controller_id{{{I}}})', "controller")], "short")
newrow("Process")
panel("CPU (cores)", [(f'rate(process_cpu_seconds_total{{{I}}}{R})', "{{instance}}")], "short")
panel("Memory", [(f'process_resident_memory_bytes{{{I}}}', "{{instance}} resident"),
                 (f'process_virtual_memory_bytes{{{I}}}', "{{instance}} virtual")], "bytes")
panel("File descriptors", [(f'process_open_fds{{{I}}} / process_max_fds{{{I}}}', "{{instance}} used share"),
                           (f'process_threads{{{I}}}', "{{instance}} threads")], "short")
panel("Versions", [(f'count by (version, commit) (borges_build_info{{{I}}})', "{{version}} {{commit}}"),
                   (f'time() - process_start_time_seconds{{{I}}}', "{{instance}} seconds since start")], "short")

dash = {
    "__inputs": [{"name": "DS_PROMETHEUS", "label": "Prometheus", "type": "datasource",
                  "pluginId": "prometheus", "pluginName": "Prometheus"}],
    "title": "Borges broker",
    "uid": "borges-broker",
    "description": "Borges brokers: throughput, latency, consumer lag, cores, storage, cluster. Built on the metrics in docs/operations.md.",
    "tags": ["borges", "streaming"],
    "timezone": "browser",
    "schemaVersion": 39,
    "version": 1,
    "editable": True,
    "refresh": "30s",
    "time": {"from": "now-1h", "to": "now"},
    "templating": {"list": [
        {"name": "datasource", "type": "datasource", "query": "prometheus", "label": "Data source", "current": {}},
        {"name": "instance", "type": "query", "label": "Broker", "multi": True, "includeAll": True,
         "allValue": ".*", "datasource": {"type": "prometheus", "uid": "${datasource}"},
         "query": {"query": "label_values(borges_build_info, instance)", "refId": "instance"},
         "definition": "label_values(borges_build_info, instance)", "refresh": 2, "current": {}}]},
    "panels": panels,
}
print(json.dumps(dash, indent=2))
