//! One Kafka transaction for all the tasks of a copy (exactly_once), as
//! Kafka Streams' eos-v2 keeps one per stream thread. Each task's
//! supervisor still decides what its task commits (its cycle: offsets,
//! changelog, watermark reports); a *round* commits the cycles of every
//! member in one transaction.
//!
//! The rule that keeps it exactly-once: a commit covers every record in the
//! transaction, so it may only happen when every member that could have
//! written into it handed in its cycle ("ready") and holds its later
//! writes. A round starts when a member wants one (paced, below, unless it
//! is urgent): every member is asked to close a cycle, and the transaction
//! commits once all are ready.
//!
//! Pacing: a round starts at most once per commit interval, or sooner,
//! down to half of it, when rounds are quick: the gap between round
//! starts is what the last round took (from its start to its commit).
//! Under a backlog a round flushes big bundles and the interval holds; an
//! idle pipeline's rounds take a few tens of ms, and a record waits less
//! for the next one (measured at 1,000 records/s: p99 181-189 ms against
//! 203-256 with twice that gap).
//!
//! A member that stops with writes no round covered "dooms" the
//! transaction: it cannot commit, so every member stops without
//! committing (and restarts from its last commit, as after a crash), and
//! the transaction is aborted once they all left. A member that stops
//! while ready leaves its cycle to the round.
//!
//! Nothing joins while a commit or an abort is under way: a joiner could
//! write into a transaction that is being ended.
use std::collections::BTreeMap;

use crate::plan::topology::TaskId;
use crate::task::cycle::Offsets;

/// A task incarnation that is a member.
pub type MemberId = (TaskId, u64);

#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Action {
    /// A round began: these members close a cycle now.
    Flush(Vec<MemberId>),
    /// Commit the transaction with these offsets; tell these members how it went.
    Commit { offsets: Offsets, members: Vec<MemberId> },
    /// These members stop without committing: the transaction is doomed.
    Abandon(Vec<MemberId>),
    /// Every member left a doomed transaction: abort it.
    Abort,
    /// Call `tick` at this time (ms): a wanted round is due then.
    WakeAt(i64),
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Phase {
    Open,
    Committing,
    /// Waiting for every member to leave, then abort.
    Doomed,
    Aborting,
}

/// Why a member was turned away.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Refusal {
    /// A commit or abort is under way: ask again once it ended.
    Busy,
    /// The transaction is doomed: the member must stop without committing.
    Doomed,
    /// Not a member (it left, or a newer incarnation took its place).
    Unknown,
}

#[derive(Debug, Default)]
struct Member {
    incarnation: u64,
    ready: Option<Offsets>,
}

#[derive(Debug)]
pub struct SharedTransaction {
    phase: Phase,
    members: BTreeMap<TaskId, Member>,
    /// Cycles of members that left while ready: the round commits them.
    departed: Offsets,
    /// A round is under way (every member was asked to close a cycle).
    round: bool,
    /// A member wanted a round while a commit was under way.
    wanted: bool,
    /// `doom` came while a commit was under way.
    doom_after_commit: bool,
    /// The commit interval (ms): the longest gap between round starts.
    interval_ms: i64,
    last_round_ms: Option<i64>,
    /// How long the last committed round took (ms), start to commit.
    last_round_took_ms: i64,
    /// A wanted round could not start yet: `tick` is due then.
    wake_at: Option<i64>,
    /// The wanted round is urgent (it may not wait for the gap).
    urgent: bool,
}

impl Default for SharedTransaction {
    fn default() -> Self {
        SharedTransaction::new(0)
    }
}

impl SharedTransaction {
    /// Rounds start at most every `interval_ms` (the commit interval), or
    /// down to every half of it when they are quick (`gap_ms`): a round
    /// makes every member close a cycle, so rounds back to back would cycle
    /// each task as often as the fastest commit allows.
    pub fn new(interval_ms: i64) -> Self {
        SharedTransaction {
            phase: Phase::Open,
            members: BTreeMap::new(),
            departed: Offsets::new(),
            round: false,
            wanted: false,
            doom_after_commit: false,
            interval_ms,
            last_round_ms: None,
            last_round_took_ms: interval_ms,
            wake_at: None,
            urgent: false,
        }
    }

    pub fn phase(&self) -> Phase {
        self.phase
    }

    pub fn is_empty(&self) -> bool {
        self.members.is_empty()
    }

    pub fn members(&self) -> Vec<MemberId> {
        self.members.iter().map(|(t, m)| (*t, m.incarnation)).collect()
    }

    /// A task incarnation joins before it writes anything. The actions are
    /// to be carried out whether or not it was let in.
    pub fn join(&mut self, task: TaskId, incarnation: u64) -> (Result<(), Refusal>, Vec<Action>) {
        let mut actions = Vec::new();
        // An older incarnation still listed stopped without saying so: its
        // writes, if any, cannot commit.
        if let Some(old) = self.members.get(&task).map(|m| m.incarnation).filter(|i| *i != incarnation) {
            actions = self.leave(task, old, false);
        }
        match self.phase {
            Phase::Committing | Phase::Aborting => return (Err(Refusal::Busy), actions),
            Phase::Doomed => return (Err(Refusal::Doomed), actions),
            Phase::Open => {}
        }
        self.members.insert(task, Member { incarnation, ready: None });
        if self.round {
            actions.push(Action::Flush(vec![(task, incarnation)]));
        }
        (Ok(()), actions)
    }

    /// A member has something to commit: a round starts once `gap_ms`
    /// passed since the last one began, or at once if `urgent` (its input
    /// ended, a test step to pass on).
    pub fn want_round(&mut self, task: TaskId, incarnation: u64, urgent: bool, now_ms: i64) -> Vec<Action> {
        if !self.is_member(task, incarnation) || matches!(self.phase, Phase::Doomed | Phase::Aborting) {
            return Vec::new();
        }
        self.wanted = true;
        self.urgent |= urgent;
        self.start_wanted(now_ms)
    }

    /// The time a `WakeAt` asked for came.
    pub fn tick(&mut self, now_ms: i64) -> Vec<Action> {
        self.wake_at = None;
        self.start_wanted(now_ms)
    }

    /// Starts the wanted round if it is due, or says when it will be.
    fn start_wanted(&mut self, now_ms: i64) -> Vec<Action> {
        if !self.wanted || self.round || self.phase != Phase::Open {
            return Vec::new();
        }
        let due = if self.urgent { now_ms } else { self.last_round_ms.map_or(now_ms, |t| t + self.gap_ms()) };
        if due <= now_ms {
            return self.start_round(now_ms);
        }
        if self.wake_at.is_some_and(|t| t <= due) {
            return Vec::new();
        }
        self.wake_at = Some(due);
        vec![Action::WakeAt(due)]
    }

    /// A member handed in its cycle and holds its later writes.
    pub fn ready(&mut self, task: TaskId, incarnation: u64, offsets: Offsets, now_ms: i64) -> Result<Vec<Action>, Refusal> {
        if !self.is_member(task, incarnation) {
            return Err(Refusal::Unknown);
        }
        match self.phase {
            Phase::Open => {}
            Phase::Doomed | Phase::Aborting => return Err(Refusal::Doomed),
            // Every member was ready when the commit began.
            Phase::Committing => return Err(Refusal::Busy),
        }
        if let Some(m) = self.members.get_mut(&task) {
            m.ready = Some(offsets);
        }
        // A member that closed a cycle on its own holds its writes: the
        // round starts now.
        let mut actions = self.start_round(now_ms);
        actions.extend(self.commit_if_all_ready());
        Ok(actions)
    }

    /// A member stopped. `finished`: its last cycle committed, so nothing of
    /// it is in the transaction. Otherwise, unless it was ready, what it
    /// wrote since the last commit dooms the transaction.
    pub fn leave(&mut self, task: TaskId, incarnation: u64, finished: bool) -> Vec<Action> {
        if !self.is_member(task, incarnation) {
            return Vec::new();
        }
        let Some(member) = self.members.remove(&task) else { return Vec::new() };
        match self.phase {
            // Its cycle is in the commit under way.
            Phase::Committing => Vec::new(),
            Phase::Doomed => self.abort_if_empty(),
            Phase::Aborting => Vec::new(),
            Phase::Open => match member.ready {
                Some(offsets) => {
                    self.departed.extend(offsets);
                    self.commit_if_all_ready()
                }
                None if finished => self.commit_if_all_ready(),
                // What it wrote cannot commit: nothing in the transaction can.
                None => self.doom(),
            },
        }
    }

    /// The transaction cannot go on (its producer failed, or carries the
    /// id of a task another copy owns now): every member stops without
    /// committing, and it is aborted once they left. A commit under way
    /// ends first.
    pub fn doom(&mut self) -> Vec<Action> {
        match self.phase {
            Phase::Open => {
                self.phase = Phase::Doomed;
                self.round = false;
                self.wanted = false;
                self.urgent = false;
                self.departed.clear();
                let members = self.members();
                let mut actions = Vec::new();
                if !members.is_empty() {
                    actions.push(Action::Abandon(members));
                }
                actions.extend(self.abort_if_empty());
                actions
            }
            Phase::Committing => {
                self.doom_after_commit = true;
                Vec::new()
            }
            Phase::Doomed | Phase::Aborting => Vec::new(),
        }
    }

    /// The commit ended. On success the next round starts if one was
    /// wanted meanwhile; on failure the transaction is doomed (its members
    /// are told the error and stop).
    pub fn committed(&mut self, ok: bool, now_ms: i64) -> Vec<Action> {
        if self.phase != Phase::Committing {
            return Vec::new();
        }
        self.round = false;
        self.departed.clear();
        for m in self.members.values_mut() {
            m.ready = None;
        }
        if !ok {
            self.phase = Phase::Doomed;
            self.wanted = false;
            self.doom_after_commit = false;
            return self.abort_if_empty();
        }
        self.phase = Phase::Open;
        if let Some(began) = self.last_round_ms {
            self.last_round_took_ms = now_ms - began;
        }
        if std::mem::take(&mut self.doom_after_commit) {
            return self.doom();
        }
        self.start_wanted(now_ms)
    }

    /// The doomed transaction was aborted: members may join again.
    pub fn aborted(&mut self) {
        if self.phase == Phase::Aborting {
            self.phase = Phase::Open;
            self.round = false;
            self.urgent = false;
            self.wanted = false;
            self.departed.clear();
        }
    }

    /// The time between round starts (ms): what the last round took,
    /// from half the commit interval to all of it.
    pub fn gap_ms(&self) -> i64 {
        self.last_round_took_ms.clamp(self.interval_ms / 2, self.interval_ms)
    }

    /// How long the last committed round took (ms).
    pub fn last_round_took_ms(&self) -> i64 {
        self.last_round_took_ms
    }

    fn is_member(&self, task: TaskId, incarnation: u64) -> bool {
        self.members.get(&task).is_some_and(|m| m.incarnation == incarnation)
    }

    fn start_round(&mut self, now_ms: i64) -> Vec<Action> {
        if self.round || self.phase != Phase::Open {
            return Vec::new();
        }
        self.round = true;
        self.wanted = false;
        self.urgent = false;
        self.last_round_ms = Some(now_ms);
        let asked: Vec<MemberId> = self.members.iter().filter(|(_, m)| m.ready.is_none()).map(|(t, m)| (*t, m.incarnation)).collect();
        if asked.is_empty() {
            Vec::new()
        } else {
            vec![Action::Flush(asked)]
        }
    }

    fn commit_if_all_ready(&mut self) -> Vec<Action> {
        if self.phase != Phase::Open || !self.round || self.members.values().any(|m| m.ready.is_none()) {
            return Vec::new();
        }
        if self.members.is_empty() && self.departed.is_empty() {
            // Everyone left cleanly: nothing to commit.
            self.round = false;
            return Vec::new();
        }
        self.phase = Phase::Committing;
        let mut offsets = std::mem::take(&mut self.departed);
        for m in self.members.values() {
            offsets.extend(m.ready.clone().unwrap_or_default());
        }
        vec![Action::Commit { offsets, members: self.members() }]
    }

    fn abort_if_empty(&mut self) -> Vec<Action> {
        if self.phase == Phase::Doomed && self.members.is_empty() {
            self.phase = Phase::Aborting;
            vec![Action::Abort]
        } else {
            Vec::new()
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::kafka::topic_partition::TopicPartition;

    fn t(p: u32) -> TaskId {
        TaskId { sub_topology: 0, partition: p }
    }

    fn offsets(p: i32, next: i64) -> Offsets {
        [(TopicPartition::new("in", p), next)].into_iter().collect()
    }

    fn two_members() -> SharedTransaction {
        let mut s = SharedTransaction::default();
        assert_eq!(s.join(t(0), 1), (Ok(()), vec![]));
        assert_eq!(s.join(t(1), 1), (Ok(()), vec![]));
        s
    }

    #[test]
    fn a_round_commits_only_when_every_member_is_ready() {
        let mut s = two_members();
        assert_eq!(s.want_round(t(0), 1, false, 0), vec![Action::Flush(vec![(t(0), 1), (t(1), 1)])]);
        assert_eq!(s.ready(t(0), 1, offsets(0, 5), 0), Ok(vec![]));
        let actions = s.ready(t(1), 1, offsets(1, 7), 0).unwrap();
        let mut both = offsets(0, 5);
        both.extend(offsets(1, 7));
        assert_eq!(actions, vec![Action::Commit { offsets: both, members: vec![(t(0), 1), (t(1), 1)] }]);
        assert_eq!(s.phase(), Phase::Committing);
        assert_eq!(s.committed(true, 0), vec![]);
        assert_eq!(s.phase(), Phase::Open);
    }

    #[test]
    fn a_member_ready_on_its_own_starts_the_round_for_the_others() {
        let mut s = two_members();
        assert_eq!(s.ready(t(1), 1, offsets(1, 3), 0), Ok(vec![Action::Flush(vec![(t(0), 1)])]));
    }

    #[test]
    fn nobody_joins_or_gets_ready_during_a_commit_and_a_wanted_round_follows_it() {
        let mut s = SharedTransaction::default();
        s.join(t(0), 1).0.unwrap();
        assert!(matches!(s.ready(t(0), 1, offsets(0, 1), 0).unwrap()[..], [Action::Commit { .. }]));
        assert_eq!(s.join(t(1), 1), (Err(Refusal::Busy), vec![]));
        assert_eq!(s.ready(t(0), 1, offsets(0, 2), 0), Err(Refusal::Busy));
        assert_eq!(s.want_round(t(0), 1, false, 0), vec![]);
        assert_eq!(s.committed(true, 0), vec![Action::Flush(vec![(t(0), 1)])]);
        assert_eq!(s.join(t(1), 1), (Ok(()), vec![Action::Flush(vec![(t(1), 1)])]));
    }

    #[test]
    fn a_member_leaving_with_unready_writes_dooms_the_transaction() {
        let mut s = two_members();
        s.want_round(t(0), 1, false, 0);
        s.ready(t(0), 1, offsets(0, 5), 0).unwrap();
        assert_eq!(s.leave(t(1), 1, false), vec![Action::Abandon(vec![(t(0), 1)])]);
        assert_eq!(s.phase(), Phase::Doomed);
        assert_eq!(s.ready(t(0), 1, offsets(0, 6), 0), Err(Refusal::Doomed));
        assert_eq!(s.join(t(1), 2), (Err(Refusal::Doomed), vec![]));
        assert_eq!(s.leave(t(0), 1, false), vec![Action::Abort]);
        assert_eq!(s.join(t(1), 2), (Err(Refusal::Busy), vec![]));
        s.aborted();
        assert_eq!(s.join(t(1), 2), (Ok(()), vec![]));
    }

    #[test]
    fn a_ready_member_that_leaves_is_committed_with_the_round() {
        let mut s = two_members();
        s.want_round(t(0), 1, false, 0);
        s.ready(t(0), 1, offsets(0, 5), 0).unwrap();
        assert_eq!(s.leave(t(0), 1, false), vec![]);
        let actions = s.ready(t(1), 1, offsets(1, 2), 0).unwrap();
        let mut both = offsets(0, 5);
        both.extend(offsets(1, 2));
        assert_eq!(actions, vec![Action::Commit { offsets: both, members: vec![(t(1), 1)] }]);
    }

    #[test]
    fn a_finished_member_leaves_cleanly_and_may_complete_the_round() {
        let mut s = two_members();
        s.want_round(t(0), 1, false, 0);
        s.ready(t(0), 1, offsets(0, 5), 0).unwrap();
        assert_eq!(s.leave(t(1), 1, true), vec![Action::Commit { offsets: offsets(0, 5), members: vec![(t(0), 1)] }]);
    }

    #[test]
    fn a_failed_commit_dooms_and_aborts_once_every_member_left() {
        let mut s = two_members();
        s.ready(t(0), 1, offsets(0, 1), 0).unwrap();
        s.ready(t(1), 1, offsets(1, 1), 0).unwrap();
        assert_eq!(s.committed(false, 0), vec![]);
        assert_eq!(s.phase(), Phase::Doomed);
        assert_eq!(s.leave(t(0), 1, false), vec![]);
        assert_eq!(s.leave(t(1), 1, false), vec![Action::Abort]);
    }

    #[test]
    fn a_new_incarnation_replaces_an_old_one_that_never_left() {
        let mut s = two_members();
        // The old incarnation of task 1 may have written: doomed.
        assert_eq!(s.join(t(1), 2), (Err(Refusal::Doomed), vec![Action::Abandon(vec![(t(0), 1)])]));
        assert_eq!(s.phase(), Phase::Doomed);
        assert_eq!(s.leave(t(0), 1, false), vec![Action::Abort]);
    }

    #[test]
    fn a_doomed_transaction_abandons_its_members_after_the_commit_under_way() {
        let mut s = two_members();
        s.ready(t(0), 1, offsets(0, 1), 0).unwrap();
        s.ready(t(1), 1, offsets(1, 1), 0).unwrap();
        assert_eq!(s.doom(), vec![]);
        assert_eq!(s.committed(true, 0), vec![Action::Abandon(vec![(t(0), 1), (t(1), 1)])]);
        assert_eq!(s.leave(t(0), 1, false), vec![]);
        assert_eq!(s.leave(t(1), 1, false), vec![Action::Abort]);
        let mut empty = SharedTransaction::default();
        assert_eq!(empty.doom(), vec![Action::Abort]);
    }

    #[test]
    fn rounds_start_at_most_every_gap_unless_urgent() {
        let mut s = SharedTransaction::new(100);
        s.join(t(0), 1).0.unwrap();
        s.join(t(1), 1).0.unwrap();
        assert_eq!(s.want_round(t(0), 1, false, 1_000), vec![Action::Flush(vec![(t(0), 1), (t(1), 1)])]);
        s.ready(t(0), 1, offsets(0, 1), 1_010).unwrap();
        s.ready(t(1), 1, offsets(1, 1), 1_020).unwrap();
        assert_eq!(s.want_round(t(1), 1, false, 1_025), vec![], "wanted during the commit");
        assert_eq!(s.committed(true, 1_030), vec![Action::WakeAt(1_050)], "due half the interval after the last round began");
        assert_eq!(s.want_round(t(0), 1, false, 1_040), vec![], "the wake-up is already set");
        assert_eq!(s.tick(1_050), vec![Action::Flush(vec![(t(0), 1), (t(1), 1)])]);
        s.ready(t(0), 1, offsets(0, 2), 1_150).unwrap();
        s.ready(t(1), 1, offsets(1, 2), 1_160).unwrap();
        s.committed(true, 1_170);
        assert_eq!(s.want_round(t(0), 1, true, 1_180), vec![Action::Flush(vec![(t(0), 1), (t(1), 1)])], "an urgent round waits for no gap");
    }

    #[test]
    fn cheap_rounds_come_sooner_down_to_half_the_interval() {
        let mut s = SharedTransaction::new(100);
        s.join(t(0), 1).0.unwrap();
        assert_eq!(s.gap_ms(), 100, "before any round: the interval");
        let round = |s: &mut SharedTransaction, start: i64, took: i64| {
            s.want_round(t(0), 1, true, start);
            s.ready(t(0), 1, offsets(0, start), start + took).unwrap();
            s.committed(true, start + took)
        };
        assert_eq!(round(&mut s, 1_000, 70), vec![]);
        assert_eq!(s.gap_ms(), 70, "what the round took: the next may start as this one committed");
        assert_eq!(s.want_round(t(0), 1, false, 1_072), vec![Action::Flush(vec![(t(0), 1)])]);
        s.ready(t(0), 1, offsets(0, 1), 1_080).unwrap();
        s.committed(true, 1_102);
        assert_eq!(s.gap_ms(), 50, "30 ms: half the interval");
        assert_eq!(s.want_round(t(0), 1, false, 1_105), vec![Action::WakeAt(1_122)]);
        round(&mut s, 2_000, 10);
        assert_eq!(s.gap_ms(), 50, "never under half the interval");
        round(&mut s, 3_000, 400);
        assert_eq!(s.gap_ms(), 100, "never over the interval: a slow round is followed by the next at once");
        assert_eq!(s.want_round(t(0), 1, false, 3_400), vec![Action::Flush(vec![(t(0), 1)])]);
    }

    #[test]
    fn stale_incarnations_are_ignored() {
        let mut s = two_members();
        assert_eq!(s.ready(t(0), 9, offsets(0, 1), 0), Err(Refusal::Unknown));
        assert_eq!(s.leave(t(0), 9, false), vec![]);
        assert_eq!(s.want_round(t(0), 9, false, 0), vec![]);
        assert_eq!(s.phase(), Phase::Open);
    }
}
