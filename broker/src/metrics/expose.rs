//! The exposition: metric families built from plain values, bounded per family, and encoded
//! by `prometheus-client` in the Prometheus text format (0.0.4) or OpenMetrics.

use prometheus_client::collector::Collector;
use prometheus_client::encoding::{DescriptorEncoder, EncodeMetric, MetricEncoder};
use prometheus_client::metrics::MetricType;
use prometheus_client::registry::Registry;

use super::histogram::HistogramSnapshot;

/// Label pairs of one series.
pub type Labels = Vec<(&'static str, String)>;

/// The value of one series.
#[derive(Debug, Clone)]
pub enum Value {
    /// A counter or integer gauge.
    Int(i64),
    /// A gauge with a fraction.
    Float(f64),
    /// A histogram.
    Histogram(HistogramSnapshot),
}

/// The type of a family.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// Only goes up (the name ends in `_total`).
    Counter,
    /// Goes up and down.
    Gauge,
    /// Buckets, sum and count.
    Histogram,
}

/// One metric family: name, help, type and its series.
#[derive(Debug, Clone)]
pub struct Family {
    /// Full name as scraped (`borges_requests_total`, `borges_request_latency_seconds`).
    pub name: &'static str,
    /// `# HELP` text.
    pub help: &'static str,
    /// Type.
    pub kind: Kind,
    /// Series, labels sorted by value order at render time.
    pub series: Vec<(Labels, Value)>,
}

/// The families of one scrape, each at most `series_per_family_max` series (the rest are
/// counted in `borges_metrics_series_omitted`).
#[derive(Debug, Default)]
pub struct Exposition {
    families: Vec<Family>,
    series_per_family_max: usize,
}

impl Exposition {
    /// An empty exposition whose families keep at most `series_per_family_max` series.
    pub fn new(series_per_family_max: usize) -> Exposition {
        Exposition {
            families: Vec::new(),
            series_per_family_max,
        }
    }

    /// Starts a family; series are added with [`Exposition::series`] until the next one.
    pub fn family(&mut self, name: &'static str, help: &'static str, kind: Kind) -> &mut Self {
        assert_eq!(
            kind == Kind::Counter,
            name.ends_with("_total"),
            "{name}: counters, and only counters, end in _total"
        );
        assert!(
            self.families.iter().all(|f| f.name != name),
            "{name} declared twice"
        );
        self.families.push(Family {
            name,
            help,
            kind,
            series: Vec::new(),
        });
        self
    }

    /// Adds a series to the family started last.
    pub fn series(&mut self, labels: Labels, value: Value) -> &mut Self {
        let family = self.families.last_mut().expect("a family is started first");
        family.series.push((labels, value));
        self
    }

    /// The families, each sorted by labels and cut to the limit, then the omitted counts.
    pub fn finish(mut self) -> Vec<Family> {
        let mut omitted = Vec::new();
        for f in &mut self.families {
            f.series.sort_by(|a, b| a.0.cmp(&b.0));
            if f.series.len() > self.series_per_family_max {
                omitted.push((f.name, f.series.len() - self.series_per_family_max));
                f.series.truncate(self.series_per_family_max);
            }
        }
        self.family(
            "borges_metrics_series_omitted",
            "Series left out of a family at this scrape (metrics.series_per_family_max)",
            Kind::Gauge,
        );
        for (name, n) in omitted {
            self.series(vec![("family", name.to_string())], Value::Int(n as i64));
        }
        self.families
    }
}

/// Encodes `families`: OpenMetrics (ending in `# EOF`) or the Prometheus text format.
pub fn encode(families: Vec<Family>, openmetrics: bool) -> String {
    let mut registry = Registry::default();
    registry.register_collector(Box::new(Families(families)));
    let mut out = String::with_capacity(64 * 1024);
    let encoded = if openmetrics {
        prometheus_client::encoding::text::encode(&mut out, &registry)
    } else {
        prometheus_client::encoding::prometheus_text::encode(&mut out, &registry)
    };
    // Writing into a String cannot fail; label values are escaped by the encoder.
    assert!(encoded.is_ok(), "encoding metrics into a String");
    out
}

#[derive(Debug)]
struct Families(Vec<Family>);

impl Collector for Families {
    fn encode(&self, mut encoder: DescriptorEncoder) -> Result<(), std::fmt::Error> {
        for f in &self.0 {
            let (name, kind) = match f.kind {
                Kind::Counter => (f.name.trim_end_matches("_total"), MetricType::Counter),
                Kind::Gauge => (f.name, MetricType::Gauge),
                Kind::Histogram => (f.name, MetricType::Histogram),
            };
            let mut family = encoder.encode_descriptor(name, f.help, None, kind)?;
            match f.series.as_slice() {
                [(labels, value)] if labels.is_empty() => encode_value(family, f.kind, value)?,
                series => {
                    for (labels, value) in series {
                        assert!(
                            !labels.is_empty(),
                            "{}: an unlabelled series is alone",
                            f.name
                        );
                        encode_value(family.encode_family(labels)?, f.kind, value)?;
                    }
                }
            }
        }
        Ok(())
    }
}

fn encode_value(mut e: MetricEncoder, kind: Kind, value: &Value) -> Result<(), std::fmt::Error> {
    use prometheus_client::metrics::counter::ConstCounter;
    use prometheus_client::metrics::gauge::ConstGauge;
    match (kind, value) {
        (Kind::Counter, Value::Int(v)) => ConstCounter::new((*v).max(0) as u64).encode(e),
        (Kind::Counter, Value::Float(v)) => ConstCounter::new(v.max(0.0)).encode(e),
        (Kind::Gauge, Value::Int(v)) => ConstGauge::new(*v).encode(e),
        (Kind::Gauge, Value::Float(v)) => ConstGauge::new(*v).encode(e),
        (Kind::Histogram, Value::Histogram(h)) => e
            .encode_histogram::<prometheus_client::encoding::NoLabelSet>(
                h.sum,
                h.count(),
                &h.buckets(),
                None,
            ),
        (kind, value) => panic!("a {kind:?} family got {value:?}"),
    }
}
