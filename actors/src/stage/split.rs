//! Splitting a running bundle a flush waits on (`runtime::task::split`
//! decides when): the harness stops it after its current element, and what
//! it did not process goes back to the task as deferred elements, with the
//! bundles queued before the flush.
use std::future::Future;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use actix::prelude::*;
use beam_kafka_fnapi::{BundleError, BundleInput, Residual, SplitResult};
use beam_kafka_runtime::task::split::{decide, residual, SplitDecision};

use super::{Running, StageActor};
use crate::messages::{StageEvent, StageResidual};

/// Runs a bundle and, if asked meanwhile, its split; the split's answer is
/// awaited even when the bundle ends first (the harness may answer it after
/// the bundle's response).
pub(super) async fn run_with_split<B, S, T>(
    bundle: B,
    split: S,
    asked: &AtomicBool,
) -> (Result<T, BundleError>, Result<SplitResult, BundleError>)
where
    B: Future<Output = Result<T, BundleError>>,
    S: Future<Output = Option<Result<SplitResult, BundleError>>>,
{
    tokio::pin!(bundle);
    tokio::pin!(split);
    let mut result = None;
    let mut splits = None;
    loop {
        tokio::select! {
            r = &mut bundle, if result.is_none() => result = Some(r),
            s = &mut split, if splits.is_none() => splits = Some(s.unwrap_or(Ok(SplitResult::default()))),
        }
        match (&result, &splits) {
            (Some(_), Some(_)) => break,
            (Some(_), None) if !asked.load(Ordering::SeqCst) => break,
            _ => {}
        }
    }
    (result.expect("the loop ends with it"), splits.unwrap_or(Ok(SplitResult::default())))
}

/// The elements of `input` from index `first` on.
fn elements_from(input: &BundleInput, first: usize) -> Vec<Vec<u8>> {
    residual(&input.ends, first).into_iter().map(|r| input.data[r].to_vec()).collect()
}

impl StageActor {
    /// Splits the running bundle if a flush waits on it and it ran long
    /// enough, or looks again when it will have.
    pub(super) fn check_split(&mut self, ctx: &mut Context<Self>) {
        let Some(r) = self.running.as_mut() else { return };
        let waited_on = self.waiters.iter().any(|(_, target)| *target >= r.seq);
        if !waited_on || r.split.is_none() || r.processed.load(Ordering::SeqCst) {
            return;
        }
        let after = self.spec.max_bundle_time.as_millis() as u64;
        let running_ms = r.started.elapsed().as_millis() as u64;
        let restrictions = !self.spec.residual_sources.is_empty();
        match decide(after, running_ms, r.elements as usize, r.fires_timers, restrictions) {
            SplitDecision::Never => {}
            SplitDecision::Now => {
                tracing::debug!(stage = %self.spec.display_name, "splitting bundle {} after {running_ms} ms: a commit waits on it", r.seq);
                r.split_asked.store(true, Ordering::SeqCst);
                if let Some(tx) = r.split.take() {
                    let _ = tx.send(());
                }
            }
            SplitDecision::Later(ms) => {
                let seq = r.seq;
                ctx.run_later(Duration::from_millis(ms), move |act, ctx| {
                    if act.running.as_ref().is_some_and(|r| r.seq == seq) {
                        act.check_split(ctx);
                    }
                });
            }
        }
    }

    /// After `running` finished: sends the task what it left unprocessed
    /// (per `split`), what it left of splittable DoFn restrictions (the
    /// split's and the bundle's own `residuals`) and, when it was split for
    /// a flush, the bundles queued before that flush (they would keep the
    /// flush waiting; a bundle that fires timers stays). Returns how many
    /// elements the bundle processed and the sequence the stage has now
    /// completed through.
    pub(super) fn defer(&mut self, running: &Running, split: SplitResult, residuals: Vec<Residual>) -> Result<(u64, u64), String> {
        let residuals = split
            .residuals
            .into_iter()
            .chain(residuals)
            .map(|r| {
                let source = self.spec.residual_sources.get(&r.transform_id).ok_or_else(|| {
                    format!("the harness returned residual work for '{}', which is not a splittable DoFn of this stage", r.transform_id)
                })?;
                Ok(StageResidual { source: source.clone(), element: r.element, delay_ms: r.delay_ms, output_watermark: r.output_watermark })
            })
            .collect::<Result<Vec<_>, String>>()?;
        if !self.spec.residual_sources.is_empty() && !split.channels.is_empty() {
            self.whole_bundle_deferred = split.channels.iter().all(|c| c.first_residual == 0) && residuals.is_empty();
        }
        let mut deferred: Vec<(String, Vec<Vec<u8>>)> = Vec::new();
        for s in &split.channels {
            if let Some(input) = running.inputs.iter().find(|i| i.transform_id == s.transform_id) {
                let left = elements_from(input, s.first_residual);
                if !left.is_empty() {
                    deferred.push((s.transform_id.clone(), left));
                }
            }
        }
        let unprocessed: u64 = deferred.iter().map(|(_, e)| e.len() as u64).sum();
        let mut through = running.seq;
        if running.split_asked.load(Ordering::SeqCst) {
            let target = self.waiters.iter().map(|(_, t)| *t).max().unwrap_or(running.seq);
            while self.queue.front().is_some_and(|b| b.seq <= target && b.timers.values().all(|t| t.is_empty())) {
                let b = self.queue.pop_front().expect("checked above");
                through = b.seq;
                for input in &b.inputs {
                    let all = elements_from(input, 0);
                    if !all.is_empty() {
                        deferred.push((input.transform_id.clone(), all));
                    }
                }
            }
        }
        if !deferred.is_empty() || !residuals.is_empty() {
            let count: usize = deferred.iter().map(|(_, e)| e.len()).sum();
            tracing::debug!(
                stage = %self.spec.display_name,
                "bundle {}: {count} element(s) and {} residual(s) deferred to the next cycle", running.seq, residuals.len()
            );
            self.supervisor.do_send(StageEvent::Deferred { unprocessed: deferred, residuals });
        }
        Ok((running.elements.saturating_sub(unprocessed), through))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use beam_kafka_fnapi::ChannelSplit;

    fn block_on<F: Future>(f: F) -> F::Output {
        tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap().block_on(f)
    }

    #[test]
    fn a_split_asked_for_is_awaited_even_when_the_bundle_ends_first() {
        let asked = AtomicBool::new(true);
        let (tx, rx) = tokio::sync::oneshot::channel();
        let (result, splits) = block_on(async {
            tokio::spawn(async move {
                tokio::time::sleep(Duration::from_millis(20)).await;
                let _ = tx.send(SplitResult {
                    channels: vec![ChannelSplit { transform_id: "src".into(), first_residual: 3 }],
                    residuals: vec![],
                });
            });
            run_with_split(async { Ok::<_, BundleError>("done") }, async { Some(Ok(rx.await.unwrap())) }, &asked).await
        });
        assert_eq!(result.unwrap(), "done");
        assert_eq!(splits.unwrap().channels, vec![ChannelSplit { transform_id: "src".into(), first_residual: 3 }]);
    }

    #[test]
    fn a_bundle_no_split_was_asked_for_ends_with_the_bundle() {
        let asked = AtomicBool::new(false);
        let (result, splits) = block_on(run_with_split(
            async { Ok::<_, BundleError>(7) },
            std::future::pending::<Option<Result<SplitResult, BundleError>>>(),
            &asked,
        ));
        assert_eq!(result.unwrap(), 7);
        assert_eq!(splits.unwrap(), SplitResult::default());
    }

    #[test]
    fn the_residual_elements_are_cut_at_their_boundaries() {
        let input = BundleInput { transform_id: "src".into(), data: b"aabbbc".to_vec(), ends: vec![2, 5, 6] };
        assert_eq!(elements_from(&input, 1), vec![b"bbb".to_vec(), b"c".to_vec()]);
        assert!(elements_from(&input, 3).is_empty());
    }
}
