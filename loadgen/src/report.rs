//! Side-by-side reports: a markdown table (Borges, Kafka, ratio) per workload and SVG charts
//! (latency percentiles, throughput over time), from result files written by `run --json`.

use std::collections::BTreeMap;
use std::fmt::Write;
use std::path::{Path, PathBuf};

use plotters::prelude::*;

use crate::error::LoadgenError;
use crate::machine::cpu_list;
use crate::result::{fmt_f, rate_label, RunResult, MB_BYTES};

/// The system we build; its column comes first.
pub const SUBJECT: &str = "borges";
/// The system we compare against.
pub const BASELINE: &str = "kafka";
/// Reported target: Borges's maximum throughput at least this many times Kafka's.
pub const TARGET_THROUGHPUT_RATIO_MIN: f64 = 2.0;
/// Reported target: Borges's p99.9 publish latency at most this fraction of Kafka's.
pub const TARGET_P999_RATIO_MAX: f64 = 0.2;

const CHART_SIZE: (u32, u32) = (900, 500);

/// Whether a larger value of a metric is better.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Better {
    /// Throughput.
    Higher,
    /// Latency, CPU, memory, time.
    Lower,
}

/// One row of a comparison table.
#[derive(Debug, Clone, PartialEq)]
pub struct Row {
    /// What is measured, with its unit.
    pub metric: String,
    /// Borges's value.
    pub subject: Option<f64>,
    /// Kafka's value.
    pub baseline: Option<f64>,
    /// Direction.
    pub better: Better,
}

impl Row {
    /// Borges / Kafka, if both exist and Kafka's is not zero.
    pub fn ratio(&self) -> Option<f64> {
        match (self.subject, self.baseline) {
            (Some(s), Some(b)) if b != 0.0 => Some(s / b),
            _ => None,
        }
    }
}

/// The results of one workload, one per driver (the last one given wins).
#[derive(Debug, Clone, Default)]
pub struct Comparison {
    /// Workload name.
    pub workload: String,
    /// The Borges run.
    pub subject: Option<RunResult>,
    /// The Kafka run.
    pub baseline: Option<RunResult>,
}

/// Groups results by workload, in name order.
pub fn group(results: Vec<RunResult>) -> Vec<Comparison> {
    let mut by_name: BTreeMap<String, Comparison> = BTreeMap::new();
    for r in results {
        let c = by_name
            .entry(r.workload.name.clone())
            .or_insert_with(|| Comparison {
                workload: r.workload.name.clone(),
                ..Default::default()
            });
        if r.driver == SUBJECT {
            c.subject = Some(r);
        } else {
            c.baseline = Some(r);
        }
    }
    by_name.into_values().collect()
}

/// The rows of a workload's table.
pub fn rows(c: &Comparison) -> Vec<Row> {
    type Get = fn(&RunResult) -> Option<f64>;
    let spec: Vec<(&str, Better, Get)> = vec![
        ("publish throughput (MB/s)", Better::Higher, |r| {
            Some(r.summary.throughput_mb_s)
        }),
        ("publish throughput (records/s)", Better::Higher, |r| {
            Some(r.summary.throughput_records_s)
        }),
        ("consume throughput (MB/s)", Better::Higher, |r| {
            Some(r.summary.consume_throughput_mb_s)
        }),
        ("publish latency avg (ms)", Better::Lower, |r| {
            Some(r.summary.publish.mean_ms)
        }),
        ("publish latency p50 (ms)", Better::Lower, |r| {
            Some(r.summary.publish.p50_ms)
        }),
        ("publish latency p99 (ms)", Better::Lower, |r| {
            Some(r.summary.publish.p99_ms)
        }),
        ("publish latency p99.9 (ms)", Better::Lower, |r| {
            Some(r.summary.publish.p999_ms)
        }),
        ("publish latency p99.99 (ms)", Better::Lower, |r| {
            Some(r.summary.publish.p9999_ms)
        }),
        ("publish latency max (ms)", Better::Lower, |r| {
            Some(r.summary.publish.max_ms)
        }),
        ("end-to-end latency avg (ms)", Better::Lower, |r| {
            nonzero(r.summary.e2e.count, r.summary.e2e.mean_ms)
        }),
        ("end-to-end latency p50 (ms)", Better::Lower, |r| {
            nonzero(r.summary.e2e.count, r.summary.e2e.p50_ms)
        }),
        ("end-to-end latency p99 (ms)", Better::Lower, |r| {
            nonzero(r.summary.e2e.count, r.summary.e2e.p99_ms)
        }),
        ("end-to-end latency p99.9 (ms)", Better::Lower, |r| {
            nonzero(r.summary.e2e.count, r.summary.e2e.p999_ms)
        }),
        ("catch-up time (s)", Better::Lower, |r| {
            r.summary.backlog.map(|b| b.catch_up_s)
        }),
        ("broker CPU (% of one core)", Better::Lower, |r| {
            r.summary.broker_cpu_pct_avg
        }),
        ("broker CPU-seconds per GiB", Better::Lower, |r| {
            r.summary.broker_cpu_s_per_gib
        }),
        ("broker RSS max (MiB)", Better::Lower, |r| {
            r.summary.broker_rss_bytes_max.map(|b| b as f64 / MB_BYTES)
        }),
        ("errors", Better::Lower, |r| Some(r.summary.errors as f64)),
    ];
    spec.into_iter()
        .map(|(metric, better, get)| Row {
            metric: metric.to_string(),
            subject: c.subject.as_ref().and_then(get),
            baseline: c.baseline.as_ref().and_then(get),
            better,
        })
        .filter(|r| r.subject.is_some() || r.baseline.is_some())
        .collect()
}

fn nonzero(count: u64, v: f64) -> Option<f64> {
    (count > 0).then_some(v)
}

fn cell(v: Option<f64>) -> String {
    v.map_or("-".to_string(), fmt_f)
}

/// The markdown table of one workload.
pub fn markdown_table(c: &Comparison) -> String {
    let mut out = String::new();
    let _ = writeln!(out, "| metric | Borges | Kafka | Borges / Kafka | better |");
    let _ = writeln!(out, "|---|---:|---:|---:|---|");
    for r in rows(c) {
        let ratio = r.ratio().map_or("-".to_string(), |x| format!("{x:.2}x"));
        let better = match r.better {
            Better::Higher => "higher",
            Better::Lower => "lower",
        };
        let _ = writeln!(
            out,
            "| {} | {} | {} | {} | {} |",
            r.metric,
            cell(r.subject),
            cell(r.baseline),
            ratio,
            better
        );
    }
    out
}

fn workload_line(r: &RunResult) -> String {
    let w = &r.workload;
    format!(
        "{} topic(s) x {} partition(s), {} B records, keys {}, {} producer(s)/topic at {}, \
         {} group(s) x {} consumer(s)/topic, batch {} B, linger {} ms, compression {:?}, \
         acks={}, durability={}, {} s measured after {} s warm-up",
        w.topics,
        w.partitions_per_topic,
        w.record_size_bytes,
        serde_json::to_string(&w.keys).unwrap_or_default(),
        w.producer.producers_per_topic,
        rate_label(&w.producer),
        w.consumer.subscriptions_per_topic,
        w.consumer.consumers_per_subscription,
        w.producer.batch_size_bytes,
        w.producer.linger_ms,
        w.producer.compression,
        w.producer.acks.as_kafka(),
        w.topic.durability.as_str(),
        w.run.duration_s,
        w.run.warmup_s
    )
}

/// The headline table over all workloads with the two reported targets. The throughput target
/// is judged only without a target rate (a fixed rate's throughput is the offered load); the
/// latency target only at a fixed rate, where both systems get the same load.
pub fn headline_table(comparisons: &[Comparison]) -> String {
    let mut out = String::new();
    let _ = writeln!(
        out,
        "| workload | rate | durability | Borges MB/s | Kafka MB/s \
         | ratio (target >= {TARGET_THROUGHPUT_RATIO_MIN}x) | Borges p99.9 ms | Kafka p99.9 ms \
         | ratio (target <= {TARGET_P999_RATIO_MAX}x) |"
    );
    let _ = writeln!(out, "|---|---|---|---:|---:|---:|---:|---:|---:|");
    for c in comparisons {
        let all = rows(c);
        let find = |m: &str| all.iter().find(|r| r.metric.starts_with(m)).cloned();
        let any = c.subject.as_ref().or(c.baseline.as_ref());
        // A catch-up workload is about how fast the backlog is read.
        let catch_up = any.is_some_and(|r| r.workload.consumer.backlog_size_bytes > 0);
        let tp = if catch_up {
            find("consume throughput (MB/s)")
        } else {
            find("publish throughput (MB/s)")
        };
        let lat = find("publish latency p99.9");
        let durability = any.map_or("-", |r| r.workload.topic.durability.as_str());
        let rate = match any {
            None => "-".to_string(),
            Some(_) if catch_up => "catch-up (consume MB/s)".to_string(),
            Some(r) => rate_label(&r.workload.producer),
        };
        let fixed_rate = any.is_some_and(|r| r.workload.producer.rate_records_s > 0);
        let tp_ratio = mark(tp.as_ref().and_then(Row::ratio), !fixed_rate, |x| {
            x >= TARGET_THROUGHPUT_RATIO_MIN
        });
        let lat_ratio = mark(lat.as_ref().and_then(Row::ratio), fixed_rate, |x| {
            x <= TARGET_P999_RATIO_MAX
        });
        let _ = writeln!(
            out,
            "| {} | {rate} | {durability} | {} | {} | {tp_ratio} | {} | {} | {lat_ratio} |",
            c.workload,
            cell(tp.as_ref().and_then(|r| r.subject)),
            cell(tp.as_ref().and_then(|r| r.baseline)),
            cell(lat.as_ref().and_then(|r| r.subject)),
            cell(lat.as_ref().and_then(|r| r.baseline)),
        );
    }
    out
}

/// `1.23x`, with `(met)` / `(not met)` where the target applies.
fn mark(ratio: Option<f64>, applies: bool, ok: impl Fn(f64) -> bool) -> String {
    ratio.map_or("-".to_string(), |x| match (applies, ok(x)) {
        (false, _) => format!("{x:.2}x"),
        (true, true) => format!("{x:.2}x (met)"),
        (true, false) => format!("{x:.2}x (not met)"),
    })
}

/// Writes `report.md` and the charts into `out_dir`; `notes` (markdown: machine, cores,
/// commands, durability settings) goes under the title. Returns the report's path.
pub fn write_report(
    results: Vec<RunResult>,
    out_dir: &Path,
    notes: &str,
) -> Result<PathBuf, LoadgenError> {
    if results.is_empty() {
        return Err(LoadgenError::Report("no result files".into()));
    }
    std::fs::create_dir_all(out_dir).map_err(|source| LoadgenError::Io {
        path: out_dir.display().to_string(),
        source,
    })?;
    let comparisons = group(results);
    let mut md = String::from("# Borges vs Apache Kafka\n\n");
    if !notes.trim().is_empty() {
        md.push_str(notes.trim_end());
        md.push_str("\n\n");
    }
    md.push_str(&machine_section(&comparisons));
    md.push_str("## Summary\n\n");
    md.push_str(
        "Targets are reported, never asserted. The throughput target is judged on workloads \
         without a target rate (at a fixed rate throughput is the offered load); the latency \
         target on fixed-rate workloads, where both systems get the same load (at the maximum \
         rate latency mostly shows how much is queued).\n\n",
    );
    md.push_str(&headline_table(&comparisons));
    for scale in SCALES {
        md.push_str(&scale_section(&comparisons, &scale, out_dir)?);
    }
    for c in &comparisons {
        md.push_str(&workload_section(c, out_dir)?);
    }
    let path = out_dir.join("report.md");
    std::fs::write(&path, md).map_err(|source| LoadgenError::Io {
        path: path.display().to_string(),
        source,
    })?;
    Ok(path)
}

/// Workloads that vary one thing (`scale-partitions-*`, `scale-records-*`): a table and two
/// charts over it.
pub struct Scale {
    /// Workload name prefix.
    pub prefix: &'static str,
    /// What varies, for the axis.
    pub label: &'static str,
    /// The varied value of a run.
    pub x: fn(&RunResult) -> f64,
}

/// The scales the report draws.
pub const SCALES: [Scale; 2] = [
    Scale {
        prefix: "scale-partitions-",
        label: "partitions",
        x: |r| f64::from(r.workload.partitions_per_topic),
    },
    Scale {
        prefix: "scale-records-",
        label: "record size (bytes)",
        x: |r| r.workload.record_size_bytes as f64,
    },
];

/// One point of a scale: the varied value and each system's run.
type ScalePoint<'c> = (f64, Option<&'c RunResult>, Option<&'c RunResult>);

fn scale_points<'c>(comparisons: &'c [Comparison], scale: &Scale) -> Vec<ScalePoint<'c>> {
    let mut points: Vec<ScalePoint<'c>> = comparisons
        .iter()
        .filter(|c| c.workload.starts_with(scale.prefix))
        .filter_map(|c| {
            let any = c.subject.as_ref().or(c.baseline.as_ref())?;
            Some(((scale.x)(any), c.subject.as_ref(), c.baseline.as_ref()))
        })
        .collect();
    points.sort_by(|a, b| a.0.total_cmp(&b.0));
    points
}

/// Broker RSS per partition in KiB.
fn rss_per_partition_kib(r: &RunResult) -> Option<f64> {
    let partitions = f64::from(r.workload.partitions_per_topic) * f64::from(r.workload.topics);
    r.summary
        .broker_rss_bytes_max
        .map(|b| b as f64 / 1024.0 / partitions.max(1.0))
}

/// The table and charts of one scale; empty when no workload of it ran.
pub fn scale_section(
    comparisons: &[Comparison],
    scale: &Scale,
    out_dir: &Path,
) -> Result<String, LoadgenError> {
    let points = scale_points(comparisons, scale);
    if points.is_empty() {
        return Ok(String::new());
    }
    let mut md = format!("\n## Over {}\n\n", scale.label);
    let _ = writeln!(
        md,
        "| {} | Borges MB/s | Kafka MB/s | Borges p99 ms | Kafka p99 ms \
         | Borges CPU-s/GiB | Kafka CPU-s/GiB | Borges RSS KiB/partition \
         | Kafka RSS KiB/partition |",
        scale.label
    );
    let _ = writeln!(md, "|---:|---:|---:|---:|---:|---:|---:|---:|---:|");
    for (x, s, b) in &points {
        let get = |f: fn(&RunResult) -> Option<f64>| (cell(s.and_then(f)), cell(b.and_then(f)));
        let tp = get(|r| Some(r.summary.throughput_mb_s));
        let p99 = get(|r| Some(r.summary.publish.p99_ms));
        let cpu = get(|r| r.summary.broker_cpu_s_per_gib);
        let rss = get(rss_per_partition_kib);
        let _ = writeln!(
            md,
            "| {x} | {} | {} | {} | {} | {} | {} | {} | {} |",
            tp.0, tp.1, p99.0, p99.1, cpu.0, cpu.1, rss.0, rss.1
        );
    }
    let stem = scale.prefix.trim_end_matches('-');
    let tp_chart = format!("{stem}-throughput.svg");
    let p99_chart = format!("{stem}-p99.svg");
    scale_chart(&points, scale, false, &out_dir.join(&tp_chart))?;
    scale_chart(&points, scale, true, &out_dir.join(&p99_chart))?;
    let _ = writeln!(
        md,
        "\n![throughput over {0}]({tp_chart})\n\n![publish p99 over {0}]({p99_chart})",
        scale.label
    );
    Ok(md)
}

/// Throughput or publish p99 over the scale's values, log-log, one line per system.
fn scale_chart(
    points: &[ScalePoint<'_>],
    scale: &Scale,
    p99: bool,
    path: &Path,
) -> Result<(), LoadgenError> {
    let value = |r: &RunResult| {
        if p99 {
            r.summary.publish.p99_ms.max(0.001)
        } else {
            r.summary.throughput_mb_s
        }
    };
    let series = |subject: bool| -> Vec<(f64, f64)> {
        points
            .iter()
            .filter_map(|(x, s, b)| if subject { *s } else { *b }.map(|r| (*x, value(r))))
            .collect()
    };
    let all: Vec<f64> = series(true)
        .into_iter()
        .chain(series(false))
        .map(|p| p.1)
        .collect();
    let x_min = points.first().map_or(1.0, |p| p.0).max(1.0) / 1.5;
    let x_max = points.last().map_or(10.0, |p| p.0).max(2.0) * 1.5;
    let (what, unit) = if p99 {
        ("publish p99", "milliseconds (log scale)")
    } else {
        ("throughput", "MB/s (2^20 bytes, log scale)")
    };
    let root = canvas(path)?;
    let caption = format!("{what} over {}", scale.label);
    let mut chart = chart_frame(&root, &caption)
        .build_cartesian_2d(
            (x_min..x_max).log_scale(),
            log_range(all.iter().copied()).log_scale(),
        )
        .map_err(draw_err)?;
    chart
        .configure_mesh()
        .x_desc(format!("{} (log scale)", scale.label))
        .y_desc(unit)
        .draw()
        .map_err(draw_err)?;
    for (subject, driver) in [(true, SUBJECT), (false, BASELINE)] {
        let style = series_color(driver).stroke_width(3);
        let pts = series(subject);
        if pts.is_empty() {
            continue;
        }
        draw_line(&mut chart, pts.clone(), style, driver.to_string())?;
        chart
            .draw_series(pts.into_iter().map(|p| Circle::new(p, 4, style.filled())))
            .map_err(draw_err)?;
    }
    finish_chart(chart, &root, SeriesLabelPosition::UpperRight)
}

fn machine_section(comparisons: &[Comparison]) -> String {
    let Some(r) = comparisons
        .iter()
        .find_map(|c| c.subject.as_ref().or(c.baseline.as_ref()))
    else {
        return String::new();
    };
    let m = &r.machine;
    format!(
        "## Machine\n\n- {} ({}), {} CPUs online: {}\n- memory: {} GiB\n- load generator on CPUs {}\n\n",
        m.hostname,
        m.kernel,
        m.cpus_online,
        m.cpu_model,
        m.memory_bytes >> 30,
        cpu_list(&m.loadgen_cpus)
    )
}

fn workload_section(c: &Comparison, out_dir: &Path) -> Result<String, LoadgenError> {
    let mut md = format!("\n## {}\n\n", c.workload);
    if let Some(r) = c.subject.as_ref().or(c.baseline.as_ref()) {
        if !r.workload.description.is_empty() {
            let _ = writeln!(md, "{}\n", r.workload.description);
        }
        let _ = writeln!(md, "{}\n", workload_line(r));
    }
    md.push_str(&markdown_table(c));
    for r in c.subject.iter().chain(&c.baseline) {
        let _ = writeln!(md, "\n{}: `{}`", r.driver, r.command);
        if !r.driver_info.is_empty() {
            let _ = writeln!(md, "({})", r.driver_info.join(", "));
        }
        if let Some(e) = &r.summary.first_error {
            let _ = writeln!(md, "\n{} first error: `{e}`", r.driver);
        }
    }
    let latency = format!("{}-latency.svg", c.workload);
    let throughput = format!("{}-throughput.svg", c.workload);
    let over_time = format!("{}-latency-over-time.svg", c.workload);
    latency_chart(c, &out_dir.join(&latency))?;
    throughput_chart(c, &out_dir.join(&throughput))?;
    latency_over_time_chart(c, &out_dir.join(&over_time))?;
    let _ = writeln!(
        md,
        "\n![publish latency]({latency})\n\n![throughput]({throughput})\n\n\
         ![publish latency per second]({over_time})"
    );
    Ok(md)
}

fn draw_err(e: impl std::fmt::Display) -> LoadgenError {
    LoadgenError::Report(format!("chart: {e}"))
}

fn series_color(driver: &str) -> RGBColor {
    if driver == SUBJECT {
        RGBColor(0x1f, 0x77, 0xb4)
    } else {
        RGBColor(0xd6, 0x27, 0x28)
    }
}

type Canvas<'p> = DrawingArea<SVGBackend<'p>, plotters::coord::Shift>;

/// A white SVG canvas written to `path` by [`finish_chart`].
fn canvas(path: &Path) -> Result<Canvas<'_>, LoadgenError> {
    let root = SVGBackend::new(path, CHART_SIZE).into_drawing_area();
    root.fill(&WHITE).map_err(draw_err)?;
    Ok(root)
}

/// The frame every report chart shares: caption, margin and label areas.
fn chart_frame<'a, 'p>(
    root: &'a Canvas<'p>,
    caption: &str,
) -> ChartBuilder<'a, 'a, SVGBackend<'p>> {
    let mut builder = ChartBuilder::on(root);
    builder
        .caption(caption, ("sans-serif", 22))
        .margin(15)
        .x_label_area_size(40)
        .y_label_area_size(70);
    builder
}

/// Draws `points` as a line with a legend entry `name`.
fn draw_line<CT>(
    chart: &mut ChartContext<'_, SVGBackend<'_>, CT>,
    points: Vec<(f64, f64)>,
    style: ShapeStyle,
    name: String,
) -> Result<(), LoadgenError>
where
    CT: CoordTranslate<From = (f64, f64)>,
{
    chart
        .draw_series(LineSeries::new(points, style))
        .map_err(draw_err)?
        .label(name)
        .legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 20, y)], style));
    Ok(())
}

/// Draws the legend at `position` and writes the file.
fn finish_chart<'p, CT: CoordTranslate>(
    mut chart: ChartContext<'p, SVGBackend<'p>, CT>,
    root: &Canvas<'_>,
    position: SeriesLabelPosition,
) -> Result<(), LoadgenError> {
    chart
        .configure_series_labels()
        .position(position)
        .background_style(WHITE.mix(0.85))
        .border_style(BLACK)
        .draw()
        .map_err(draw_err)?;
    root.present().map_err(draw_err)
}

/// A log-scale range around `values` (milliseconds), at least 0.5 ms .. 2 ms.
fn log_range(values: impl IntoIterator<Item = f64> + Clone) -> std::ops::Range<f64> {
    let min = values
        .clone()
        .into_iter()
        .fold(f64::INFINITY, f64::min)
        .min(1.0)
        * 0.5;
    let max = values.into_iter().fold(0.0, f64::max).max(1.0) * 2.0;
    min..max
}

/// Publish (solid) and end-to-end (dashed markers) latency percentiles, log scale.
pub fn latency_chart(c: &Comparison, path: &Path) -> Result<(), LoadgenError> {
    let runs: Vec<&RunResult> = c.subject.iter().chain(&c.baseline).collect();
    let labels = ["p50", "p99", "p99.9", "p99.99", "max"];
    let series = |r: &RunResult, e2e: bool| -> Vec<(f64, f64)> {
        let s = if e2e {
            &r.summary.e2e
        } else {
            &r.summary.publish
        };
        if s.count == 0 {
            return Vec::new();
        }
        s.points()
            .iter()
            .enumerate()
            .map(|(i, (_, v))| (i as f64, v.max(0.001)))
            .collect()
    };
    let values: Vec<f64> = runs
        .iter()
        .flat_map(|r| series(r, false).into_iter().chain(series(r, true)))
        .map(|(_, v)| v)
        .collect();
    let root = canvas(path)?;
    let mut chart = chart_frame(&root, &format!("{}: latency percentiles", c.workload))
        .build_cartesian_2d(-0.3f64..4.3f64, log_range(values).log_scale())
        .map_err(draw_err)?;
    chart
        .configure_mesh()
        .x_labels(5)
        .x_label_formatter(&|x| {
            let i = x.round();
            if (x - i).abs() < 0.01 && (0.0..5.0).contains(&i) {
                labels[i as usize].to_string()
            } else {
                String::new()
            }
        })
        .y_desc("milliseconds (log scale)")
        .draw()
        .map_err(draw_err)?;
    for r in &runs {
        let color = series_color(&r.driver);
        for (e2e, style) in [
            (false, color.stroke_width(3)),
            (true, color.mix(0.5).stroke_width(2)),
        ] {
            let points = series(r, e2e);
            if points.is_empty() {
                continue;
            }
            let name = format!(
                "{} {}",
                r.driver,
                if e2e { "end-to-end" } else { "publish" }
            );
            draw_line(&mut chart, points.clone(), style, name)?;
            chart
                .draw_series(
                    points
                        .into_iter()
                        .map(|p| Circle::new(p, 4, style.filled())),
                )
                .map_err(draw_err)?;
        }
    }
    finish_chart(chart, &root, SeriesLabelPosition::UpperLeft)
}

/// Produce (solid) and consume (light) MB/s per one-second window.
pub fn throughput_chart(c: &Comparison, path: &Path) -> Result<(), LoadgenError> {
    let runs: Vec<&RunResult> = c.subject.iter().chain(&c.baseline).collect();
    let series = |r: &RunResult, consumed: bool| -> Vec<(f64, f64)> {
        let mut prev_t = 0.0;
        r.windows
            .iter()
            .map(|w| {
                let secs = (w.t_s - prev_t).max(1e-3);
                prev_t = w.t_s;
                let bytes = if consumed {
                    w.consumed_bytes
                } else {
                    w.produced_bytes
                };
                (w.t_s, bytes as f64 / MB_BYTES / secs)
            })
            .collect()
    };
    let t_max = runs
        .iter()
        .flat_map(|r| r.windows.last().map(|w| w.t_s))
        .fold(1.0, f64::max);
    let y_max = runs
        .iter()
        .flat_map(|r| series(r, false).into_iter().chain(series(r, true)))
        .map(|(_, v)| v)
        .fold(1.0, f64::max)
        * 1.15;
    let root = canvas(path)?;
    let mut chart = chart_frame(&root, &format!("{}: throughput per second", c.workload))
        .build_cartesian_2d(0f64..t_max, 0f64..y_max)
        .map_err(draw_err)?;
    chart
        .configure_mesh()
        .x_desc("seconds since start (warm-up included)")
        .y_desc("MB/s (2^20 bytes)")
        .draw()
        .map_err(draw_err)?;
    for r in &runs {
        let color = series_color(&r.driver);
        for (consumed, style) in [
            (false, color.stroke_width(2)),
            (true, color.mix(0.4).stroke_width(2)),
        ] {
            let points = series(r, consumed);
            let name = format!(
                "{} {}",
                r.driver,
                if consumed { "consume" } else { "publish" }
            );
            draw_line(&mut chart, points, style, name)?;
        }
    }
    finish_chart(chart, &root, SeriesLabelPosition::LowerRight)
}

/// Publish p99 (solid) and max (light) per one-second window, log scale.
pub fn latency_over_time_chart(c: &Comparison, path: &Path) -> Result<(), LoadgenError> {
    let runs: Vec<&RunResult> = c.subject.iter().chain(&c.baseline).collect();
    let series = |r: &RunResult, max: bool| -> Vec<(f64, f64)> {
        r.windows
            .iter()
            .filter_map(|w| {
                let v = if max {
                    w.publish_max_ms
                } else {
                    w.publish_p99_ms
                };
                v.map(|v| (w.t_s, v.max(0.001)))
            })
            .collect()
    };
    let values: Vec<f64> = runs
        .iter()
        .flat_map(|r| series(r, false).into_iter().chain(series(r, true)))
        .map(|(_, v)| v)
        .collect();
    let t_max = runs
        .iter()
        .flat_map(|r| r.windows.last().map(|w| w.t_s))
        .fold(1.0, f64::max);
    let root = canvas(path)?;
    let mut chart = chart_frame(
        &root,
        &format!("{}: publish latency per second", c.workload),
    )
    .build_cartesian_2d(0f64..t_max, log_range(values).log_scale())
    .map_err(draw_err)?;
    chart
        .configure_mesh()
        .x_desc("seconds since start (warm-up included)")
        .y_desc("milliseconds (log scale)")
        .draw()
        .map_err(draw_err)?;
    for r in &runs {
        let color = series_color(&r.driver);
        for (max, style) in [
            (false, color.stroke_width(2)),
            (true, color.mix(0.4).stroke_width(1)),
        ] {
            let points = series(r, max);
            if points.is_empty() {
                continue;
            }
            let name = format!("{} {}", r.driver, if max { "max" } else { "p99" });
            draw_line(&mut chart, points, style, name)?;
        }
    }
    finish_chart(chart, &root, SeriesLabelPosition::UpperRight)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::result::tests::sample_result;

    fn pair() -> Comparison {
        let mut g = group(vec![
            sample_result("kafka", 100.0, 10.0),
            sample_result("borges", 250.0, 1.5),
        ]);
        assert_eq!(g.len(), 1);
        g.remove(0)
    }

    #[test]
    fn ratios_are_subject_over_baseline() {
        let c = pair();
        let r = rows(&c);
        let tp = r
            .iter()
            .find(|r| r.metric == "publish throughput (MB/s)")
            .unwrap();
        assert_eq!(tp.ratio(), Some(2.5));
        assert_eq!(tp.better, Better::Higher);
        let lat = r
            .iter()
            .find(|r| r.metric == "publish latency p99.9 (ms)")
            .unwrap();
        assert_eq!(lat.ratio(), Some(0.15));
        let avg = r
            .iter()
            .find(|r| r.metric == "publish latency avg (ms)")
            .unwrap();
        assert_eq!(
            avg.subject,
            Some(c.subject.as_ref().unwrap().summary.publish.mean_ms)
        );
        // No consumer ran: no end-to-end rows.
        assert!(!r.iter().any(|r| r.metric.starts_with("end-to-end")));
    }

    #[test]
    fn tables_show_both_columns_and_targets() {
        let c = pair();
        let t = markdown_table(&c);
        assert!(
            t.contains("| publish throughput (MB/s) | 250 | 100 | 2.50x | higher |"),
            "{t}"
        );
        let h = headline_table(&[c]);
        assert!(h.contains("2.50x (met)"), "{h}");
        assert!(
            h.contains("| 0.15x |"),
            "latency not judged at max rate: {h}"
        );
        let mut fixed = pair();
        for r in [
            fixed.subject.as_mut().unwrap(),
            fixed.baseline.as_mut().unwrap(),
        ] {
            r.workload.producer.rate_records_s = 1000;
        }
        let h = headline_table(&[fixed]);
        assert!(h.contains("0.15x (met)"), "{h}");
        assert!(
            h.contains("| 2.50x |"),
            "throughput not judged at a fixed rate: {h}"
        );
    }

    #[test]
    fn missing_driver_shows_dashes() {
        let c = group(vec![sample_result("borges", 1.0, 1.0)]).remove(0);
        let t = markdown_table(&c);
        assert!(
            t.contains("| publish throughput (MB/s) | 1.00 | - | - | higher |"),
            "{t}"
        );
    }

    fn scaled(driver: &str, partitions: u32, mb_s: f64) -> RunResult {
        let mut r = sample_result(driver, mb_s, 1.0);
        r.workload.name = format!("scale-partitions-{partitions}-1kb");
        r.workload.partitions_per_topic = partitions;
        r.summary.broker_rss_bytes_max = Some(u64::from(partitions) * 2048);
        r
    }

    #[test]
    fn scale_section_orders_by_the_varied_value_and_draws_charts() {
        let dir = tempfile::tempdir().unwrap();
        let comparisons = group(vec![
            scaled("borges", 1000, 700.0),
            scaled("kafka", 1000, 15.0),
            scaled("borges", 16, 800.0),
            scaled("kafka", 16, 290.0),
            sample_result("borges", 1.0, 1.0),
        ]);
        let md = scale_section(&comparisons, &SCALES[0], dir.path()).unwrap();
        let first = md.find("| 16 | 800 | 290 |").expect(&md);
        let second = md.find("| 1000 | 700 | 15.0 |").expect(&md);
        assert!(first < second, "{md}");
        // 2 KiB of RSS per partition on both sides.
        assert!(md.contains("| 2.00 | 2.00 |"), "{md}");
        assert!(!md.contains("| w1"), "{md}");
        for chart in [
            "scale-partitions-throughput.svg",
            "scale-partitions-p99.svg",
        ] {
            let svg = std::fs::read_to_string(dir.path().join(chart)).unwrap();
            assert!(svg.contains("borges") && svg.contains("kafka"), "{chart}");
        }
        assert!(scale_section(&comparisons, &SCALES[1], dir.path())
            .unwrap()
            .is_empty());
    }

    #[test]
    fn writes_report_and_svg_charts() {
        let dir = tempfile::tempdir().unwrap();
        let path = write_report(
            vec![
                sample_result("kafka", 100.0, 10.0),
                sample_result("borges", 250.0, 1.5),
            ],
            dir.path(),
            "notes: exact commands here",
        )
        .unwrap();
        let md = std::fs::read_to_string(path).unwrap();
        assert!(md.contains("notes: exact commands here"));
        assert!(md.contains("## w1"));
        assert!(md.contains("w1-latency.svg"));
        for chart in ["w1-latency.svg", "w1-throughput.svg"] {
            let svg = std::fs::read_to_string(dir.path().join(chart)).unwrap();
            assert!(svg.starts_with("<svg"), "{chart}");
            assert!(
                svg.contains("borges publish") && svg.contains("kafka publish"),
                "{chart}"
            );
        }
        let svg = std::fs::read_to_string(dir.path().join("w1-latency-over-time.svg")).unwrap();
        assert!(svg.contains("borges p99") && svg.contains("kafka max"));
        assert!(write_report(vec![], dir.path(), "").is_err());
    }
}
