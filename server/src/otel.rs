//! Exporting metrics and traces over OTLP. Configured the standard way, by
//! `OTEL_EXPORTER_OTLP_*`, `OTEL_SERVICE_NAME`, `OTEL_RESOURCE_ATTRIBUTES`,
//! `OTEL_METRIC_EXPORT_INTERVAL` and `OTEL_TRACES_SAMPLER`, or by flags.
//! Nothing is exported (and the instruments cost next to nothing) unless an
//! endpoint is given.
use anyhow::Context as _;
use opentelemetry::KeyValue;
use opentelemetry_otlp::{Protocol, WithExportConfig};
use opentelemetry_sdk::metrics::SdkMeterProvider;
use opentelemetry_sdk::trace::SdkTracerProvider;
use opentelemetry_sdk::Resource;

#[derive(clap::Args, Clone, Debug, Default)]
pub struct OtelArgs {
    /// Export metrics and traces over OTLP to this collector, e.g.
    /// http://localhost:4317 (gRPC) or http://localhost:4318 (HTTP); the
    /// default is OTEL_EXPORTER_OTLP_ENDPOINT. Without either, nothing is exported.
    #[arg(long)]
    otlp_endpoint: Option<String>,
    /// `grpc` or `http/protobuf`; the default is OTEL_EXPORTER_OTLP_PROTOCOL,
    /// else grpc for a :4317 endpoint and http/protobuf otherwise.
    #[arg(long)]
    otlp_protocol: Option<String>,
    /// Serve the same metrics for Prometheus to scrape at /metrics on this
    /// port (0 picks a free one), with or without an OTLP endpoint.
    #[arg(long)]
    metrics_port: Option<u16>,
    /// Address /metrics listens on.
    #[arg(long, default_value = "127.0.0.1")]
    metrics_bind: String,
}

/// The installed providers; dropping it flushes and shuts them down.
pub struct Exporting {
    meters: SdkMeterProvider,
    tracer: Option<SdkTracerProvider>,
}

impl Drop for Exporting {
    fn drop(&mut self) {
        let _ = self.meters.force_flush();
        let _ = self.meters.shutdown();
        if let Some(t) = &self.tracer {
            let _ = t.force_flush();
            let _ = t.shutdown();
        }
    }
}

/// Whether an endpoint is configured by environment.
fn endpoint_from_env() -> Option<String> {
    ["OTEL_EXPORTER_OTLP_ENDPOINT", "OTEL_EXPORTER_OTLP_METRICS_ENDPOINT", "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT"]
        .iter()
        .find_map(|v| std::env::var(v).ok().filter(|s| !s.is_empty()))
}

/// The protocol to speak: the flag, the environment, or a guess from the port.
pub fn protocol(flag: Option<&str>, env: Option<&str>, endpoint: &str) -> anyhow::Result<Protocol> {
    match flag.or(env).map(str::trim) {
        Some("grpc") => Ok(Protocol::Grpc),
        Some("http/protobuf") | Some("http") => Ok(Protocol::HttpBinary),
        Some(other) => anyhow::bail!("the OTLP protocol must be grpc or http/protobuf, not '{other}'"),
        None if endpoint.trim_end_matches('/').ends_with(":4317") => Ok(Protocol::Grpc),
        None => Ok(Protocol::HttpBinary),
    }
}

/// An HTTP endpoint given as a base URL gets the signal's path, as the
/// OTLP specification says of OTEL_EXPORTER_OTLP_ENDPOINT.
fn signal_url(base: &str, path: &str) -> String {
    format!("{}/{path}", base.trim_end_matches('/'))
}

/// Installs the exporting providers if an OTLP endpoint or a metrics port
/// is configured, and the observers of the running jobs; `attributes` go
/// into the resource.
pub async fn install(args: &OtelArgs, attributes: Vec<KeyValue>) -> anyhow::Result<Option<Exporting>> {
    if std::env::var("OTEL_SDK_DISABLED").is_ok_and(|v| v.eq_ignore_ascii_case("true")) {
        return Ok(None);
    }
    let flag_endpoint = args.otlp_endpoint.clone().filter(|s| !s.is_empty());
    let endpoint = flag_endpoint.clone().or_else(endpoint_from_env);
    if endpoint.is_none() && args.metrics_port.is_none() {
        return Ok(None);
    }
    let resource = resource(attributes);
    let mut meters = SdkMeterProvider::builder().with_resource(resource.clone());
    let mut tracer = None;
    if let Some(endpoint) = &endpoint {
        let env_protocol = std::env::var("OTEL_EXPORTER_OTLP_PROTOCOL").ok();
        let protocol = protocol(args.otlp_protocol.as_deref(), env_protocol.as_deref(), endpoint)?;
        let (metrics, spans) = exporters(protocol, flag_endpoint.as_deref());
        let metrics = metrics.with_context(|| format!("cannot export metrics to {endpoint}"))?;
        let spans = spans.with_context(|| format!("cannot export traces to {endpoint}"))?;
        // Exports run on the tokio runtime: gRPC and hyper clients need one.
        let reader = opentelemetry_sdk::metrics::periodic_reader_with_async_runtime::PeriodicReader::builder(
            metrics,
            opentelemetry_sdk::runtime::Tokio,
        )
        .build();
        meters = meters.with_reader(reader);
        let batch = opentelemetry_sdk::trace::span_processor_with_async_runtime::BatchSpanProcessor::builder(
            spans,
            opentelemetry_sdk::runtime::Tokio,
        )
        .build();
        tracer = Some(SdkTracerProvider::builder().with_resource(resource).with_span_processor(batch).build());
        tracing::info!("exporting metrics and traces over OTLP ({protocol:?}) to {endpoint}");
    }
    let scrape = args.metrics_port.map(|_| crate::prometheus::SharedReader::new());
    if let Some(reader) = &scrape {
        meters = meters.with_reader(reader.clone());
    }
    let meters = meters.build();
    opentelemetry::global::set_meter_provider(meters.clone());
    if let Some(t) = &tracer {
        opentelemetry::global::set_tracer_provider(t.clone());
    }
    beam_kafka_actors::telemetry::observe::register_observers();
    if let (Some(reader), Some(port)) = (scrape, args.metrics_port) {
        crate::prometheus::serve(&args.metrics_bind, port, reader).await?;
    }
    Ok(Some(Exporting { meters, tracer }))
}

type Built<T> = Result<T, opentelemetry_otlp::ExporterBuildError>;

/// The OTLP exporters of `protocol`, to the flag's endpoint or the
/// environment's.
fn exporters(
    protocol: Protocol,
    flag_endpoint: Option<&str>,
) -> (Built<opentelemetry_otlp::MetricExporter>, Built<opentelemetry_otlp::SpanExporter>) {
    match protocol {
        Protocol::Grpc => {
            let mut m = opentelemetry_otlp::MetricExporter::builder().with_tonic();
            let mut s = opentelemetry_otlp::SpanExporter::builder().with_tonic();
            if let Some(e) = flag_endpoint {
                m = m.with_endpoint(e);
                s = s.with_endpoint(e);
            }
            (m.build(), s.build())
        }
        _ => {
            let mut m = opentelemetry_otlp::MetricExporter::builder().with_http().with_protocol(Protocol::HttpBinary);
            let mut s = opentelemetry_otlp::SpanExporter::builder().with_http().with_protocol(Protocol::HttpBinary);
            if let Some(e) = flag_endpoint {
                m = m.with_endpoint(signal_url(e, "v1/metrics"));
                s = s.with_endpoint(signal_url(e, "v1/traces"));
            }
            (m.build(), s.build())
        }
    }
}

/// The process as a resource: the service (named by OTEL_SERVICE_NAME, else
/// beam-kafka), its version, this copy (host and pid), and `attributes`
/// (the application and job of `beam-kafka run`).
fn resource(attributes: Vec<KeyValue>) -> Resource {
    let copy = beam_kafka_actors::status_board::this_copy();
    let host = copy.rsplit_once(':').map_or(copy.as_str(), |(h, _)| h).to_string();
    let mut b = Resource::builder();
    if std::env::var("OTEL_SERVICE_NAME").is_err() && !resource_attributes_name_service() {
        b = b.with_service_name("beam-kafka");
    }
    b.with_attributes([
        KeyValue::new("service.version", env!("CARGO_PKG_VERSION")),
        KeyValue::new("service.instance.id", copy.clone()),
        KeyValue::new("host.name", host),
        KeyValue::new("process.pid", std::process::id() as i64),
    ])
    .with_attributes(attributes)
    .build()
}

/// Whether OTEL_RESOURCE_ATTRIBUTES names the service itself.
fn resource_attributes_name_service() -> bool {
    std::env::var("OTEL_RESOURCE_ATTRIBUTES").is_ok_and(|v| v.split(',').any(|kv| kv.trim_start().starts_with("service.name=")))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn protocol_from_flag_env_or_port() {
        assert_eq!(protocol(Some("grpc"), Some("http/protobuf"), "http://x:4318").unwrap(), Protocol::Grpc);
        assert_eq!(protocol(None, Some("http/protobuf"), "http://x:4317").unwrap(), Protocol::HttpBinary);
        assert_eq!(protocol(None, None, "http://x:4317").unwrap(), Protocol::Grpc);
        assert_eq!(protocol(None, None, "http://x:4318/").unwrap(), Protocol::HttpBinary);
        let e = protocol(Some("thrift"), None, "http://x").unwrap_err().to_string();
        assert!(e.contains("grpc or http/protobuf") && e.contains("thrift"), "{e}");
    }

    #[test]
    fn http_base_urls_get_the_signal_path() {
        assert_eq!(signal_url("http://c:4318/", "v1/metrics"), "http://c:4318/v1/metrics");
        assert_eq!(signal_url("http://c:4318", "v1/traces"), "http://c:4318/v1/traces");
    }
}
