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

#[cfg(test)]
mod tests {
    use super::*;

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
