//! Metrics of a job, aggregated from the monitoring infos of every bundle:
//! sums add up, distributions merge, string sets unite, bounded tries
//! combine (`bounded_trie`), gauges keep the latest value. Attempted
//! metrics count every finished bundle; committed ones only bundles whose
//! task committed its progress after them.
use std::collections::BTreeMap;

use beam_kafka_proto::pipeline::MonitoringInfo;
use beam_kafka_runtime::codec::coders::{decode_varint, encode_varint};

const SUM_INT64: &str = "beam:metrics:sum_int64:v1";
const DISTRIBUTION_INT64: &str = "beam:metrics:distribution_int64:v1";
const LATEST_INT64: &str = "beam:metrics:latest_int64:v1";
const SET_STRING: &str = "beam:metrics:set_string:v1";
const BOUNDED_TRIE: &str = "beam:metrics:bounded_trie:v1";

fn read_i64(buf: &[u8], at: &mut usize) -> Option<i64> {
    let (v, n) = decode_varint(&buf[*at..])?;
    *at += n;
    Some(v as i64)
}

fn decode_ints(buf: &[u8], count: usize) -> Option<Vec<i64>> {
    let mut at = 0;
    (0..count).map(|_| read_i64(buf, &mut at)).collect()
}

fn encode_ints(values: &[i64]) -> Vec<u8> {
    let mut out = Vec::new();
    for v in values {
        encode_varint(*v as u64, &mut out);
    }
    out
}

#[derive(Default)]
pub struct JobMetrics {
    pub attempted: Aggregate,
    pub committed: Aggregate,
}

#[derive(Default)]
pub struct Aggregate {
    by_key: BTreeMap<(String, Vec<(String, String)>), MonitoringInfo>,
}

impl Aggregate {
    pub fn add(&mut self, infos: Vec<MonitoringInfo>) {
        for info in infos {
            let mut labels: Vec<_> = info.labels.iter().map(|(k, v)| (k.clone(), v.clone())).collect();
            labels.sort();
            let key = (info.urn.clone(), labels);
            match self.by_key.get_mut(&key) {
                None => {
                    self.by_key.insert(key, info);
                }
                Some(old) => merge(old, info),
            }
        }
    }

    /// The aggregate of the metric `info` reports on.
    pub fn get(&self, info: &MonitoringInfo) -> Option<&MonitoringInfo> {
        let mut labels: Vec<_> = info.labels.iter().map(|(k, v)| (k.clone(), v.clone())).collect();
        labels.sort();
        self.by_key.get(&(info.urn.clone(), labels))
    }

    pub fn all(&self) -> Vec<MonitoringInfo> {
        self.by_key.values().cloned().collect()
    }
}

fn merge(old: &mut MonitoringInfo, new: MonitoringInfo) {
    match new.r#type.as_str() {
        SUM_INT64 => {
            if let (Some(a), Some(b)) = (decode_ints(&old.payload, 1), decode_ints(&new.payload, 1)) {
                old.payload = encode_ints(&[a[0].wrapping_add(b[0])]);
            }
        }
        DISTRIBUTION_INT64 => {
            if let (Some(a), Some(b)) = (decode_ints(&old.payload, 4), decode_ints(&new.payload, 4)) {
                old.payload = encode_ints(&[a[0] + b[0], a[1].wrapping_add(b[1]), a[2].min(b[2]), a[3].max(b[3])]);
            }
        }
        LATEST_INT64 => *old = new,
        SET_STRING => {
            if let (Some(mut a), Some(b)) = (decode_strings(&old.payload), decode_strings(&new.payload)) {
                a.extend(b);
                old.payload = encode_strings(&a);
            }
        }
        BOUNDED_TRIE => {
            if let Some(combined) = beam_kafka_runtime::metrics::bounded_trie::combine_encoded(&old.payload, &new.payload) {
                old.payload = combined;
            }
        }
        // Kinds not aggregated here (e.g. progress): keep the newest report.
        _ => *old = new,
    }
}

/// A string set's payload: a count, then each string length-prefixed.
fn decode_strings(buf: &[u8]) -> Option<std::collections::BTreeSet<Vec<u8>>> {
    let count = i32::from_be_bytes(buf.get(..4)?.try_into().ok()?);
    let mut at = 4;
    let mut out = std::collections::BTreeSet::new();
    for _ in 0..count.max(0) {
        let (len, n) = decode_varint(&buf[at..])?;
        at += n;
        out.insert(buf.get(at..at + len as usize)?.to_vec());
        at += len as usize;
    }
    Some(out)
}

fn encode_strings(set: &std::collections::BTreeSet<Vec<u8>>) -> Vec<u8> {
    let mut out = (set.len() as i32).to_be_bytes().to_vec();
    for s in set {
        encode_varint(s.len() as u64, &mut out);
        out.extend_from_slice(s);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn info(kind: &str, name: &str, payload: Vec<u8>) -> MonitoringInfo {
        MonitoringInfo {
            urn: "beam:metric:user:v1".into(),
            r#type: kind.into(),
            payload,
            labels: [("NAME".to_string(), name.to_string())].into(),
            ..Default::default()
        }
    }

    #[test]
    fn sums_add_and_distributions_merge() {
        let mut m = Aggregate::default();
        m.add(vec![info(SUM_INT64, "c", encode_ints(&[2])), info(DISTRIBUTION_INT64, "d", encode_ints(&[2, 10, 3, 7]))]);
        m.add(vec![info(SUM_INT64, "c", encode_ints(&[5])), info(DISTRIBUTION_INT64, "d", encode_ints(&[1, 1, 1, 1]))]);
        m.add(vec![info(SUM_INT64, "other", encode_ints(&[1]))]);
        let all = m.all();
        assert_eq!(all.len(), 3);
        let c = all.iter().find(|i| i.labels["NAME"] == "c" && i.r#type == SUM_INT64).unwrap();
        assert_eq!(decode_ints(&c.payload, 1).unwrap(), [7]);
        let d = all.iter().find(|i| i.r#type == DISTRIBUTION_INT64).unwrap();
        assert_eq!(decode_ints(&d.payload, 4).unwrap(), [3, 11, 1, 7]);
    }

    #[test]
    fn string_sets_unite() {
        let set = |items: &[&str]| encode_strings(&items.iter().map(|s| s.as_bytes().to_vec()).collect());
        let mut m = Aggregate::default();
        m.add(vec![info(SET_STRING, "s", set(&["a", "b"]))]);
        m.add(vec![info(SET_STRING, "s", set(&["b", "zzz"]))]);
        let got = decode_strings(&m.all()[0].payload).unwrap();
        assert_eq!(got.len(), 3);
        assert!(got.contains(b"zzz".as_slice()));
    }

    #[test]
    fn bounded_tries_combine() {
        use prost::Message;
        let trie = |path: &[&str]| beam_kafka_proto::pipeline::BoundedTrie {
            bound: 100,
            root: None,
            singleton: path.iter().map(|s| s.to_string()).collect(),
        };
        let mut m = Aggregate::default();
        m.add(vec![info(BOUNDED_TRIE, "t", trie(&["a", "b"]).encode_to_vec())]);
        m.add(vec![info(BOUNDED_TRIE, "t", trie(&["a", "c"]).encode_to_vec())]);
        let got = beam_kafka_proto::pipeline::BoundedTrie::decode(m.all()[0].payload.as_slice()).unwrap();
        let a = &got.root.unwrap().children["a"];
        assert_eq!(a.children.len(), 2, "both reports' paths are kept");
    }
}
