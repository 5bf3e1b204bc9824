//! ReadFromKafka's per-partition logic, free of I/O: a Kafka record becomes a
//! Beam element (timestamp by the timestamp policy, value by the formats),
//! and each partition keeps its own watermark.
//!
//! Watermarks: under ProcessingTime the watermark is the clock. Under
//! CreateTime and LogAppendTime it is the largest record timestamp seen; a
//! partition that has been caught up and silent for the idle timeout moves
//! it to `now - idle timeout`, so idle partitions do not hold the pipeline
//! back (a record older than that arriving later is late, as with Beam's Java
//! timestamp policies).
use beam_kafka_proto::envelope::{KafkaFormat, KafkaReadSpec, TimestampPolicy};

use crate::codec::coders::{encode_global_windowed_value, encode_varint};
use crate::codec::row::{self, Row, Value};
use crate::codec::timestamp::{Millis, Watermark, MIN_TIMESTAMP};
use crate::kafka::io::{number, to_beam_nullable};
use crate::pb;
use crate::plan::expansion::record_schema;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum TimestampKind {
    NotAvailable,
    CreateTime,
    LogAppendTime,
}

/// One Kafka record as the source sees it.
pub struct KafkaRecord<'a> {
    pub topic: &'a str,
    pub partition: i32,
    pub offset: i64,
    pub key: Option<&'a [u8]>,
    pub value: Option<&'a [u8]>,
    pub timestamp: Millis,
    pub timestamp_kind: TimestampKind,
    pub headers: &'a [(String, Option<Vec<u8>>)],
}

/// The event-time clock of one partition.
#[derive(Clone, Debug)]
pub struct PartitionClock {
    policy: TimestampPolicy,
    idle_ms: i64,
    watermark: Watermark,
    last_record_at: Millis,
}

impl PartitionClock {
    pub fn new(policy: TimestampPolicy, idle_ms: i64, now: Millis) -> Self {
        PartitionClock { policy, idle_ms, watermark: Watermark::NegInf, last_record_at: now }
    }

    pub fn watermark(&self) -> Watermark {
        self.watermark
    }

    /// The element timestamp of `r`, read at `now`; advances the watermark.
    pub fn on_record(&mut self, r: &KafkaRecord, now: Millis) -> Result<Millis, String> {
        self.last_record_at = now;
        let ts = match self.policy {
            TimestampPolicy::ProcessingTime | TimestampPolicy::Unspecified => now,
            TimestampPolicy::CreateTime => {
                if r.timestamp_kind == TimestampKind::NotAvailable || r.timestamp < 0 {
                    return Err(format!(
                        "record {}[{}]@{} has no timestamp, and timestamp_policy is CreateTime",
                        r.topic, r.partition, r.offset
                    ));
                }
                r.timestamp
            }
            TimestampPolicy::LogAppendTime => {
                if r.timestamp_kind != TimestampKind::LogAppendTime {
                    return Err(format!(
                        "record {}[{}]@{} carries a {:?} timestamp, and timestamp_policy is LogAppendTime; \
                         set the topic's message.timestamp.type=LogAppendTime or use CreateTime",
                        r.topic, r.partition, r.offset, r.timestamp_kind
                    ));
                }
                r.timestamp
            }
        };
        self.advance(Watermark::At(ts.max(MIN_TIMESTAMP)));
        Ok(ts)
    }

    /// No record for the idle timeout.
    pub fn is_idle(&self, now: Millis) -> bool {
        now - self.last_record_at >= self.idle_ms
    }

    /// Periodic check; `caught_up` says the partition has no backlog.
    pub fn on_tick(&mut self, now: Millis, caught_up: bool) -> Watermark {
        match self.policy {
            TimestampPolicy::ProcessingTime | TimestampPolicy::Unspecified => self.advance(Watermark::At(now)),
            _ if caught_up && now - self.last_record_at >= self.idle_ms => self.advance(Watermark::At(now - self.idle_ms)),
            _ => {}
        }
        self.watermark
    }

    /// The partition's read is over (a bounded read reached its end).
    pub fn finish(&mut self) {
        self.watermark = Watermark::PosInf;
    }

    fn advance(&mut self, wm: Watermark) {
        self.watermark = self.watermark.max(wm);
    }
}

/// Turns Kafka records of one ReadFromKafka into the Beam elements its stage
/// reads: windowed values in the global window whose value is KV(nullable
/// key, nullable value) or a metadata row. Built once per source.
pub struct ElementEncoder {
    spec: KafkaReadSpec,
    /// The metadata row schema, for `with_metadata` reads.
    schema: Option<pb::Schema>,
    /// The stage reads the value length-prefixed.
    length_prefix: bool,
}

fn field(format: KafkaFormat, bytes: Option<&[u8]>) -> Result<Value, String> {
    let Some(b) = bytes else { return Ok(Value::Null) };
    Ok(match format {
        KafkaFormat::String => Value::String(String::from_utf8_lossy(b).into_owned()),
        KafkaFormat::Long | KafkaFormat::Integer => Value::Int(number(format, b)?),
        _ => Value::Bytes(b.to_vec()),
    })
}

impl ElementEncoder {
    pub fn new(spec: KafkaReadSpec, length_prefix: bool) -> Self {
        let schema = spec.with_metadata.then(|| record_schema(spec.key_format(), spec.value_format()));
        ElementEncoder { spec, schema, length_prefix }
    }

    pub fn spec(&self) -> &KafkaReadSpec {
        &self.spec
    }

    /// The element for `r` at `timestamp`, appended to `out`.
    pub fn encode(&self, r: &KafkaRecord, timestamp: Millis, out: &mut Vec<u8>) -> Result<(), String> {
        let spec = &self.spec;
        let mut value = Vec::new();
        if let Some(schema) = &self.schema {
            let headers = r
                .headers
                .iter()
                .map(|(k, v)| {
                    Value::Row(Row {
                        fields: vec![
                            ("key".into(), Value::String(k.clone())),
                            ("value".into(), v.clone().map_or(Value::Null, Value::Bytes)),
                        ],
                    })
                })
                .collect();
            let (type_id, type_name) = match r.timestamp_kind {
                TimestampKind::NotAvailable => (-1, "NoTimestampType"),
                TimestampKind::CreateTime => (0, "CreateTime"),
                TimestampKind::LogAppendTime => (1, "LogAppendTime"),
            };
            let values = vec![
                Value::String(r.topic.to_string()),
                Value::Int(r.partition as i64),
                Value::Int(r.offset),
                Value::Int(r.timestamp),
                Value::Int(type_id),
                Value::String(type_name.into()),
                field(spec.key_format(), r.key)?,
                field(spec.value_format(), r.value)?,
                Value::List(headers),
            ];
            row::encode(schema, &values, &mut value)?;
        } else {
            to_beam_nullable(spec.key_format(), r.key, &mut value)
                .map_err(|e| format!("key of {}[{}]@{}: {e}", r.topic, r.partition, r.offset))?;
            to_beam_nullable(spec.value_format(), r.value, &mut value)
                .map_err(|e| format!("value of {}[{}]@{}: {e}", r.topic, r.partition, r.offset))?;
        }
        if self.length_prefix {
            let mut prefixed = Vec::with_capacity(value.len() + 5);
            encode_varint(value.len() as u64, &mut prefixed);
            prefixed.extend_from_slice(&value);
            value = prefixed;
        }
        encode_global_windowed_value(timestamp, &value, out);
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn record<'a>(ts: Millis, kind: TimestampKind, value: Option<&'a [u8]>) -> KafkaRecord<'a> {
        KafkaRecord { topic: "t", partition: 2, offset: 7, key: None, value, timestamp: ts, timestamp_kind: kind, headers: &[] }
    }

    #[test]
    fn create_time_watermark_follows_records_then_idles_forward() {
        let mut c = PartitionClock::new(TimestampPolicy::CreateTime, 1000, 50_000);
        assert_eq!(c.on_record(&record(10_000, TimestampKind::CreateTime, None), 50_000).unwrap(), 10_000);
        c.on_record(&record(8_000, TimestampKind::CreateTime, None), 50_100).unwrap();
        assert_eq!(c.watermark(), Watermark::At(10_000));
        // Not idle long enough, or not caught up: no move.
        assert_eq!(c.on_tick(50_500, true), Watermark::At(10_000));
        assert_eq!(c.on_tick(60_000, false), Watermark::At(10_000));
        assert_eq!(c.on_tick(60_000, true), Watermark::At(59_000));
        c.finish();
        assert_eq!(c.on_tick(70_000, true), Watermark::PosInf);
    }

    #[test]
    fn log_append_time_refuses_create_time_records() {
        let mut c = PartitionClock::new(TimestampPolicy::LogAppendTime, 1000, 0);
        let err = c.on_record(&record(5, TimestampKind::CreateTime, None), 1).unwrap_err();
        assert!(err.contains("LogAppendTime") && err.contains("t[2]@7"), "{err}");
        let mut p = PartitionClock::new(TimestampPolicy::ProcessingTime, 1000, 0);
        assert_eq!(p.on_record(&record(5, TimestampKind::CreateTime, None), 42).unwrap(), 42);
        assert_eq!(p.on_tick(100, false), Watermark::At(100));
    }

    #[test]
    fn an_element_is_a_global_windowed_kv_of_nullables() {
        let spec = KafkaReadSpec { key_format: KafkaFormat::Bytes as i32, value_format: KafkaFormat::Long as i32, ..Default::default() };
        let v = 3i64.to_be_bytes();
        let mut out = Vec::new();
        let enc = ElementEncoder::new(spec, false);
        enc.encode(&record(0, TimestampKind::CreateTime, Some(&v)), 1000, &mut out).unwrap();
        let mut want = Vec::new();
        encode_global_windowed_value(1000, &[0, 1, 3], &mut want);
        assert_eq!(out, want);
        let short = [1u8];
        assert!(enc.encode(&record(0, TimestampKind::CreateTime, Some(&short)), 0, &mut out).unwrap_err().contains("t[2]@7"));
    }

    #[test]
    fn a_metadata_element_is_a_row_readable_with_its_schema() {
        let spec = KafkaReadSpec { key_format: 1, value_format: 2, with_metadata: true, ..Default::default() };
        let headers = vec![("h".to_string(), Some(b"x".to_vec()))];
        let r = KafkaRecord { headers: &headers, key: Some(b"k"), ..record(99, TimestampKind::CreateTime, Some(b"v")) };
        let mut out = Vec::new();
        ElementEncoder::new(spec.clone(), true).encode(&r, 99, &mut out).unwrap();
        let mut plain = Vec::new();
        ElementEncoder::new(spec, false).encode(&r, 99, &mut plain).unwrap();
        // Header: 8 bytes timestamp, 4 window count, 1 pane.
        let value = &plain[13..];
        let row = row::decode(&record_schema(KafkaFormat::Bytes, KafkaFormat::String), value).unwrap();
        assert_eq!(row.get("offset"), Some(&Value::Int(7)));
        assert_eq!(row.get("value"), Some(&Value::String("v".into())));
        assert_eq!(row.get("timestampTypeName"), Some(&Value::String("CreateTime".into())));
        assert_eq!(out.len(), plain.len() + 1, "one length byte");
    }
}
