//! The bundle a stage is filling, and when it becomes one to run.
//!
//! A bundle exists only for work: data elements, timers to fire or
//! deferred work handed back (which arrives as elements). A flush, a time
//! bound or a size bound seals what is open; with nothing open there is no
//! bundle. Beam's runners never run an empty bundle, and a DoFn may rely on
//! that (one that emits in `finish_bundle` would emit once more per empty
//! bundle, and every empty bundle costs a round trip to the harness).
use std::collections::{BTreeMap, HashMap};

/// A timer family: (transform, family id).
pub type Family = (String, String);

/// A bundle ready to run: per data source its elements (one after another)
/// and where each ends, timers to fire per family, and its element count.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct SealedBundle {
    /// One entry per data source of the stage, in the order given to `seal`,
    /// each with its elements' bytes and their ends (empty when it got none:
    /// every data source still gets its end-of-stream).
    pub inputs: Vec<(String, Vec<u8>, Vec<usize>)>,
    pub timers: HashMap<Family, Vec<u8>>,
    /// Data elements (timers not counted).
    pub elements: u64,
}

impl SealedBundle {
    /// Whether it fires timers.
    pub fn fires_timers(&self) -> bool {
        self.timers.values().any(|t| !t.is_empty())
    }
}

/// What the stage collects until the bundle is sealed.
#[derive(Debug, Default)]
pub struct OpenBundle {
    data: BTreeMap<String, Vec<u8>>,
    ends: BTreeMap<String, Vec<usize>>,
    timers: HashMap<Family, Vec<u8>>,
    /// Elements plus timer batches: what `max_bundle_size` counts.
    items: u64,
    elements: u64,
    /// Changes whenever a bundle is sealed, so a time bound set for an
    /// earlier bundle is recognised as stale.
    generation: u64,
}

impl OpenBundle {
    /// Whether nothing is open.
    pub fn is_empty(&self) -> bool {
        self.items == 0
    }

    /// Elements plus timer batches collected.
    pub fn items(&self) -> u64 {
        self.items
    }

    /// Identifies the open bundle (for its time bound).
    pub fn generation(&self) -> u64 {
        self.generation
    }

    /// Adds one encoded element for data source `source`.
    pub fn add_element(&mut self, source: &str, element: &[u8]) {
        let data = self.data.entry(source.to_string()).or_default();
        data.extend_from_slice(element);
        let end = data.len();
        self.ends.entry(source.to_string()).or_default().push(end);
        self.items += 1;
        self.elements += 1;
    }

    /// Adds encoded timers to fire for `family`; nothing for no bytes.
    pub fn add_timers(&mut self, family: Family, timers: &[u8]) {
        if timers.is_empty() {
            return;
        }
        self.timers.entry(family).or_default().extend_from_slice(timers);
        self.items += 1;
    }

    /// The open bundle as one to run, with an entry for each of `sources`;
    /// `None` when nothing is open (there is no empty bundle).
    pub fn seal(&mut self, sources: &[String]) -> Option<SealedBundle> {
        if self.items == 0 {
            return None;
        }
        let mut data = std::mem::take(&mut self.data);
        let mut ends = std::mem::take(&mut self.ends);
        let inputs = sources.iter().map(|s| (s.clone(), data.remove(s).unwrap_or_default(), ends.remove(s).unwrap_or_default())).collect();
        let bundle = SealedBundle { inputs, timers: std::mem::take(&mut self.timers), elements: self.elements };
        self.items = 0;
        self.elements = 0;
        self.generation += 1;
        Some(bundle)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sources() -> Vec<String> {
        vec!["a".into(), "b".into()]
    }

    #[test]
    fn nothing_open_seals_no_bundle() {
        let mut open = OpenBundle::default();
        assert_eq!(open.seal(&sources()), None, "a flush or time bound with nothing open runs nothing");
        open.add_timers(("pardo".into(), "t".into()), &[]);
        assert_eq!(open.seal(&sources()), None, "no timer bytes are no timers");
        assert!(open.is_empty());
        assert_eq!(open.generation(), 0, "no bundle was sealed");
    }

    #[test]
    fn elements_make_a_bundle_with_every_source_and_their_ends() {
        let mut open = OpenBundle::default();
        open.add_element("b", b"xy");
        open.add_element("b", b"z");
        let bundle = open.seal(&sources()).expect("elements were open");
        assert_eq!(bundle.inputs, vec![("a".into(), vec![], vec![]), ("b".into(), b"xyz".to_vec(), vec![2, 3])]);
        assert_eq!(bundle.elements, 2);
        assert!(!bundle.fires_timers());
        assert_eq!(open.generation(), 1);
        assert_eq!(open.seal(&sources()), None, "sealing again finds nothing open");
    }

    #[test]
    fn timers_alone_make_a_bundle() {
        let mut open = OpenBundle::default();
        let family: Family = ("pardo".into(), "t".into());
        open.add_timers(family.clone(), b"t1");
        open.add_timers(family.clone(), b"t2");
        assert_eq!(open.items(), 2);
        let bundle = open.seal(&sources()).expect("timers were open");
        assert_eq!(bundle.elements, 0);
        assert!(bundle.fires_timers());
        assert_eq!(bundle.timers[&family], b"t1t2");
    }
}
