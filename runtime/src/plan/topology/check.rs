//! The last check of a plan: no sub-topology may read, directly or through
//! other sub-topologies, a runner topic it writes. Its input watermark would
//! then wait on its own output watermark and the job would never finish.
//! Fusion avoids such plans; this refuses one that slipped through.
use super::{name_of, InputKind, TopologyPlan};
use crate::plan::graph::PipelineGraph;

/// One hop of a cycle: `from` writes `topic`, which `to` reads.
struct Hop {
    from: usize,
    topic: usize,
    to: usize,
}

impl TopologyPlan {
    /// Fails, naming the sub-topologies, topics and transforms of the first
    /// cycle found, when a sub-topology reaches itself through topics.
    pub fn check_acyclic(&self, graph: &PipelineGraph) -> Result<(), String> {
        let Some(cycle) = self.find_cycle() else { return Ok(()) };
        let hops: Vec<String> = cycle
            .iter()
            .map(|h| {
                let topic = &self.topics[h.topic];
                let from = graph.producer.get(&topic.pcollection).map(|p| format!(" from '{}'", name_of(graph, p)));
                let via = self.sub_topologies[h.to].inputs.iter().find(|i| i.topic == h.topic).and_then(|i| match &i.kind {
                    InputKind::GroupByKey { transform } => Some(format!(" via '{}'", name_of(graph, transform))),
                    _ => None,
                });
                let (a, b) = (&self.sub_topologies[h.from], &self.sub_topologies[h.to]);
                format!(
                    "sub-topology {} ({}) writes {}{}, read{} by sub-topology {} ({})",
                    a.id,
                    a.stage.id,
                    topic.name,
                    from.unwrap_or_default(),
                    via.unwrap_or_default(),
                    b.id,
                    b.stage.id
                )
            })
            .collect();
        Err(format!(
            "the plan has a cycle: {}; a sub-topology on it would wait for its own watermark, so the job would never finish \
             (a planner bug: please report it with the pipeline)",
            hops.join("; ")
        ))
    }

    /// The hops of a cycle of sub-topologies, if there is one (depth-first,
    /// over what each writes and who reads it as an input or a side input).
    fn find_cycle(&self) -> Option<Vec<Hop>> {
        let n = self.sub_topologies.len();
        let mut next: Vec<Vec<(usize, usize)>> = vec![Vec::new(); n]; // (topic, reader)
        for (from, s) in self.sub_topologies.iter().enumerate() {
            for o in &s.outputs {
                for (to, r) in self.sub_topologies.iter().enumerate() {
                    let reads = r.inputs.iter().any(|i| i.topic == o.topic) || r.side_inputs.iter().any(|si| si.topic == o.topic);
                    if reads && !next[from].contains(&(o.topic, to)) {
                        next[from].push((o.topic, to));
                    }
                }
            }
        }
        let mut state = vec![0u8; n]; // 0 = new, 1 = on the path, 2 = done
        for start in 0..n {
            if state[start] != 0 {
                continue;
            }
            // The path so far: each sub-topology with the index of its next hop to try.
            let mut path: Vec<(usize, usize)> = vec![(start, 0)];
            state[start] = 1;
            while let Some(top) = path.last_mut() {
                let at = top.0;
                let Some(&(topic, to)) = next[at].get(top.1) else {
                    state[at] = 2;
                    path.pop();
                    continue;
                };
                top.1 += 1;
                match state[to] {
                    0 => {
                        state[to] = 1;
                        path.push((to, 0));
                    }
                    1 => {
                        let from = path.iter().position(|&(s, _)| s == to).expect("on the path");
                        let mut hops: Vec<Hop> =
                            path[from..].windows(2).map(|w| Hop { from: w[0].0, topic: next[w[0].0][w[0].1 - 1].0, to: w[1].0 }).collect();
                        hops.push(Hop { from: at, topic, to });
                        return Some(hops);
                    }
                    _ => {}
                }
            }
        }
        None
    }
}
