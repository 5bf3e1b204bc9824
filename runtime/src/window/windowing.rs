//! The parts of a windowing strategy the runner executes at a GroupByKey:
//! merging, trigger, accumulation, allowed lateness and output timestamps.
//! Window assignment itself runs in the SDK (WindowInto).
use crate::codec::coder::Coder;
use crate::pb;
pub use crate::window::trigger::Trigger;
use crate::window::window_fns::SdkWindowFn;

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
    /// The wire window coder (length-prefixed if the runner cannot read it).
    pub window_coder: Coder,
    /// What the SDK does for the runner: merge (a merging WindowFn other
    /// than Sessions) or tell the ends of windows it cannot read.
    pub sdk: Option<SdkWindowFn>,
    /// An on-time pane fires even when empty (`OnTimeBehavior.FIRE_ALWAYS`).
    pub on_time_always: bool,
    /// The final pane fires even when empty (`ClosingBehavior.FIRE_ALWAYS`):
    /// at expiry, a window whose trigger has not finished closes with a
    /// pane marked last.
    pub final_pane_always: bool,
    /// The GroupByKey's input is bounded: its triggers are asked about
    /// elements at watermark steps only (see `gbk`).
    pub bounded_input: bool,
}

impl WindowingSpec {
    pub fn from_proto(components: &pb::Components, ws: &pb::WindowingStrategy) -> Result<WindowingSpec, String> {
        let mut scratch = pb::Components { coders: components.coders.clone(), ..Default::default() };
        let wire_window_coder = crate::codec::coder::length_prefixed(&mut scratch, &ws.window_coder_id);
        let window_coder = Coder::from_components(&scratch, &wire_window_coder);
        if !matches!(window_coder, Coder::GlobalWindow | Coder::IntervalWindow | Coder::LengthPrefix(_)) {
            return Err(format!("a window coder the runner cannot read nor length-prefix ({window_coder:?})"));
        }
        let merging = ws.merge_status == pb::merge_status::Enum::NeedsMerge as i32;
        let sdk = SdkWindowFn::of(components, ws);
        if sdk.as_ref().is_some_and(|s| s.opaque && s.window_fn.urn != crate::window::window_fns::PICKLED_WINDOW_FN) {
            // Every SDK merges windows (merge_windows); the ends of windows
            // the runner cannot read come from Python's window mapping.
            let urn = &ws.window_fn.as_ref().map(|f| f.urn.as_str()).unwrap_or("");
            return Err(format!(
                "the WindowFn '{urn}' has windows of a coder the runner cannot read: only Python's SDK tells the runner their ends"
            ));
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
            sdk,
            on_time_always: ws.on_time_behavior != pb::on_time_behavior::Enum::FireIfNonempty as i32,
            final_pane_always: ws.closing_behavior == pb::closing_behavior::Enum::EmitAlways as i32
                && !written_by_python(components, &ws.environment_id),
            bounded_input: false,
        })
    }
}

/// Whether Python's SDK wrote the strategy: it writes `EMIT_ALWAYS` as the
/// closing behaviour whatever the pipeline (it has no closing behaviour of
/// its own), and Beam's Python runners close windows without an empty final
/// pane, so its pipelines keep that.
fn written_by_python(components: &pb::Components, environment_id: &str) -> bool {
    crate::plan::sdk_version::is_sdk(components, environment_id, "Python")
}

#[cfg(test)]
mod tests {
    use super::*;
    use pb::trigger::Trigger as T;

    fn components() -> pb::Components {
        let mut c = pb::Components::default();
        for (id, urn) in
            [("gw", crate::urns::CODER_GLOBAL_WINDOW), ("iw", crate::codec::coder::INTERVAL_WINDOW), ("pw", "beam:coder:pickled_python:v1")]
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
        assert!(!s.final_pane_always, "unspecified: Java's default, FIRE_IF_NON_EMPTY");
    }

    #[test]
    fn an_empty_final_pane_is_asked_for_by_closing_behaviour_except_in_python_s_strategies() {
        let mut c = components();
        let sdk = |image: &str| pb::Environment {
            capabilities: vec![format!("{}{image}", crate::plan::sdk_version::SDK_BASE_PREFIX)],
            ..Default::default()
        };
        c.environments.insert("java".into(), sdk("apache/beam_java17_sdk:2.73.0"));
        c.environments.insert("py".into(), sdk("apache/beam_python3.11_sdk:2.73.0"));
        let mut ws = with_trigger(T::Default(Default::default()));
        ws.closing_behavior = pb::closing_behavior::Enum::EmitAlways as i32;
        for (env, always) in [("java", true), ("", true), ("py", false)] {
            ws.environment_id = env.into();
            assert_eq!(WindowingSpec::from_proto(&c, &ws).unwrap().final_pane_always, always, "{env}");
        }
        ws.environment_id = "java".into();
        ws.closing_behavior = pb::closing_behavior::Enum::EmitIfNonempty as i32;
        assert!(!WindowingSpec::from_proto(&c, &ws).unwrap().final_pane_always);
    }

    #[test]
    fn sessions_merge_in_the_runner_and_custom_window_fns_in_the_sdk() {
        let c = components();
        let mut ws = with_trigger(T::Default(Default::default()));
        ws.window_coder_id = "iw".into();
        ws.merge_status = pb::merge_status::Enum::NeedsMerge as i32;
        ws.window_fn = Some(pb::FunctionSpec { urn: crate::urns::SESSIONS.into(), payload: vec![] });
        let sessions = WindowingSpec::from_proto(&c, &ws).unwrap();
        assert!(sessions.merging && sessions.sdk.is_none());
        ws.window_fn = Some(pb::FunctionSpec { urn: crate::window::window_fns::PICKLED_WINDOW_FN.into(), payload: vec![1] });
        let custom = WindowingSpec::from_proto(&c, &ws).unwrap();
        let sdk = custom.sdk.unwrap();
        assert!(sdk.merges && !sdk.opaque);
        ws.window_coder_id = "pw".into();
        ws.merge_status = pb::merge_status::Enum::NonMerging as i32;
        let opaque = WindowingSpec::from_proto(&c, &ws).unwrap();
        assert!(matches!(opaque.window_coder, Coder::LengthPrefix(_)), "travels length-prefixed");
        let sdk = opaque.sdk.unwrap();
        assert!(!sdk.merges && sdk.opaque);
        ws.window_fn = Some(pb::FunctionSpec { urn: "beam:window_fn:java_calendar:v1".into(), payload: vec![] });
        assert!(WindowingSpec::from_proto(&c, &ws).unwrap_err().contains("java_calendar"));
        // A Java WindowFn merges in Java's SDK when the runner reads its windows.
        ws.window_fn = Some(pb::FunctionSpec { urn: "beam:window_fn:serialized_java:v1".into(), payload: vec![2] });
        ws.window_coder_id = "iw".into();
        ws.merge_status = pb::merge_status::Enum::NeedsMerge as i32;
        let java = WindowingSpec::from_proto(&c, &ws).unwrap().sdk.unwrap();
        assert!(java.merges && !java.opaque);
    }
}
