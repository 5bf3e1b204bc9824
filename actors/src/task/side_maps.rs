//! Side windows the SDK maps main windows onto, for side inputs whose
//! WindowFn (or whose main input's window type) the runner cannot evaluate
//! (`runtime::state::side_input::SideMaps`): each held element's windows are asked
//! once, beside the input (nothing waits but the held elements), and held
//! elements are looked at again when the SDK answers. Until it does, an
//! element waits for the whole side input, as it would without the SDK.
use std::collections::BTreeMap;

use actix::prelude::*;
use beam_kafka_runtime::codec::timestamp::Watermark;
use beam_kafka_runtime::codec::windowed::Window;
use beam_kafka_runtime::state::held::HeldElements;
use beam_kafka_runtime::state::side_input::SideMaps;

use super::TaskSupervisor;
use crate::side_inputs::SideInputSpec;

/// The side inputs the SDK maps windows for, by index.
pub(super) fn mapped_sides(specs: &[SideInputSpec]) -> Vec<usize> {
    specs.iter().enumerate().filter(|(_, s)| s.mapping.is_some()).map(|(i, _)| i).collect()
}

/// The mappings the held elements need, and which of them to ask.
pub(super) fn wanted_by_held(held: &HeldElements, specs: &[SideInputSpec]) -> (SideMaps, Vec<(usize, Window)>) {
    let mut maps = SideMaps::default();
    let to_ask = maps.want_all(&mapped_sides(specs), held.windows());
    (maps, to_ask)
}

/// Whether side input `i` (`spec`) is complete for main window `w`.
pub(super) fn side_ready(maps: &SideMaps, i: usize, spec: &SideInputSpec, w: &Window, wm: Watermark) -> bool {
    maps.side_ready(i, spec.mapping.is_some(), &spec.windowing, w, wm)
}

impl TaskSupervisor {
    /// Notes the mappings the windows of an element about to be held need.
    pub(super) fn want_side_maps(&mut self, windows: &[Window]) {
        let sides = mapped_sides(&self.cfg.side_inputs);
        if !sides.is_empty() {
            let to_ask = self.side_maps.want_all(&sides, windows);
            self.side_maps_to_ask.extend(to_ask);
        }
    }

    /// Forgets mappings onto side windows that ended, but those held
    /// elements still need (the cache stays as small as what is live).
    pub(super) fn forget_ended_side_maps(&mut self) {
        if self.cfg.side_mapper.is_none() {
            return;
        }
        let in_use: std::collections::HashSet<&Window> = self.held.windows().collect();
        for i in mapped_sides(&self.cfg.side_inputs) {
            let wm = self.side_watermarks.get(&self.cfg.side_inputs[i].topic).copied().unwrap_or(Watermark::NegInf);
            self.side_maps.forget_ended(i, wm, |w| in_use.contains(w));
        }
    }

    /// Asks the SDK the mappings noted, in one helper bundle per side input.
    pub(super) fn ask_side_maps(&mut self, ctx: &mut Context<Self>) {
        if self.side_maps_to_ask.is_empty() {
            return;
        }
        let Some(bundles) = self.cfg.side_mapper.clone() else { return };
        let mut by_side: BTreeMap<usize, Vec<Window>> = BTreeMap::new();
        for (i, w) in std::mem::take(&mut self.side_maps_to_ask) {
            by_side.entry(i).or_default().push(w);
        }
        let asks: Vec<_> = by_side.into_iter().filter_map(|(i, ws)| self.cfg.side_inputs[i].mapping.clone().map(|m| (i, m, ws))).collect();
        let asked = async move {
            let mut learned = Vec::new();
            for (i, m, windows) in asks {
                learned.extend(bundles.side_window_ends(&m, &windows).await?.into_iter().map(|(w, max)| (i, w, max)));
            }
            Ok::<_, String>(learned)
        };
        ctx.spawn(asked.into_actor(self).map(|answer, act, ctx| match answer {
            Ok(learned) => {
                for (i, w, max) in learned {
                    act.side_maps.learn(i, w, max);
                }
                act.held.recheck();
                act.pump(ctx);
            }
            Err(e) => {
                act.side_maps.forget_pending();
                act.fail(ctx, format!("cannot tell which side input windows its elements need: {e}"));
            }
        }));
    }
}
