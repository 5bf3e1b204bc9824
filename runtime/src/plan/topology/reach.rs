//! What a plan's TestStreams reach: the tasks whose progress says a step
//! was processed in full.
use super::{TaskId, TopicKind, TopologyPlan};

impl TopologyPlan {
    /// The terminal tasks a TestStream's steps reach (through inputs and
    /// side inputs): once each passed a step's epoch on, the step was
    /// processed in full.
    pub fn test_stream_terminals(&self) -> Vec<TaskId> {
        let mut reached: Vec<bool> = self.topics.iter().map(|t| t.kind == TopicKind::TestStream).collect();
        let mut subs = vec![false; self.sub_topologies.len()];
        loop {
            let mut changed = false;
            for (i, s) in self.sub_topologies.iter().enumerate() {
                let reads = s.inputs.iter().map(|x| x.topic).chain(s.side_inputs.iter().map(|x| x.topic)).any(|t| reached[t]);
                if reads && !subs[i] {
                    subs[i] = true;
                    changed = true;
                    for o in &s.outputs {
                        reached[o.topic] = true;
                    }
                }
            }
            if !changed {
                break;
            }
        }
        let reached: Vec<u32> = self.sub_topologies.iter().zip(subs).filter(|(_, r)| *r).map(|(s, _)| s.id).collect();
        self.terminal_tasks().into_iter().filter(|t| reached.contains(&t.sub_topology)).collect()
    }
}
