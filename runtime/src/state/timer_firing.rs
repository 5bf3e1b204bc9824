//! Which of a task's timers fire in a commit cycle, and in what shape the
//! stage gets them. Asked when a cycle's flush completed (so every timer the
//! bundles before it set or cleared is known) with the stage's watermark
//! (`timers::firing_watermark`) and the processing time (the test clock
//! under a TestStream). At the end of input every timer fires, whatever
//! its domain.
use crate::codec::timestamp::{Millis, Watermark};
use crate::state::timers::{TimerCodec, Timers};

/// A ParDo's timer family: (transform, family), as the Fn API names it.
pub type TimerFamily = (String, String);

/// The processing time timers see: at the end of input, the end of time.
fn clock(input: Watermark, now: Millis) -> Millis {
    if input == Watermark::PosInf {
        Millis::MAX
    } else {
        now
    }
}

impl Timers {
    /// Whether a timer is due (worth a cycle that fires it): an event-time
    /// one the stage's watermark `input` passed (any, at the end of input),
    /// or a processing-time one whose time `now` reached.
    pub fn any_due(&self, input: Watermark, now: Millis) -> bool {
        let event_due = match (input, self.hold()) {
            (Watermark::PosInf, _) => !self.is_empty(),
            (Watermark::At(w), Watermark::At(h)) => h < w,
            _ => false,
        };
        event_due || self.next_processing_time().is_some_and(|t| t <= now)
    }

    /// Takes the timers to fire now (`take_due`), encoded as the stage's
    /// timer data: consecutive timers of one family, in fire-time order,
    /// in one batch.
    pub fn take_firings(&mut self, input: Watermark, now: Millis) -> Vec<(TimerFamily, Vec<u8>)> {
        if self.is_empty() {
            return Vec::new();
        }
        let mut per_family: Vec<(TimerFamily, Vec<u8>)> = Vec::new();
        for (id, t) in self.take_due(input, clock(input, now)) {
            let family = (id.transform.clone(), id.family.clone());
            let mut bytes = Vec::new();
            TimerCodec::encode_firing(&id, &t.times, &mut bytes);
            match per_family.last_mut() {
                Some((f, b)) if *f == family => b.extend_from_slice(&bytes),
                _ => per_family.push((family, bytes)),
            }
        }
        per_family
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::state::timers::{TimeDomain, TimerSetting, TimerTimes};

    fn set(key: &[u8], fire: Millis) -> TimerSetting {
        TimerSetting { key: key.to_vec(), tag: String::new(), window: vec![], set: Some(TimerTimes { fire, hold: fire, pane: vec![0x0f] }) }
    }

    #[test]
    fn a_timer_is_due_once_the_watermark_passed_it_or_its_time_came() {
        let mut t = Timers::default();
        assert!(!t.any_due(Watermark::PosInf, 0), "no timers, nothing due");
        t.apply("p", "ev", TimeDomain::EventTime, vec![set(b"a", 10)]);
        t.apply("p", "pt", TimeDomain::ProcessingTime, vec![set(b"a", 500)]);
        let cases = [
            (Watermark::NegInf, 0, false),
            (Watermark::At(10), 0, false),
            (Watermark::At(11), 0, true),
            (Watermark::At(5), 499, false),
            (Watermark::At(5), 500, true),
            (Watermark::PosInf, 0, true),
        ];
        for (input, now, due) in cases {
            assert_eq!(t.any_due(input, now), due, "{input:?} at {now}");
        }
    }

    #[test]
    fn firings_group_consecutive_timers_of_a_family_and_the_end_of_input_fires_every_one() {
        let mut t = Timers::default();
        t.apply("p", "ev", TimeDomain::EventTime, vec![set(b"a", 10), set(b"b", 20)]);
        t.apply("p", "pt", TimeDomain::ProcessingTime, vec![set(b"c", 1_000_000)]);
        let firings = t.take_firings(Watermark::At(30), 0);
        assert_eq!(firings.iter().map(|(f, _)| f.1.as_str()).collect::<Vec<_>>(), ["ev"], "one batch for both");
        let mut one = Vec::new();
        let mut again = Timers::default();
        again.apply("p", "ev", TimeDomain::EventTime, vec![set(b"a", 10)]);
        let (id, p) = again.take_due(Watermark::At(30), 0).remove(0);
        TimerCodec::encode_firing(&id, &p.times, &mut one);
        assert!(firings[0].1.starts_with(&one) && firings[0].1.len() > one.len(), "a's firing first, then b's");
        assert!(t.take_firings(Watermark::At(30), 0).is_empty(), "the processing-time one is not due");
        let last = t.take_firings(Watermark::PosInf, 0);
        assert_eq!(last.len(), 1, "the end of input fires it");
        assert!(t.is_empty());
    }
}
