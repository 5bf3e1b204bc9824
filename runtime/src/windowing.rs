//! The parts of a windowing strategy the runner executes at a GroupByKey:
//! merging, trigger, accumulation, allowed lateness and output timestamps.
//! Window assignment itself runs in the SDK (WindowInto).
use crate::coder::Coder;
use crate::pb;
pub use crate::trigger::Trigger;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum OutputTime {
    EndOfWindow,
    EarliestInPane,
    LatestInPane,
}

#[derive(Clone, Debug, PartialEq)]
pub struct WindowingSpec {
    pub merging: bool,
    pub trigger: Trigger,
    pub accumulating: bool,
    pub allowed_lateness: i64,
    pub output_time: OutputTime,
    pub window_coder: Coder,
    /// An on-time pane fires even when empty (`OnTimeBehavior.FIRE_ALWAYS`).
    pub on_time_always: bool,
    /// The GroupByKey's input is bounded: its triggers are asked about
    /// elements at watermark steps only (see `gbk`).
    pub bounded_input: bool,
}

impl WindowingSpec {
    pub fn from_proto(components: &pb::Components, ws: &pb::WindowingStrategy) -> Result<WindowingSpec, String> {
        let window_coder = Coder::from_components(components, &ws.window_coder_id);
        if !matches!(window_coder, Coder::GlobalWindow | Coder::IntervalWindow) {
            return Err("custom WindowFns (windows the runner cannot read) are not supported yet".into());
        }
        let window_fn = ws.window_fn.as_ref().map(|f| f.urn.as_str()).unwrap_or("");
        let merging = ws.merge_status == pb::merge_status::Enum::NeedsMerge as i32;
        if merging && window_fn != "beam:window_fn:session_windows:v1" {
            return Err(format!("the merging WindowFn '{window_fn}' is not supported yet (only Sessions)"));
        }
        let accumulating = match pb::accumulation_mode::Enum::try_from(ws.accumulation_mode) {
            Ok(pb::accumulation_mode::Enum::Accumulating) => true,
            Ok(pb::accumulation_mode::Enum::Retracting) => return Err("retracting accumulation is not supported".into()),
            _ => false,
        };
        let output_time = match pb::output_time::Enum::try_from(ws.output_time) {
            Ok(pb::output_time::Enum::EarliestInPane) => OutputTime::EarliestInPane,
            Ok(pb::output_time::Enum::LatestInPane) => OutputTime::LatestInPane,
            _ => OutputTime::EndOfWindow,
        };
        Ok(WindowingSpec {
            merging,
            trigger: Trigger::from_proto(ws.trigger.as_ref())?,
            accumulating,
            allowed_lateness: ws.allowed_lateness.max(0),
            output_time,
            window_coder,
            on_time_always: ws.on_time_behavior != pb::on_time_behavior::Enum::FireIfNonempty as i32,
            bounded_input: false,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use pb::trigger::Trigger as T;

    fn components() -> pb::Components {
        let mut c = pb::Components::default();
        for (id, urn) in
            [("gw", crate::urns::CODER_GLOBAL_WINDOW), ("iw", crate::coder::INTERVAL_WINDOW), ("pw", "beam:coder:pickled_python:v1")]
        {
            c.coders.insert(
                id.into(),
                pb::Coder { spec: Some(pb::FunctionSpec { urn: urn.into(), payload: vec![] }), component_coder_ids: vec![] },
            );
        }
        c
    }

    fn with_trigger(t: T) -> pb::WindowingStrategy {
        pb::WindowingStrategy { window_coder_id: "gw".into(), trigger: Some(pb::Trigger { trigger: Some(t) }), ..Default::default() }
    }

    #[test]
    fn every_trigger_is_taken_and_behaviours_are_read() {
        let c = components();
        let spec = |t| WindowingSpec::from_proto(&c, &with_trigger(t));
        assert_eq!(spec(T::Default(Default::default())).unwrap().trigger, Trigger::default_trigger());
        assert!(spec(T::Never(Default::default())).is_ok());
        let bad = T::AfterAll(pb::trigger::AfterAll { subtriggers: vec![] });
        assert!(spec(bad).unwrap_err().contains("AfterAll"));
        let mut ws = with_trigger(T::Always(Default::default()));
        ws.on_time_behavior = pb::on_time_behavior::Enum::FireIfNonempty as i32;
        assert!(!WindowingSpec::from_proto(&c, &ws).unwrap().on_time_always);
        let s = WindowingSpec::from_proto(&c, &with_trigger(T::Always(Default::default()))).unwrap();
        assert!(s.on_time_always, "unspecified: Java's default");
    }

    #[test]
    fn sessions_merge_and_custom_windows_are_refused() {
        let c = components();
        let mut ws = with_trigger(T::Default(Default::default()));
        ws.window_coder_id = "iw".into();
        ws.merge_status = pb::merge_status::Enum::NeedsMerge as i32;
        ws.window_fn = Some(pb::FunctionSpec { urn: "beam:window_fn:session_windows:v1".into(), payload: vec![] });
        assert!(WindowingSpec::from_proto(&c, &ws).unwrap().merging);
        ws.window_coder_id = "pw".into();
        assert!(WindowingSpec::from_proto(&c, &ws).unwrap_err().contains("custom WindowFn"));
    }
}
