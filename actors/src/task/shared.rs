//! The task's part in the copy's transaction (exactly_once, see
//! `copy_transaction`): it joins before it writes anything, asks for a
//! round when it has something to commit (the round opens its cycle),
//! hands its cycle in and waits for the round's commit, and leaves when it
//! stops or finishes.
use actix::prelude::*;
use beam_kafka_runtime::codec::timestamp::Watermark;

use super::TaskSupervisor;
use crate::copy_transaction::{Join, Leave, TxnHandle, TxnNotice, WantRound};

impl TaskSupervisor {
    /// Joins the copy's transaction, then starts working (input, timers);
    /// a task that cannot join stops and is started again later.
    pub(super) fn join_transaction(&mut self, txn: TxnHandle, ctx: &mut Context<Self>) {
        let join = Join { member: (self.cfg.task, self.cfg.incarnation), generation: txn.generation, notices: ctx.address().recipient() };
        ctx.wait(txn.addr.send(join).into_actor(self).map(|result, act, ctx| {
            let refused = match result {
                Ok(Ok(())) => return act.begin(ctx),
                Ok(Err(e)) => e,
                Err(e) => e.to_string(),
            };
            act.stop_uncommitted(ctx, format!("it could not join the copy's transaction: {refused}"));
        }));
    }

    /// The task has something to commit: the next round closes a cycle of
    /// every member. Urgent (no waiting for the commit interval) when the
    /// task's input ended or a TestStream step waits to be passed on.
    /// Asked once per round (again when urgent).
    pub(super) fn want_round(&mut self) {
        if let Some(txn) = &self.cfg.txn {
            let urgent = self.output_watermark() == Watermark::PosInf
                || self.progress.epoch > self.reported_progress.epoch
                || self.lifecycle.is_draining()
                || self.is_handing_over();
            if !self.requests.ask_round(urgent) {
                return;
            }
            txn.addr.do_send(WantRound { member: (self.cfg.task, self.cfg.incarnation), urgent });
        }
    }

    /// Leaves the copy's transaction (once). `finished`: its last cycle
    /// committed, so it leaves nothing in it. Any other task leaves what it
    /// wrote since its last commit, which then never commits, unless its
    /// cycle was already handed in.
    pub(super) fn leave_transaction(&mut self, finished: bool) {
        if let Some(txn) = self.cfg.txn.take() {
            txn.addr.do_send(Leave { member: (self.cfg.task, self.cfg.incarnation), finished });
        }
    }

    /// Under exactly_once, a task that left the copy's transaction opens no cycle.
    pub(super) fn can_commit(&self) -> bool {
        !self.cfg.transactional || self.cfg.txn.is_some()
    }
}

impl Handler<TxnNotice> for TaskSupervisor {
    type Result = ();

    fn handle(&mut self, notice: TxnNotice, ctx: &mut Context<Self>) {
        match notice {
            TxnNotice::Flush => {
                // A round that began while the cycle the last round committed
                // waits for its answer opens the next cycle once it has it.
                if self.requests.round_began(self.cycles.is_open()) {
                    self.open_cycle();
                }
            }
            TxnNotice::Abandon(reason) => self.stop_uncommitted(ctx, reason),
        }
    }
}
