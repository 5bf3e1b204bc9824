//! The parts of a windowing strategy the runner executes at a GroupByKey:
//! merging, trigger, accumulation, allowed lateness and output timestamps.
//! Window assignment itself runs in the SDK (WindowInto).
use crate::coder::Coder;
use crate::pb;
use pb::trigger::Trigger as T;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Trigger {
    /// Fire once when the watermark passes the end of the window, then on
    /// every late element.
    Default,
    /// Fire on every element.
    Always,
    /// Fire after every `n` elements; the rest at the end of the window.
    RepeatedCount(u64),
}

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
}

fn trigger_name(t: &Option<T>) -> &'static str {
    match t {
        None => "unset",
        Some(T::AfterAll(_)) => "AfterAll",
        Some(T::AfterAny(_)) => "AfterAny",
        Some(T::AfterEach(_)) => "AfterEach",
        Some(T::AfterEndOfWindow(_)) => "AfterWatermark with early or late firings",
        Some(T::AfterProcessingTime(_)) => "AfterProcessingTime",
        Some(T::AfterSynchronizedProcessingTime(_)) => "AfterSynchronizedProcessingTime",
        Some(T::Always(_)) => "Always",
        Some(T::Default(_)) => "Default",
        Some(T::ElementCount(_)) => "AfterCount",
        Some(T::Never(_)) => "Never",
        Some(T::OrFinally(_)) => "OrFinally",
        Some(T::Repeat(_)) => "Repeatedly",
    }
}

fn trigger(t: &Option<pb::Trigger>) -> Result<Trigger, String> {
    let inner = t.as_ref().and_then(|t| t.trigger.clone());
    match &inner {
        None | Some(T::Default(_)) => Ok(Trigger::Default),
        Some(T::AfterEndOfWindow(a)) if a.early_firings.is_none() && a.late_firings.is_none() => Ok(Trigger::Default),
        Some(T::Always(_)) => Ok(Trigger::Always),
        Some(T::Repeat(r)) => match r.subtrigger.as_ref().and_then(|s| s.trigger.as_ref()) {
            Some(T::ElementCount(c)) if c.element_count > 0 => Ok(Trigger::RepeatedCount(c.element_count as u64)),
            _ => Err("the trigger Repeatedly(...) is supported only around AfterCount".into()),
        },
        other => Err(format!("the trigger {} is not supported yet", trigger_name(other))),
    }
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
            trigger: trigger(&ws.trigger)?,
            accumulating,
            allowed_lateness: ws.allowed_lateness.max(0),
            output_time,
            window_coder,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

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
    fn supported_triggers() {
        let c = components();
        let spec = |t| WindowingSpec::from_proto(&c, &with_trigger(t));
        assert_eq!(spec(T::Default(Default::default())).unwrap().trigger, Trigger::Default);
        assert_eq!(spec(T::Always(Default::default())).unwrap().trigger, Trigger::Always);
        let count = pb::Trigger { trigger: Some(T::ElementCount(pb::trigger::ElementCount { element_count: 3 })) };
        let repeat = T::Repeat(Box::new(pb::trigger::Repeat { subtrigger: Some(Box::new(count)) }));
        assert_eq!(spec(repeat).unwrap().trigger, Trigger::RepeatedCount(3));
        let err = spec(T::Never(Default::default())).unwrap_err();
        assert!(err.contains("Never"), "{err}");
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
