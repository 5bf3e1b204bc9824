//! OpenTelemetry instruments of the dataflow. Without an installed meter
//! and tracer provider they cost next to nothing; the binary installs them
//! when asked to export (`server::otel`), then registers the observers.
//!
//! Names follow the OTel semantic conventions where one exists (messaging),
//! else `beam_kafka.*`; durations are in seconds, as the conventions ask.
use std::sync::OnceLock;
use std::time::{Duration, SystemTime};

use opentelemetry::metrics::{Counter, Histogram};
use opentelemetry::trace::{Span as _, Tracer as _};
use opentelemetry::KeyValue;

pub mod observe;

/// Seconds, from a millisecond to a minute.
const DURATION_BOUNDS: [f64; 15] = [0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0];
/// Elements in a bundle.
const SIZE_BOUNDS: [f64; 12] = [1.0, 2.0, 5.0, 10.0, 50.0, 100.0, 500.0, 1000.0, 5000.0, 10_000.0, 50_000.0, 100_000.0];

pub struct Instruments {
    pub commit_duration: Histogram<f64>,
    pub bundle_duration: Histogram<f64>,
    pub bundle_size: Histogram<u64>,
    pub restore_duration: Histogram<f64>,
    pub late_dropped: Counter<u64>,
}

pub fn instruments() -> &'static Instruments {
    static I: OnceLock<Instruments> = OnceLock::new();
    I.get_or_init(|| {
        let meter = opentelemetry::global::meter("beam-kafka");
        let seconds = |name: &'static str, what: &'static str| {
            meter.f64_histogram(name).with_unit("s").with_description(what).with_boundaries(DURATION_BOUNDS.to_vec()).build()
        };
        Instruments {
            commit_duration: seconds(
                "beam_kafka.task.commit.duration",
                "A task's commit cycle: barrier, flush of the stage, changelog and watermark writes, commit",
            ),
            bundle_duration: seconds("beam_kafka.stage.bundle.duration", "A bundle on an SDK harness, from start to outputs written"),
            bundle_size: meter
                .u64_histogram("beam_kafka.stage.bundle.size")
                .with_unit("{element}")
                .with_description("Elements a bundle processed")
                .with_boundaries(SIZE_BOUNDS.to_vec())
                .build(),
            restore_duration: seconds("beam_kafka.task.restore.duration", "Reading a task's state back from its changelog"),
            late_dropped: meter
                .u64_counter("beam_kafka.group_by_key.late_dropped")
                .with_unit("{element}")
                .with_description("Elements dropped by a GroupByKey because their window had expired")
                .build(),
        }
    })
}

/// Bundles traced: one in this many, and every slow one.
const BUNDLE_SAMPLE: u64 = 64;
const SLOW_BUNDLE: Duration = Duration::from_secs(1);

/// Whether the bundle numbered `seq`, which took `took`, gets a span.
pub fn bundle_sampled(seq: u64, took: Duration) -> bool {
    seq.is_multiple_of(BUNDLE_SAMPLE) || took >= SLOW_BUNDLE
}

/// Records a span that already happened, from `start` to `end`.
pub fn past_span(name: &'static str, start: SystemTime, end: SystemTime, attributes: Vec<KeyValue>) {
    let tracer = opentelemetry::global::tracer("beam-kafka");
    let mut span = tracer.span_builder(name).with_start_time(start).with_attributes(attributes).start(&tracer);
    span.end_with_timestamp(end);
}

/// A span that already happened and failed.
pub fn past_failed_span(name: &'static str, start: SystemTime, end: SystemTime, attributes: Vec<KeyValue>, error: &str) {
    let tracer = opentelemetry::global::tracer("beam-kafka");
    let mut span = tracer.span_builder(name).with_start_time(start).with_attributes(attributes).start(&tracer);
    span.set_status(opentelemetry::trace::Status::error(error.to_string()));
    span.end_with_timestamp(end);
}

/// `ms` since the epoch as a time.
pub fn at_millis(ms: i64) -> SystemTime {
    SystemTime::UNIX_EPOCH + Duration::from_millis(ms.max(0) as u64)
}
