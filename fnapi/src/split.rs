//! Runner-initiated splits of a running bundle (`ProcessBundleSplit`): the
//! runner asks the harness to stop a bundle as soon as it can, after the
//! element each data source is processing, and hands the elements it will
//! not process (the residual) to a later bundle.
use beam_kafka_proto::fn_execution as fn_pb;
use fn_pb::process_bundle_split_request::DesiredSplit;

/// The part of what is left a second split of restrictions keeps, when
/// the first (keeping nothing) cut none: a bounded source's tracker refuses
/// to split exactly where it is reading.
pub const RESTRICTION_SLIVER: f64 = 0.01;

/// Work a bundle left of a splittable DoFn's restriction: a checkpoint the
/// DoFn took (`defer_remainder`) or the part a split cut off. Run again
/// later, as an element of the process step's input.
#[derive(Clone, Debug, PartialEq)]
pub struct Residual {
    /// The process step it belongs to, and its input.
    pub transform_id: String,
    pub input_id: String,
    /// The element (with its rest of the restriction), in the input's wire coder.
    pub element: Vec<u8>,
    /// How long the DoFn asked to wait before it runs again.
    pub delay_ms: u64,
    /// The watermark its outputs will not be behind (the DoFn's estimate):
    /// the stage's output watermark is held there meanwhile.
    pub output_watermark: Option<i64>,
}

impl Residual {
    pub fn from_proto(d: fn_pb::DelayedBundleApplication) -> Result<Residual, String> {
        let app = d.application.ok_or_else(|| "the harness returned a residual without an application".to_string())?;
        let delay_ms = d
            .requested_time_delay
            .map_or(0, |t| (t.seconds.max(0) as u64).saturating_mul(1000).saturating_add((t.nanos.max(0) as u64) / 1_000_000));
        let output_watermark =
            app.output_watermarks.values().map(|t| t.seconds.saturating_mul(1000).saturating_add(i64::from(t.nanos) / 1_000_000)).min();
        Ok(Residual { transform_id: app.transform_id, input_id: app.input_id, element: app.element, delay_ms, output_watermark })
    }
}

/// What a split cut off: where each data source stopped, and the rest of
/// the restrictions being processed.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct SplitResult {
    pub channels: Vec<ChannelSplit>,
    pub residuals: Vec<Residual>,
}

/// Where the harness stopped one data source of a split bundle.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ChannelSplit {
    pub transform_id: String,
    /// Index of the first element of the source the bundle does not process.
    pub first_residual: usize,
}

/// The request stopping each data source after its current element
/// (`fraction_of_remainder` 0: keep as little as possible); `sources` are
/// (data source, elements sent on it). Element 0 is kept whole (no split
/// point before it): a bundle whose first element had not started when the
/// split arrived (a slow `start_bundle`) still makes progress, where a
/// split at 0 would defer all of it, every cycle. Except on `splittable`
/// sources (their elements are restrictions of a splittable DoFn): there
/// the first element too may be checkpointed where it got to, since a
/// single restriction (a compressed file, an unbounded source) can run for
/// longer than a transaction may stay open. Their restriction keeps
/// `keep` of what is left: 0 for a checkpoint (a sliver of a huge range,
/// as an unbounded source's, would still be endless).
pub fn checkpoint_request(
    bundle_id: &str,
    sources: &[(String, usize)],
    splittable: &[String],
    keep: f64,
) -> fn_pb::ProcessBundleSplitRequest {
    let desired_splits = sources
        .iter()
        .filter(|(_, n)| *n > 0)
        .map(|(t, n)| {
            let (first, fraction_of_remainder) = if splittable.contains(t) { (0, keep) } else { (1, 0.0) };
            let allowed_split_points = (first..=*n as i64).collect();
            (t.clone(), DesiredSplit { fraction_of_remainder, estimated_input_elements: *n as i64, allowed_split_points })
        })
        .collect();
    fn_pb::ProcessBundleSplitRequest { instruction_id: bundle_id.to_string(), desired_splits }
}

/// Whether a checkpoint that answered `result` should be asked again keeping
/// a sliver: it was sent restrictions (`sources` with elements among
/// `splittable`) and cut none of them.
pub fn ask_for_sliver(result: &SplitResult, sources: &[(String, usize)], splittable: &[String]) -> bool {
    result.residuals.is_empty() && sources.iter().any(|(t, n)| *n > 0 && splittable.contains(t))
}

/// The answers of two splits of one bundle as one: each source stops at the
/// earlier of its two stops, and both cuts' restrictions come back.
pub fn merge_splits(first: SplitResult, second: SplitResult) -> SplitResult {
    let mut channels = first.channels;
    for c in second.channels {
        match channels.iter_mut().find(|k| k.transform_id == c.transform_id) {
            Some(k) => k.first_residual = k.first_residual.min(c.first_residual),
            None => channels.push(c),
        }
    }
    let mut residuals = first.residuals;
    residuals.extend(second.residuals);
    SplitResult { channels, residuals }
}

/// Reads the harness's answer: the channel splits it made and, when it
/// split the restriction of the element it was processing, that
/// restriction's rest (its primary stays with the bundle). An empty answer
/// means the bundle was not running any more (or not yet): nothing split.
pub fn read_split(response: fn_pb::ProcessBundleSplitResponse) -> Result<SplitResult, String> {
    let residuals = response.residual_roots.into_iter().map(Residual::from_proto).collect::<Result<_, _>>()?;
    let channels = response
        .channel_splits
        .into_iter()
        .map(|c| {
            usize::try_from(c.first_residual_element)
                .map(|first_residual| ChannelSplit { transform_id: c.transform_id.clone(), first_residual })
                .map_err(|_| format!("the harness split {} at element {}", c.transform_id, c.first_residual_element))
        })
        .collect::<Result<_, _>>()?;
    Ok(SplitResult { channels, residuals })
}

#[cfg(test)]
mod tests {
    use super::*;
    use fn_pb::process_bundle_split_response::ChannelSplit as PbChannelSplit;

    #[test]
    fn a_checkpoint_asks_every_source_with_elements_to_keep_nothing_more() {
        let r = checkpoint_request("bundle-7", &[("src-a".into(), 40), ("src-b".into(), 0), ("sdf".into(), 2)], &["sdf".into()], 0.0);
        assert_eq!(r.instruction_id, "bundle-7");
        assert_eq!(r.desired_splits.len(), 2, "a source sent nothing has nothing to split");
        assert_eq!(r.desired_splits["sdf"].allowed_split_points, [0, 1, 2], "a restriction may be checkpointed inside the first");
        let d = &r.desired_splits["src-a"];
        assert_eq!(d.fraction_of_remainder, 0.0);
        assert_eq!(d.estimated_input_elements, 40);
        assert_eq!(d.allowed_split_points.first(), Some(&1), "never before the first element");
        assert_eq!(d.allowed_split_points.last(), Some(&40));
    }

    #[test]
    fn channel_splits_and_cut_restrictions_are_read() {
        let ok = fn_pb::ProcessBundleSplitResponse {
            channel_splits: vec![PbChannelSplit { transform_id: "src-a".into(), last_primary_element: 4, first_residual_element: 5 }],
            ..Default::default()
        };
        assert_eq!(read_split(ok).unwrap().channels, vec![ChannelSplit { transform_id: "src-a".into(), first_residual: 5 }]);
        assert_eq!(read_split(Default::default()).unwrap(), SplitResult::default(), "nothing split");
        let app = fn_pb::BundleApplication {
            transform_id: "process".into(),
            input_id: "in".into(),
            element: b"rest".to_vec(),
            output_watermarks: [("out".to_string(), prost_types::Timestamp { seconds: 12, nanos: 5_000_000 })].into(),
            ..Default::default()
        };
        let delay = prost_types::Duration { seconds: 1, nanos: 500_000_000 };
        let sdf = fn_pb::ProcessBundleSplitResponse {
            residual_roots: vec![fn_pb::DelayedBundleApplication { application: Some(app), requested_time_delay: Some(delay) }],
            ..Default::default()
        };
        let r = &read_split(sdf).unwrap().residuals[0];
        assert_eq!((r.transform_id.as_str(), r.element.as_slice()), ("process", b"rest".as_slice()));
        assert_eq!((r.delay_ms, r.output_watermark), (1500, Some(12_005)));
        let forever = fn_pb::DelayedBundleApplication {
            application: Some(Default::default()),
            requested_time_delay: Some(prost_types::Duration { seconds: i64::MAX, nanos: 999_999_999 }),
        };
        assert_eq!(Residual::from_proto(forever).unwrap().delay_ms, u64::MAX, "saturates, never overflows");
        let empty = fn_pb::ProcessBundleSplitResponse { residual_roots: vec![Default::default()], ..Default::default() };
        assert!(read_split(empty).is_err(), "a residual must say what to run");
        let bad = fn_pb::ProcessBundleSplitResponse {
            channel_splits: vec![PbChannelSplit { transform_id: "src-a".into(), last_primary_element: -2, first_residual_element: -1 }],
            ..Default::default()
        };
        assert!(read_split(bad).is_err());
    }

    fn residual(transform_id: &str) -> Residual {
        Residual { transform_id: transform_id.into(), input_id: "in".into(), element: vec![1], delay_ms: 0, output_watermark: None }
    }

    #[test]
    fn a_checkpoint_that_cut_no_restriction_is_asked_again_keeping_a_sliver() {
        let sources = [("sdf".to_string(), 1), ("plain".to_string(), 3)];
        let splittable = ["sdf".to_string()];
        let channel_only =
            SplitResult { channels: vec![ChannelSplit { transform_id: "sdf".into(), first_residual: 1 }], residuals: vec![] };
        assert!(ask_for_sliver(&channel_only, &sources, &splittable), "the running restriction was not cut");
        let cut = SplitResult { channels: vec![], residuals: vec![residual("process")] };
        assert!(!ask_for_sliver(&cut, &sources, &splittable));
        assert!(!ask_for_sliver(&SplitResult::default(), &[("plain".into(), 3)], &splittable), "no restrictions: nothing to cut");
        assert!(!ask_for_sliver(&SplitResult::default(), &[("sdf".into(), 0)], &splittable), "no restriction was sent");
        let again = checkpoint_request("b", &sources, &splittable, RESTRICTION_SLIVER);
        assert_eq!(again.desired_splits["sdf"].fraction_of_remainder, RESTRICTION_SLIVER);
        assert_eq!(again.desired_splits["plain"].fraction_of_remainder, 0.0, "whole elements are still cut at once");
    }

    #[test]
    fn two_splits_of_a_bundle_stop_each_source_at_the_earlier_stop_and_keep_both_cuts() {
        let first = SplitResult {
            channels: vec![
                ChannelSplit { transform_id: "sdf".into(), first_residual: 1 },
                ChannelSplit { transform_id: "a".into(), first_residual: 4 },
            ],
            residuals: vec![],
        };
        let second = SplitResult {
            channels: vec![
                ChannelSplit { transform_id: "sdf".into(), first_residual: 2 },
                ChannelSplit { transform_id: "b".into(), first_residual: 7 },
            ],
            residuals: vec![residual("process")],
        };
        let merged = merge_splits(first, second);
        let stops: Vec<(&str, usize)> = merged.channels.iter().map(|c| (c.transform_id.as_str(), c.first_residual)).collect();
        assert_eq!(stops, [("sdf", 1), ("a", 4), ("b", 7)]);
        assert_eq!(merged.residuals, vec![residual("process")]);
    }
}
