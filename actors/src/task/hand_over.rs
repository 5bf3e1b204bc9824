//! Handing a task over to the copy its partitions move to (incremental
//! rebalancing): the task closes a last cycle at once and stops as soon as
//! it committed, before its partitions are given up. Its next owner then
//! starts exactly from that commit, and the copy's transaction is not
//! aborted: the sub-topology's other tasks here keep running.
//!
//! The task takes no more input once asked, and what ran after the cycle's
//! snapshot is dropped: under exactly_once the writes of a bundle that ran
//! during the commit wait for `Resume`, which a task handing over never
//! sends, and the next owner reads those records again from the commit.
use actix::prelude::*;
use beam_kafka_runtime::task::lifecycle::TaskState;
use tokio::sync::oneshot;

use super::TaskSupervisor;
use crate::messages::Shutdown;

/// Commit a last cycle now and stop; `done` is answered (or dropped, if
/// the task stops another way) once nothing of it is left to commit.
#[derive(Message)]
#[rtype(result = "()")]
pub struct HandOver {
    pub done: oneshot::Sender<()>,
}

impl Handler<HandOver> for TaskSupervisor {
    type Result = ();

    fn handle(&mut self, msg: HandOver, ctx: &mut Context<Self>) {
        if !self.lifecycle.is_running() || !self.can_commit() {
            // Nothing of it can commit any more (it stopped, finished or
            // left the copy's transaction): the hand-over is its end.
            ctx.notify(Shutdown);
            return;
        }
        tracing::debug!(task = %self.cfg.task, incarnation = self.cfg.incarnation, "handing over: committing a last cycle");
        self.leaving.hand_over(msg.done);
        // Nothing more is taken in: the last cycle covers what the stage
        // was given, and the next owner reads the rest from its commit
        // (without transactions, outputs written after the cycle would be
        // written again by the next owner).
        self.drop_input();
        self.request_flush();
    }
}

impl TaskSupervisor {
    /// Whether the task stops after its next commit.
    pub(super) fn is_handing_over(&self) -> bool {
        self.leaving.is_handing_over()
    }

    /// Whether the cycle just committed was the task's last here
    /// (`runtime::task::leaving`).
    pub(super) fn hands_over_now(&self) -> bool {
        self.leaving.leaves_now(self.cfg.transactional)
    }

    /// The last cycle committed: the task stops cleanly, leaving nothing in
    /// the copy's transaction, and its partitions may go.
    pub(super) fn handed_over(&mut self, ctx: &mut Context<Self>) {
        self.leave_transaction(true);
        self.stage.do_send(Shutdown);
        self.refund_sources();
        self.report_flow("handed over");
        let _ = self.lifecycle.transition(TaskState::Closed);
        self.publish_status();
        if let Err(e) = self.store.write_checkpoint(self.changelog_next) {
            tracing::warn!(task = %self.cfg.task, "{e}; the next start here rebuilds the store from the changelog");
        }
        tracing::debug!(task = %self.cfg.task, incarnation = self.cfg.incarnation, "handed over");
        if let Some(done) = self.leaving.done() {
            let _ = done.send(());
        }
        ctx.stop();
    }
}
