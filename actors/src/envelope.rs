//! Encoding and decoding records of runner-owned topics.
use beam_kafka_proto::envelope::{envelope::Body, Data, Envelope, WatermarkReport};
use beam_kafka_runtime::timestamp::Watermark;
use prost::Message;

pub fn data(value: Vec<u8>) -> Vec<u8> {
    Envelope { body: Some(Body::Data(Data { value })) }.encode_to_vec()
}

/// `data(value.to_vec())` written into `out` (cleared first), without the
/// copies: the hot path of every output record.
pub fn data_into(value: &[u8], out: &mut Vec<u8>) {
    use prost::encoding::{encode_key, encode_varint, WireType};
    out.clear();
    // Envelope.data (field 1) holds a Data message whose field 1 is the value.
    let inner = 1 + prost::encoding::encoded_len_varint(value.len() as u64) + value.len();
    encode_key(1, WireType::LengthDelimited, out);
    encode_varint(inner as u64, out);
    encode_key(1, WireType::LengthDelimited, out);
    encode_varint(value.len() as u64, out);
    out.extend_from_slice(value);
}

pub fn watermark(wm: Watermark, source: &str, partition: u32, total: u32) -> Vec<u8> {
    Envelope {
        body: Some(Body::Watermark(WatermarkReport {
            millis: wm.to_millis(),
            source_transform: source.to_string(),
            source_partition: partition as i32,
            total_partitions: total as i32,
        })),
    }
    .encode_to_vec()
}

/// A decoded record of a runner-owned topic.
#[derive(Debug, PartialEq)]
pub enum Record {
    Data(Vec<u8>),
    Watermark { wm: Watermark, source: String, partition: u32, total: u32 },
}

pub fn decode(bytes: &[u8]) -> Result<Record, String> {
    let env = Envelope::decode(bytes).map_err(|e| format!("undecodable record on a runner topic: {e}"))?;
    match env.body {
        Some(Body::Data(d)) => Ok(Record::Data(d.value)),
        Some(Body::Watermark(w)) => Ok(Record::Watermark {
            wm: Watermark::from_millis(w.millis),
            source: w.source_transform,
            partition: w.source_partition.max(0) as u32,
            total: w.total_partitions.max(1) as u32,
        }),
        None => Err("empty record on a runner topic".into()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn records_round_trip() {
        assert_eq!(decode(&data(vec![1, 2])).unwrap(), Record::Data(vec![1, 2]));
        let r = decode(&watermark(Watermark::PosInf, "impulse", 0, 1)).unwrap();
        assert_eq!(r, Record::Watermark { wm: Watermark::PosInf, source: "impulse".into(), partition: 0, total: 1 });
        assert!(decode(&[0xff, 0xff]).is_err());
    }

    #[test]
    fn data_into_encodes_like_data() {
        let mut out = vec![9, 9, 9];
        for len in [1, 5, 127, 128, 300, 20_000] {
            let value: Vec<u8> = (0..len).map(|i| i as u8).collect();
            data_into(&value, &mut out);
            assert_eq!(out, data(value.clone()), "length {len}");
        }
        data_into(&[], &mut out);
        assert_eq!(decode(&out).unwrap(), Record::Data(vec![]));
    }
}
