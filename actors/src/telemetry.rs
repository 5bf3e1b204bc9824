//! OpenTelemetry instruments of the dataflow. Without an installed meter
//! provider they cost nothing; the binary installs one when asked to export.
use std::sync::OnceLock;

use opentelemetry::metrics::{Counter, Histogram};

pub struct Instruments {
    pub elements_in: Counter<u64>,
    pub bundles: Counter<u64>,
    pub bundle_millis: Histogram<f64>,
    pub commits: Counter<u64>,
    pub late_dropped: Counter<u64>,
}

pub fn instruments() -> &'static Instruments {
    static I: OnceLock<Instruments> = OnceLock::new();
    I.get_or_init(|| {
        let meter = opentelemetry::global::meter("beam-kafka");
        Instruments {
            elements_in: meter.u64_counter("beam_kafka.task.elements_in").with_description("Elements a task fed to its stage").build(),
            bundles: meter.u64_counter("beam_kafka.stage.bundles").with_description("Bundles completed on SDK harnesses").build(),
            bundle_millis: meter
                .f64_histogram("beam_kafka.stage.bundle_duration")
                .with_unit("ms")
                .with_description("Bundle duration")
                .build(),
            commits: meter.u64_counter("beam_kafka.task.commits").with_description("Offset commits of tasks").build(),
            late_dropped: meter
                .u64_counter("beam_kafka.group_by_key.late_dropped")
                .with_description("Elements dropped by a GroupByKey because their window had expired")
                .build(),
        }
    })
}
