//! Who may use the job server. With a token configured (`--auth-token-file`),
//! a client proves itself on the Job API and the expansion service by either
//! - gRPC metadata `authorization: Bearer <token>` (any gRPC client), or
//! - the pipeline option `--job_server_token=<token>`, which a plain
//!   `PortableRunner` sends in Prepare (the option is advertised through
//!   DescribePipelineOptions) and Python's expansion client in its request.
//!
//! What Prepare hands back then acts as a capability for that one job, the
//! way Beam's staging token does: the preparation id (Run, artifact staging)
//! and the job id (state, messages, metrics, cancel) are unguessable, and
//! only an authenticated GetJobs lists job ids. Harnesses prove themselves
//! on the Fn API and artifact retrieval with their worker id, a per-worker
//! secret (see `execution`).
use prost_types::{value::Kind, Struct};
use tonic::metadata::MetadataMap;
use tonic::Status;

/// The pipeline option a client without call credentials passes the token in.
pub const TOKEN_OPTION: &str = "job_server_token";

#[derive(Clone, Default)]
pub struct Auth {
    token: Option<String>,
}

impl Auth {
    pub fn new(token: Option<String>) -> Auth {
        Auth { token: token.filter(|t| !t.is_empty()) }
    }

    /// Reads the token from `path` (surrounding whitespace ignored).
    pub fn from_file(path: &std::path::Path) -> anyhow::Result<Auth> {
        use anyhow::Context as _;
        let text = std::fs::read_to_string(path).with_context(|| format!("cannot read the auth token file {}", path.display()))?;
        let token = text.trim().to_string();
        anyhow::ensure!(token.len() >= 16, "the auth token in {} is shorter than 16 characters", path.display());
        Ok(Auth::new(Some(token)))
    }

    pub fn is_enabled(&self) -> bool {
        self.token.is_some()
    }

    /// Whether `presented` is the token (anything goes without one).
    pub fn accepts(&self, presented: Option<&str>) -> bool {
        self.token.is_none() || presented.is_some_and(|p| self.matches(p))
    }

    fn matches(&self, presented: &str) -> bool {
        self.token.as_deref().is_some_and(|t| constant_time_eq(t.as_bytes(), presented.as_bytes()))
    }

    /// Whether the call's metadata carries the token (always, without one).
    pub fn metadata_ok(&self, metadata: &MetadataMap) -> bool {
        if self.token.is_none() {
            return true;
        }
        let presented = metadata.get("authorization").and_then(|v| v.to_str().ok()).and_then(|v| v.strip_prefix("Bearer "));
        presented.is_some_and(|p| self.matches(p.trim()))
    }

    /// Checks a call that must be authenticated by metadata or by the token
    /// option in `options`; removes that option, so it is never stored,
    /// listed or handed to a harness.
    pub fn check(&self, what: &str, metadata: &MetadataMap, options: Option<&mut Struct>) -> Result<(), Status> {
        let from_option = options.and_then(take_token_option);
        if self.token.is_none() || self.metadata_ok(metadata) || from_option.is_some_and(|t| self.matches(&t)) {
            return Ok(());
        }
        Err(unauthenticated(what))
    }

    /// Checks a call that only metadata can authenticate.
    pub fn check_metadata(&self, what: &str, metadata: &MetadataMap) -> Result<(), Status> {
        if self.metadata_ok(metadata) {
            Ok(())
        } else {
            Err(unauthenticated(what))
        }
    }
}

fn unauthenticated(what: &str) -> Status {
    Status::unauthenticated(format!(
        "{what} needs the job server's token: send gRPC metadata 'authorization: Bearer <token>', or pass \
         --{TOKEN_OPTION}=<token> as a pipeline option"
    ))
}

/// Removes the token option (in any of the forms SDKs send, also among
/// the Go SDK's flags in `go_options`) and returns it.
fn take_token_option(options: &mut Struct) -> Option<String> {
    let keys = [format!("beam:option:{TOKEN_OPTION}:v1"), TOKEN_OPTION.to_string()];
    let mut found = None;
    for k in keys {
        if let Some(v) = options.fields.remove(&k) {
            if let Some(Kind::StringValue(s)) = v.kind {
                found = Some(s);
            }
        }
    }
    if let Some(flags) = crate::options::go_flags_mut(options) {
        if let Some(Kind::StringValue(s)) = flags.fields.remove(TOKEN_OPTION).and_then(|v| v.kind) {
            found = found.or(Some(s));
        }
    }
    found
}

fn constant_time_eq(a: &[u8], b: &[u8]) -> bool {
    if a.len() != b.len() {
        return false;
    }
    a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

/// Says once, in the server's log, how it is protected.
pub fn announce(auth: &Auth, bind: &str) {
    if auth.is_enabled() {
        tracing::info!("the Job API and expansion service require the token from --auth-token-file");
    } else {
        tracing::info!("no --auth-token-file: any client that can connect to {bind} may submit pipelines (localhost only by default)");
    }
}

/// Whether `host` only accepts connections from this machine.
pub fn is_loopback(host: &str) -> bool {
    host == "localhost" || host.parse::<std::net::IpAddr>().is_ok_and(|ip| ip.is_loopback())
}

#[cfg(test)]
mod tests {
    use super::*;
    use prost_types::Value;

    fn with_option(token: &str) -> Struct {
        let mut s = Struct::default();
        s.fields.insert(format!("beam:option:{TOKEN_OPTION}:v1"), Value { kind: Some(Kind::StringValue(token.into())) });
        s.fields.insert("beam:option:application_id:v1".into(), Value { kind: Some(Kind::StringValue("a".into())) });
        s
    }

    #[test]
    fn the_token_is_accepted_as_metadata_or_option_and_the_option_is_removed() {
        let auth = Auth::new(Some("s3cret-token-of-16".into()));
        let mut md = MetadataMap::new();
        assert!(auth.check_metadata("GetJobs", &md).is_err());
        let mut opts = with_option("s3cret-token-of-16");
        assert!(auth.check("Prepare", &md, Some(&mut opts)).is_ok());
        assert_eq!(opts.fields.len(), 1, "the token option is gone: {opts:?}");
        let mut wrong = with_option("s3cret-token-of-17");
        assert_eq!(auth.check("Prepare", &md, Some(&mut wrong)).unwrap_err().code(), tonic::Code::Unauthenticated);
        md.insert("authorization", "Bearer s3cret-token-of-16".parse().unwrap());
        assert!(auth.check_metadata("GetJobs", &md).is_ok());
        md.insert("authorization", "Bearer nope".parse().unwrap());
        assert!(auth.check_metadata("GetJobs", &md).is_err());
    }

    #[test]
    fn without_a_token_everything_passes_and_the_option_still_goes() {
        let auth = Auth::default();
        let mut opts = with_option("anything");
        assert!(auth.check("Prepare", &MetadataMap::new(), Some(&mut opts)).is_ok());
        assert_eq!(opts.fields.len(), 1);
        // The Go SDK's flags, nested in go_options.
        let mut flags = Struct::default();
        flags.fields.insert(TOKEN_OPTION.into(), Value { kind: Some(Kind::StringValue("s3cret-token-of-16".into())) });
        let mut go = Struct::default();
        go.fields.insert("options".into(), Value { kind: Some(Kind::StructValue(flags)) });
        let mut go_opts = Struct::default();
        go_opts.fields.insert("beam:option:go_options:v1".into(), Value { kind: Some(Kind::StructValue(go)) });
        let with_token = Auth::new(Some("s3cret-token-of-16".into()));
        assert!(with_token.check("Prepare", &MetadataMap::new(), Some(&mut go_opts)).is_ok());
        assert!(!format!("{go_opts:?}").contains("s3cret"), "{go_opts:?}");
        assert!(is_loopback("127.0.0.1") && is_loopback("::1") && is_loopback("localhost") && !is_loopback("0.0.0.0"));
    }
}
