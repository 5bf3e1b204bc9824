//! Beam's Kafka transforms (ReadFromKafka, WriteToKafka) as this runner
//! executes them: their configuration row checked and normalised into our
//! specs, and the mapping between Kafka's bytes and Beam's encodings.
use std::collections::HashMap;

use beam_kafka_proto::envelope::{KafkaFormat, KafkaReadSpec, KafkaWriteSpec, TimestampPolicy};

use crate::codec::coders::{decode_varint, encode_varint};
use crate::codec::row::{Row, Value};

pub const JAVA_READ_WITHOUT_METADATA: &str = "beam:transform:org.apache.beam:kafka_read_without_metadata:v1";
pub const JAVA_READ_WITH_METADATA: &str = "beam:transform:org.apache.beam:kafka_read_with_metadata:v1";
pub const JAVA_WRITE: &str = "beam:transform:org.apache.beam:kafka_write:v1";
pub const JAVA_WRITE_WITH_HEADERS: &str = "beam:transform:org.apache.beam:kafka_write_with_headers:v1";

const SERDE_PACKAGE: &str = "org.apache.kafka.common.serialization.";

fn format_of(class: &str, suffix: &str) -> Option<KafkaFormat> {
    let short = class.strip_prefix(SERDE_PACKAGE).unwrap_or(class).strip_suffix(suffix)?;
    match short {
        "ByteArray" => Some(KafkaFormat::Bytes),
        "String" => Some(KafkaFormat::String),
        "Long" => Some(KafkaFormat::Long),
        "Integer" => Some(KafkaFormat::Integer),
        _ => None,
    }
}

fn serde_error(transform: &str, setting: &str, class: &str, suffix: &str) -> String {
    format!(
        "{transform}: {setting} '{class}' is not supported by beam-kafka; use one of {SERDE_PACKAGE}{{ByteArray,String,Long,Integer}}{suffix}"
    )
}

fn string_map(row: &Row, name: &str) -> Result<HashMap<String, String>, String> {
    match row.get(name) {
        None => Ok(HashMap::new()),
        Some(Value::Map(entries)) => entries
            .iter()
            .map(|(k, v)| match (k, v) {
                (Value::String(k), Value::String(v)) => Ok((k.clone(), v.clone())),
                _ => Err(format!("{name} must map strings to strings")),
            })
            .collect(),
        Some(_) => Err(format!("{name} must be a map of strings")),
    }
}

fn string(row: &Row, name: &str) -> Option<String> {
    match row.get(name) {
        Some(Value::String(s)) => Some(s.clone()),
        _ => None,
    }
}

fn int(row: &Row, name: &str) -> Option<i64> {
    match row.get(name) {
        Some(Value::Int(i)) => Some(*i),
        _ => None,
    }
}

fn flag(row: &Row, name: &str) -> bool {
    matches!(row.get(name), Some(Value::Bool(true)))
}

/// Checks a ReadFromKafka configuration row and turns it into our spec.
pub fn read_spec(row: &Row, with_metadata: bool) -> Result<KafkaReadSpec, String> {
    const T: &str = "ReadFromKafka";
    let consumer_config = string_map(row, "consumer_config")?;
    if !consumer_config.contains_key("bootstrap.servers") {
        return Err(format!("{T}: consumer_config has no 'bootstrap.servers'"));
    }
    let topics: Vec<String> = match row.get("topics") {
        Some(Value::List(items)) => items.iter().filter_map(|v| if let Value::String(s) = v { Some(s.clone()) } else { None }).collect(),
        _ => Vec::new(),
    };
    if topics.is_empty() || topics.iter().any(|t| t.is_empty()) {
        return Err(format!("{T}: topics must name at least one topic"));
    }
    let deser = |setting: &str| -> Result<KafkaFormat, String> {
        let class = string(row, setting).unwrap_or_else(|| format!("{SERDE_PACKAGE}ByteArrayDeserializer"));
        format_of(&class, "Deserializer").ok_or_else(|| serde_error(T, setting, &class, "Deserializer"))
    };
    let key_format = deser("key_deserializer")?;
    let value_format = deser("value_deserializer")?;
    let policy = string(row, "timestamp_policy").unwrap_or_else(|| "ProcessingTime".into());
    let timestamp_policy = match policy.as_str() {
        "ProcessingTime" => TimestampPolicy::ProcessingTime,
        "CreateTime" => TimestampPolicy::CreateTime,
        "LogAppendTime" => TimestampPolicy::LogAppendTime,
        other => return Err(format!("{T}: timestamp_policy '{other}' is not one of ProcessingTime, CreateTime, LogAppendTime")),
    };
    let commit_offset_in_finalize = flag(row, "commit_offset_in_finalize");
    if commit_offset_in_finalize && !consumer_config.contains_key("group.id") {
        return Err(format!("{T}: commit_offset_in_finalize needs a 'group.id' in consumer_config to commit to"));
    }
    if let Some(reset) = consumer_config.get("auto.offset.reset") {
        if !["earliest", "latest", "smallest", "largest"].contains(&reset.as_str()) {
            return Err(format!("{T}: consumer_config 'auto.offset.reset'='{reset}' is not supported; use 'earliest' or 'latest'"));
        }
    }
    let max_num_records = int(row, "max_num_records");
    if max_num_records.is_some_and(|n| n <= 0) {
        return Err(format!("{T}: max_num_records must be positive"));
    }
    let max_read_time_secs = int(row, "max_read_time");
    if max_read_time_secs.is_some_and(|n| n <= 0) {
        return Err(format!("{T}: max_read_time must be positive (seconds)"));
    }
    // Settings that ask for machinery this runner does not have (or need).
    if flag(row, "redistribute") {
        return Err(format!(
            "{T}: redistribute=True is not supported: beam-kafka reads every partition in its own task already; \
             add beam.Reshuffle() after the read to spread keys further"
        ));
    }
    if int(row, "dynamic_read_poll_interval_seconds").is_some() {
        return Err(format!("{T}: dynamic_read_poll_interval_seconds (partition discovery) is not supported by beam-kafka yet"));
    }
    if string(row, "consumer_factory_fn_class").is_some() {
        return Err(format!("{T}: consumer_factory_fn_class names a Java class; beam-kafka runs no Java"));
    }
    Ok(KafkaReadSpec {
        topics,
        consumer_config,
        key_format: key_format as i32,
        value_format: value_format as i32,
        start_read_time_millis: int(row, "start_read_time"),
        max_num_records,
        max_read_time_secs,
        commit_offset_in_finalize,
        timestamp_policy: timestamp_policy as i32,
        with_metadata,
    })
}

/// Checks a WriteToKafka configuration row and turns it into our spec.
pub fn write_spec(row: &Row, with_headers: bool) -> Result<KafkaWriteSpec, String> {
    const T: &str = "WriteToKafka";
    let producer_config = string_map(row, "producer_config")?;
    if !producer_config.contains_key("bootstrap.servers") {
        return Err(format!("{T}: producer_config has no 'bootstrap.servers'"));
    }
    let topic = string(row, "topic").filter(|t| !t.is_empty()).ok_or_else(|| format!("{T}: topic is missing"))?;
    let ser = |setting: &str| -> Result<KafkaFormat, String> {
        let class = string(row, setting).unwrap_or_else(|| format!("{SERDE_PACKAGE}ByteArraySerializer"));
        format_of(&class, "Serializer").ok_or_else(|| serde_error(T, setting, &class, "Serializer"))
    };
    let key_format = ser("key_serializer")?;
    let value_format = ser("value_serializer")?;
    if with_headers && (key_format != KafkaFormat::Bytes || value_format != KafkaFormat::Bytes) {
        return Err(format!("{T}: with_headers=True supports only ByteArraySerializer for key and value"));
    }
    Ok(KafkaWriteSpec { topic, producer_config, key_format: key_format as i32, value_format: value_format as i32, with_headers })
}

/// The Beam coder URN of values in `format`.
pub fn coder_urn(format: KafkaFormat) -> &'static str {
    match format {
        KafkaFormat::String => crate::codec::coder::STRING_UTF8,
        KafkaFormat::Long | KafkaFormat::Integer => crate::codec::coder::VARINT,
        KafkaFormat::Bytes | KafkaFormat::Unspecified => crate::urns::CODER_BYTES,
    }
}

/// The number Kafka's Long/Integer deserializer reads from `bytes`; fails
/// like them on bytes of the wrong size.
pub fn number(format: KafkaFormat, bytes: &[u8]) -> Result<i64, String> {
    match format {
        KafkaFormat::Long => {
            let b: [u8; 8] = bytes.try_into().map_err(|_| format!("LongDeserializer needs 8 bytes, got {}", bytes.len()))?;
            Ok(i64::from_be_bytes(b))
        }
        KafkaFormat::Integer => {
            let b: [u8; 4] = bytes.try_into().map_err(|_| format!("IntegerDeserializer needs 4 bytes, got {}", bytes.len()))?;
            Ok(i32::from_be_bytes(b) as i64)
        }
        other => Err(format!("{other:?} is not a number format")),
    }
}

/// Kafka bytes → the Beam nested encoding of `format`'s coder. Fails like
/// Kafka's deserializers do on bytes of the wrong size.
pub fn to_beam(format: KafkaFormat, bytes: &[u8], out: &mut Vec<u8>) -> Result<(), String> {
    match format {
        KafkaFormat::Bytes | KafkaFormat::Unspecified => {
            encode_varint(bytes.len() as u64, out);
            out.extend_from_slice(bytes);
        }
        KafkaFormat::String => {
            // As Java's StringDeserializer: invalid UTF-8 becomes U+FFFD.
            let s = String::from_utf8_lossy(bytes);
            encode_varint(s.len() as u64, out);
            out.extend_from_slice(s.as_bytes());
        }
        KafkaFormat::Long | KafkaFormat::Integer => encode_varint(number(format, bytes)? as u64, out),
    }
    Ok(())
}

/// A Kafka key or value that may be null, as `beam:coder:nullable:v1` of `format`.
pub fn to_beam_nullable(format: KafkaFormat, bytes: Option<&[u8]>, out: &mut Vec<u8>) -> Result<(), String> {
    match bytes {
        None => out.push(0),
        Some(b) => {
            out.push(1);
            to_beam(format, b, out)?;
        }
    }
    Ok(())
}

/// The Beam nested encoding of `format`'s coder at the start of `buf` → the
/// bytes Kafka's serializer would write, and how much of `buf` was read.
pub fn from_beam(format: KafkaFormat, buf: &[u8]) -> Result<(Vec<u8>, usize), String> {
    let (v, n) = decode_varint(buf).ok_or("element ends early")?;
    match format {
        KafkaFormat::Bytes | KafkaFormat::String | KafkaFormat::Unspecified => {
            let end = n.checked_add(v as usize).filter(|&e| e <= buf.len()).ok_or("element ends early")?;
            Ok((buf[n..end].to_vec(), end))
        }
        KafkaFormat::Long => Ok(((v as i64).to_be_bytes().to_vec(), n)),
        KafkaFormat::Integer => {
            let i = i32::try_from(v as i64).map_err(|_| format!("{} does not fit IntegerSerializer's 32 bits", v as i64))?;
            Ok((i.to_be_bytes().to_vec(), n))
        }
    }
}

/// Normalised `host:port` list, for telling whether two configs name one cluster.
pub fn same_cluster(a: &str, b: &str) -> bool {
    let norm = |s: &str| {
        let mut v: Vec<String> = s.split(',').map(|h| h.trim().to_ascii_lowercase()).filter(|h| !h.is_empty()).collect();
        v.sort();
        v.dedup();
        v
    };
    let (a, b) = (norm(a), norm(b));
    a.iter().any(|h| b.contains(h))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn row(fields: Vec<(&str, Value)>) -> Row {
        Row { fields: fields.into_iter().map(|(k, v)| (k.to_string(), v)).collect() }
    }

    fn s(v: &str) -> Value {
        Value::String(v.into())
    }

    fn base_read() -> Vec<(&'static str, Value)> {
        vec![
            ("consumer_config", Value::Map(vec![(s("bootstrap.servers"), s("h:9092")), (s("auto.offset.reset"), s("earliest"))])),
            ("topics", Value::List(vec![s("in")])),
            ("key_deserializer", s("org.apache.kafka.common.serialization.StringDeserializer")),
            ("value_deserializer", s("org.apache.kafka.common.serialization.LongDeserializer")),
            ("max_num_records", Value::Int(10)),
            ("timestamp_policy", s("CreateTime")),
        ]
    }

    #[test]
    fn a_read_config_becomes_a_spec() {
        let spec = read_spec(&row(base_read()), false).unwrap();
        assert_eq!(spec.topics, ["in"]);
        assert_eq!(spec.key_format(), KafkaFormat::String);
        assert_eq!(spec.value_format(), KafkaFormat::Long);
        assert_eq!(spec.timestamp_policy(), TimestampPolicy::CreateTime);
        assert_eq!(spec.max_num_records, Some(10));
        assert_eq!(spec.consumer_config["auto.offset.reset"], "earliest");
    }

    #[test]
    fn unsupported_settings_are_named() {
        let mut f = base_read();
        f[3].1 = s("io.confluent.kafka.serializers.KafkaAvroDeserializer");
        let err = read_spec(&row(f), false).unwrap_err();
        assert!(err.contains("value_deserializer") && err.contains("KafkaAvroDeserializer"), "{err}");
        let mut f = base_read();
        f.push(("commit_offset_in_finalize", Value::Bool(true)));
        assert!(read_spec(&row(f), false).unwrap_err().contains("group.id"));
        let mut f = base_read();
        f.push(("redistribute", Value::Bool(true)));
        assert!(read_spec(&row(f), false).unwrap_err().contains("redistribute"));
        let mut f = base_read();
        f[0].1 = Value::Map(vec![]);
        assert!(read_spec(&row(f), false).unwrap_err().contains("bootstrap.servers"));
        let w = row(vec![
            ("producer_config", Value::Map(vec![(s("bootstrap.servers"), s("h:1"))])),
            ("topic", s("out")),
            ("key_serializer", s("org.apache.kafka.common.serialization.DoubleSerializer")),
        ]);
        let err = write_spec(&w, false).unwrap_err();
        assert!(err.contains("key_serializer") && err.contains("DoubleSerializer"), "{err}");
    }

    #[test]
    fn kafka_bytes_map_to_beam_encodings_and_back() {
        for (format, kafka) in [
            (KafkaFormat::Bytes, vec![0u8, 1, 2]),
            (KafkaFormat::String, "héllo".as_bytes().to_vec()),
            (KafkaFormat::Long, (-5i64).to_be_bytes().to_vec()),
            (KafkaFormat::Integer, 70000i32.to_be_bytes().to_vec()),
        ] {
            let mut beam = Vec::new();
            to_beam(format, &kafka, &mut beam).unwrap();
            let (back, used) = from_beam(format, &beam).unwrap();
            assert_eq!((back, used), (kafka, beam.len()), "{format:?}");
        }
        let mut beam = Vec::new();
        to_beam(KafkaFormat::Long, &(300i64).to_be_bytes(), &mut beam).unwrap();
        assert_eq!(beam, [0xac, 0x02]);
        assert!(to_beam(KafkaFormat::Long, &[1, 2], &mut beam).unwrap_err().contains("8 bytes"));
        let mut big = Vec::new();
        encode_varint(1u64 << 40, &mut big);
        assert!(from_beam(KafkaFormat::Integer, &big).is_err());
        let mut n = Vec::new();
        to_beam_nullable(KafkaFormat::Bytes, None, &mut n).unwrap();
        assert_eq!(n, [0]);
    }

    #[test]
    fn clusters_compare_by_any_shared_broker() {
        assert!(same_cluster("a:1, b:2", "B:2"));
        assert!(!same_cluster("a:1", "a:2"));
    }
}
