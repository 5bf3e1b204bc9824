//! Input-watermark aggregation of one task: the watermark holds
//! at −∞ until every partition of every upstream has reported, each partition
//! is monotonic, idle partitions do not hold it back, and the result never
//! goes backwards.
use std::collections::{BTreeMap, BTreeSet};

use crate::codec::coders::{encode_varint, ByteReader};
use crate::codec::timestamp::Watermark;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum PartitionState {
    At(Watermark),
    /// No data and nothing pending: does not hold the minimum.
    Idle(Watermark),
}

impl PartitionState {
    fn value(self) -> Watermark {
        match self {
            PartitionState::At(w) | PartitionState::Idle(w) => w,
        }
    }
}

#[derive(Debug, Default)]
struct Upstream {
    total_partitions: u32,
    partitions: BTreeMap<u32, PartitionState>,
}

#[derive(Debug)]
pub struct InputWatermark {
    expected: BTreeSet<String>,
    upstreams: BTreeMap<String, Upstream>,
    current: Watermark,
}

impl InputWatermark {
    /// `expected` names every upstream (transform or task) that feeds this input.
    pub fn new(expected: impl IntoIterator<Item = String>) -> Self {
        InputWatermark { expected: expected.into_iter().collect(), upstreams: BTreeMap::new(), current: Watermark::NegInf }
    }

    pub fn current(&self) -> Watermark {
        self.current
    }

    /// Records a report; returns the new input watermark if it advanced.
    pub fn report(&mut self, source: &str, partition: u32, total_partitions: u32, wm: Watermark) -> Option<Watermark> {
        self.record(source, partition, total_partitions, PartitionState::At(wm))
    }

    /// Marks a partition idle at `wm`: it stops holding the watermark back.
    pub fn report_idle(&mut self, source: &str, partition: u32, total_partitions: u32, wm: Watermark) -> Option<Watermark> {
        self.record(source, partition, total_partitions, PartitionState::Idle(wm))
    }

    fn record(&mut self, source: &str, partition: u32, total: u32, state: PartitionState) -> Option<Watermark> {
        if !self.expected.contains(source) || partition >= total {
            return None; // not ours, or malformed: ignore rather than corrupt the minimum
        }
        let up = self.upstreams.entry(source.to_string()).or_default();
        up.total_partitions = up.total_partitions.max(total);
        let slot = up.partitions.entry(partition).or_insert(state);
        // A partition never goes backwards.
        if state.value() >= slot.value() {
            *slot = state;
        }
        let next = self.compute()?;
        if next > self.current {
            self.current = next;
            Some(next)
        } else {
            None
        }
    }

    /// Every report received, for a durable store: a restarted task must not
    /// wait for reports its upstreams sent before the restart.
    pub fn snapshot(&self) -> Vec<u8> {
        let mut out = Vec::new();
        out.extend_from_slice(&self.current.to_millis().to_be_bytes());
        encode_varint(self.upstreams.len() as u64, &mut out);
        for (name, up) in &self.upstreams {
            encode_varint(name.len() as u64, &mut out);
            out.extend_from_slice(name.as_bytes());
            encode_varint(up.total_partitions as u64, &mut out);
            encode_varint(up.partitions.len() as u64, &mut out);
            for (p, st) in &up.partitions {
                encode_varint(*p as u64, &mut out);
                out.push(matches!(st, PartitionState::Idle(_)) as u8);
                out.extend_from_slice(&st.value().to_millis().to_be_bytes());
            }
        }
        out
    }

    /// Restores what [`snapshot`](Self::snapshot) saved.
    pub fn restore(&mut self, buf: &[u8]) -> Result<(), String> {
        let mut r = ByteReader::new(buf);
        let current = Watermark::from_millis(r.i64()?);
        let mut upstreams = BTreeMap::new();
        for _ in 0..r.varint()? {
            let len = r.varint()? as usize;
            let name = String::from_utf8(r.take(len)?.to_vec()).map_err(|_| "bad upstream name")?;
            let total = r.varint()? as u32;
            let mut partitions = BTreeMap::new();
            for _ in 0..r.varint()? {
                let p = r.varint()? as u32;
                let idle = r.take(1)?[0] == 1;
                let wm = Watermark::from_millis(r.i64()?);
                partitions.insert(p, if idle { PartitionState::Idle(wm) } else { PartitionState::At(wm) });
            }
            upstreams.insert(name, Upstream { total_partitions: total, partitions });
        }
        self.upstreams = upstreams;
        self.current = current;
        Ok(())
    }

    /// The minimum over active partitions, or `None` while some partition has
    /// not reported yet.
    fn compute(&self) -> Option<Watermark> {
        let mut min_active: Option<Watermark> = None;
        let mut max_idle: Option<Watermark> = None;
        for source in &self.expected {
            let up = self.upstreams.get(source)?;
            if (up.partitions.len() as u32) < up.total_partitions {
                return None;
            }
            for st in up.partitions.values() {
                match *st {
                    PartitionState::At(w) => min_active = Some(min_active.map_or(w, |m| m.min(w))),
                    PartitionState::Idle(w) => max_idle = Some(max_idle.map_or(w, |m| m.max(w))),
                }
            }
        }
        // With every partition idle the input is as far as the furthest of them.
        min_active.or(max_idle)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use Watermark::*;

    fn two_sources() -> InputWatermark {
        InputWatermark::new(["a".to_string(), "b".to_string()])
    }

    #[test]
    fn holds_until_every_partition_of_every_upstream_reported() {
        let mut w = two_sources();
        assert_eq!(w.report("a", 0, 2, At(10)), None);
        assert_eq!(w.report("a", 1, 2, At(20)), None);
        assert_eq!(w.current(), NegInf);
        assert_eq!(w.report("b", 0, 1, At(15)), Some(At(10)));
        assert_eq!(w.report("a", 0, 2, At(30)), Some(At(15)));
    }

    #[test]
    fn never_goes_backwards() {
        let mut w = InputWatermark::new(["a".to_string()]);
        assert_eq!(w.report("a", 0, 1, At(10)), Some(At(10)));
        assert_eq!(w.report("a", 0, 1, At(5)), None);
        assert_eq!(w.current(), At(10));
        assert_eq!(w.report("a", 0, 1, PosInf), Some(PosInf));
    }

    #[test]
    fn idle_partitions_do_not_hold_it_back() {
        let mut w = InputWatermark::new(["a".to_string()]);
        w.report("a", 0, 2, At(100));
        assert_eq!(w.report_idle("a", 1, 2, At(1)), Some(At(100)));
        // All idle: the furthest idle value.
        let mut all_idle = InputWatermark::new(["a".to_string()]);
        assert_eq!(all_idle.report_idle("a", 0, 1, At(7)), Some(At(7)));
    }

    #[test]
    fn unknown_sources_and_bad_partitions_are_ignored() {
        let mut w = InputWatermark::new(["a".to_string()]);
        assert_eq!(w.report("zzz", 0, 1, PosInf), None);
        assert_eq!(w.report("a", 3, 2, PosInf), None);
        assert_eq!(w.current(), NegInf);
    }

    #[test]
    fn a_snapshot_restores_every_report() {
        let mut a = InputWatermark::new(["up".to_string(), "other".to_string()]);
        a.report("up", 0, 2, Watermark::At(5));
        a.report("up", 1, 2, Watermark::At(9));
        let before = a.current();
        let mut b = InputWatermark::new(["up".to_string(), "other".to_string()]);
        b.restore(&a.snapshot()).unwrap();
        assert_eq!(b.current(), before);
        // Only the missing upstream is still awaited.
        assert_eq!(b.report("other", 0, 1, Watermark::At(7)), Some(Watermark::At(5)));
        assert!(b.restore(&a.snapshot()[..5]).is_err());
    }
}
