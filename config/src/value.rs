/// A pipeline option's value as it arrives from an SDK (a `google.protobuf.Value`,
/// without the protobuf dependency). Python sends ints as strings.
#[derive(Clone, Debug, PartialEq)]
pub enum OptionValue {
    Null,
    Bool(bool),
    Number(f64),
    String(String),
    List(Vec<OptionValue>),
    /// A dictionary (Python sends `--transform_name_mapping` as one).
    Map(Vec<(String, OptionValue)>),
    Other,
}

impl OptionValue {
    /// The value as text, for the kinds that have one.
    pub fn as_text(&self) -> Option<String> {
        match self {
            OptionValue::String(s) => Some(s.clone()),
            OptionValue::Number(n) if n.fract() == 0.0 => Some(format!("{}", *n as i64)),
            OptionValue::Number(n) => Some(n.to_string()),
            OptionValue::Bool(b) => Some(b.to_string()),
            _ => None,
        }
    }
}
