//! A client context that remembers the cluster refusing the runner's
//! credentials. librdkafka reports a failed SASL login or TLS handshake only
//! through its error callback; the request that needed the connection fails
//! as a mere transport error, which alone would be retried as an outage.
use std::sync::{Arc, Mutex};

use beam_kafka_runtime::kafka::failure;
use rdkafka::client::ClientContext;
use rdkafka::error::KafkaError;

#[derive(Clone, Default)]
pub struct AccessWatch {
    denied: Arc<Mutex<Option<String>>>,
}

impl AccessWatch {
    /// The last refusal of the runner's credentials or TLS settings, if any.
    pub fn denied(&self) -> Option<String> {
        self.denied.lock().unwrap_or_else(|p| p.into_inner()).clone()
    }
}

impl ClientContext for AccessWatch {
    fn error(&self, error: KafkaError, reason: &str) {
        let text = format!("{error}: {reason}");
        if failure::is_access_denied(&text) {
            *self.denied.lock().unwrap_or_else(|p| p.into_inner()) = Some(reason.to_string());
        }
        tracing::error!("librdkafka: {text}");
    }
}

impl rdkafka::consumer::ConsumerContext for AccessWatch {}
