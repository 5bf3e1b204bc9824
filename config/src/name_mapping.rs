//! `--transform_name_mapping`, as Dataflow spells it: a JSON object of
//! earlier transform names to new ones. Python sends it as a dictionary,
//! other SDKs and `beam-kafka run` as JSON text.
use std::collections::BTreeMap;

use crate::OptionValue;

pub fn parse(value: Option<&OptionValue>) -> Result<BTreeMap<String, String>, String> {
    let pairs: Vec<(String, OptionValue)> = match value {
        None | Some(OptionValue::Null) => return Ok(BTreeMap::new()),
        Some(OptionValue::Map(pairs)) => pairs.clone(),
        Some(OptionValue::String(text)) if text.trim().is_empty() => return Ok(BTreeMap::new()),
        Some(OptionValue::String(text)) => {
            let json: serde_json::Value =
                serde_json::from_str(text).map_err(|e| format!("'{text}' is not a JSON object ({e}); e.g. {{\"Old\":\"New\"}}"))?;
            let serde_json::Value::Object(map) = json else {
                return Err(format!("'{text}' is not a JSON object; e.g. {{\"Old\":\"New\"}}"));
            };
            map.into_iter()
                .map(|(k, v)| match v {
                    serde_json::Value::String(s) => (k, OptionValue::String(s)),
                    serde_json::Value::Null => (k, OptionValue::Null),
                    other => (k, OptionValue::String(format!("\0{other}"))),
                })
                .collect()
        }
        Some(other) => return Err(format!("expected a JSON object of names, got {other:?}")),
    };
    let mut out = BTreeMap::new();
    for (old, new) in pairs {
        match new {
            OptionValue::String(new) if !new.starts_with('\0') => {
                out.insert(old, new);
            }
            OptionValue::Null => {
                out.insert(old, String::new());
            }
            other => {
                let shown = match &other {
                    OptionValue::String(s) => s.trim_start_matches('\0').to_string(),
                    v => format!("{v:?}"),
                };
                return Err(format!("'{old}' is mapped to {shown}: a transform's new name must be text (\"\" drops it)"));
            }
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_dictionary_or_json_text_maps_names_and_anything_else_is_refused() {
        let text = |s: &str| OptionValue::String(s.to_string());
        let m = parse(Some(&text(r#"{"Count": "Tally", "Old": ""}"#))).unwrap();
        assert_eq!(m["Count"], "Tally");
        assert_eq!(m["Old"], "");
        let dict = OptionValue::Map(vec![("A".into(), text("B")), ("C".into(), OptionValue::Null)]);
        let m = parse(Some(&dict)).unwrap();
        assert_eq!((m["A"].as_str(), m["C"].as_str()), ("B", ""));
        assert!(parse(None).unwrap().is_empty());
        assert!(parse(Some(&text("[1]"))).unwrap_err().contains("not a JSON object"));
        assert!(parse(Some(&text("{"))).unwrap_err().contains("not a JSON object"));
        assert!(parse(Some(&text(r#"{"A": 3}"#))).unwrap_err().contains("'A' is mapped to 3"));
    }
}
