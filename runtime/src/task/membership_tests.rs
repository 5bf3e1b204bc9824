//! Tables of events and the commands they give.
use super::*;
use crate::kafka::failure::{Backoff, Failure};

fn t(p: u32) -> TaskId {
    TaskId { sub_topology: 0, partition: p }
}

fn part(p: i32) -> TopicPartition {
    TopicPartition::new("in", p)
}

fn held(ps: &[i32]) -> BTreeSet<TopicPartition> {
    ps.iter().map(|p| part(*p)).collect()
}

fn owned(ts: &[u32]) -> BTreeSet<TaskId> {
    ts.iter().map(|p| t(*p)).collect()
}

/// Tasks 0_0 and 0_1 on partitions 0 and 1 of "in"; both terminal.
fn job() -> Membership<&'static str> {
    Membership::new(Roster::new([(t(0), vec![part(0)]), (t(1), vec![part(1)])]), [t(0), t(1)])
}

/// Both partitions here, 0_0 running as "a".
fn running_0_0() -> Membership<&'static str> {
    let mut m = job();
    m.on(Event::Assigned { partitions: vec![part(0), part(1)], held: held(&[0, 1]) }, 0, 0.0);
    m.on(Event::Started(vec![(t(0), 1, "a")]), 0, 0.0);
    m
}

/// A row: at `now`, this event gives these commands.
type Row = (u64, Event<&'static str>, Vec<Command<&'static str>>);

/// Runs each event in turn and checks the commands it gave.
fn check(m: &mut Membership<&'static str>, table: Vec<Row>) {
    for (i, (now, event, want)) in table.into_iter().enumerate() {
        let said = format!("{event:?}");
        assert_eq!(m.on(event, now, 0.0), want, "row {i}: {said}");
    }
}

#[test]
fn assigned_partitions_start_their_tasks_which_then_run() {
    let mut m = job();
    check(
        &mut m,
        vec![
            (
                0,
                Event::Assigned { partitions: vec![part(0), part(1)], held: held(&[0]) },
                vec![Command::Owned { tasks: owned(&[0, 1]), revoked: false }, Command::Start(vec![t(0)])],
            ),
            (0, Event::Started(vec![(t(0), 1, "a")]), vec![Command::Run { task: t(0), drain: false }, Command::RunningChanged]),
            // The consumer holds partition 1 by the next look.
            (1_000, Event::Reconcile { held: held(&[0, 1]) }, vec![Command::Start(vec![t(1)])]),
            (1_000, Event::Started(vec![(t(1), 2, "b")]), vec![Command::Run { task: t(1), drain: false }, Command::RunningChanged]),
            (2_000, Event::Reconcile { held: held(&[0, 1]) }, vec![]),
        ],
    );
    assert_eq!(m.roster().running().len(), 2);
}

#[test]
fn a_revoked_partition_stops_its_task_and_one_started_too_late_is_stopped_at_once() {
    let mut m = job();
    m.on(Event::Assigned { partitions: vec![part(0), part(1)], held: held(&[0, 1]) }, 0, 0.0);
    check(
        &mut m,
        vec![
            (0, Event::Started(vec![(t(0), 1, "a")]), vec![Command::Run { task: t(0), drain: false }, Command::RunningChanged]),
            (
                10,
                Event::Revoked(vec![part(0), part(1)]),
                vec![Command::Owned { tasks: owned(&[]), revoked: true }, Command::Stop(vec!["a"]), Command::RunningChanged],
            ),
            // 0_1's start was under way while its partition left.
            (20, Event::Started(vec![(t(1), 2, "late")]), vec![Command::Refuse("late")]),
            (30, Event::RevokedAll, vec![Command::Owned { tasks: owned(&[]), revoked: true }]),
        ],
    );
    assert!(m.roster().running().is_empty());
}

#[test]
fn a_second_incarnation_of_a_running_task_is_refused_and_the_first_keeps_its_routes() {
    let mut m = job();
    m.on(Event::Assigned { partitions: vec![part(0)], held: held(&[0]) }, 0, 0.0);
    m.on(Event::Started(vec![(t(0), 1, "a")]), 0, 0.0);
    assert_eq!(m.on(Event::Started(vec![(t(0), 2, "b")]), 0, 0.0), vec![Command::Refuse("b")]);
    assert_eq!(m.roster().running()[&t(0)].incarnation, 1);
}

#[test]
fn partitions_asked_back_are_handed_over_even_when_no_task_runs_on_them() {
    let mut m = running_0_0();
    check(
        &mut m,
        vec![
            (
                5,
                Event::Revoking(vec![part(0)]),
                vec![Command::Owned { tasks: owned(&[1]), revoked: true }, Command::HandOver(vec!["a"]), Command::RunningChanged],
            ),
            (6, Event::Revoking(vec![part(1)]), vec![Command::Owned { tasks: owned(&[]), revoked: true }, Command::HandOver(vec![])]),
        ],
    );
}

#[test]
fn partitions_the_consumer_lost_stop_their_tasks_at_the_next_look() {
    let mut m = job();
    m.on(Event::Assigned { partitions: vec![part(0), part(1)], held: held(&[0, 1]) }, 0, 0.0);
    m.on(Event::Started(vec![(t(0), 1, "a"), (t(1), 1, "b")]), 0, 0.0);
    let said = m.on(Event::Reconcile { held: held(&[1]) }, 1_000, 0.0);
    assert!(matches!(&said[0], Command::Say(s) if s.contains("no longer assigned")), "{said:?}");
    assert_eq!(said[1..], [Command::Owned { tasks: owned(&[1]), revoked: true }, Command::Stop(vec!["a"]), Command::RunningChanged]);
}

#[test]
fn a_stopped_task_pauses_its_partitions_and_restarts_after_its_backoff() {
    let mut m = job();
    m.on(Event::Assigned { partitions: vec![part(0)], held: held(&[0]) }, 0, 0.0);
    m.on(Event::Started(vec![(t(0), 1, "a")]), 0, 0.0);
    assert!(m.on(Event::Stopped { task: t(0), incarnation: 7, reason: "fenced".into() }, 100, 0.0).is_empty(), "old news");
    let said = m.on(Event::Stopped { task: t(0), incarnation: 1, reason: "fenced".into() }, 100, 0.0);
    assert_eq!(said[0], Command::Pause(vec![part(0)]));
    assert!(matches!(&said[1], Command::Say(s) if s.contains("task 0_0 stopped (fenced)")), "{said:?}");
    let due = 100 + Backoff::FIRST_MS / 2;
    assert_eq!(m.next_restart(), Some(due));
    check(
        &mut m,
        vec![
            (due - 1, Event::RestartDue { held: held(&[0]) }, vec![]),
            (due, Event::RestartDue { held: held(&[0]) }, vec![Command::Start(vec![t(0)])]),
        ],
    );
}

#[test]
fn a_transient_start_failure_waits_and_a_fatal_one_ends_the_job() {
    let mut m = job();
    m.on(Event::Assigned { partitions: vec![part(0)], held: held(&[0]) }, 0, 0.0);
    let said = m.on(Event::StartFailed { tasks: vec![t(0)], error: Failure::kafka("NotCoordinator", "Broker: Not coordinator") }, 0, 0.0);
    assert!(matches!(&said[..], [Command::Warn(s)] if s.contains("waiting for") && s.contains("next try in")), "{said:?}");
    assert_eq!(m.on(Event::RestartDue { held: held(&[0]) }, 1, 0.0), vec![], "cooling down");
    // Fenced while starting: another copy took the task, the group says so next.
    let said = m.on(Event::StartFailed { tasks: vec![t(0)], error: Failure::kafka("Fenced", "fenced by a newer instance") }, 0, 0.0);
    assert!(matches!(&said[..], [Command::Warn(s)] if s.contains("next assignment")), "{said:?}");
    let said = m.on(
        Event::StartFailed { tasks: vec![t(0)], error: Failure::kafka("TopicAuthorizationFailed", "Broker: Topic authorization failed") },
        0,
        0.0,
    );
    assert!(matches!(&said[..], [Command::End(Some(why))] if why.contains("to fix")), "{said:?}");
}

#[test]
fn the_job_is_done_once_every_terminal_task_finished_here_or_elsewhere() {
    let mut m = job();
    check(
        &mut m,
        vec![
            (0, Event::Finished(t(0)), vec![Command::AnnounceFinished(t(0))]),
            (0, Event::Finished(t(0)), vec![]),
            (0, Event::FinishedElsewhere(t(9)), vec![]),
            (0, Event::FinishedElsewhere(t(1)), vec![Command::End(None)]),
        ],
    );
    let mut m = job();
    m.on(Event::FinishedElsewhere(t(1)), 0, 0.0);
    assert_eq!(m.on(Event::Finished(t(0)), 0, 0.0), vec![Command::AnnounceFinished(t(0)), Command::End(None)]);
}

#[test]
fn a_failed_task_fails_the_job_and_a_commit_resets_the_backoff() {
    let mut m = job();
    assert_eq!(m.on(Event::Failed("boom".into()), 0, 0.0), vec![Command::End(Some("boom".into()))]);
    m.on(Event::Assigned { partitions: vec![part(0)], held: held(&[0]) }, 0, 0.0);
    for incarnation in 1..=2 {
        m.on(Event::Started(vec![(t(0), incarnation, "a")]), 0, 0.0);
        m.on(Event::Stopped { task: t(0), incarnation, reason: "x".into() }, 0, 0.0);
    }
    assert_eq!(m.next_restart(), Some(Backoff::FIRST_MS), "the second wait doubles");
    m.on(Event::Started(vec![(t(0), 3, "a")]), 0, 0.0);
    m.on(Event::Committed { task: t(0), incarnation: 3 }, 0, 0.0);
    m.on(Event::Stopped { task: t(0), incarnation: 3, reason: "x".into() }, 0, 0.0);
    assert_eq!(m.next_restart(), Some(Backoff::FIRST_MS / 2), "it committed: the backoff starts over");
}

#[test]
fn a_drain_tells_the_running_tasks_once_and_every_task_started_later() {
    let mut m = running_0_0();
    check(
        &mut m,
        vec![
            (0, Event::Drain, vec![Command::StartDrain(vec![t(0)])]),
            (0, Event::Drain, vec![]),
            (0, Event::Started(vec![(t(1), 1, "b")]), vec![Command::Run { task: t(1), drain: true }, Command::RunningChanged]),
        ],
    );
    assert!(m.draining());
    assert_eq!(m.stop_all().len(), 2);
}
