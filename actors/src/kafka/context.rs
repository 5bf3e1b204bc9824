//! A client context that remembers the cluster refusing the runner's
//! credentials. librdkafka reports a failed SASL login or TLS handshake only
//! through its error callback; the request that needed the connection fails
//! as a mere transport error, which alone would be retried as an outage.
use std::sync::{Arc, Mutex};

use beam_kafka_runtime::kafka::failure::{self, Failure};
use rdkafka::client::ClientContext;
use rdkafka::error::KafkaError;

#[derive(Clone, Default)]
pub struct AccessWatch {
    denied: Arc<Mutex<Option<Failure>>>,
}

impl AccessWatch {
    /// The last refusal of the runner's credentials or TLS settings, if any.
    pub fn denied(&self) -> Option<Failure> {
        self.denied.lock().unwrap_or_else(|p| p.into_inner()).clone()
    }
}

impl ClientContext for AccessWatch {
    fn error(&self, error: KafkaError, reason: &str) {
        if let Some(code) = error.rdkafka_error_code().map(super::failure::code_name).filter(|c| failure::is_access_denied(c)) {
            *self.denied.lock().unwrap_or_else(|p| p.into_inner()) = Some(Failure::kafka(&code, reason));
        }
        tracing::error!("librdkafka: {error}: {reason}");
    }
}

impl rdkafka::consumer::ConsumerContext for AccessWatch {}
