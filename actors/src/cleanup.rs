//! What a finished (or drained) job deletes: its runner topics, its
//! consumer group and its tasks' local stores, once every copy has left
//! the group; a drained job keeps its sources' positions for the next run.
use std::time::Duration;

use beam_kafka_runtime::plan::topology::{changelog_topic, TopicKind};

use crate::control;
use crate::job_input::JobInput;
use crate::kafka::admin::Admin;
use crate::store::task_dir;

/// Deletes the topics and consumer group of a finished bounded job.
pub(crate) async fn cleanup(admin: &Admin, input: &JobInput, info: &(dyn Fn(String) + Sync), drained: bool) {
    let mut names: Vec<String> = input.plan.runner_topics().map(|t| t.name.clone()).collect();
    names.extend(input.plan.sub_topologies.iter().map(|s| changelog_topic(&input.options.application_id, s.id)));
    names.extend(input.retired_topics.iter().cloned());
    names.push(control::control_topic(&input.options.application_id));
    names.push(crate::copies::copies_topic(&input.options.application_id));
    names.push(crate::identity::plan_topic(&input.options.application_id));
    // A drained job ended where its sources stopped: a restart reads on from
    // there, so their positions outlive the group.
    let sources: Vec<(String, u32)> =
        input.plan.topics.iter().filter(|t| t.kind == TopicKind::Source).map(|t| (t.name.clone(), t.partitions)).collect();
    let positions = if drained {
        match admin.committed_positions(&sources).await {
            Ok(p) => Some(p),
            Err(e) => {
                info(format!("a restart will not resume the sources where the drain stopped: {e}"));
                None
            }
        }
    } else {
        None
    };
    let local = async {
        crate::standby::close(&input.options.application_id);
        // Let the actors stop and close their stores first.
        tokio::time::sleep(Duration::from_millis(100)).await;
        // Only what the runner made: each task's store directory, then the
        // application's directory if that left it empty (state_dir is the
        // client's choice, so the directory around the stores may be theirs).
        let (state_dir, app) = (&input.options.state_dir, &input.options.application_id);
        for task in input.plan.tasks() {
            let dir = task_dir(state_dir, app, task);
            // Only a directory the runner marked as a store of its own, and
            // only while no store (of another run) has it open.
            if let Err(e) = crate::store::remove_store_dir(&dir) {
                if e.kind() != std::io::ErrorKind::NotFound {
                    info(format!("could not delete the job's local state {}: {e}", dir.display()));
                }
            }
        }
        let _ = std::fs::remove_dir(state_dir.join(app));
    };
    // The group empties once every copy has left it: a copy whose last
    // terminal task finished elsewhere leaves once the control topic told
    // it, so the topics (the control topic among them) go only after that.
    let group_then_topics = async {
        for attempt in 0..GROUP_EMPTY_TRIES {
            match admin.delete_group(&input.options.application_id).await {
                Ok(()) => {
                    if let Some(p) = &positions {
                        if let Err(e) = admin.commit_positions(p) {
                            info(format!("a restart will not resume the sources where the drain stopped: {e}"));
                        }
                    }
                    if let Err(e) = admin.delete_topics(&names).await {
                        info(format!("could not delete the job's topics: {e}"));
                    }
                    return;
                }
                Err(e) if attempt + 1 == GROUP_EMPTY_TRIES => {
                    info(format!(
                        "could not delete the consumer group (another copy still runs?): {e}; the topics are kept, and a \
                         later run under this id is refused until `beam-kafka reset`"
                    ));
                    let _ = crate::identity::record_finished(&input.options).await;
                }
                Err(_) => tokio::time::sleep(Duration::from_millis(100)).await,
            }
        }
    };
    tokio::join!(local, group_then_topics);
}

/// How often (every 100 ms) the clean-up tries to delete the group before
/// it gives up: other copies leave it within a second of the last end.
const GROUP_EMPTY_TRIES: u32 = 300;
