//! Beam rows (`beam:coder:row:v1`) read and written against their schema.
//!
//! External transforms send their configuration as a row, and Kafka records
//! with metadata travel as rows. The encoding: a varint field count, a null
//! bitmap (varint length + bytes, bit i set when field i is null), then each
//! non-null field in its field type's nested encoding.
use crate::codec::coders::{decode_varint, encode_varint};
use crate::pb;
use crate::pb::field_type::TypeInfo;

#[derive(Clone, Debug, PartialEq)]
pub enum Value {
    Null,
    Bool(bool),
    /// BYTE, INT16, INT32 and INT64.
    Int(i64),
    /// FLOAT and DOUBLE.
    Double(f64),
    String(String),
    Bytes(Vec<u8>),
    /// ARRAY and ITERABLE.
    List(Vec<Value>),
    Map(Vec<(Value, Value)>),
    Row(Row),
}

/// A decoded row: its values in schema field order, with the field names.
#[derive(Clone, Debug, PartialEq, Default)]
pub struct Row {
    pub fields: Vec<(String, Value)>,
}

impl Row {
    /// The field `name`, else the one spelled alike but for case and
    /// underscores: Python sends `producer_config`, Go `ProducerConfig`.
    pub fn get(&self, name: &str) -> Option<&Value> {
        let loose = |n: &str| n.chars().filter(|c| *c != '_').map(|c| c.to_ascii_lowercase()).collect::<String>();
        let field = self.fields.iter().find(|(n, _)| n == name).or_else(|| {
            let wanted = loose(name);
            self.fields.iter().find(|(n, _)| loose(n) == wanted)
        });
        field.map(|(_, v)| v).filter(|v| **v != Value::Null)
    }
}

struct Reader<'a> {
    buf: &'a [u8],
    at: usize,
}

impl<'a> Reader<'a> {
    fn take(&mut self, n: usize) -> Result<&'a [u8], String> {
        let end = self.at.checked_add(n).filter(|&e| e <= self.buf.len()).ok_or("row ends early")?;
        let s = &self.buf[self.at..end];
        self.at = end;
        Ok(s)
    }
    fn varint(&mut self) -> Result<u64, String> {
        let (v, n) = decode_varint(&self.buf[self.at..]).ok_or("row ends inside a varint")?;
        self.at += n;
        Ok(v)
    }
    fn remaining(&self) -> usize {
        self.buf.len() - self.at
    }
    fn be_i32(&mut self) -> Result<i32, String> {
        Ok(i32::from_be_bytes(self.take(4)?.try_into().expect("4 bytes")))
    }
}

/// Decodes a row encoded with `schema` (nested or outer context alike: a row
/// is self-delimiting).
pub fn decode(schema: &pb::Schema, buf: &[u8]) -> Result<Row, String> {
    let mut r = Reader { buf, at: 0 };
    let row = read_row(schema, &mut r)?;
    Ok(row)
}

/// How many bytes the row at the start of `buf` takes.
pub fn skip(schema: &pb::Schema, buf: &[u8]) -> Result<usize, String> {
    let mut r = Reader { buf, at: 0 };
    read_row(schema, &mut r)?;
    Ok(r.at)
}

/// Fields in the order they are encoded.
fn encoding_order(schema: &pb::Schema) -> Vec<usize> {
    let mut order: Vec<usize> = (0..schema.fields.len()).collect();
    if schema.encoding_positions_set {
        order.sort_by_key(|&i| schema.fields[i].encoding_position);
    }
    order
}

fn read_row(schema: &pb::Schema, r: &mut Reader) -> Result<Row, String> {
    let count = r.varint()? as usize;
    let bitmap_len = r.varint()? as usize;
    let bitmap = r.take(bitmap_len)?.to_vec();
    let is_null = |i: usize| bitmap.get(i / 8).is_some_and(|b| b & (1 << (i % 8)) != 0);
    let order = encoding_order(schema);
    let mut values = vec![Value::Null; schema.fields.len()];
    for (pos, &field) in order.iter().enumerate() {
        // Fields beyond the encoded count are absent (an older writer).
        if pos >= count || is_null(pos) {
            continue;
        }
        let f = &schema.fields[field];
        let ty = f.r#type.as_ref().ok_or_else(|| format!("field '{}' has no type", f.name))?;
        values[field] = read_value(ty, r).map_err(|e| format!("field '{}': {e}", f.name))?;
    }
    // A newer writer's extra fields cannot be skipped without their types.
    if count > order.len() {
        return Err(format!("row has {count} fields, its schema {}", order.len()));
    }
    Ok(Row { fields: schema.fields.iter().map(|f| f.name.clone()).zip(values).collect() })
}

fn read_value(ty: &pb::FieldType, r: &mut Reader) -> Result<Value, String> {
    use pb::AtomicType as A;
    match ty.type_info.as_ref().ok_or("field type is empty")? {
        TypeInfo::AtomicType(a) => match A::try_from(*a).unwrap_or(A::Unspecified) {
            A::Byte => Ok(Value::Int(r.take(1)?[0] as i8 as i64)),
            A::Int16 => Ok(Value::Int(i16::from_be_bytes(r.take(2)?.try_into().expect("2")) as i64)),
            A::Int32 | A::Int64 => Ok(Value::Int(r.varint()? as i64)),
            A::Float => Ok(Value::Double(f32::from_be_bytes(r.take(4)?.try_into().expect("4")) as f64)),
            A::Double => Ok(Value::Double(f64::from_be_bytes(r.take(8)?.try_into().expect("8")))),
            A::Boolean => Ok(Value::Bool(r.take(1)?[0] != 0)),
            A::String => {
                let n = r.varint()? as usize;
                String::from_utf8(r.take(n)?.to_vec()).map(Value::String).map_err(|_| "a string is not UTF-8".into())
            }
            A::Bytes => {
                let n = r.varint()? as usize;
                Ok(Value::Bytes(r.take(n)?.to_vec()))
            }
            A::Unspecified => Err(format!("unsupported atomic type {a}")),
        },
        TypeInfo::ArrayType(a) => read_list(a.element_type.as_deref(), r),
        TypeInfo::IterableType(a) => read_list(a.element_type.as_deref(), r),
        TypeInfo::MapType(m) => {
            let (k, v) = (m.key_type.as_deref().ok_or("map without key type")?, m.value_type.as_deref().ok_or("map without value type")?);
            let n = r.be_i32()?;
            // Every entry takes a byte at least: a count beyond the bytes
            // left is a lie, refused before anything is allocated for it.
            if n as i64 > r.remaining() as i64 {
                return Err(format!("a map claims {n} entries in {} byte(s)", r.remaining()));
            }
            let mut entries = Vec::with_capacity(n.max(0) as usize);
            for _ in 0..n {
                let key = read_value(k, r)?;
                // Map values are nullable: a marker byte comes first.
                let value = if v.nullable { read_nullable(v, r)? } else { read_value(v, r)? };
                entries.push((key, value));
            }
            Ok(Value::Map(entries))
        }
        TypeInfo::RowType(rt) => Ok(Value::Row(read_row(rt.schema.as_ref().ok_or("row type without schema")?, r)?)),
        TypeInfo::LogicalType(l) => read_value(l.representation.as_deref().ok_or("logical type without representation")?, r),
    }
}

fn read_nullable(ty: &pb::FieldType, r: &mut Reader) -> Result<Value, String> {
    match r.take(1)?[0] {
        0 => Ok(Value::Null),
        _ => read_value(ty, r),
    }
}

fn read_list(elem: Option<&pb::FieldType>, r: &mut Reader) -> Result<Value, String> {
    let elem = elem.ok_or("list without element type")?;
    let read_one = |r: &mut Reader| if elem.nullable { read_nullable(elem, r) } else { read_value(elem, r) };
    let n = r.be_i32()?;
    if n as i64 > r.remaining() as i64 {
        return Err(format!("a list claims {n} items in {} byte(s)", r.remaining()));
    }
    let mut items = Vec::new();
    if n >= 0 {
        for _ in 0..n {
            items.push(read_one(r)?);
        }
    } else {
        // Unknown length: chunks of (varint count, elements), ended by 0.
        loop {
            let chunk = r.varint()?;
            if chunk == 0 {
                break;
            }
            for _ in 0..chunk {
                items.push(read_one(r)?);
            }
        }
    }
    Ok(Value::List(items))
}

/// Encodes `values` (in schema field order) as a row of `schema`.
pub fn encode(schema: &pb::Schema, values: &[Value], out: &mut Vec<u8>) -> Result<(), String> {
    if values.len() != schema.fields.len() {
        return Err(format!("{} values for {} fields", values.len(), schema.fields.len()));
    }
    let order = encoding_order(schema);
    encode_varint(order.len() as u64, out);
    let nulls: Vec<bool> = order.iter().map(|&i| values[i] == Value::Null).collect();
    if nulls.iter().any(|&n| n) {
        let mut bitmap = vec![0u8; order.len().div_ceil(8)];
        for (i, _) in nulls.iter().enumerate().filter(|(_, n)| **n) {
            bitmap[i / 8] |= 1 << (i % 8);
        }
        encode_varint(bitmap.len() as u64, out);
        out.extend_from_slice(&bitmap);
    } else {
        encode_varint(0, out);
    }
    for &i in &order {
        let f = &schema.fields[i];
        if values[i] == Value::Null {
            if !f.r#type.as_ref().is_some_and(|t| t.nullable) {
                return Err(format!("field '{}' is not nullable", f.name));
            }
            continue;
        }
        let ty = f.r#type.as_ref().ok_or_else(|| format!("field '{}' has no type", f.name))?;
        write_value(ty, &values[i], out).map_err(|e| format!("field '{}': {e}", f.name))?;
    }
    Ok(())
}

fn write_value(ty: &pb::FieldType, v: &Value, out: &mut Vec<u8>) -> Result<(), String> {
    use pb::AtomicType as A;
    match (ty.type_info.as_ref().ok_or("field type is empty")?, v) {
        (TypeInfo::AtomicType(a), v) => match (A::try_from(*a).unwrap_or(A::Unspecified), v) {
            (A::Byte, Value::Int(i)) => out.push(*i as u8),
            (A::Int16, Value::Int(i)) => out.extend_from_slice(&(*i as i16).to_be_bytes()),
            (A::Int32 | A::Int64, Value::Int(i)) => encode_varint(*i as u64, out),
            (A::Float, Value::Double(d)) => out.extend_from_slice(&(*d as f32).to_be_bytes()),
            (A::Double, Value::Double(d)) => out.extend_from_slice(&d.to_be_bytes()),
            (A::Boolean, Value::Bool(b)) => out.push(*b as u8),
            (A::String, Value::String(s)) => {
                encode_varint(s.len() as u64, out);
                out.extend_from_slice(s.as_bytes());
            }
            (A::Bytes, Value::Bytes(b)) => {
                encode_varint(b.len() as u64, out);
                out.extend_from_slice(b);
            }
            (a, v) => return Err(format!("cannot write {v:?} as {a:?}")),
        },
        (TypeInfo::ArrayType(_) | TypeInfo::IterableType(_), Value::List(items)) => {
            let elem = match ty.type_info.as_ref() {
                Some(TypeInfo::ArrayType(a)) => a.element_type.as_deref(),
                Some(TypeInfo::IterableType(a)) => a.element_type.as_deref(),
                _ => None,
            }
            .ok_or("list without element type")?;
            out.extend_from_slice(&(items.len() as i32).to_be_bytes());
            for item in items {
                write_maybe_null(elem, item, out)?;
            }
        }
        (TypeInfo::MapType(m), Value::Map(entries)) => {
            let (k, val) = (m.key_type.as_deref().ok_or("map without key type")?, m.value_type.as_deref().ok_or("map without value type")?);
            out.extend_from_slice(&(entries.len() as i32).to_be_bytes());
            for (key, value) in entries {
                write_value(k, key, out)?;
                write_maybe_null(val, value, out)?;
            }
        }
        (TypeInfo::RowType(rt), Value::Row(row)) => {
            let values: Vec<Value> = row.fields.iter().map(|(_, v)| v.clone()).collect();
            encode(rt.schema.as_ref().ok_or("row type without schema")?, &values, out)?;
        }
        (TypeInfo::LogicalType(l), v) => write_value(l.representation.as_deref().ok_or("logical type without representation")?, v, out)?,
        (t, v) => return Err(format!("cannot write {v:?} as {t:?}")),
    }
    Ok(())
}

fn write_maybe_null(ty: &pb::FieldType, v: &Value, out: &mut Vec<u8>) -> Result<(), String> {
    if !ty.nullable {
        return write_value(ty, v, out);
    }
    if *v == Value::Null {
        out.push(0);
        Ok(())
    } else {
        out.push(1);
        write_value(ty, v, out)
    }
}

/// Schema building helpers (for the rows the runner itself produces).
pub mod schema {
    use super::*;

    pub fn atomic(a: pb::AtomicType, nullable: bool) -> pb::FieldType {
        pb::FieldType { nullable, type_info: Some(TypeInfo::AtomicType(a as i32)) }
    }

    pub fn array(elem: pb::FieldType, nullable: bool) -> pb::FieldType {
        pb::FieldType { nullable, type_info: Some(TypeInfo::ArrayType(Box::new(pb::ArrayType { element_type: Some(Box::new(elem)) }))) }
    }

    pub fn map(k: pb::FieldType, v: pb::FieldType, nullable: bool) -> pb::FieldType {
        pb::FieldType {
            nullable,
            type_info: Some(TypeInfo::MapType(Box::new(pb::MapType { key_type: Some(Box::new(k)), value_type: Some(Box::new(v)) }))),
        }
    }

    pub fn row(schema: pb::Schema, nullable: bool) -> pb::FieldType {
        pb::FieldType { nullable, type_info: Some(TypeInfo::RowType(pb::RowType { schema: Some(schema) })) }
    }

    pub fn new(id: &str, fields: Vec<(&str, pb::FieldType)>) -> pb::Schema {
        pb::Schema {
            id: id.to_string(),
            fields: fields
                .into_iter()
                .enumerate()
                .map(|(i, (name, ty))| pb::Field { name: name.to_string(), r#type: Some(ty), id: i as i32, ..Default::default() })
                .collect(),
            ..Default::default()
        }
    }
}

#[cfg(test)]
mod tests {
    use super::schema::*;
    use super::*;
    use pb::AtomicType as A;

    fn config_schema() -> pb::Schema {
        new(
            "cfg",
            vec![
                ("consumer_config", map(atomic(A::String, false), atomic(A::String, false), false)),
                ("topics", array(atomic(A::String, false), false)),
                ("max_num_records", atomic(A::Int64, true)),
                ("commit", atomic(A::Boolean, false)),
                ("keys", atomic(A::Int32, true)),
            ],
        )
    }

    #[test]
    fn a_row_round_trips_with_nulls_maps_and_lists() {
        let s = config_schema();
        let values = vec![
            Value::Map(vec![(Value::String("bootstrap.servers".into()), Value::String("h:1".into()))]),
            Value::List(vec![Value::String("in".into()), Value::String("other".into())]),
            Value::Null,
            Value::Bool(true),
            Value::Int(-3),
        ];
        let mut buf = Vec::new();
        encode(&s, &values, &mut buf).unwrap();
        // Count 5, a one-byte bitmap with field 2 null.
        assert_eq!(&buf[..3], &[5, 1, 0b100]);
        let row = decode(&s, &buf).unwrap();
        assert_eq!(row.get("max_num_records"), None);
        assert_eq!(row.get("keys"), Some(&Value::Int(-3)));
        assert_eq!(row.get("topics"), Some(&values[1]));
        assert_eq!(skip(&s, &buf).unwrap(), buf.len());
    }

    #[test]
    fn reads_the_bytes_python_writes_for_a_kafka_write_config() {
        // apache_beam 2.73 WriteToKafka(producer_config={'bootstrap.servers': 'b'}, topic='out'):
        // 4 fields, empty bitmap, a map of one entry, then three strings.
        let mut buf = vec![4, 0, 0, 0, 0, 1, 17];
        buf.extend_from_slice(b"bootstrap.servers");
        buf.extend_from_slice(&[1, b'b', 3]);
        buf.extend_from_slice(b"out");
        for _ in 0..2 {
            buf.push(57);
            buf.extend_from_slice(b"org.apache.kafka.common.serialization.ByteArraySerializer");
        }
        let s = new(
            "w",
            vec![
                ("producer_config", map(atomic(A::String, false), atomic(A::String, false), false)),
                ("topic", atomic(A::String, false)),
                ("key_serializer", atomic(A::String, false)),
                ("value_serializer", atomic(A::String, false)),
            ],
        );
        let row = decode(&s, &buf).unwrap();
        assert_eq!(row.get("topic"), Some(&Value::String("out".into())));
        assert_eq!(
            row.get("producer_config"),
            Some(&Value::Map(vec![(Value::String("bootstrap.servers".into()), Value::String("b".into()))]))
        );
    }

    #[test]
    fn a_truncated_row_is_an_error_not_a_panic() {
        let s = config_schema();
        let mut buf = Vec::new();
        encode(
            &s,
            &[Value::Map(vec![]), Value::List(vec![Value::String("t".into())]), Value::Int(1), Value::Bool(false), Value::Null],
            &mut buf,
        )
        .unwrap();
        for cut in 0..buf.len() {
            assert!(decode(&s, &buf[..cut]).is_err(), "cut at {cut}");
        }
    }

    #[test]
    fn a_map_or_list_claiming_2_pow_31_entries_is_refused_before_allocating() {
        let s = config_schema();
        // Count 1, empty bitmap, then the map's entry count.
        let mut buf = vec![1, 0];
        buf.extend_from_slice(&i32::MAX.to_be_bytes());
        buf.extend_from_slice(&[0; 16]);
        let e = decode(&s, &buf).unwrap_err();
        assert!(e.contains("claims 2147483647 entries"), "{e}");
        let list = new("l", vec![("topics", array(atomic(A::String, false), false))]);
        assert!(decode(&list, &buf).unwrap_err().contains("claims"));
    }

    #[test]
    fn fields_are_found_whatever_the_sdk_calls_them() {
        let row = Row {
            fields: vec![
                ("ProducerConfig".to_string(), Value::String("go".into())),
                ("topic".to_string(), Value::String("exact".into())),
                ("Topic".to_string(), Value::String("loose".into())),
            ],
        };
        assert_eq!(row.get("producer_config"), Some(&Value::String("go".into())));
        assert_eq!(row.get("topic"), Some(&Value::String("exact".into())), "an exact name wins");
        assert_eq!(row.get("key_serializer"), None);
    }
}
