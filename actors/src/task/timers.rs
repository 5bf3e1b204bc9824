//! Timers of a task's stateful ParDos: which are due, firing them inside a
//! commit cycle, applying what bundles set, and expiring user state.
use std::collections::HashMap;

use beam_kafka_fnapi::TimerFamily;
use beam_kafka_runtime::codec::coder::Coder;
use beam_kafka_runtime::codec::timestamp::Watermark;
use beam_kafka_runtime::codec::windowed::Window;
use beam_kafka_runtime::state::expiry;
use beam_kafka_runtime::state::timers::firing_watermark;

use super::cycle::clock_now;
use super::TaskSupervisor;
use crate::messages::FireTimers;

/// A stage data source read by a ParDo with an OnWindowExpiration callback.
pub(super) struct ExpiryInput {
    transform: String,
    key_coder: Coder,
    window_coder: Coder,
    allowed_lateness: i64,
}

/// The expiry inputs of a task's input routes, by stage data source.
pub(super) fn expiry_inputs(routes: &HashMap<String, super::InputRoute>) -> HashMap<String, ExpiryInput> {
    let expiry = |r: &super::InputRoute| {
        let (transform, key_coder) = r.expiry.clone()?;
        Some((
            r.source_transform.clone(),
            ExpiryInput { transform, key_coder, window_coder: r.window_coder.clone(), allowed_lateness: r.allowed_lateness },
        ))
    };
    routes.values().filter_map(expiry).collect()
}

impl TaskSupervisor {
    /// The watermark the stage's timers see (`timers::firing_watermark`):
    /// the input watermark, held back by closed GroupByKey windows not yet
    /// handed to the stage (their panes would arrive behind it), by
    /// watermark steps a GroupByKey has not reported taking in, and by
    /// elements the stage has yet to process: deferred by a split bundle or
    /// waiting for side inputs.
    pub(super) fn stage_watermark(&self) -> Watermark {
        let closed = self.gbk_views.values().map(|g| g.stage_hold());
        let unprocessed = closed.chain([self.deferred.hold_watermark(), self.held.hold_watermark()]);
        firing_watermark(self.input_watermark, unprocessed)
    }

    /// Sends the stage every timer now due (in fire-time order). Called when
    /// a flush completed, so every timer the bundles before it set or
    /// cleared is known (a timer decided on earlier could fire twice); the
    /// cycle then flushes again, and the timers' removal commits with what
    /// their firing produced (`runtime::state::timer_firing`).
    pub(super) fn fire_due_timers(&mut self) -> bool {
        let input = self.stage_watermark();
        let timers = self.timers.take_firings(input, clock_now(&self.progress));
        if timers.is_empty() {
            return false;
        }
        tracing::debug!(task = %self.cfg.task, "firing timers at input watermark {input:?}: {:?}", timers.iter().map(|(f, b)| (f, b.len())).collect::<Vec<_>>());
        self.stage.do_send(FireTimers { timers });
        true
    }

    /// Whether a timer is due now (to start a cycle that fires it).
    pub(super) fn timers_due(&self) -> bool {
        self.timers.any_due(self.stage_watermark(), clock_now(&self.progress))
    }

    /// Applies the timers a bundle set or cleared.
    pub(super) fn apply_timers(&mut self, set: HashMap<TimerFamily, Vec<u8>>) -> Result<(), String> {
        for ((transform, family), bytes) in set {
            let spec = self
                .cfg
                .timer_specs
                .iter()
                .find(|t| t.transform == transform && t.family == family)
                .ok_or_else(|| format!("the harness set timers of an unknown family {family} of {transform}"))?;
            let settings = spec.codec.decode_all(&bytes).map_err(|e| format!("timers of {family} of {transform}: {e}"))?;
            tracing::debug!(task = %self.cfg.task, "timers set: {:?}", settings.iter().map(|s| (&s.tag, s.set.as_ref().map(|t| (t.fire, t.hold)))).collect::<Vec<_>>());
            self.timers.apply(&transform, &family, spec.domain, settings);
        }
        Ok(())
    }

    /// Arms the OnWindowExpiration timer of each key and window whose
    /// user state a bundle of this cycle wrote: it fires at the window's
    /// expiry (end plus allowed lateness), holding the output watermark at
    /// the window's end (or the input watermark, if that is past it) so
    /// what the callback outputs is not late; the state it reads is kept
    /// until it fired.
    pub(super) fn arm_window_expiries(&mut self) {
        if !self.timers.has_expiry_families() {
            return;
        }
        let (Some(user), Some(route)) = (&self.cfg.user_state, self.cfg.inputs.values().next()) else { return };
        let (coder, lateness) = (&route.window_coder, route.allowed_lateness);
        let input = self.stage_watermark();
        let user = user.lock().expect("user state lock");
        for cell in user.written_cells() {
            self.timers.arm_expiry(&cell.transform, &cell.key, &cell.window, || expiry::timer(&cell.window, coder, lateness, input));
        }
    }

    /// Arms the OnWindowExpiration timer of each key and window of elements
    /// handed to a ParDo with that callback (see `arm_window_expiries`).
    pub(super) fn arm_expiries_of(&mut self, source: &str, elements: &[Vec<u8>]) -> Result<(), String> {
        // Called per record of a source: no hashing when no ParDo has the callback.
        if self.expiry_inputs.is_empty() {
            return Ok(());
        }
        let Some(e) = self.expiry_inputs.get(source) else { return Ok(()) };
        let input = self.stage_watermark();
        for element in elements {
            let (key, windows) = expiry::key_and_windows(element, &e.window_coder, &e.key_coder)?;
            for window in windows {
                self.timers.arm_expiry(&e.transform, key, window, || expiry::timer(window, &e.window_coder, e.allowed_lateness, input));
            }
        }
        Ok(())
    }

    /// Drops user state of windows the watermark has passed (end of window
    /// plus allowed lateness), except where a timer of the window is still
    /// to fire and read it. At the end of input nothing is dropped: the last
    /// timers fire after it.
    pub(super) fn expire_user_state(&self, wm: Watermark) -> Result<(), String> {
        let (Some(user), Some(route)) = (&self.cfg.user_state, self.cfg.inputs.values().next()) else { return Ok(()) };
        let Watermark::At(w) = wm.min(self.stage_watermark()) else { return Ok(()) };
        let (coder, lateness) = (&route.window_coder, route.allowed_lateness);
        let timers = &self.timers;
        user.lock().expect("user state lock").expire(|transform, window| {
            !timers.pending_in(transform, window)
                && Window::decode(window, coder).is_ok_and(|win| win.max_timestamp().saturating_add(lateness) < w)
        })
    }
}
