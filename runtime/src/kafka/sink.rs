//! WriteToKafka's element decoding, free of I/O: a Beam element (as the
//! stage's data sink writes it) becomes the key, value and headers of one
//! Kafka record, encoded as the configured serializers would.
use beam_kafka_proto::envelope::{KafkaFormat, KafkaWriteSpec};

use crate::codec::coder::Coder;
use crate::codec::coders::decode_varint;
use crate::codec::row::{self, Value};
use crate::codec::windowed;
use crate::kafka::io::from_beam;
use crate::pb;

/// One record to write.
#[derive(Clone, Debug, PartialEq, Default)]
pub struct OutRecord {
    pub key: Option<Vec<u8>>,
    pub value: Option<Vec<u8>>,
    pub headers: Vec<(String, Option<Vec<u8>>)>,
    /// Per-record overrides (with_headers rows only).
    pub topic: Option<String>,
    pub partition: Option<i32>,
    pub timestamp: Option<i64>,
}

/// How a sink reads its input's elements.
#[derive(Clone, Debug)]
pub struct SinkCodec {
    pub spec: KafkaWriteSpec,
    /// The wire coders of the input PCollection.
    pub element: Coder,
    pub window: Coder,
    /// The row schema of with_headers input.
    pub row_schema: Option<pb::Schema>,
}

fn read_side(coder: &Coder, format: KafkaFormat, buf: &[u8]) -> Result<(Option<Vec<u8>>, usize), String> {
    match coder {
        Coder::Nullable(inner) => match buf.first() {
            Some(0) => Ok((None, 1)),
            Some(_) => {
                let (v, n) = read_side(inner, format, &buf[1..])?;
                Ok((v, n + 1))
            }
            None => Err("element ends early".into()),
        },
        Coder::LengthPrefix(inner) => {
            let (len, n) = decode_varint(buf).ok_or("element ends early")?;
            let end = n + len as usize;
            let body = buf.get(n..end).ok_or("element ends early")?;
            let (v, _) = read_side(inner, format, body)?;
            Ok((v, end))
        }
        _ => {
            let (v, n) = from_beam(format, buf)?;
            Ok((Some(v), n))
        }
    }
}

impl SinkCodec {
    /// Decodes the element at the start of `buf`; returns it and its length.
    pub fn decode(&self, buf: &[u8]) -> Result<(OutRecord, usize), String> {
        let h = windowed::split(buf, &self.window)?;
        let at = h.value_offset;
        if let Some(schema) = &self.row_schema {
            let (body_at, len) = match &self.element {
                Coder::LengthPrefix(_) => {
                    let (len, n) = decode_varint(&buf[at..]).ok_or("element ends early")?;
                    (at + n, len as usize)
                }
                _ => (at, row::skip(schema, &buf[at..])?),
            };
            let body = buf.get(body_at..body_at + len).ok_or("element ends early")?;
            let r = row::decode(schema, body)?;
            let bytes = |n: &str| match r.get(n) {
                Some(Value::Bytes(b)) => Some(b.clone()),
                Some(Value::String(s)) => Some(s.clone().into_bytes()),
                _ => None,
            };
            let headers = match r.get("headers") {
                Some(Value::List(items)) => items
                    .iter()
                    .filter_map(|h| match h {
                        Value::Row(h) => Some((
                            match h.get("key") {
                                Some(Value::String(s)) => s.clone(),
                                _ => String::new(),
                            },
                            match h.get("value") {
                                Some(Value::Bytes(b)) => Some(b.clone()),
                                _ => None,
                            },
                        )),
                        _ => None,
                    })
                    .collect(),
                _ => Vec::new(),
            };
            let int = |n: &str| if let Some(Value::Int(i)) = r.get(n) { Some(*i) } else { None };
            let out = OutRecord {
                key: bytes("key"),
                value: bytes("value"),
                headers,
                topic: if let Some(Value::String(t)) = r.get("topic") { Some(t.clone()) } else { None },
                partition: int("partition").map(|p| p as i32),
                timestamp: int("timestamp"),
            };
            return Ok((out, body_at + len));
        }
        let Coder::Kv(kc, vc) = &self.element else {
            return Err(format!("WriteToKafka expects key/value elements, its input is coded {:?}", self.element));
        };
        let (key, kn) = read_side(kc, self.spec.key_format(), &buf[at..])?;
        let (value, vn) = read_side(vc, self.spec.value_format(), &buf[at + kn..])?;
        Ok((OutRecord { key, value, ..Default::default() }, at + kn + vn))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::codec::coders::encode_global_windowed_value;
    use crate::codec::row::schema;

    #[test]
    fn kv_elements_become_serialized_records() {
        let spec = KafkaWriteSpec { key_format: KafkaFormat::String as i32, value_format: KafkaFormat::Long as i32, ..Default::default() };
        let codec = SinkCodec {
            spec,
            element: Coder::Kv(Box::new(Coder::StringUtf8), Box::new(Coder::Nullable(Box::new(Coder::Varint)))),
            window: Coder::GlobalWindow,
            row_schema: None,
        };
        let mut buf = Vec::new();
        encode_global_windowed_value(5, &[2, b'h', b'i', 1, 0xac, 0x02], &mut buf);
        encode_global_windowed_value(6, &[1, b'x', 0], &mut buf);
        let (first, n) = codec.decode(&buf).unwrap();
        assert_eq!(first.key.as_deref(), Some(&b"hi"[..]));
        assert_eq!(first.value, Some(300i64.to_be_bytes().to_vec()));
        let (second, m) = codec.decode(&buf[n..]).unwrap();
        assert_eq!((second.key.as_deref(), second.value), (Some(&b"x"[..]), None));
        assert_eq!(n + m, buf.len());
    }

    #[test]
    fn header_rows_carry_headers_and_overrides() {
        use pb::AtomicType as A;
        let header = schema::new("h", vec![("key", schema::atomic(A::String, false)), ("value", schema::atomic(A::Bytes, false))]);
        let s = schema::new(
            "r",
            vec![
                ("key", schema::atomic(A::Bytes, false)),
                ("value", schema::atomic(A::Bytes, false)),
                ("headers", schema::array(schema::row(header, false), true)),
                ("partition", schema::atomic(A::Int32, true)),
            ],
        );
        let h = Value::Row(row::Row {
            fields: vec![("key".into(), Value::String("trace".into())), ("value".into(), Value::Bytes(b"1".to_vec()))],
        });
        let mut body = Vec::new();
        row::encode(&s, &[Value::Bytes(b"k".to_vec()), Value::Bytes(b"v".to_vec()), Value::List(vec![h]), Value::Int(3)], &mut body)
            .unwrap();
        let mut lp = vec![body.len() as u8];
        lp.extend_from_slice(&body);
        let mut buf = Vec::new();
        encode_global_windowed_value(0, &lp, &mut buf);
        let codec = SinkCodec {
            spec: KafkaWriteSpec { with_headers: true, ..Default::default() },
            element: Coder::LengthPrefix(Box::new(Coder::Opaque("row".into()))),
            window: Coder::GlobalWindow,
            row_schema: Some(s),
        };
        let (r, n) = codec.decode(&buf).unwrap();
        assert_eq!(n, buf.len());
        assert_eq!(r.headers, vec![("trace".to_string(), Some(b"1".to_vec()))]);
        assert_eq!((r.key, r.partition, r.topic), (Some(b"k".to_vec()), Some(3), None));
    }
}
