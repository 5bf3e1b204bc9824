//! Timers of stateful ParDos: the SDK's timer settings as they travel on the
//! Fn API data plane (`beam:coder:timer:v1`: key, dynamic tag, windows,
//! clear bit, then fire and hold timestamps and pane), and the task's pending
//! timers, due by the input watermark (event time) or the wall clock
//! (processing time), fired in timestamp order.
//!
use std::collections::{BTreeMap, BTreeSet, HashMap};

use crate::codec::coder::Coder;
use crate::codec::coders::{decode_varint, encode_timestamp, encode_varint, ByteReader};
use crate::codec::timestamp::{Millis, Watermark};
use crate::state::changelog::{ChangelogStore, Entry};
use crate::state::task_state;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum TimeDomain {
    EventTime,
    ProcessingTime,
}

/// One timer setting for one window, as the SDK sent it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TimerSetting {
    /// The key's bytes exactly as encoded (length-prefixed where the runner
    /// cannot read the key coder).
    pub key: Vec<u8>,
    pub tag: String,
    /// The window's encoding.
    pub window: Vec<u8>,
    /// `None` clears the timer.
    pub set: Option<TimerTimes>,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TimerTimes {
    pub fire: Millis,
    pub hold: Millis,
    /// The pane's encoding.
    pub pane: Vec<u8>,
}

fn read_timestamp(r: &mut ByteReader<'_>) -> Result<Millis, String> {
    let raw: [u8; 8] = r.take(8)?.try_into().map_err(|_| "truncated timestamp")?;
    Ok((u64::from_be_bytes(raw) ^ (1u64 << 63)) as i64)
}

/// Reads and writes timers of one timer family.
#[derive(Clone, Debug)]
pub struct TimerCodec {
    pub key: Coder,
    pub window: Coder,
}

impl TimerCodec {
    /// Every timer in `buf` (a concatenation), one setting per window.
    pub fn decode_all(&self, buf: &[u8]) -> Result<Vec<TimerSetting>, String> {
        let mut out = Vec::new();
        let mut at = 0;
        while at < buf.len() {
            let mut r = ByteReader::new(&buf[at..]);
            let kn = self.key.skip(&buf[at..])?;
            let key = r.take(kn)?.to_vec();
            let tn = r.varint()? as usize;
            let tag = String::from_utf8(r.take(tn)?.to_vec()).map_err(|_| "a timer tag is not UTF-8")?;
            let count = i32::from_be_bytes(r.take(4)?.try_into().map_err(|_| "truncated window count")?);
            if count < 0 {
                return Err("a timer's windows of unknown count".into());
            }
            let mut windows = Vec::new();
            for _ in 0..count {
                let start = at + r.at;
                let n = self.window.skip(&buf[start..])?;
                windows.push(r.take(n)?.to_vec());
            }
            let clear = r.take(1)?[0] != 0;
            let set = if clear {
                None
            } else {
                let fire = read_timestamp(&mut r)?;
                let hold = read_timestamp(&mut r)?;
                let pane_start = r.at;
                let first = r.take(1)?[0];
                for _ in 0..(first >> 4) {
                    let (_, n) = decode_varint(&buf[at + r.at..]).ok_or("truncated pane index")?;
                    r.take(n)?;
                }
                Some(TimerTimes { fire, hold, pane: buf[at + pane_start..at + r.at].to_vec() })
            };
            out.extend(windows.into_iter().map(|window| TimerSetting { key: key.clone(), tag: tag.clone(), window, set: set.clone() }));
            at += r.at;
        }
        Ok(out)
    }

    /// Encodes a pending timer to fire it (one window, clear bit unset).
    pub fn encode_firing(id: &TimerId, t: &TimerTimes, out: &mut Vec<u8>) {
        out.extend_from_slice(&id.key);
        encode_varint(id.tag.len() as u64, out);
        out.extend_from_slice(id.tag.as_bytes());
        out.extend_from_slice(&1i32.to_be_bytes());
        out.extend_from_slice(&id.window);
        out.push(0);
        encode_timestamp(t.fire, out);
        encode_timestamp(t.hold, out);
        out.extend_from_slice(&t.pane);
    }
}

/// Which timer: of which ParDo and family, for which key, window and tag.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct TimerId {
    pub transform: String,
    pub family: String,
    pub key: Vec<u8>,
    pub window: Vec<u8>,
    pub tag: String,
}

impl TimerId {
    /// The timer as one key of the task's store.
    pub fn encode(&self) -> Vec<u8> {
        let mut out = Vec::new();
        for part in [self.transform.as_bytes(), self.family.as_bytes(), &self.key, &self.window, self.tag.as_bytes()] {
            encode_varint(part.len() as u64, &mut out);
            out.extend_from_slice(part);
        }
        out
    }

    pub fn decode(buf: &[u8]) -> Result<TimerId, String> {
        let mut r = ByteReader::new(buf);
        let mut part = || -> Result<Vec<u8>, String> {
            let n = r.varint()? as usize;
            Ok(r.take(n)?.to_vec())
        };
        let text = |b: Vec<u8>| String::from_utf8(b).map_err(|_| "bad name in a timer key".to_string());
        Ok(TimerId { transform: text(part()?)?, family: text(part()?)?, key: part()?, window: part()?, tag: text(part()?)? })
    }
}

impl PendingTimer {
    pub fn encode(&self) -> Vec<u8> {
        let mut out = vec![matches!(self.domain, TimeDomain::ProcessingTime) as u8];
        out.extend_from_slice(&self.times.fire.to_be_bytes());
        out.extend_from_slice(&self.times.hold.to_be_bytes());
        out.extend_from_slice(&self.times.pane);
        out
    }

    pub fn decode(buf: &[u8]) -> Result<PendingTimer, String> {
        let mut r = ByteReader::new(buf);
        let domain = if r.take(1)?[0] == 1 { TimeDomain::ProcessingTime } else { TimeDomain::EventTime };
        let (fire, hold) = (r.i64()?, r.i64()?);
        Ok(PendingTimer { domain, times: TimerTimes { fire, hold, pane: buf[r.at..].to_vec() } })
    }
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PendingTimer {
    pub domain: TimeDomain,
    pub times: TimerTimes,
}

/// A task's pending timers, with what changed since the last commit: an
/// identity store plus indexes (by fire time per domain, by hold, by
/// transform and window) so the questions asked every cycle and on every
/// watermark move do not scan every timer.
#[derive(Debug, Default)]
pub struct Timers {
    pending: BTreeMap<TimerId, PendingTimer>,
    event: BTreeSet<(Millis, TimerId)>,
    processing: BTreeSet<(Millis, TimerId)>,
    /// Hold timestamp → how many pending timers hold there.
    holds: BTreeMap<Millis, usize>,
    /// (transform, window) → how many pending timers.
    windows: HashMap<(String, Vec<u8>), usize>,
    dirty: BTreeSet<TimerId>,
    /// Transform → its OnWindowExpiration timer family.
    expiry_families: HashMap<String, String>,
    /// Expiration timers fired since the last `take_changes`: the state
    /// their callbacks write does not arm them again.
    fired_expiries: BTreeSet<TimerId>,
}

impl Timers {
    fn by_fire(&mut self, domain: TimeDomain) -> &mut BTreeSet<(Millis, TimerId)> {
        match domain {
            TimeDomain::EventTime => &mut self.event,
            TimeDomain::ProcessingTime => &mut self.processing,
        }
    }

    fn insert(&mut self, id: TimerId, t: PendingTimer) {
        self.remove(&id);
        self.by_fire(t.domain).insert((t.times.fire, id.clone()));
        *self.holds.entry(t.times.hold).or_default() += 1;
        *self.windows.entry((id.transform.clone(), id.window.clone())).or_default() += 1;
        self.pending.insert(id, t);
    }

    fn remove(&mut self, id: &TimerId) -> Option<PendingTimer> {
        let t = self.pending.remove(id)?;
        self.by_fire(t.domain).remove(&(t.times.fire, id.clone()));
        decrement(&mut self.holds, &t.times.hold);
        let window = (id.transform.clone(), id.window.clone());
        if let Some(n) = self.windows.get_mut(&window) {
            *n -= 1;
            if *n == 0 {
                self.windows.remove(&window);
            }
        }
        Some(t)
    }

    /// The ParDos with an OnWindowExpiration callback
    /// (`on_window_expiration_timer_family_spec`): transform → timer family.
    pub fn set_expiry_families(&mut self, families: HashMap<String, String>) {
        self.expiry_families = families;
    }

    pub fn has_expiry_families(&self) -> bool {
        !self.expiry_families.is_empty()
    }

    /// Arms the OnWindowExpiration timer of `transform`'s `key` in `window`
    /// (which now holds user state), unless it is pending or fired in this
    /// cycle. The SDK calls the callback when it fires; the runner, not the
    /// SDK, sets it, once per key and window.
    pub fn arm_expiry(&mut self, transform: &str, key: &[u8], window: &[u8], times: impl FnOnce() -> Option<TimerTimes>) {
        let Some(family) = self.expiry_families.get(transform) else { return };
        let id =
            TimerId { transform: transform.into(), family: family.clone(), key: key.to_vec(), window: window.to_vec(), tag: String::new() };
        if self.pending.contains_key(&id) || self.fired_expiries.contains(&id) {
            return;
        }
        let Some(times) = times() else { return };
        self.insert(id.clone(), PendingTimer { domain: TimeDomain::EventTime, times });
        self.dirty.insert(id);
    }

    /// Applies the SDK's settings for one family (set replaces, clear removes).
    pub fn apply(&mut self, transform: &str, family: &str, domain: TimeDomain, settings: Vec<TimerSetting>) {
        for s in settings {
            let id = TimerId { transform: transform.into(), family: family.into(), key: s.key, window: s.window, tag: s.tag };
            match s.set {
                Some(times) => self.insert(id.clone(), PendingTimer { domain, times }),
                None => {
                    self.remove(&id);
                }
            }
            self.dirty.insert(id);
        }
    }

    /// Removes and returns, in fire-time order, the timers to fire now: of
    /// those due (event-time ones the input watermark has passed,
    /// processing-time ones whose time the clock has reached), per ParDo
    /// and key only those at the key's earliest due time in each domain.
    /// A callback may set a timer earlier than the key's other pending
    /// ones, and Beam fires a key's timers in timestamp order: the rest
    /// fire in the next round, after the callbacks of this one.
    pub fn take_due(&mut self, input: Watermark, now: Millis) -> Vec<(TimerId, PendingTimer)> {
        let event_due = |fire: Millis| match input {
            Watermark::NegInf => false,
            Watermark::PosInf => true,
            Watermark::At(w) => fire < w,
        };
        let mut ids = earliest_per_key(self.event.iter().take_while(|(f, _)| event_due(*f)));
        ids.extend(earliest_per_key(self.processing.iter().take_while(|(f, _)| *f <= now)));
        ids.sort();
        let mut out = Vec::with_capacity(ids.len());
        for (_, id) in ids {
            if let Some(t) = self.remove(&id) {
                if self.expiry_families.get(&id.transform) == Some(&id.family) {
                    self.fired_expiries.insert(id.clone());
                }
                self.dirty.insert(id.clone());
                out.push((id, t));
            }
        }
        out
    }

    /// The earliest output timestamp a pending timer may still produce.
    pub fn hold(&self) -> Watermark {
        self.holds.keys().next().map_or(Watermark::PosInf, |h| Watermark::At(*h))
    }

    /// The earliest processing-time timer, to schedule a wake-up.
    pub fn next_processing_time(&self) -> Option<Millis> {
        self.processing.first().map(|(f, _)| *f)
    }

    pub fn is_empty(&self) -> bool {
        self.pending.is_empty()
    }

    pub fn len(&self) -> usize {
        self.pending.len()
    }

    /// Whether a timer of `transform` is pending in `window` (its state must
    /// outlive the window's end until the timer fired).
    pub fn pending_in(&self, transform: &str, window: &[u8]) -> bool {
        self.windows.contains_key(&(transform.to_string(), window.to_vec()))
    }

    /// What changed since the last call (`None`: the timer is gone). Ends
    /// a commit cycle: expiration timers fired in it may be armed again.
    fn take_changes(&mut self) -> Vec<(TimerId, Option<PendingTimer>)> {
        self.fired_expiries.clear();
        std::mem::take(&mut self.dirty)
            .into_iter()
            .map(|id| {
                let t = self.pending.get(&id).cloned();
                (id, t)
            })
            .collect()
    }

    pub fn restore(&mut self, id: TimerId, t: PendingTimer) {
        self.insert(id, t);
    }
}

/// Of timers in fire-time order, those at their (ParDo, key)'s earliest time.
fn earliest_per_key<'a>(timers: impl Iterator<Item = &'a (Millis, TimerId)>) -> Vec<(Millis, TimerId)> {
    let mut first: HashMap<(&str, &[u8]), Millis> = HashMap::new();
    let mut out = Vec::new();
    for (fire, id) in timers {
        let earliest = *first.entry((id.transform.as_str(), id.key.as_slice())).or_insert(*fire);
        if earliest == *fire {
            out.push((*fire, id.clone()));
        }
    }
    out
}

/// The watermark a stage's timers fire at: its input watermark held back by
/// every input the stage has not processed yet (elements a split bundle
/// handed back, elements waiting for side inputs, closed windows not yet
/// handed over). Such an element may still set a timer again; had the timer
/// fired before it, it would fire a second time, which Beam's model does not
/// allow for an element before the watermark.
pub fn firing_watermark(input: Watermark, unprocessed: impl IntoIterator<Item = Watermark>) -> Watermark {
    unprocessed.into_iter().fold(input, Watermark::min)
}

fn decrement(counts: &mut BTreeMap<Millis, usize>, at: &Millis) {
    if let Some(n) = counts.get_mut(at) {
        *n -= 1;
        if *n == 0 {
            counts.remove(at);
        }
    }
}

impl ChangelogStore for Timers {
    fn take_entries(&mut self) -> Vec<Entry> {
        self.take_changes().into_iter().map(|(id, t)| (task_state::timer_key(&id.encode()), t.map(|t| t.encode()))).collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::codec::coders::encode_nested_bytes;

    fn codec() -> TimerCodec {
        TimerCodec { key: Coder::LengthPrefix(Box::new(Coder::Bytes)), window: Coder::GlobalWindow }
    }

    /// A timer as the Python SDK encodes it.
    fn sdk_timer(key: &[u8], tag: &str, clear: bool, fire: Millis, hold: Millis) -> Vec<u8> {
        let mut out = Vec::new();
        encode_nested_bytes(key, &mut out);
        encode_nested_bytes(tag.as_bytes(), &mut out);
        out.extend_from_slice(&1i32.to_be_bytes()); // one global window: no bytes
        out.push(clear as u8);
        if !clear {
            encode_timestamp(fire, &mut out);
            encode_timestamp(hold, &mut out);
            out.push(0x0f);
        }
        out
    }

    #[test]
    fn the_sdks_timers_decode_and_a_firing_encodes_back() {
        let buf = [sdk_timer(b"k", "", false, 10, 9), sdk_timer(b"k", "t2", true, 0, 0)].concat();
        let settings = codec().decode_all(&buf).unwrap();
        assert_eq!(settings.len(), 2);
        assert_eq!(settings[0].set, Some(TimerTimes { fire: 10, hold: 9, pane: vec![0x0f] }));
        assert_eq!((settings[1].tag.as_str(), settings[1].set.is_none()), ("t2", true));
        let id = TimerId { transform: "t".into(), family: "f".into(), key: settings[0].key.clone(), window: vec![], tag: String::new() };
        let mut out = Vec::new();
        TimerCodec::encode_firing(&id, settings[0].set.as_ref().unwrap(), &mut out);
        assert_eq!(out, sdk_timer(b"k", "", false, 10, 9));
        assert!(codec().decode_all(&buf[..buf.len() - 3]).is_err());
        assert_eq!(TimerId::decode(&id.encode()).unwrap(), id);
        let p = PendingTimer { domain: TimeDomain::ProcessingTime, times: settings[0].set.clone().unwrap() };
        assert_eq!(PendingTimer::decode(&p.encode()).unwrap(), p);
    }

    /// Beam's strict timer ordering (ParDoTest's timer-ordering tests): a
    /// key's timers fire one time at a time, so a callback's earlier timer
    /// comes before the key's later ones; other keys are not held back.
    #[test]
    fn a_keys_timers_fire_one_time_at_a_time_so_a_callbacks_earlier_timer_comes_first() {
        let mut t = Timers::default();
        let set = |key: &[u8], tag: &str, fire| TimerSetting {
            key: key.to_vec(),
            tag: tag.into(),
            window: vec![],
            set: Some(TimerTimes { fire, hold: fire, pane: vec![0x0f] }),
        };
        t.apply("p", "append", TimeDomain::EventTime, vec![set(b"k", "", 0), set(b"other", "", 5)]);
        t.apply("p", "gc", TimeDomain::EventTime, vec![set(b"k", "", 101_000)]);
        t.apply("p", "both", TimeDomain::EventTime, vec![set(b"k", "a", 0), set(b"k", "b", 0)]);
        let fired = |due: Vec<(TimerId, PendingTimer)>| -> Vec<(String, Vec<u8>, i64)> {
            due.into_iter().map(|(id, p)| (id.family, id.key, p.times.fire)).collect()
        };
        // The input is done: every timer is due, but k's gc waits for its earlier ones.
        let round = fired(t.take_due(Watermark::PosInf, 0));
        assert_eq!(round.len(), 4, "{round:?}");
        assert!(round.iter().all(|(f, _, _)| f != "gc"), "{round:?}");
        assert!(round.contains(&("append".into(), b"other".to_vec(), 5)), "another key is not held back");
        // The append callback sets its next time, before gc.
        t.apply("p", "append", TimeDomain::EventTime, vec![set(b"k", "", 1_000)]);
        assert_eq!(fired(t.take_due(Watermark::PosInf, 0)), vec![("append".into(), b"k".to_vec(), 1_000)]);
        assert_eq!(fired(t.take_due(Watermark::PosInf, 0)), vec![("gc".into(), b"k".to_vec(), 101_000)]);
        assert!(t.is_empty());
    }

    #[test]
    fn timers_fire_in_order_once_due_and_hold_the_watermark() {
        let mut t = Timers::default();
        let set = |key: &[u8], fire| TimerSetting {
            key: key.to_vec(),
            tag: String::new(),
            window: vec![],
            set: Some(TimerTimes { fire, hold: fire, pane: vec![0x0f] }),
        };
        t.apply("p", "ev", TimeDomain::EventTime, vec![set(b"b", 20), set(b"a", 10)]);
        t.apply("p", "pt", TimeDomain::ProcessingTime, vec![set(b"a", 500)]);
        assert_eq!(t.hold(), Watermark::At(10));
        assert!(t.take_due(Watermark::At(10), 0).is_empty(), "the watermark must pass the timestamp");
        let due = t.take_due(Watermark::PosInf, 0);
        assert_eq!(due.iter().map(|(i, _)| i.key.clone()).collect::<Vec<_>>(), [b"a".to_vec(), b"b".to_vec()]);
        assert_eq!(t.next_processing_time(), Some(500));
        assert_eq!(t.take_due(Watermark::PosInf, 500).len(), 1);
        assert!(t.is_empty());
        // A clear removes; changes report every touched timer.
        t.take_changes();
        t.apply("p", "ev", TimeDomain::EventTime, vec![set(b"c", 5)]);
        t.apply("p", "ev", TimeDomain::EventTime, vec![TimerSetting { set: None, ..set(b"c", 5) }]);
        assert!(t.is_empty());
        assert_eq!(t.take_changes().len(), 1);
    }

    /// Go's TestTimers_EventTime_Bounded under load: a bundle setting a key's
    /// timer is split, the rest of its elements (which set the same timer
    /// again) deferred, and the input watermark is already at the end.
    #[test]
    fn a_timer_fires_once_when_a_split_bundle_sets_it_again_after_the_split() {
        use crate::state::deferred::{Deferred, DeferredWork};
        let set = |fire| TimerSetting {
            key: b"k".to_vec(),
            tag: String::new(),
            window: vec![],
            set: Some(TimerTimes { fire, hold: fire, pane: vec![0x0f] }),
        };
        let mut timers = Timers::default();
        let mut deferred = DeferredWork::default();
        // The split bundle's first half set the timer; its second half
        // (elements at the impulse's timestamp) came back deferred.
        timers.apply("p", "ev", TimeDomain::EventTime, vec![set(5)]);
        deferred.defer(Deferred { source: "src".into(), element: b"e2".to_vec(), hold: Millis::MIN, not_before: 0 });
        let input = Watermark::PosInf;
        let at = firing_watermark(input, [deferred.hold_watermark()]);
        assert_eq!(at, Watermark::At(Millis::MIN));
        assert!(timers.take_due(at, i64::MAX).is_empty(), "unprocessed input before the timer holds its firing");
        // The cycle commits the deferred element; it runs after the commit
        // and sets the timer again.
        deferred.take_entries();
        deferred.saved();
        assert_eq!(deferred.release(0, 10).len(), 1);
        timers.apply("p", "ev", TimeDomain::EventTime, vec![set(7)]);
        assert_eq!(timers.len(), 1, "a timer set again replaces the one pending");
        let at = firing_watermark(input, [deferred.hold_watermark()]);
        let fired = timers.take_due(at, i64::MAX);
        assert_eq!(fired.iter().map(|(_, t)| t.times.fire).collect::<Vec<_>>(), [7], "fires once, at its last setting");
        assert!(timers.take_due(at, i64::MAX).is_empty());
        assert_eq!(timers.take_changes().len(), 1, "its removal is durable with the cycle that fired it");
    }

    #[test]
    fn a_reset_or_cleared_timer_leaves_no_trace_in_the_indexes() {
        let mut t = Timers::default();
        let set = |key: &[u8], window: &[u8], fire| TimerSetting {
            key: key.to_vec(),
            tag: String::new(),
            window: window.to_vec(),
            set: Some(TimerTimes { fire, hold: fire - 1, pane: vec![0x0f] }),
        };
        t.apply("p", "pt", TimeDomain::ProcessingTime, vec![set(b"a", b"w1", 100), set(b"b", b"w2", 300)]);
        // Reset to a later time: the earlier one is gone from every index.
        t.apply("p", "pt", TimeDomain::ProcessingTime, vec![set(b"a", b"w1", 200)]);
        assert_eq!(t.next_processing_time(), Some(200));
        assert_eq!(t.hold(), Watermark::At(199));
        assert!(t.take_due(Watermark::NegInf, 150).is_empty());
        assert!(t.pending_in("p", b"w1") && t.pending_in("p", b"w2") && !t.pending_in("q", b"w1"));
        t.apply("p", "pt", TimeDomain::ProcessingTime, vec![TimerSetting { set: None, ..set(b"a", b"w1", 200) }]);
        assert!(!t.pending_in("p", b"w1"));
        assert_eq!(t.hold(), Watermark::At(299));
        assert_eq!(t.take_due(Watermark::NegInf, 300).len(), 1);
        assert_eq!((t.hold(), t.next_processing_time(), t.pending_in("p", b"w2")), (Watermark::PosInf, None, false));
    }

    /// OnWindowExpiration: armed once per key and window, fired when the
    /// watermark passes the window's expiry, and not armed again by what
    /// its callback writes in the same cycle.
    #[test]
    fn expiration_timers_are_armed_once_and_not_again_by_their_callback() {
        let mut t = Timers::default();
        t.set_expiry_families(HashMap::from([("pardo".to_string(), "expiry".to_string())]));
        let times = |fire| move || Some(TimerTimes { fire, hold: 10, pane: vec![0x0f] });
        t.arm_expiry("other", b"k", b"w", times(20));
        assert!(t.is_empty(), "a ParDo without the callback");
        t.arm_expiry("pardo", b"k", b"w", times(20));
        t.arm_expiry("pardo", b"k", b"w", times(99));
        assert_eq!((t.len(), t.hold()), (1, Watermark::At(10)), "armed once, holding the output");
        let armed = t.take_changes();
        assert_eq!(armed.len(), 1);
        assert_eq!(armed[0].1.as_ref().unwrap().times.fire, 20, "the first arming stands");
        assert!(t.take_due(Watermark::At(20), 0).is_empty(), "due once the watermark passed it");
        let fired = t.take_due(Watermark::At(21), 0);
        assert_eq!((fired[0].0.family.as_str(), fired[0].0.tag.as_str()), ("expiry", ""));
        t.arm_expiry("pardo", b"k", b"w", times(20));
        assert!(t.is_empty(), "the callback's own writes do not arm it again");
        t.take_changes();
        t.arm_expiry("pardo", b"k", b"w", times(20));
        assert_eq!(t.len(), 1, "state written in a later cycle does");
    }
}
