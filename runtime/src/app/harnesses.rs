//! Which SDK harness a task's stage runs on, when a copy runs several
//! (`--sdk_worker_parallelism`). A Python harness runs its bundles on one
//! core (the GIL), so a copy uses more cores only by spreading its tasks
//! over harnesses.

/// How many harnesses to start: the requested number, or one per core
/// when it is 0 (Beam's "runner decides").
pub fn harness_count(requested: u32, cores: usize) -> usize {
    match requested {
        0 => cores.max(1),
        n => n as usize,
    }
}

/// The harness a task's stage takes: the one running the fewest stages
/// now, so tasks that start, restart or move here keep the harnesses evenly
/// loaded whatever this copy's share of the tasks. Among equally loaded
/// harnesses the one after the last pick wins, so a copy's tasks go round
/// the harnesses in start order.
pub fn least_loaded(loads: &[usize], last_pick: usize) -> usize {
    assert!(!loads.is_empty(), "a copy has at least one harness");
    least_loaded_where(loads, last_pick, |_| true).expect("at least one harness")
}

/// [`least_loaded`] among the harnesses `eligible` accepts: a job whose
/// transforms name several SDK environments (a Python pipeline with a Java
/// transform) runs each stage on a harness of its own environment. None
/// when no harness is eligible.
pub fn least_loaded_where(loads: &[usize], last_pick: usize, eligible: impl Fn(usize) -> bool) -> Option<usize> {
    let n = loads.len();
    (1..=n).map(|step| (last_pick + step) % n).filter(|&i| eligible(i)).min_by_key(|&i| loads[i])
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn zero_means_one_harness_per_core() {
        assert_eq!(harness_count(0, 2), 2);
        assert_eq!(harness_count(0, 0), 1);
        assert_eq!(harness_count(3, 2), 3);
        assert_eq!(harness_count(1, 16), 1);
    }

    #[test]
    fn the_least_loaded_harness_is_taken() {
        assert_eq!(least_loaded(&[2, 0, 1], 0), 1);
        assert_eq!(least_loaded(&[0, 3, 3], 0), 0);
    }

    #[test]
    fn a_stage_takes_the_least_loaded_harness_of_its_environment() {
        let envs = ["py", "java", "py", "java"];
        let of = |env: &'static str| move |i: usize| envs[i] == env;
        // Harness 0 is the least loaded overall, but not a Java one.
        assert_eq!(least_loaded_where(&[0, 2, 1, 1], 0, of("java")), Some(3));
        assert_eq!(least_loaded_where(&[0, 2, 1, 1], 0, of("py")), Some(0));
        // Ties among one environment's harnesses go round from the last pick.
        assert_eq!(least_loaded_where(&[0, 1, 0, 1], 3, of("java")), Some(1));
        assert_eq!(least_loaded_where(&[0, 1, 0, 1], 1, of("java")), Some(3));
        assert_eq!(least_loaded_where(&[0, 0], 0, of("go")), None);
    }

    #[test]
    fn equal_loads_go_round_in_start_order() {
        let mut loads = vec![0; 3];
        let mut last = loads.len() - 1;
        let mut picks = Vec::new();
        for _ in 0..6 {
            last = least_loaded(&loads, last);
            loads[last] += 1;
            picks.push(last);
        }
        assert_eq!(picks, [0, 1, 2, 0, 1, 2]);
    }

    #[test]
    fn a_stopped_task_frees_its_harness_for_the_next() {
        // Four tasks on two harnesses; a task of harness 1 stops, and the
        // next to start takes its place even though harness 0 was next.
        let mut loads = vec![2, 2];
        loads[1] -= 1;
        assert_eq!(least_loaded(&loads, 1), 1);
    }

    #[test]
    fn one_harness_takes_everything() {
        assert_eq!(least_loaded(&[7], 0), 0);
    }
}
