//! The Prometheus text exposition format, for a scrape endpoint of the
//! runner's own (`--metrics-port`): OTel metric names and attributes
//! translated the way an OpenTelemetry Collector's `prometheus` exporter
//! translates them by default, so one dashboard serves both set-ups.
use std::collections::BTreeMap;
use std::fmt::Write as _;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    Counter,
    Gauge,
    Histogram,
}

impl Kind {
    fn as_str(self) -> &'static str {
        match self {
            Kind::Counter => "counter",
            Kind::Gauge => "gauge",
            Kind::Histogram => "histogram",
        }
    }
}

#[derive(Clone, Debug, PartialEq)]
pub enum Value {
    Number(f64),
    /// Explicit buckets: upper bounds, a count per bucket (one more than
    /// bounds: the last is above every bound), sum and count.
    Histogram {
        bounds: Vec<f64>,
        counts: Vec<u64>,
        sum: f64,
        count: u64,
    },
}

#[derive(Clone, Debug, PartialEq)]
pub struct Sample {
    /// OTel attribute keys and values (translated when rendered).
    pub labels: Vec<(String, String)>,
    pub value: Value,
}

#[derive(Clone, Debug, PartialEq)]
pub struct Family {
    /// The Prometheus name (`metric_name`).
    pub name: String,
    pub help: String,
    pub kind: Kind,
    pub samples: Vec<Sample>,
}

/// Unit words the collector spells out.
fn unit_word(unit: &str) -> Option<&str> {
    let unit = unit.trim();
    if unit.is_empty() || unit.contains('{') || unit.contains('}') || unit == "1" {
        return None;
    }
    Some(match unit {
        "s" => "seconds",
        "ms" => "milliseconds",
        "us" => "microseconds",
        "ns" => "nanoseconds",
        "min" => "minutes",
        "h" => "hours",
        "d" => "days",
        "By" => "bytes",
        "KiBy" => "kibibytes",
        "MiBy" => "mebibytes",
        "%" => "percent",
        other => other,
    })
}

fn tokens(s: &str) -> impl Iterator<Item = &str> {
    s.split(|c: char| !(c.is_ascii_alphanumeric() || c == ':')).filter(|t| !t.is_empty())
}

/// The Prometheus name of an OTel metric: its words joined by `_`, the
/// unit's word appended, `_total` for a counter, `_ratio` for a gauge of
/// unit 1 (a histogram's series add `_bucket`, `_sum`, `_count`).
pub fn metric_name(otel_name: &str, unit: &str, kind: Kind) -> String {
    let mut words: Vec<&str> = tokens(otel_name).collect();
    let unit_words: Vec<&str> = unit_word(unit).map(|u| tokens(u).collect()).unwrap_or_default();
    if !unit_words.iter().all(|u| words.contains(u)) {
        words.extend(unit_words);
    }
    match kind {
        Kind::Counter => {
            words.retain(|w| *w != "total");
            words.push("total");
        }
        Kind::Gauge if unit.trim() == "1" => {
            words.retain(|w| *w != "ratio");
            words.push("ratio");
        }
        _ => {}
    }
    let name = words.join("_");
    if name.starts_with(|c: char| c.is_ascii_digit()) {
        format!("_{name}")
    } else {
        name
    }
}

/// An attribute key as a label name: characters other than letters,
/// digits and `_` become `_`.
pub fn label_name(key: &str) -> String {
    let name: String = key.chars().map(|c| if c.is_ascii_alphanumeric() || c == '_' { c } else { '_' }).collect();
    if name.starts_with(|c: char| c.is_ascii_digit()) {
        format!("key_{name}")
    } else {
        name
    }
}

fn escape_value(v: &str) -> String {
    v.replace('\\', "\\\\").replace('"', "\\\"").replace('\n', "\\n")
}

fn escape_help(v: &str) -> String {
    v.replace('\\', "\\\\").replace('\n', "\\n")
}

fn number(v: f64) -> String {
    if v.is_nan() {
        "NaN".into()
    } else if v.is_infinite() {
        if v > 0.0 { "+Inf" } else { "-Inf" }.into()
    } else if v.fract() == 0.0 && v.abs() < 1e15 {
        format!("{}", v as i64)
    } else {
        format!("{v}")
    }
}

fn labels(pairs: &[(String, String)], extra: Option<(&str, &str)>) -> String {
    // Keys that translate to one label name: their values joined by ';'.
    let mut merged: BTreeMap<String, Vec<&str>> = BTreeMap::new();
    for (k, v) in pairs {
        merged.entry(label_name(k)).or_default().push(v);
    }
    let mut parts: Vec<String> = merged.iter().map(|(k, vs)| format!("{k}=\"{}\"", escape_value(&vs.join(";")))).collect();
    if let Some((k, v)) = extra {
        parts.push(format!("{k}=\"{v}\""));
    }
    if parts.is_empty() {
        String::new()
    } else {
        format!("{{{}}}", parts.join(","))
    }
}

/// The exposition of `families`; families of one name (from several
/// instrumentation scopes) are written as one.
pub fn render(families: &[Family]) -> String {
    let mut by_name: BTreeMap<&str, Vec<&Family>> = BTreeMap::new();
    for f in families {
        by_name.entry(&f.name).or_default().push(f);
    }
    let mut out = String::new();
    for (name, fs) in by_name {
        let first = fs[0];
        let _ = writeln!(out, "# HELP {name} {}", escape_help(&first.help));
        let _ = writeln!(out, "# TYPE {name} {}", first.kind.as_str());
        for s in fs.iter().flat_map(|f| &f.samples) {
            match &s.value {
                Value::Number(v) => {
                    let _ = writeln!(out, "{name}{} {}", labels(&s.labels, None), number(*v));
                }
                Value::Histogram { bounds, counts, sum, count } => {
                    let mut cumulative = 0u64;
                    for (bound, n) in bounds.iter().zip(counts) {
                        cumulative += n;
                        let le = number(*bound);
                        let _ = writeln!(out, "{name}_bucket{} {cumulative}", labels(&s.labels, Some(("le", &le))));
                    }
                    let _ = writeln!(out, "{name}_bucket{} {count}", labels(&s.labels, Some(("le", "+Inf"))));
                    let _ = writeln!(out, "{name}_sum{} {}", labels(&s.labels, None), number(*sum));
                    let _ = writeln!(out, "{name}_count{} {count}", labels(&s.labels, None));
                }
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_as_the_collector_makes_them() {
        assert_eq!(
            metric_name("messaging.client.consumed.messages", "{message}", Kind::Counter),
            "messaging_client_consumed_messages_total"
        );
        assert_eq!(metric_name("beam_kafka.task.commit.duration", "s", Kind::Histogram), "beam_kafka_task_commit_duration_seconds");
        assert_eq!(metric_name("beam_kafka.task.state.size", "By", Kind::Gauge), "beam_kafka_task_state_size_bytes");
        assert_eq!(metric_name("beam_kafka.task.changelog.written", "By", Kind::Counter), "beam_kafka_task_changelog_written_bytes_total");
        assert_eq!(metric_name("beam_kafka.job.uptime", "s", Kind::Gauge), "beam_kafka_job_uptime_seconds");
        assert_eq!(metric_name("x.seconds", "s", Kind::Gauge), "x_seconds", "a unit already named is not repeated");
        assert_eq!(metric_name("hits.total", "", Kind::Counter), "hits_total");
        assert_eq!(metric_name("use", "1", Kind::Gauge), "use_ratio");
        assert_eq!(label_name("beam_kafka.application.id"), "beam_kafka_application_id");
        assert_eq!(label_name("9lives"), "key_9lives");
    }

    #[test]
    fn renders_counters_gauges_and_histograms() {
        let families = vec![
            Family {
                name: "c_total".into(),
                help: "a counter\nof things".into(),
                kind: Kind::Counter,
                samples: vec![Sample { labels: vec![("a.b".into(), "x\"y".into())], value: Value::Number(3.0) }],
            },
            Family {
                name: "h_seconds".into(),
                help: "h".into(),
                kind: Kind::Histogram,
                samples: vec![Sample {
                    labels: vec![("task".into(), "0_1".into())],
                    value: Value::Histogram { bounds: vec![0.5, 1.0], counts: vec![1, 2, 3], sum: 7.25, count: 6 },
                }],
            },
            Family {
                name: "c_total".into(),
                help: "again".into(),
                kind: Kind::Counter,
                samples: vec![Sample { labels: vec![], value: Value::Number(0.5) }],
            },
        ];
        let text = render(&families);
        let expected = "# HELP c_total a counter\\nof things\n# TYPE c_total counter\nc_total{a_b=\"x\\\"y\"} 3\nc_total 0.5\n\
                        # HELP h_seconds h\n# TYPE h_seconds histogram\nh_seconds_bucket{task=\"0_1\",le=\"0.5\"} 1\n\
                        h_seconds_bucket{task=\"0_1\",le=\"1\"} 3\nh_seconds_bucket{task=\"0_1\",le=\"+Inf\"} 6\n\
                        h_seconds_sum{task=\"0_1\"} 7.25\nh_seconds_count{task=\"0_1\"} 6\n";
        assert_eq!(text, expected);
    }
}
