//! Encoding and decoding records of runner-owned topics: one element
//! (`Data`), many (`Batch`, a packed record: `runtime::codec::packed`) or a
//! watermark report.
use crate::codec::packed::Pack;
use crate::codec::timestamp::Watermark;
pub use crate::test_stream::progress::Progress;
use beam_kafka_proto::envelope::{envelope::Body, Batch, Data, Envelope, WatermarkReport};
use prost::Message;

pub fn data(value: Vec<u8>) -> Vec<u8> {
    Envelope { body: Some(Body::Data(Data { value })) }.encode_to_vec()
}

/// A packed record of `pack`'s elements.
pub fn batch(pack: Pack) -> Vec<u8> {
    Envelope { body: Some(Body::Batch(Batch { data: pack.data, ends: pack.ends })) }.encode_to_vec()
}

pub fn watermark(wm: Watermark, source: &str, partition: u32, total: u32) -> Vec<u8> {
    watermark_with_progress(wm, source, partition, total, Progress::default())
}

/// A watermark report that also carries TestStream progress.
pub fn watermark_with_progress(wm: Watermark, source: &str, partition: u32, total: u32, progress: Progress) -> Vec<u8> {
    Envelope {
        body: Some(Body::Watermark(WatermarkReport {
            millis: wm.to_millis(),
            source_transform: source.to_string(),
            source_partition: partition as i32,
            total_partitions: total as i32,
            epoch: progress.epoch,
            clock_millis: progress.clock,
        })),
    }
    .encode_to_vec()
}

/// A decoded record of a runner-owned topic.
#[derive(Debug, PartialEq)]
pub enum Record {
    /// Its elements, in order: one, or a packed record's (validated).
    Data(Pack),
    Watermark {
        wm: Watermark,
        source: String,
        partition: u32,
        total: u32,
        progress: Progress,
    },
}

/// `decode`, with an error that names where the record is.
pub fn decode_at(bytes: &[u8], topic: &str, partition: i32, offset: i64) -> Result<Record, String> {
    decode(bytes).map_err(|e| format!("{e} ({topic}[{partition}] offset {offset})"))
}

pub fn decode(bytes: &[u8]) -> Result<Record, String> {
    let env = Envelope::decode(bytes).map_err(|e| format!("undecodable record on a runner topic: {e}"))?;
    match env.body {
        Some(Body::Data(d)) => Ok(Record::Data(Pack::single(d.value))),
        Some(Body::Batch(b)) => {
            let pack = Pack { data: b.data, ends: b.ends };
            pack.validate()?;
            Ok(Record::Data(pack))
        }
        Some(Body::Watermark(w)) => Ok(Record::Watermark {
            wm: Watermark::from_millis(w.millis),
            source: w.source_transform,
            partition: w.source_partition.max(0) as u32,
            total: w.total_partitions.max(1) as u32,
            progress: Progress { epoch: w.epoch, clock: w.clock_millis },
        }),
        None => Err("empty record on a runner topic".into()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn records_round_trip() {
        assert_eq!(decode(&data(vec![1, 2])).unwrap(), Record::Data(Pack::single(vec![1, 2])));
        let r = decode(&watermark(Watermark::PosInf, "impulse", 0, 1)).unwrap();
        let none = Progress::default();
        assert_eq!(r, Record::Watermark { wm: Watermark::PosInf, source: "impulse".into(), partition: 0, total: 1, progress: none });
        let progress = Progress { epoch: 3, clock: 1_000 };
        let r = decode(&watermark_with_progress(Watermark::At(5), "ts", 0, 1, progress)).unwrap();
        assert!(matches!(r, Record::Watermark { progress: p, .. } if p == progress));
        assert!(decode(&[0xff, 0xff]).is_err());
    }

    #[test]
    fn a_packed_record_brings_back_its_elements_in_order() {
        let mut packer = crate::codec::packed::Packer::new(1 << 20, 1000);
        let elements: Vec<Vec<u8>> = (0..300u32).map(|i| i.to_be_bytes()[..(i % 4 + 1) as usize].to_vec()).collect();
        for e in &elements {
            assert!(packer.push(2, e).is_none());
        }
        let (partition, pack) = packer.finish().pop().unwrap();
        assert_eq!(partition, 2);
        let Record::Data(got) = decode(&batch(pack)).unwrap() else { panic!("not data") };
        assert_eq!(got.iter().collect::<Vec<_>>(), elements.iter().map(Vec::as_slice).collect::<Vec<_>>());
        assert_eq!(got.elements().unwrap(), elements);
    }

    #[test]
    fn a_malformed_packed_record_is_an_error_naming_topic_and_offset() {
        let bytes = batch(Pack { data: vec![1, 2, 3], ends: vec![1, 7] });
        let e = decode_at(&bytes, "__beam_app_shuffle_0", 3, 42).unwrap_err();
        assert!(e.contains("malformed packed record"), "{e}");
        assert!(e.contains("__beam_app_shuffle_0[3] offset 42"), "{e}");
        // Cut short: not even an envelope.
        let e = decode_at(&bytes[..bytes.len() - 2], "__beam_app_edge_1", 0, 7).unwrap_err();
        assert!(e.contains("undecodable record") && e.contains("__beam_app_edge_1[0] offset 7"), "{e}");
    }
}
