//! Encoding and decoding records of runner-owned topics.
use beam_kafka_proto::envelope::{envelope::Body, Data, Envelope, WatermarkReport};
use beam_kafka_runtime::timestamp::Watermark;
use prost::Message;

pub fn data(value: Vec<u8>) -> Vec<u8> {
    Envelope { body: Some(Body::Data(Data { value })) }.encode_to_vec()
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
}
