//! The trigger state machine on its own: every trigger and composite,
//! merging, and a state that goes through its durable form.
use super::*;
use pb::trigger as t;

fn tr(x: T) -> pb::Trigger {
    pb::Trigger { trigger: Some(x) }
}
fn boxed(x: T) -> Option<Box<pb::Trigger>> {
    Some(Box::new(tr(x)))
}
fn count(n: i32) -> T {
    T::ElementCount(t::ElementCount { element_count: n })
}
fn processing(delay: i64) -> T {
    T::AfterProcessingTime(t::AfterProcessingTime {
        timestamp_transforms: vec![pb::TimestampTransform {
            timestamp_transform: Some(pb::timestamp_transform::TimestampTransform::Delay(pb::timestamp_transform::Delay {
                delay_millis: delay,
            })),
        }],
    })
}
fn watermark(early: Option<T>, late: Option<T>) -> T {
    T::AfterEndOfWindow(Box::new(t::AfterEndOfWindow {
        early_firings: early.map(|e| Box::new(tr(e))),
        late_firings: late.map(|l| Box::new(tr(l))),
    }))
}
fn repeat(x: T) -> T {
    T::Repeat(Box::new(t::Repeat { subtrigger: boxed(x) }))
}
fn any(xs: Vec<T>) -> T {
    T::AfterAny(t::AfterAny { subtriggers: xs.into_iter().map(tr).collect() })
}
fn all(xs: Vec<T>) -> T {
    T::AfterAll(t::AfterAll { subtriggers: xs.into_iter().map(tr).collect() })
}
fn each(xs: Vec<T>) -> T {
    T::AfterEach(t::AfterEach { subtriggers: xs.into_iter().map(tr).collect() })
}
fn or_finally(main: T, until: T) -> T {
    T::OrFinally(Box::new(t::OrFinally { main: boxed(main), finally: boxed(until) }))
}

/// A window [0, 10) driven by hand: elements, clocks, firings.
struct Driver {
    trigger: Trigger,
    state: TriggerState,
    now: Now,
}

impl Driver {
    fn new(x: T) -> Driver {
        let trigger = Trigger::from_proto(Some(&tr(x))).unwrap();
        let state = trigger.new_state();
        Driver { trigger, state, now: Now { watermark: Watermark::NegInf, processing: 0, window_max: 9, mid_batch: false } }
    }
    fn elements(&mut self, n: usize) -> &mut Self {
        for _ in 0..n {
            self.trigger.on_element(&mut self.state, &self.now);
        }
        self
    }
    fn watermark(&mut self, wm: Millis) -> &mut Self {
        self.now.watermark = Watermark::At(wm);
        self
    }
    fn clock(&mut self, t: Millis) -> &mut Self {
        self.now.processing = t;
        self
    }
    /// Fires if the trigger says so; whether it did.
    fn fire(&mut self) -> bool {
        let fires = self.trigger.should_fire(&mut self.state, &self.now);
        if fires {
            self.trigger.on_fire(&mut self.state, &self.now);
        }
        fires
    }
    fn finished(&self) -> bool {
        self.trigger.is_finished(&self.state)
    }
}

#[test]
fn default_fires_at_the_end_of_the_window_and_on_every_late_batch_after() {
    let mut d = Driver::new(T::Default(Default::default()));
    assert!(!d.elements(3).fire());
    assert!(d.watermark(10).fire());
    assert!(!d.finished());
    assert!(d.elements(1).fire(), "late data fires again");
    assert!(Trigger::default_trigger().is_watermark_only() && Trigger::default_trigger().has_on_time_pane());
}

#[test]
fn after_count_fires_once_and_finishes() {
    let mut d = Driver::new(count(3));
    assert!(!d.elements(2).fire());
    assert!(d.elements(1).fire());
    assert!(d.finished());
    assert!(!d.elements(5).fire(), "a finished trigger never fires again");
    assert!(!d.trigger.has_on_time_pane());
}

#[test]
fn repeatedly_starts_its_subtrigger_over() {
    let mut d = Driver::new(repeat(count(2)));
    assert!(!d.elements(1).fire());
    assert!(d.elements(1).fire());
    assert!(!d.finished());
    assert!(!d.elements(1).fire(), "the count restarted");
    assert!(d.elements(1).fire());
}

#[test]
fn after_processing_time_waits_from_the_first_element() {
    let mut d = Driver::new(processing(5000));
    d.clock(100).elements(1);
    assert_eq!(d.trigger.next_deadline(&d.state), Some(5100));
    d.clock(3000).elements(1);
    assert_eq!(d.trigger.next_deadline(&d.state), Some(5100), "later elements keep the first deadline");
    assert!(!d.clock(5099).fire());
    assert!(d.clock(5100).fire());
    assert!(d.finished());
    assert_eq!(d.trigger.next_deadline(&d.state), None);
}

#[test]
fn processing_time_alignment_rounds_up_to_the_period() {
    assert_eq!(deadline(1234, &[TimeTransform::AlignTo { period: 1000, offset: 0 }]), 2000);
    assert_eq!(deadline(2000, &[TimeTransform::AlignTo { period: 1000, offset: 0 }]), 2000);
    assert_eq!(deadline(1234, &[TimeTransform::Delay(100), TimeTransform::AlignTo { period: 1000, offset: 500 }]), 1500);
    assert_eq!(deadline(-1, &[TimeTransform::AlignTo { period: 10, offset: 0 }]), 0);
    // A payload may hold anything: no overflow.
    deadline(i64::MIN, &[TimeTransform::AlignTo { period: 7, offset: i64::MAX }, TimeTransform::Delay(i64::MAX)]);
}

#[test]
fn repeated_processing_time_sets_a_new_deadline_after_each_firing() {
    let mut d = Driver::new(repeat(processing(10)));
    d.clock(0).elements(1);
    assert!(d.clock(10).fire());
    assert_eq!(d.trigger.next_deadline(&d.state), None, "no element since the firing");
    d.clock(15).elements(1);
    assert_eq!(d.trigger.next_deadline(&d.state), Some(25));
}

#[test]
fn after_watermark_with_early_and_late_firings() {
    // AfterWatermark(early=AfterProcessingTime(10), late=AfterCount(1)).
    let mut d = Driver::new(watermark(Some(processing(10)), Some(count(1))));
    d.clock(0).elements(1);
    assert!(!d.fire());
    assert!(d.clock(10).fire(), "early");
    d.clock(12).elements(1);
    assert!(!d.clock(21).fire());
    assert!(d.clock(22).fire(), "early again: early firings repeat");
    d.elements(1);
    assert!(d.watermark(10).fire(), "on time");
    assert!(!d.finished());
    assert!(!d.clock(1000).fire(), "the early deadline was dropped at the end of the window");
    assert!(d.elements(1).fire(), "late");
    assert!(d.elements(1).fire(), "late firings repeat");
    assert!(!d.fire(), "nothing new");
}

#[test]
fn after_watermark_without_late_firings_finishes_on_time() {
    let mut d = Driver::new(watermark(Some(count(2)), None));
    assert!(d.elements(2).fire());
    assert!(!d.finished());
    assert!(d.watermark(10).fire());
    assert!(d.finished());
    assert!(!d.trigger.is_watermark_only());
    assert!(Driver::new(watermark(None, None)).trigger.is_watermark_only());
}

#[test]
fn after_any_fires_when_one_fires_and_finishes_with_it() {
    let mut d = Driver::new(any(vec![count(3), processing(5)]));
    d.clock(0).elements(1);
    assert!(d.clock(5).fire());
    assert!(d.finished());
}

#[test]
fn after_all_waits_for_every_subtrigger() {
    let mut d = Driver::new(all(vec![count(2), processing(5)]));
    d.clock(0).elements(2);
    assert!(!d.fire(), "the deadline has not passed");
    assert!(d.clock(5).fire());
    assert!(d.finished());
}

#[test]
fn repeated_after_all_counts_and_waits_again() {
    // As in Beam's test_multiple_accumulating_firings: early=AfterAll(AfterCount(1), AfterProcessingTime(5)).
    let mut d = Driver::new(watermark(Some(all(vec![count(1), processing(5000)])), None));
    d.clock(0).elements(5);
    assert!(!d.fire());
    assert!(d.clock(5000).fire(), "first early firing");
    d.elements(5);
    assert!(!d.fire(), "a new deadline from the first element after the firing");
    assert!(d.clock(10_000).fire());
    assert!(d.watermark(10).fire(), "on time");
    assert!(d.finished());
}

#[test]
fn after_each_runs_its_subtriggers_in_turn() {
    let mut d = Driver::new(each(vec![count(2), count(3)]));
    assert!(d.elements(2).fire());
    assert!(!d.finished());
    assert!(!d.elements(2).fire(), "the second counts from its own start");
    assert!(d.elements(1).fire());
    assert!(d.finished());
}

#[test]
fn or_finally_stops_a_repeated_trigger() {
    let mut d = Driver::new(or_finally(repeat(count(1)), count(3)));
    assert!(d.elements(1).fire());
    assert!(d.elements(1).fire());
    assert!(!d.finished());
    assert!(d.elements(1).fire(), "the third element fires the finally trigger");
    assert!(d.finished());
}

#[test]
fn always_never_and_synchronized_processing_time() {
    let mut always = Driver::new(T::Always(Default::default()));
    assert!(!always.fire(), "nothing to fire");
    assert!(always.elements(1).fire() && !always.fire() && !always.finished());
    assert!(always.elements(2).fire());
    let mut never = Driver::new(T::Never(Default::default()));
    assert!(!never.elements(10).watermark(100).fire());
    let mut sync = Driver::new(T::AfterSynchronizedProcessingTime(Default::default()));
    assert!(sync.elements(1).fire() && !sync.finished() && !sync.fire());
}

#[test]
fn merged_windows_add_counts_keep_the_earliest_deadline_and_carry_finishing() {
    let trigger = Trigger::from_proto(Some(&tr(any(vec![count(4), processing(100)])))).unwrap();
    let now = |p| Now { watermark: Watermark::NegInf, processing: p, window_max: 30, mid_batch: false };
    let (mut a, mut b) = (trigger.new_state(), trigger.new_state());
    trigger.on_element(&mut a, &now(50));
    trigger.on_element(&mut b, &now(10));
    trigger.on_element(&mut b, &now(60));
    let mut merged = trigger.merge([&a, &b]);
    assert_eq!(trigger.next_deadline(&merged), Some(110));
    assert!(!trigger.should_fire(&mut merged, &now(60)));
    trigger.on_element(&mut merged, &now(70));
    assert!(trigger.should_fire(&mut merged, &now(70)), "1 + 2 + 1 elements reach the count");

    let once = Trigger::from_proto(Some(&tr(count(1)))).unwrap();
    let mut done = once.new_state();
    once.on_element(&mut done, &now(0));
    once.on_fire(&mut done, &now(0));
    assert!(once.is_finished(&once.merge([&done, &once.new_state()])), "a session merged with a closed one is closed");
}

#[test]
fn a_state_restored_from_its_durable_form_goes_on_where_it_was() {
    let mut d = Driver::new(watermark(Some(repeat(each(vec![count(2), processing(7)]))), Some(count(1))));
    d.clock(1).elements(2);
    assert!(d.fire(), "the AfterCount(2) of the early AfterEach");
    d.clock(3).elements(1);
    let mut bytes = Vec::new();
    d.state.encode(&mut bytes);
    let restored = TriggerState::decode(&mut ByteReader::new(&bytes)).unwrap();
    assert_eq!(restored, d.state);
    d.state = restored;
    assert_eq!(d.trigger.next_deadline(&d.state), Some(10));
    assert!(d.clock(10).fire(), "the AfterProcessingTime(7), then the AfterEach starts over");
    assert!(!d.elements(1).fire());
    assert!(d.elements(1).fire());

    let mut wrong = TriggerState::decode(&mut ByteReader::new(&[0])).unwrap();
    assert!(!d.trigger.should_fire(&mut wrong, &d.now), "a state of another shape starts fresh");
}

#[test]
fn malformed_triggers_are_refused() {
    let empty_any = Trigger::from_proto(Some(&tr(any(vec![])))).unwrap_err();
    assert!(empty_any.contains("AfterAny"), "{empty_any}");
    let no_sub = tr(T::Repeat(Box::new(t::Repeat { subtrigger: None })));
    assert!(Trigger::from_proto(Some(&no_sub)).unwrap_err().contains("Repeatedly"));
    let mut deep = count(1);
    for _ in 0..40 {
        deep = repeat(deep);
    }
    assert!(Trigger::from_proto(Some(&tr(deep))).is_err());
}
