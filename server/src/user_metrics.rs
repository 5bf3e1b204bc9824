//! Beam's user metrics as OpenTelemetry metrics. Each bundle reports its
//! own counts (`MonitoringInfo`s); they are recorded as they arrive, once
//! as attempted and again, once the task committed the bundle's work, as
//! committed (the attribute `beam.metric.state`). A metric is named
//! `beam.user.<namespace>.<name>`, with the namespace, name and transform
//! as attributes too.
//!
//! - counters (sum_int64) → an up-down counter (Beam counters may go down);
//! - distributions → `<name>.count` (counter) and `<name>.sum` (up-down
//!   counter), and `<name>.min` / `<name>.max` gauges of the job so far;
//! - gauges (latest_int64) → a gauge;
//! - string sets are not numbers and are not exported.
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::LazyLock;

use beam_kafka_proto::pipeline::MonitoringInfo;
use beam_kafka_runtime::codec::coders::decode_varint;
use dashmap::DashMap;
use opentelemetry::metrics::{Counter, Gauge, UpDownCounter};
use opentelemetry::KeyValue;

use crate::metrics::Aggregate;

static EXPORTING: AtomicBool = AtomicBool::new(false);

/// User metrics are decoded and recorded only while exporting.
pub fn enable() {
    EXPORTING.store(true, Ordering::Relaxed);
}

enum Instrument {
    Sum(UpDownCounter<i64>),
    Count(Counter<u64>),
    Gauge(Gauge<i64>),
}

static INSTRUMENTS: LazyLock<DashMap<String, Instrument>> = LazyLock::new(DashMap::new);

fn record(name: String, value: i64, attributes: &[KeyValue], make: fn(&str) -> Instrument) {
    if !INSTRUMENTS.contains_key(&name) {
        let instrument = make(&name);
        INSTRUMENTS.entry(name.clone()).or_insert(instrument);
    }
    let Some(entry) = INSTRUMENTS.get(&name) else { return };
    match entry.value() {
        Instrument::Sum(c) => c.add(value, attributes),
        Instrument::Count(c) => c.add(value.max(0) as u64, attributes),
        Instrument::Gauge(g) => g.record(value, attributes),
    }
}

fn meter() -> opentelemetry::metrics::Meter {
    opentelemetry::global::meter("beam-kafka.user")
}

fn sum(name: &str) -> Instrument {
    Instrument::Sum(meter().i64_up_down_counter(name.to_string()).with_description("A Beam user metric").build())
}

fn count(name: &str) -> Instrument {
    Instrument::Count(meter().u64_counter(name.to_string()).with_description("A Beam user distribution's count").build())
}

fn gauge(name: &str) -> Instrument {
    Instrument::Gauge(meter().i64_gauge(name.to_string()).with_description("A Beam user metric").build())
}

/// `beam.user.<namespace>.<name>`, in the characters OTel allows in a
/// name (others become `_`), at most 255 of them.
pub fn metric_name(namespace: &str, name: &str) -> String {
    let raw = format!("beam.user.{namespace}.{name}");
    raw.chars().map(|c| if c.is_ascii_alphanumeric() || "_.-/".contains(c) { c } else { '_' }).take(255).collect()
}

fn ints(buf: &[u8], count: usize) -> Option<Vec<i64>> {
    let mut at = 0;
    (0..count)
        .map(|_| {
            let (v, n) = decode_varint(buf.get(at..)?)?;
            at += n;
            Some(v as i64)
        })
        .collect()
}

/// Records the user metrics among `infos` (one bundle's), as `state`
/// (attempted or committed); `so_far` is the job's aggregate including them.
pub fn export(infos: &[MonitoringInfo], state: &str, job: &[KeyValue], so_far: &Aggregate) {
    if !EXPORTING.load(Ordering::Relaxed) {
        return;
    }
    for info in infos {
        let Some(kind) = info.urn.strip_prefix("beam:metric:user:") else { continue };
        let label = |k: &str| info.labels.get(k).map(String::as_str).unwrap_or_default();
        let (namespace, name) = (label("NAMESPACE"), label("NAME"));
        let base = metric_name(namespace, name);
        let mut attributes = job.to_vec();
        attributes.extend([
            KeyValue::new("beam.metric.namespace", namespace.to_string()),
            KeyValue::new("beam.metric.name", name.to_string()),
            KeyValue::new("beam.transform", label("PTRANSFORM").to_string()),
            KeyValue::new("beam.metric.state", state.to_string()),
        ]);
        if kind.starts_with("sum_int64") {
            if let Some(v) = ints(&info.payload, 1) {
                record(base, v[0], &attributes, sum);
            }
        } else if kind.starts_with("distribution_int64") {
            if let Some(v) = ints(&info.payload, 4) {
                record(format!("{base}.count"), v[0], &attributes, count);
                record(format!("{base}.sum"), v[1], &attributes, sum);
            }
            if let Some(all) = so_far.get(info).and_then(|i| ints(&i.payload, 4)) {
                record(format!("{base}.min"), all[2], &attributes, gauge);
                record(format!("{base}.max"), all[3], &attributes, gauge);
            }
        } else if kind.starts_with("latest_int64") {
            // A timestamp, then the value.
            if let Some(v) = ints(&info.payload, 2) {
                record(base, v[1], &attributes, gauge);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_keep_what_otel_allows() {
        assert_eq!(metric_name("__main__.CountWords", "empty lines"), "beam.user.__main__.CountWords.empty_lines");
        assert_eq!(metric_name("ns", "a/b-c"), "beam.user.ns.a/b-c");
        assert_eq!(metric_name("x", &"n".repeat(400)).len(), 255);
    }
}
