//! What a task knows of a GroupByKey that runs as an actor of its own: the
//! GroupByKey reports its watermark, its holds and its closed panes with
//! every answer, and the task decides from the last report.
//!
//! The holds cost a walk over the panes, so they travel only with answers to
//! a watermark step and to a barrier. Between those, the task's view is
//! behind the GroupByKey's in a safe direction for the stage (firing closed
//! panes only raises `closed_hold`), and it is exact at every barrier, which
//! is when a cycle's output watermark is decided.
use crate::codec::timestamp::{Millis, Watermark};
use crate::gbk::GroupByKey;

/// The holds a GroupByKey puts on its task's watermarks.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct GbkHolds {
    /// The earliest output timestamp buffered data may still produce.
    pub hold: Watermark,
    /// The earliest output timestamp of closed panes not yet fired.
    pub closed_hold: Watermark,
}

/// What a GroupByKey says about itself after handling a command.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct GbkReport {
    /// The input watermark it has been given.
    pub watermark: Watermark,
    /// Closed panes waiting for their on-time firing.
    pub closed_pending: usize,
    /// Elements it dropped as late, in all.
    pub dropped_late: u64,
    /// The earliest processing time a trigger of it waits for.
    pub deadline: Option<Millis>,
    pub holds: Option<GbkHolds>,
}

impl GroupByKey {
    /// Its report; `with_holds` walks its panes for the holds.
    pub fn report(&self, with_holds: bool) -> GbkReport {
        GbkReport {
            watermark: self.input_watermark,
            closed_pending: self.closed_pending(),
            dropped_late: self.dropped_late,
            deadline: self.next_deadline(),
            holds: with_holds.then(|| GbkHolds { hold: self.hold(), closed_hold: self.closed_hold() }),
        }
    }
}

/// A task's view of one GroupByKey actor.
#[derive(Clone, Debug)]
pub struct GbkView {
    /// The data source of the stage its panes go to.
    pub source_transform: String,
    /// Its windowing's allowed lateness (for the user's warnings).
    pub allowed_lateness: i64,
    pub watermark: Watermark,
    pub closed_pending: usize,
    pub dropped_late: u64,
    /// The earliest processing time a trigger waits for (None once the
    /// GroupByKey was told it passed, until it reports again).
    pub deadline: Option<Millis>,
    pub holds: GbkHolds,
    /// A firing of closed panes was asked for and not answered yet.
    pub firing: bool,
    /// A watermark step may have closed panes that no report counts yet.
    maybe_closed: bool,
}

impl GbkView {
    /// The view of a GroupByKey as restored, before its actor starts.
    pub fn new(source_transform: String, gbk: &GroupByKey) -> GbkView {
        let r = gbk.report(true);
        GbkView {
            source_transform,
            allowed_lateness: gbk.spec_allowed_lateness(),
            watermark: r.watermark,
            closed_pending: r.closed_pending,
            dropped_late: r.dropped_late,
            deadline: r.deadline,
            holds: r.holds.expect("asked for"),
            firing: false,
            maybe_closed: false,
        }
    }

    /// Takes in a report; whether its closed panes just ran out.
    pub fn update(&mut self, r: &GbkReport) -> bool {
        let drained = self.closed_pending > 0 && r.closed_pending == 0;
        self.maybe_closed = false;
        self.watermark = r.watermark;
        self.closed_pending = r.closed_pending;
        self.dropped_late = r.dropped_late;
        self.deadline = r.deadline;
        match r.holds {
            Some(h) => self.holds = h,
            // Nothing closed is left to fire: nothing closed holds.
            None if r.closed_pending == 0 => self.holds.closed_hold = Watermark::PosInf,
            None => {}
        }
        drained
    }

    /// The task's watermark moved: windows may have closed that no report
    /// counts yet, so a firing is worth asking for.
    pub fn watermark_moved(&mut self) {
        self.maybe_closed = true;
    }

    /// Whether closed panes wait and no firing is asked for yet.
    pub fn wants_firing(&self) -> bool {
        (self.closed_pending > 0 || self.maybe_closed) && !self.firing
    }

    /// Whether closed panes wait or are being fired: queued records wait
    /// behind them.
    pub fn has_closed(&self) -> bool {
        self.closed_pending > 0 || self.firing || self.maybe_closed
    }

    /// Whether a trigger's processing-time deadline passed at `now`; if so
    /// it is taken (the GroupByKey is told once, and reports the next).
    pub fn take_due_deadline(&mut self, now: Millis) -> bool {
        let due = self.deadline.is_some_and(|d| d <= now);
        if due {
            self.deadline = None;
        }
        due
    }

    /// How far the stage behind may see the watermark: not past closed panes
    /// still to come, nor past the watermark the GroupByKey has taken in
    /// (the windows a later step closes are not counted yet).
    pub fn stage_hold(&self) -> Watermark {
        self.holds.closed_hold.min(self.watermark)
    }

    /// How far the task's output watermark may go.
    pub fn output_hold(&self) -> Watermark {
        self.holds.hold
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::gbk::fixtures::{interval_element, interval_gbk};

    fn gbk() -> GroupByKey {
        interval_gbk(false)
    }

    /// Key `k`, value 1, at `ts` in its 10 ms window.
    fn kv(k: &str, ts: Millis) -> Vec<u8> {
        interval_element(ts, ts - ts % 10, ts - ts % 10 + 10, k, 1)
    }

    #[test]
    fn a_view_is_exact_after_a_report_with_holds_and_safe_in_between() {
        let mut g = gbk();
        let mut out = Vec::new();
        g.add(&kv("a", 3), &mut out).unwrap();
        g.add(&kv("b", 13), &mut out).unwrap();
        let mut view = GbkView::new("src".into(), &g);
        assert_eq!(view.output_hold(), Watermark::At(9), "the first window's end holds the output");
        assert_eq!(view.stage_hold(), Watermark::NegInf, "no watermark taken in yet");

        g.set_watermark(Watermark::At(25), &mut out);
        assert!(!view.update(&g.report(true)));
        assert_eq!(view.closed_pending, 2);
        assert!(view.wants_firing());
        assert_eq!(view.stage_hold(), Watermark::At(9), "closed, unfired panes hold the stage");

        view.firing = true;
        assert!(!view.wants_firing(), "one firing asked for at a time");
        g.fire_closed(1, &mut out);
        view.firing = false;
        assert!(!view.update(&g.report(false)));
        assert_eq!(view.stage_hold(), Watermark::At(9), "without holds the view stays behind: safe");
        g.fire_closed(1, &mut out);
        assert!(view.update(&g.report(false)), "the last closed pane fired");
        assert_eq!(view.stage_hold(), Watermark::At(25), "nothing closed holds; the GroupByKey's watermark does");
        assert_eq!(out.len(), 2);

        view.watermark_moved();
        assert!(view.wants_firing(), "a watermark step may have closed panes no report counted yet");
        assert!(!view.update(&g.report(false)), "an empty firing is not a drain");
        assert!(!view.wants_firing());
    }
}
