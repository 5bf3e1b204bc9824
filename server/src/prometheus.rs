//! A Prometheus scrape endpoint of the runner's own (`--metrics-port`),
//! for shops without an OpenTelemetry Collector: the same metrics the
//! OTLP export sends, read from the meter provider at each scrape and
//! named as a collector's `prometheus` exporter names them, so the
//! dashboard in ops/grafana works with either.
use std::sync::{Arc, Weak};
use std::time::Duration;

use anyhow::Context as _;
use axum::http::header;
use axum::response::IntoResponse;
use axum::routing::get;
use axum::Router;
use beam_kafka_runtime::metrics::prometheus::{metric_name, render, Family, Kind, Sample, Value};
use opentelemetry::KeyValue;
use opentelemetry_sdk::error::OTelSdkResult;
use opentelemetry_sdk::metrics::data::{AggregatedMetrics, MetricData, ResourceMetrics};
use opentelemetry_sdk::metrics::reader::MetricReader;
use opentelemetry_sdk::metrics::{InstrumentKind, ManualReader, Pipeline, Temporality};

/// A manual reader the meter provider owns and the endpoint shares.
#[derive(Clone, Debug)]
pub struct SharedReader(Arc<ManualReader>);

impl SharedReader {
    pub fn new() -> SharedReader {
        SharedReader(Arc::new(ManualReader::builder().build()))
    }
}

impl MetricReader for SharedReader {
    fn register_pipeline(&self, pipeline: Weak<Pipeline>) {
        self.0.register_pipeline(pipeline)
    }
    fn collect(&self, rm: &mut ResourceMetrics) -> OTelSdkResult {
        self.0.collect(rm)
    }
    fn force_flush(&self) -> OTelSdkResult {
        self.0.force_flush()
    }
    fn shutdown_with_timeout(&self, timeout: Duration) -> OTelSdkResult {
        self.0.shutdown_with_timeout(timeout)
    }
    fn temporality(&self, kind: InstrumentKind) -> Temporality {
        self.0.temporality(kind)
    }
}

fn pairs<'a>(attributes: impl Iterator<Item = &'a KeyValue>) -> Vec<(String, String)> {
    attributes.map(|kv| (kv.key.to_string(), kv.value.to_string())).collect()
}

fn families_of<T: AsF64>(name: &str, unit: &str, help: &str, data: &MetricData<T>, out: &mut Vec<Family>) {
    let (kind, samples): (Kind, Vec<Sample>) = match data {
        MetricData::Gauge(g) => (
            Kind::Gauge,
            g.data_points().map(|p| Sample { labels: pairs(p.attributes()), value: Value::Number(p.value().as_f64()) }).collect(),
        ),
        MetricData::Sum(s) => (
            if s.is_monotonic() { Kind::Counter } else { Kind::Gauge },
            s.data_points().map(|p| Sample { labels: pairs(p.attributes()), value: Value::Number(p.value().as_f64()) }).collect(),
        ),
        MetricData::Histogram(h) => (
            Kind::Histogram,
            h.data_points()
                .map(|p| Sample {
                    labels: pairs(p.attributes()),
                    value: Value::Histogram {
                        bounds: p.bounds().collect(),
                        counts: p.bucket_counts().collect(),
                        sum: p.sum().as_f64(),
                        count: p.count(),
                    },
                })
                .collect(),
        ),
        // No instrument of the runner makes these.
        MetricData::ExponentialHistogram(_) => return,
    };
    out.push(Family { name: metric_name(name, unit, kind), help: help.to_string(), kind, samples });
}

/// A data point's value as Prometheus has it.
trait AsF64: Copy {
    fn as_f64(self) -> f64;
}

impl AsF64 for f64 {
    fn as_f64(self) -> f64 {
        self
    }
}

impl AsF64 for u64 {
    fn as_f64(self) -> f64 {
        self as f64
    }
}

impl AsF64 for i64 {
    fn as_f64(self) -> f64 {
        self as f64
    }
}

/// Everything the provider has now, in the exposition format, with the
/// resource as `target_info`.
fn scrape(reader: &SharedReader) -> String {
    let mut rm = ResourceMetrics::default();
    if let Err(e) = reader.collect(&mut rm) {
        return format!("# collection failed: {e}\n");
    }
    let mut families = vec![Family {
        name: "target_info".into(),
        help: "Target metadata".into(),
        kind: Kind::Gauge,
        samples: vec![Sample {
            labels: rm.resource().iter().map(|(k, v)| (k.to_string(), v.to_string())).collect(),
            value: Value::Number(1.0),
        }],
    }];
    for scope in rm.scope_metrics() {
        for m in scope.metrics() {
            match m.data() {
                AggregatedMetrics::F64(d) => families_of(m.name(), m.unit(), m.description(), d, &mut families),
                AggregatedMetrics::U64(d) => families_of(m.name(), m.unit(), m.description(), d, &mut families),
                AggregatedMetrics::I64(d) => families_of(m.name(), m.unit(), m.description(), d, &mut families),
            }
        }
    }
    render(&families)
}

/// Serves `/metrics` on `bind:port`; returns the address.
pub async fn serve(bind: &str, port: u16, reader: SharedReader) -> anyhow::Result<std::net::SocketAddr> {
    let listener =
        tokio::net::TcpListener::bind((bind, port)).await.with_context(|| format!("cannot listen on {bind}:{port} for /metrics"))?;
    let addr = listener.local_addr()?;
    let app = Router::new().route(
        "/metrics",
        get(move || {
            let reader = reader.clone();
            async move {
                // Collection runs the observers' callbacks: off the runtime's workers.
                let text = tokio::task::spawn_blocking(move || scrape(&reader)).await.unwrap_or_default();
                ([(header::CONTENT_TYPE, "text/plain; version=0.0.4; charset=utf-8")], text).into_response()
            }
        }),
    );
    tokio::spawn(async move {
        if let Err(e) = axum::serve(listener, app).await {
            tracing::warn!("the /metrics endpoint stopped: {e}");
        }
    });
    tracing::info!("Prometheus metrics on http://{addr}/metrics");
    Ok(addr)
}
