//! What a finished bundle tells the exported metrics: its duration and
//! size, and (sampled, plus every slow one) a span.
use std::time::{Duration, SystemTime};

use opentelemetry::KeyValue;

use super::{Running, StageActor};
use crate::telemetry::{bundle_sampled, instruments, past_span};

impl StageActor {
    pub(super) fn bundle_finished(&self, running: &Running, took: Duration) {
        let attributes = &self.spec.meters.attributes;
        instruments().bundle_duration.record(took.as_secs_f64(), attributes);
        instruments().bundle_size.record(running.elements, attributes);
        if bundle_sampled(running.seq, took) {
            let end = SystemTime::now();
            let mut a = attributes.clone();
            a.extend([
                KeyValue::new("beam_kafka.stage", self.spec.display_name.clone()),
                KeyValue::new("beam_kafka.bundle.elements", running.elements as i64),
                KeyValue::new("beam_kafka.bundle.fires_timers", running.fires_timers),
            ]);
            past_span("beam_kafka.bundle", end - took, end, a);
        }
    }
}
