//! Which transactional ids a copy initialises before tasks of one
//! sub-topology start here (exactly_once). The copy's producer carries the
//! id of one task it owns; every other task about to start has its id
//! initialised once (a throwaway producer), which fences that task's
//! earlier owner and aborts what it left open.
//!
//! The producer's id fences nobody by being kept: only an initialisation
//! does. So the producer is kept only while no other copy can have owned
//! its id's task since it was initialised. A task starting again whose
//! partitions never changed hands since (`epochs`) stopped here on its
//! own, and nobody else owned it meanwhile. One whose partitions did was
//! given away and back, or may have been: another copy may have owned it
//! and left a transaction open under its id, which readers would then wait
//! on for the whole transaction timeout. The producer is replaced and the
//! id initialised again.
use std::collections::BTreeSet;

use crate::plan::topology::TaskId;

/// The copy's producer as it stands: the task whose id it carries,
/// whether it can still write (not fenced, no fatal error), and whether
/// that task's partitions changed hands since the id was initialised.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Current {
    pub id_task: TaskId,
    pub usable: bool,
    pub moved: bool,
}

/// What to initialise before `starting` runs.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct IdPlan {
    /// The producer must be replaced (its members stop first).
    pub replace: bool,
    /// The id the new producer carries, when one is created.
    pub new_id: Option<TaskId>,
    /// The ids initialised (and dropped) only to fence earlier owners.
    pub fence: Vec<TaskId>,
}

/// `starting`: the tasks of this sub-topology about to start here;
/// `owned`: every task of it assigned to this copy now.
pub fn plan(current: Option<Current>, starting: &[TaskId], owned: &BTreeSet<TaskId>) -> IdPlan {
    let replace = match current {
        None => true,
        Some(c) => !c.usable || !owned.contains(&c.id_task) || (starting.contains(&c.id_task) && c.moved),
    };
    let new_id = if replace { starting.iter().min().copied() } else { None };
    let kept = current.filter(|_| !replace).map(|c| c.id_task);
    let fence = starting.iter().copied().filter(|t| Some(*t) != new_id && Some(*t) != kept).collect();
    IdPlan { replace, new_id, fence }
}

/// After a round in which the tasks `leaving` committed their last cycle
/// here (handed over to another copy): the task whose id the copy's
/// producer carries from now on, when the one it carries is leaving and
/// others stay. That task's next owner initialises its id, which would
/// fence the producer the staying tasks write through.
pub fn rehome(id_task: TaskId, leaving: &BTreeSet<TaskId>, staying: &BTreeSet<TaskId>) -> Option<TaskId> {
    if leaving.contains(&id_task) && !staying.contains(&id_task) {
        staying.iter().next().copied()
    } else {
        None
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn t(partition: u32) -> TaskId {
        TaskId { sub_topology: 0, partition }
    }

    fn owned(ts: &[u32]) -> BTreeSet<TaskId> {
        ts.iter().map(|&p| t(p)).collect()
    }

    #[test]
    fn a_producer_whose_task_hands_over_takes_a_staying_tasks_id() {
        assert_eq!(rehome(t(0), &owned(&[0, 3]), &owned(&[1, 2])), Some(t(1)));
        assert_eq!(rehome(t(0), &owned(&[3]), &owned(&[0, 1])), None, "its task stays");
        assert_eq!(rehome(t(0), &owned(&[0, 1]), &owned(&[])), None, "nobody left to write through it");
    }

    #[test]
    fn a_first_start_takes_the_smallest_id_and_fences_the_others() {
        let p = plan(None, &[t(2), t(0), t(1)], &owned(&[0, 1, 2]));
        assert_eq!(p, IdPlan { replace: true, new_id: Some(t(0)), fence: vec![t(2), t(1)] });
    }

    #[test]
    fn a_producer_whose_task_ran_here_all_along_is_kept_and_the_newcomers_fenced() {
        let current = Current { id_task: t(0), usable: true, moved: false };
        let p = plan(Some(current), &[t(3)], &owned(&[0, 3]));
        assert_eq!(p, IdPlan { replace: false, new_id: None, fence: vec![t(3)] });
    }

    #[test]
    fn a_producer_whose_task_came_back_is_replaced_so_its_id_fences_the_owner_in_between() {
        // Copy A's producer carries task 0's id; a rebalance gave task 0 to
        // copy B (whose producer took the id, and then B died mid
        // transaction) and gives it back now. Only a new initialisation of
        // the id aborts what B left open.
        let current = Current { id_task: t(0), usable: true, moved: true };
        let p = plan(Some(current), &[t(0), t(1)], &owned(&[0, 1, 2]));
        assert!(p.replace);
        assert_eq!(p.new_id, Some(t(0)));
        assert_eq!(p.fence, vec![t(1)]);
    }

    #[test]
    fn a_task_restarting_on_its_own_keeps_the_producer_its_siblings_write_through() {
        // Its partitions never moved: nobody else can have owned task 0
        // meanwhile, and a replacement would stop the sub-topology's other
        // tasks here.
        let current = Current { id_task: t(0), usable: true, moved: false };
        let p = plan(Some(current), &[t(0)], &owned(&[0, 1, 2]));
        assert_eq!(p, IdPlan { replace: false, new_id: None, fence: vec![] });
    }

    #[test]
    fn a_producer_of_a_task_given_away_or_unusable_is_replaced() {
        let away = plan(Some(Current { id_task: t(0), usable: true, moved: false }), &[t(2)], &owned(&[1, 2]));
        assert_eq!(away, IdPlan { replace: true, new_id: Some(t(2)), fence: vec![] });
        let fenced = plan(Some(Current { id_task: t(1), usable: false, moved: false }), &[t(2)], &owned(&[1, 2]));
        assert_eq!(fenced, IdPlan { replace: true, new_id: Some(t(2)), fence: vec![] });
    }

    #[test]
    fn every_task_starting_has_its_id_initialised_once_or_carried_by_the_kept_producer() {
        let cases = [
            (None, vec![t(1), t(0)]),
            (Some(Current { id_task: t(0), usable: true, moved: true }), vec![t(1), t(2)]),
            (Some(Current { id_task: t(0), usable: true, moved: true }), vec![t(0), t(2)]),
            (Some(Current { id_task: t(0), usable: true, moved: false }), vec![t(0), t(2)]),
            (Some(Current { id_task: t(5), usable: false, moved: false }), vec![t(3)]),
        ];
        for (current, starting) in cases {
            let p = plan(current, &starting, &owned(&[0, 1, 2, 3, 5]));
            let mut initialised: Vec<TaskId> = p.fence.clone();
            initialised.extend(p.new_id);
            initialised.extend(current.filter(|_| !p.replace).map(|c| c.id_task).filter(|id| starting.contains(id)));
            initialised.sort();
            let mut want = starting.clone();
            want.sort();
            assert_eq!(initialised, want, "{current:?} {starting:?}");
        }
    }
}
