//! What the job loop tells its user in words: which tasks run here, and
//! why a first assignment took long.
use std::time::Duration;

use beam_kafka_config::RunnerOptions;
use beam_kafka_runtime::task::roster::Roster;

use crate::task_start::LiveTask;

/// Why a copy's first assignment took long, when it did: on a new group
/// that is the brokers' initial rebalance delay, which a user can set.
pub fn slow_join_hint(waited: Duration) -> Option<String> {
    (waited >= Duration::from_secs(1)).then(|| {
        format!(
            "this copy's first partitions came {:.1} s after it joined the consumer group: Kafka brokers hold a new group's \
             first rebalance for group.initial.rebalance.delay.ms (3 s unless set; Kafka's sample configs set 0). Set it to 0 \
             on the brokers for jobs to start at once; a group that already had members rebalances without it",
            waited.as_secs_f64()
        )
    })
}

/// Which tasks this process runs now, for the job's messages.
pub fn running_message(opts: &RunnerOptions, roster: &Roster<LiveTask>) -> String {
    let ids: Vec<String> = roster.running().keys().map(|t| t.to_string()).collect();
    format!("running {} task(s) of application {} on {}: {}", ids.len(), opts.application_id, opts.bootstrap_servers, ids.join(" "))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_a_slow_first_assignment_names_the_brokers_initial_rebalance_delay() {
        assert_eq!(slow_join_hint(Duration::from_millis(40)), None);
        let said = slow_join_hint(Duration::from_millis(3100)).expect("a 3 s join is explained");
        assert!(said.contains("3.1 s") && said.contains("group.initial.rebalance.delay.ms"), "{said}");
    }
}
