//! Client properties that hold secrets (passwords, keys, JAAS configs) and
//! must never be shown: not in logs, job messages, or the options the Job
//! API and Provision hand back.

/// Shown instead of a secret value.
pub const REDACTED: &str = "<redacted>";

/// Whether a property (or option) of this name holds a secret.
pub fn is_secret(key: &str) -> bool {
    let k = key.to_ascii_lowercase();
    k.contains("password")
        || k.contains("secret")
        || k.contains("token")
        || k.contains("credential")
        || k == "sasl.jaas.config"
        || k == "sasl.oauthbearer.config"
        || k.starts_with("ssl.key.")
        || k == "ssl.key"
}

/// `value`, or [`REDACTED`] when `key` holds a secret.
pub fn shown<'a>(key: &str, value: &'a str) -> &'a str {
    if is_secret(key) {
        REDACTED
    } else {
        value
    }
}

/// A `key=value` property entry with a secret value replaced.
pub fn redact_entry(entry: &str) -> String {
    match entry.split_once('=') {
        Some((k, _)) if is_secret(k.trim()) => format!("{k}={REDACTED}"),
        _ => entry.to_string(),
    }
}

/// Why a Kafka client property must not come from a job server's client,
/// if it must not: it loads code into the server, runs a command, or makes
/// the server read (and send to a broker the client chose) a local file.
/// The server's operator sets such properties for every job instead.
pub fn unsafe_client_property(key: &str) -> Option<&'static str> {
    let k = key.trim().to_ascii_lowercase();
    if k == "plugin.library.paths" || k == "ssl.providers" || k == "ssl.engine.id" || k.starts_with("ssl_engine") {
        Some("loads code into the job server")
    } else if k.ends_with(".cmd") {
        Some("runs a command on the job server")
    } else if k.ends_with(".location") || k.ends_with(".file") || k.ends_with(".keytab") || k.ends_with(".path") || k.ends_with(".paths") {
        Some("reads a file on the job server")
    } else {
        None
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn properties_that_load_code_or_read_files_are_recognised() {
        for k in [
            "plugin.library.paths",
            "ssl.ca.location",
            "ssl.engine.location",
            "sasl.kerberos.kinit.cmd",
            "sasl.kerberos.keytab",
            "sasl.oauthbearer.assertion.private.key.file",
            "SSL.Providers",
        ] {
            assert!(unsafe_client_property(k).is_some(), "{k}");
        }
        for k in ["security.protocol", "sasl.username", "sasl.password", "group.id", "ssl.endpoint.identification.algorithm"] {
            assert!(unsafe_client_property(k).is_none(), "{k}");
        }
    }

    #[test]
    fn secrets_are_recognised_and_hidden() {
        for k in [
            "sasl.password",
            "ssl.key.password",
            "ssl.keystore.password",
            "sasl.jaas.config",
            "ssl.key.pem",
            "sasl.oauthbearer.client.secret",
            "SASL.PASSWORD",
        ] {
            assert!(is_secret(k), "{k}");
        }
        for k in ["sasl.username", "security.protocol", "ssl.ca.location", "message.timeout.ms"] {
            assert!(!is_secret(k), "{k}");
        }
        assert_eq!(shown("sasl.password", "hunter2"), REDACTED);
        assert_eq!(shown("sasl.username", "alice"), "alice");
        assert_eq!(redact_entry("sasl.password=hunter2"), format!("sasl.password={REDACTED}"));
        assert_eq!(redact_entry("linger.ms=5"), "linger.ms=5");
        assert_eq!(redact_entry("novalue"), "novalue");
    }
}
