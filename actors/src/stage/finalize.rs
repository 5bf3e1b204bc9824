//! Finalizing the bundles a committed cycle covered: `FinalizeBundle` goes
//! to the harness only once the transaction (or, at least once, the offset
//! commit) holding a bundle's outputs succeeded, and never for a bundle of
//! an aborted cycle (the task stops before it is told of a commit). The
//! next bundle waits until the callbacks ran, so work a callback
//! acknowledged is not read again before it returns (a DoFn's checkpoint
//! resumes only after its finalization).
use actix::prelude::*;
use beam_kafka_fnapi::BundleError;
use beam_kafka_runtime::kafka::failure::Failure;
use tokio::sync::oneshot;

use super::StageActor;
use crate::messages::StageEvent;

impl StageActor {
    /// `done` is told when the callbacks ran (dropped unfired if they
    /// failed: the stage reports that failure itself).
    pub(super) fn finalize_committed(&mut self, id: u64, done: Option<oneshot::Sender<()>>, ctx: &mut Context<Self>) {
        let tell = |done: Option<oneshot::Sender<()>>| {
            if let Some(d) = done {
                let _ = d.send(());
            }
        };
        let Some(&through) = self.flushed.get(&id) else { return tell(done) };
        // This flush and older ones are committed.
        self.flushed = self.flushed.split_off(&(id + 1));
        let (now, later): (Vec<_>, Vec<_>) = std::mem::take(&mut self.to_finalize).into_iter().partition(|(seq, _)| *seq <= through);
        self.to_finalize = later;
        if now.is_empty() {
            return tell(done);
        }
        self.finalizing += 1;
        let worker = self.worker.clone();
        let run = async move {
            for (_, bundle) in now {
                match worker.finalize_bundle(&bundle).await {
                    Ok(()) => {}
                    // A callback that raised was the user's to handle (the
                    // SDK logs it): the outputs are committed either way.
                    Err(BundleError::User(e)) => tracing::warn!("finalizing bundle {bundle}: {e}"),
                    Err(e) => return Err(e.to_string()),
                }
            }
            Ok(())
        };
        ctx.spawn(run.into_actor(self).map(move |result, act, ctx| {
            act.finalizing -= 1;
            if result.is_ok() {
                tell(done);
            }
            if act.stopping && act.finalizing == 0 {
                return ctx.stop();
            }
            match result {
                Ok(()) => act.start_next(ctx),
                Err(e) => {
                    act.failed = true;
                    let error = Failure::fatal(format!("Error in {} while finalizing a bundle: {e}", act.spec.display_name));
                    act.supervisor.do_send(StageEvent::Failed(error));
                }
            }
        }));
    }
}
