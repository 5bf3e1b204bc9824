//! What a job server fills in for a submission that leaves options out, so
//! an SDK's own example programs run unmodified: Go refuses flags a program
//! does not define, and Java's refuse options no interface declares, so a
//! Beam example cannot pass `--application_id` or `--bootstrap_servers`.

/// Longest application id (topic names derive from it).
const MAX_LEN: usize = 180;

/// An application id made from a job's name: characters an id may not hold
/// become '-', it starts with a letter or digit and fits the limit. Every
/// SDK makes its job names unique per run, so such a job starts fresh: only
/// an explicit `--application_id` resumes an earlier run.
pub fn application_id_from_job_name(job_name: &str) -> String {
    let cleaned: String =
        job_name.chars().map(|c| if c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-') { c } else { '-' }).collect();
    let trimmed = cleaned.trim_start_matches(|c: char| !c.is_ascii_alphanumeric());
    let id: String = trimmed.chars().take(MAX_LEN).collect();
    if id.is_empty() {
        "beam-kafka-job".to_string()
    } else {
        id
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_job_name_becomes_a_valid_application_id() {
        assert_eq!(application_id_from_job_name("go-job-1-1796579399563301445"), "go-job-1-1796579399563301445");
        assert_eq!(application_id_from_job_name("wordcount root/2026 12:00"), "wordcount-root-2026-12-00");
        assert_eq!(application_id_from_job_name("..hidden"), "hidden");
        assert_eq!(application_id_from_job_name("__"), "beam-kafka-job");
        assert_eq!(application_id_from_job_name(""), "beam-kafka-job");
        assert_eq!(application_id_from_job_name("ü-job"), "job");
        assert_eq!(application_id_from_job_name(&"x".repeat(300)).len(), MAX_LEN);
    }

    #[test]
    fn the_id_passes_the_option_checks() {
        for name in ["BeamApp-root-1206", "a b c", "-x-", "job\u{0}name"] {
            let id = application_id_from_job_name(name);
            let values = std::collections::BTreeMap::from([("application_id".to_string(), crate::OptionValue::String(id.clone()))]);
            assert!(crate::RunnerOptions::parse(&values).is_ok(), "{name} -> {id}");
        }
    }
}
