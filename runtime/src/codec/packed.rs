//! Packed records: a bundle's elements for one partition of a shuffle, edge
//! or side topic travel as a few Kafka records, each holding many encoded
//! elements one after another with where each ends, the way Flink fills
//! network buffers. Per-record costs (the producer's queue and delivery
//! report, the broker's batch entry, the consumer's copy and dispatch) are
//! then paid per pack, not per element. Changelogs are never packed: their
//! compaction needs a record per key.

use std::collections::BTreeMap;

/// Bytes of elements a pack holds at most. An element longer than this is a
/// pack of its own. Well below Kafka's default 1 MB record limit.
pub const PACK_BYTES: usize = 64 * 1024;

/// Encoded elements one after another; `ends[i]` is where element `i` ends.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Pack {
    pub data: Vec<u8>,
    pub ends: Vec<u32>,
}

impl Pack {
    pub fn len(&self) -> usize {
        self.ends.len()
    }

    pub fn is_empty(&self) -> bool {
        self.ends.is_empty()
    }

    fn push(&mut self, element: &[u8]) {
        self.data.extend_from_slice(element);
        self.ends.push(self.data.len() as u32);
    }

    /// One element as a pack.
    pub fn single(element: Vec<u8>) -> Pack {
        let ends = vec![element.len() as u32];
        Pack { data: element, ends }
    }

    /// Checks that `ends` describes `data`: rising, non-empty elements, the
    /// last ending where the data ends.
    pub fn validate(&self) -> Result<(), String> {
        let mut start = 0usize;
        for (i, &end) in self.ends.iter().enumerate() {
            let end = end as usize;
            if end <= start || end > self.data.len() {
                return Err(format!(
                    "malformed packed record: element {i} ends at byte {end}, after {start}, in {} byte(s) of data",
                    self.data.len()
                ));
            }
            start = end;
        }
        if start != self.data.len() {
            return Err(format!("malformed packed record: {} byte(s) after its last element", self.data.len() - start));
        }
        Ok(())
    }

    /// The elements, in place (of a pack `validate` accepted: an invalid
    /// one's end the iteration where they stop making sense).
    pub fn iter(&self) -> impl Iterator<Item = &[u8]> {
        let mut start = 0usize;
        self.ends.iter().map_while(move |&end| {
            let element = self.data.get(start..end as usize)?;
            start = end as usize;
            Some(element)
        })
    }

    /// The elements, copied, after checking that `ends` describes `data`.
    #[cfg(test)]
    pub fn elements(&self) -> Result<Vec<Vec<u8>>, String> {
        self.validate()?;
        Ok(self.iter().map(<[u8]>::to_vec).collect())
    }
}

/// Gathers one bundle's elements per partition into packs of at most
/// `limit` bytes and `max_elements` elements (a reader hands a pack to its
/// stage whole, so a pack must not hold more than a bundle's worth),
/// keeping each partition's elements in order.
pub struct Packer {
    limit: usize,
    max_elements: usize,
    open: BTreeMap<u32, Pack>,
}

impl Packer {
    pub fn new(limit: usize, max_elements: usize) -> Packer {
        Packer { limit: limit.max(1), max_elements: max_elements.max(1), open: BTreeMap::new() }
    }

    /// Adds an element for `partition`. Returns the partition's pack to
    /// write now when the element does not fit in it; the element starts the
    /// next one.
    pub fn push(&mut self, partition: u32, element: &[u8]) -> Option<(u32, Pack)> {
        let pack = self.open.entry(partition).or_default();
        let full = !pack.is_empty() && (pack.data.len() + element.len() > self.limit || pack.len() >= self.max_elements);
        let ready = if full { Some((partition, std::mem::take(pack))) } else { None };
        pack.push(element);
        ready
    }

    /// The packs not yet written, by partition.
    pub fn finish(self) -> Vec<(u32, Pack)> {
        self.open.into_iter().filter(|(_, p)| !p.is_empty()).collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn all(packs: &[(u32, Pack)], partition: u32) -> Vec<Vec<u8>> {
        packs.iter().filter(|(p, _)| *p == partition).flat_map(|(_, pack)| pack.elements().unwrap()).collect()
    }

    #[test]
    fn elements_of_a_partition_stay_in_order_across_packs() {
        let mut packer = Packer::new(10, 1000);
        let mut written = Vec::new();
        for i in 0..20u8 {
            if let Some(full) = packer.push(u32::from(i % 2), &[i, i, i]) {
                written.push(full);
            }
        }
        written.extend(packer.finish());
        assert_eq!(all(&written, 0), (0..20u8).step_by(2).map(|i| vec![i; 3]).collect::<Vec<_>>());
        assert_eq!(all(&written, 1), (1..20u8).step_by(2).map(|i| vec![i; 3]).collect::<Vec<_>>());
        assert!(written.iter().all(|(_, p)| p.data.len() <= 10), "no pack over the limit");
        assert_eq!(written.len(), 8, "ten elements of 3 bytes per partition make four packs of at most 9 bytes");
    }

    #[test]
    fn an_element_larger_than_the_limit_is_a_pack_of_its_own() {
        let mut packer = Packer::new(8, 1000);
        assert_eq!(packer.push(0, &[1]), None);
        let (p, first) = packer.push(0, &[2; 20]).expect("the small pack goes first");
        assert_eq!((p, first.elements().unwrap()), (0, vec![vec![1]]));
        let (_, big) = packer.push(0, &[3]).expect("the big element filled its pack");
        assert_eq!(big.elements().unwrap(), vec![vec![2; 20]]);
        assert_eq!(packer.finish()[0].1.elements().unwrap(), vec![vec![3]]);
    }

    #[test]
    fn a_pack_holds_at_most_max_elements() {
        let mut packer = Packer::new(PACK_BYTES, 3);
        let written: Vec<_> = (0..7u8).filter_map(|i| packer.push(0, &[i])).collect();
        assert_eq!(written.iter().map(|(_, p)| p.len()).collect::<Vec<_>>(), [3, 3]);
        assert_eq!(packer.finish()[0].1.len(), 1);
    }

    #[test]
    fn nothing_pushed_writes_nothing() {
        assert!(Packer::new(PACK_BYTES, 1000).finish().is_empty());
    }

    #[test]
    fn ends_that_do_not_describe_the_data_are_refused() {
        let bad = [
            Pack { data: vec![1, 2, 3], ends: vec![2, 5] },
            Pack { data: vec![1, 2, 3], ends: vec![2, 2, 3] },
            Pack { data: vec![1, 2, 3], ends: vec![2] },
            Pack { data: vec![1, 2, 3], ends: vec![] },
            Pack { data: vec![1, 2, 3], ends: vec![3, 1] },
        ];
        for pack in bad {
            let e = pack.elements().expect_err("malformed");
            assert!(e.starts_with("malformed packed record"), "{e}");
        }
        let good = Pack { data: vec![1, 2, 3], ends: vec![1, 3] };
        assert_eq!(good.elements().unwrap(), vec![vec![1], vec![2, 3]]);
    }
}
