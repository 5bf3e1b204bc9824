//! TLS for the job server's client-facing servers (Job API, artifacts,
//! expansion): a certificate and key from PEM files, and optionally a CA whose
//! client certificates are required (mutual TLS).
use std::path::PathBuf;

use anyhow::Context as _;
use tonic::transport::{Certificate, Identity, ServerTlsConfig};

#[derive(clap::Args, Clone, Debug, Default)]
pub struct TlsArgs {
    /// Serve the Job API, artifact and expansion services over TLS with this
    /// certificate (PEM; with --tls-key).
    #[arg(long, requires = "tls_key")]
    pub tls_cert: Option<PathBuf>,
    /// The certificate's private key (PEM).
    #[arg(long, requires = "tls_cert")]
    pub tls_key: Option<PathBuf>,
    /// Require client certificates signed by this CA (PEM): mutual TLS.
    #[arg(long, requires = "tls_cert")]
    pub tls_client_ca: Option<PathBuf>,
}

impl TlsArgs {
    /// The server TLS configuration, if TLS was asked for.
    pub fn config(&self) -> anyhow::Result<Option<ServerTlsConfig>> {
        let (Some(cert), Some(key)) = (&self.tls_cert, &self.tls_key) else { return Ok(None) };
        let read = |p: &PathBuf, what: &str| std::fs::read(p).with_context(|| format!("cannot read the TLS {what} {}", p.display()));
        let mut config = ServerTlsConfig::new().identity(Identity::from_pem(read(cert, "certificate")?, read(key, "key")?));
        if let Some(ca) = &self.tls_client_ca {
            config = config.client_ca_root(Certificate::from_pem(read(ca, "client CA")?));
        }
        Ok(Some(config))
    }
}

/// A server builder, with TLS when configured.
pub fn builder(tls: &Option<ServerTlsConfig>) -> anyhow::Result<tonic::transport::Server> {
    let builder = tonic::transport::Server::builder();
    match tls {
        Some(config) => builder.tls_config(config.clone()).context("invalid TLS configuration"),
        None => Ok(builder),
    }
}
