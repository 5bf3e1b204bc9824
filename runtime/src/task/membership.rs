//! The job's decisions on its tasks, as a reducer: what the group, the
//! tasks and the clock say (`Event`) goes in, what the job must do
//! (`Command`) comes out. `actors::job` only turns Kafka's callbacks, the
//! tasks' reports and its timers into events, and carries the commands out.
//!
//! It keeps the roster (which tasks run here, which cool down before a
//! restart), the terminal tasks whose end the job still waits for, and
//! whether the job drains. A bounded job is done once every terminal task
//! finished, here or in another copy.
use std::collections::BTreeSet;

use crate::kafka::failure::{Failure, Recovery, MOVED};
use crate::kafka::topic_partition::TopicPartition;
use crate::plan::topology::TaskId;
use crate::task::roster::Roster;

/// What happened, in the order the job learnt it.
#[derive(Debug)]
pub enum Event<H> {
    /// The group gave this copy these partitions; `held` is what the
    /// consumer holds now (a task starts only on partitions it holds).
    Assigned { partitions: Vec<TopicPartition>, held: BTreeSet<TopicPartition> },
    /// The group took these partitions away (eagerly): their tasks stop.
    Revoked(Vec<TopicPartition>),
    /// The group took every partition away.
    RevokedAll,
    /// The group asks these partitions back (incrementally): their tasks
    /// commit a last cycle before they are given up.
    Revoking(Vec<TopicPartition>),
    /// A periodic look at what the consumer really holds (`held`).
    Reconcile { held: BTreeSet<TopicPartition> },
    /// A task's restart backoff is over (`held` as in `Assigned`).
    RestartDue { held: BTreeSet<TopicPartition> },
    /// A start asked for by `Command::Start` ended: these incarnations run.
    Started(Vec<(TaskId, u64, H)>),
    /// A start asked for by `Command::Start` failed with `error`.
    StartFailed { tasks: Vec<TaskId>, error: Failure },
    /// A task reached the end of its input and committed it.
    Finished(TaskId),
    /// Another copy says a terminal task finished there.
    FinishedElsewhere(TaskId),
    /// A task failed in a way that fails the job.
    Failed(String),
    /// An incarnation stopped on its own (fenced, aborted): it restarts.
    Stopped { task: TaskId, incarnation: u64, reason: String },
    /// An incarnation committed a cycle: it works.
    Committed { task: TaskId, incarnation: u64 },
    /// A drain was asked for (on the control topic).
    Drain,
}

/// What the job does about it.
#[derive(Debug, PartialEq)]
pub enum Command<H> {
    /// Start these tasks (all their partitions are here and held); the
    /// result comes back as `Started` or `StartFailed`.
    Start(Vec<TaskId>),
    /// This incarnation runs now: route its partitions' records to it (and
    /// tell it to drain if the job drains).
    Run { task: TaskId, drain: bool },
    /// Stop these at once, without a last commit, and stop routing their
    /// partitions to them (their partitions left).
    Stop(Vec<H>),
    /// Stop this incarnation, to which nothing was routed: its partitions
    /// left while it started, or its task runs here already.
    Refuse(H),
    /// Stop routing to these partitions, and pause them in the consumer:
    /// their task stopped and restarts from its last commit.
    Pause(Vec<TopicPartition>),
    /// Hand these over: each commits a last cycle and stops, then the
    /// partitions asked back are given up.
    HandOver(Vec<H>),
    /// The tasks this copy owns changed (the status page shows them);
    /// after a revocation it also forgets tasks not running here (a start
    /// under way or one that failed).
    Owned { tasks: BTreeSet<TaskId>, revoked: bool },
    /// The tasks running here changed: tell the user which run now.
    RunningChanged,
    /// Drain: sources stop where they are, and these running tasks drain.
    StartDrain(Vec<TaskId>),
    /// Tell the other copies that this terminal task finished.
    AnnounceFinished(TaskId),
    /// Tell the user (a warning: something waits).
    Warn(String),
    /// Tell the user.
    Say(String),
    /// The job ends: done (`None`) or failed (`Some(why)`).
    End(Option<String>),
}

/// The job's tasks in this copy, and what it waits for.
#[derive(Debug)]
pub struct Membership<H> {
    roster: Roster<H>,
    /// Terminal tasks not finished yet (anywhere).
    waiting: BTreeSet<TaskId>,
    draining: bool,
}

impl<H> Membership<H> {
    /// `roster`: the plan's tasks and their partitions; `terminal`: the
    /// tasks whose end is the job's end.
    pub fn new(roster: Roster<H>, terminal: impl IntoIterator<Item = TaskId>) -> Membership<H> {
        Membership { roster, waiting: terminal.into_iter().collect(), draining: false }
    }

    pub fn roster(&self) -> &Roster<H> {
        &self.roster
    }

    pub fn draining(&self) -> bool {
        self.draining
    }

    /// When the next task's backoff ends (ms, the caller's clock), if any.
    pub fn next_restart(&self) -> Option<u64> {
        self.roster.next_due()
    }

    /// Every running task's handle, leaving none running (the job ends).
    pub fn stop_all(&mut self) -> Vec<H> {
        self.roster.stop_all()
    }

    /// Takes in `event` at `now_ms` (`jitter` in [0, 1) spreads copies'
    /// restarts apart); what to do, in order.
    pub fn on(&mut self, event: Event<H>, now_ms: u64, jitter: f64) -> Vec<Command<H>> {
        let mut out = Vec::new();
        match event {
            Event::Assigned { partitions, held } => {
                self.roster.assign(partitions);
                out.push(Command::Owned { tasks: self.roster.owned(), revoked: false });
                self.start(&held, now_ms, &mut out);
            }
            Event::Revoked(parts) => self.revoke(&parts, &mut out),
            Event::RevokedAll => {
                let parts: Vec<TopicPartition> = self.roster.assigned().iter().cloned().collect();
                self.revoke(&parts, &mut out);
            }
            Event::Revoking(parts) => {
                let moving = self.take_moving(&parts, &mut out);
                let any = !moving.is_empty();
                // Given up after the hand-over, even when no task ran here.
                out.push(Command::HandOver(moving));
                if any {
                    out.push(Command::RunningChanged);
                }
            }
            Event::Reconcile { held } => {
                // librdkafka's assignment is the truth: a partition it no
                // longer has (a rebalance learnt of late, or one that crossed
                // a restart) must not keep a task running here, holding its
                // offsets in open transactions and starving its real owner.
                let lost = self.roster.lost(&held);
                if !lost.is_empty() {
                    out.push(Command::Say(format!("partitions {lost:?} are no longer assigned to this process; stopping their tasks")));
                    self.revoke(&lost, &mut out);
                }
                // A start skipped because the assignment moved meanwhile
                // leaves tasks whose partitions are all here not running.
                self.start(&held, now_ms, &mut out);
            }
            Event::RestartDue { held } => self.start(&held, now_ms, &mut out),
            Event::Started(started) => {
                let mut runs = 0;
                for (task, incarnation, handle) in started {
                    match self.roster.started(task, incarnation, handle) {
                        // Its partition left meanwhile, or it runs already.
                        Some(refused) => out.push(Command::Refuse(refused)),
                        None => {
                            out.push(Command::Run { task, drain: self.draining });
                            runs += 1;
                        }
                    }
                }
                if runs > 0 {
                    out.push(Command::RunningChanged);
                }
            }
            Event::StartFailed { tasks, error } => {
                let waiting_for = match error.recovery {
                    Recovery::Transient { waiting_for } => waiting_for,
                    // Another copy started the task after this one began
                    // to: this copy's revocation is on its way.
                    Recovery::Migrated => MOVED,
                    Recovery::Aborted | Recovery::Retry => "the transaction coordinator to be available",
                    Recovery::Fatal { .. } => {
                        out.push(Command::End(Some(error.explain())));
                        return out;
                    }
                };
                let wait = self.roster.start_failed(&tasks, now_ms, jitter);
                out.push(Command::Warn(format!(
                    "cannot start tasks yet ({error}); waiting for {waiting_for}, next try in {:.1} s",
                    wait as f64 / 1000.0
                )));
            }
            Event::Finished(task) => {
                if self.waiting.remove(&task) {
                    // The other copies wait for it too.
                    out.push(Command::AnnounceFinished(task));
                }
                if self.waiting.is_empty() {
                    out.push(Command::End(None));
                }
            }
            Event::FinishedElsewhere(task) => {
                if self.waiting.remove(&task) && self.waiting.is_empty() {
                    out.push(Command::End(None));
                }
            }
            Event::Failed(error) => out.push(Command::End(Some(error))),
            Event::Stopped { task, incarnation, reason } => {
                // An incarnation already replaced or revoked is old news.
                if let Some((_, wait)) = self.roster.stopped(task, incarnation, now_ms, jitter) {
                    // Nothing is fetched for it until it runs again (its
                    // start seeks back to its last commit anyway).
                    out.push(Command::Pause(self.roster.partitions_of(task).to_vec()));
                    out.push(Command::Say(format!(
                        "task {task} stopped ({reason}); restarting it from its last commit in {:.1} s",
                        wait as f64 / 1000.0
                    )));
                }
            }
            Event::Committed { task, incarnation } => self.roster.committed(task, incarnation),
            Event::Drain => {
                if !self.draining {
                    self.draining = true;
                    // Tasks that start later are told as they start (`Run`).
                    out.push(Command::StartDrain(self.roster.running().keys().copied().collect()));
                }
            }
        }
        out
    }

    /// Starts what may start now: every partition here and held by the
    /// consumer, not running, not cooling down.
    fn start(&self, held: &BTreeSet<TopicPartition>, now_ms: u64, out: &mut Vec<Command<H>>) {
        let to_start = self.roster.startable(now_ms, |p| held.contains(p));
        if !to_start.is_empty() {
            out.push(Command::Start(to_start));
        }
    }

    /// Forgets `parts` and stops the tasks running here that read any.
    fn revoke(&mut self, parts: &[TopicPartition], out: &mut Vec<Command<H>>) {
        let moving = self.take_moving(parts, out);
        if !moving.is_empty() {
            out.push(Command::Stop(moving));
            out.push(Command::RunningChanged);
        }
    }

    /// Forgets `parts`; the tasks running here that read any leave the
    /// roster (to be stopped or handed over).
    fn take_moving(&mut self, parts: &[TopicPartition], out: &mut Vec<Command<H>>) -> Vec<H> {
        let moving = self.roster.revoke(parts);
        out.push(Command::Owned { tasks: self.roster.owned(), revoked: true });
        moving.into_iter().map(|(_, h)| h).collect()
    }
}

#[cfg(test)]
#[path = "membership_tests.rs"]
mod tests;
