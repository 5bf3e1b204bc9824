//! Runner options as each SDK spells them: a Java user passes
//! `--applicationId`, so a message naming `--application_id` would name an
//! option their program does not have.
use crate::OPTIONS;

/// `text` with every `--name` of a runner option in Java's spelling
/// (`--application_id` → `--applicationId`); other text is kept.
pub fn in_java_spelling(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut rest = text;
    while let Some(at) = rest.find("--") {
        out.push_str(&rest[..at + 2]);
        rest = &rest[at + 2..];
        let name_len = rest.find(|c: char| !(c.is_ascii_lowercase() || c.is_ascii_digit() || c == '_')).unwrap_or(rest.len());
        let name = &rest[..name_len];
        match OPTIONS.iter().find(|o| o.name == name) {
            Some(option) => out.push_str(option.java_name),
            None => out.push_str(name),
        }
        rest = &rest[name_len..];
    }
    out.push_str(rest);
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn runner_options_are_renamed_and_nothing_else() {
        assert_eq!(
            in_java_spelling("--application_id: is required; pass e.g. --application_id=my-pipeline"),
            "--applicationId: is required; pass e.g. --applicationId=my-pipeline"
        );
        assert_eq!(
            in_java_spelling("use --bootstrap_servers, not --bootstrap_serverss or --other_flag"),
            "use --bootstrapServers, not --bootstrap_serverss or --other_flag"
        );
        assert_eq!(in_java_spelling("a -- b --"), "a -- b --");
        assert_eq!(in_java_spelling("--read_max_poll_time_ms=5"), "--readMaxPollTimeMs=5");
    }
}
