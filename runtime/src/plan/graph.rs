//! The executable graph of a pipeline: its leaf transforms in topological
//! order, with who produces and who consumes each PCollection.
use std::collections::{BTreeMap, BTreeSet, HashMap};

use crate::pb;

#[derive(Debug)]
pub struct PipelineGraph<'p> {
    pub pipeline: &'p pb::Pipeline,
    /// Leaf transform ids, producers before consumers.
    pub leaves: Vec<String>,
    /// PCollection id → the leaf producing it.
    pub producer: HashMap<String, String>,
    /// PCollection id → leaves consuming it (a leaf appears once per input
    /// slot, so Flatten of the same PCollection twice appears twice).
    pub consumers: HashMap<String, Vec<String>>,
    /// Output of a skipped identity leaf → its input.
    identity_alias: BTreeMap<String, String>,
}

/// A leaf whose outputs are all among its inputs does nothing (Python sends
/// such identity leaves in streaming submissions); the runner skips it.
fn is_identity(t: &pb::PTransform) -> bool {
    !t.outputs.is_empty() && {
        let inputs: BTreeSet<_> = t.inputs.values().collect();
        t.outputs.values().all(|o| inputs.contains(o))
    }
}

impl<'p> PipelineGraph<'p> {
    /// Builds the graph. Fails when the pipeline refers to a transform it does
    /// not contain or is not a DAG.
    pub fn new(pipeline: &'p pb::Pipeline) -> Result<Self, String> {
        let components = pipeline.components.as_ref().ok_or("the pipeline has no components")?;
        let transforms = &components.transforms;
        let mut leaves = Vec::new();
        let mut stack: Vec<&String> = pipeline.root_transform_ids.iter().rev().collect();
        let mut seen = BTreeSet::new();
        while let Some(id) = stack.pop() {
            if !seen.insert(id.clone()) {
                continue;
            }
            let t = transforms.get(id).ok_or_else(|| format!("the pipeline refers to a missing transform '{id}'"))?;
            if t.subtransforms.is_empty() {
                let is_root_composite = t.spec.as_ref().is_none_or(|s| s.urn.is_empty()) && t.inputs.is_empty() && t.outputs.is_empty();
                if !is_identity(t) && !is_root_composite {
                    leaves.push(id.clone());
                }
            } else {
                stack.extend(t.subtransforms.iter().rev());
            }
        }
        let mut producer = HashMap::new();
        for id in &leaves {
            for pc in transforms[id].outputs.values() {
                if !components.pcollections.contains_key(pc) {
                    return Err(format!("transform '{id}' outputs a missing PCollection '{pc}'"));
                }
                producer.insert(pc.clone(), id.clone());
            }
        }
        // Identity leaves were dropped, so an input may have to be traced back
        // through them to its real producer.
        let identity_alias = identity_aliases(transforms);
        let resolve = |pc: &String| trace(pc, &identity_alias, &producer);
        let mut consumers: HashMap<String, Vec<String>> = HashMap::new();
        for id in &leaves {
            for pc in transforms[id].inputs.values() {
                consumers.entry(resolve(pc)).or_default().push(id.clone());
            }
        }
        let leaves = topological(&leaves, transforms, &producer, &resolve)?;
        Ok(PipelineGraph { pipeline, leaves, producer, consumers, identity_alias })
    }

    pub fn transform(&self, id: &str) -> &'p pb::PTransform {
        &self.pipeline.components.as_ref().expect("checked in new").transforms[id]
    }

    pub fn components(&self) -> &'p pb::Components {
        self.pipeline.components.as_ref().expect("checked in new")
    }

    pub fn urn(&self, id: &str) -> &'p str {
        self.transform(id).spec.as_ref().map(|s| s.urn.as_str()).unwrap_or("")
    }

    /// The side inputs of a ParDo leaf: (local name, PCollection), traced.
    pub fn side_inputs_of(&self, id: &str) -> Vec<(String, String)> {
        use prost::Message;
        let t = self.transform(id);
        let Some(spec) = t.spec.as_ref().filter(|s| crate::urns::has_pardo_payload(&s.urn)) else { return Vec::new() };
        let Ok(payload) = pb::ParDoPayload::decode(spec.payload.as_slice()) else { return Vec::new() };
        let mut out: Vec<(String, String)> = t
            .inputs
            .iter()
            .filter(|(local, _)| payload.side_inputs.contains_key(*local))
            .map(|(local, pc)| (local.clone(), trace(pc, &self.identity_alias, &self.producer)))
            .collect();
        out.sort();
        out
    }

    /// Whether a leaf is a ParDo with user state or timers.
    pub fn is_stateful(&self, id: &str) -> bool {
        use prost::Message;
        let Some(spec) = self.transform(id).spec.as_ref().filter(|s| s.urn == crate::urns::PAR_DO) else { return false };
        pb::ParDoPayload::decode(spec.payload.as_slice()).is_ok_and(|p| !p.state_specs.is_empty() || !p.timer_family_specs.is_empty())
    }

    /// The main inputs of a leaf (every input but its side inputs), traced,
    /// in local-name order (so fusion and stage inputs are deterministic).
    pub fn main_inputs_of(&self, id: &str) -> Vec<String> {
        let sides: BTreeSet<String> = self.side_inputs_of(id).into_iter().map(|(local, _)| local).collect();
        let mut mains: Vec<(&String, &String)> = self.transform(id).inputs.iter().filter(|(local, _)| !sides.contains(*local)).collect();
        mains.sort();
        mains.into_iter().map(|(_, pc)| trace(pc, &self.identity_alias, &self.producer)).collect()
    }

    /// The input PCollections of a leaf, traced through skipped identity leaves.
    pub fn inputs_of(&self, id: &str) -> Vec<String> {
        self.transform(id).inputs.values().map(|pc| trace(pc, &self.identity_alias, &self.producer)).collect()
    }

    /// Whether an SDK harness runs the leaf (fusion joins only these).
    pub fn is_sdk_executed(&self, id: &str) -> bool {
        let empty_flatten = self.urn(id) == crate::urns::FLATTEN && self.inputs_of(id).is_empty();
        crate::urns::SDK_EXECUTED.contains(&self.urn(id)) && !self.transform(id).environment_id.is_empty() && !empty_flatten
    }

    /// Whether the harness of `environment_id` reads one data input per bundle.
    pub fn one_input_per_bundle(&self, environment_id: &str) -> bool {
        crate::plan::sdk_version::is_sdk(self.components(), environment_id, "Go")
    }

    /// Whether `id` is a Flatten the runner does itself
    /// (`crate::plan::runner_flatten`): several distinct inputs, in an
    /// environment whose harness reads one input per bundle. An input read
    /// straight from a runner transform (its topic feeds one stage) must be
    /// read by no other SDK transform and only once by the Flatten; an input
    /// from another stage may repeat (each time through an edge topic of its
    /// own, so its elements come as often as it is named).
    pub fn is_runner_flatten(&self, id: &str) -> bool {
        if self.urn(id) != crate::urns::FLATTEN || !self.one_input_per_bundle(&self.transform(id).environment_id) {
            return false;
        }
        let inputs = self.inputs_of(id);
        let mut distinct = inputs.clone();
        distinct.sort();
        distinct.dedup();
        if distinct.len() < 2 {
            return false;
        }
        distinct.iter().all(|pc| {
            let from_sdk = self.producer.get(pc).is_some_and(|p| self.is_sdk_executed(p));
            let once = inputs.iter().filter(|i| *i == pc).count() == 1;
            let alone = self.consumers.get(pc).is_none_or(|cs| cs.iter().all(|c| c == id || !self.is_sdk_executed(c)));
            from_sdk || (once && alone)
        })
    }
}

/// Follows identity aliases from `pc` until a PCollection with a producer.
fn trace(pc: &str, alias: &BTreeMap<String, String>, producer: &HashMap<String, String>) -> String {
    let mut cur = pc.to_string();
    // Aliases that loop (only a malformed pipeline has them) end the walk.
    for _ in 0..=alias.len() {
        if producer.contains_key(&cur) {
            break;
        }
        match alias.get(&cur) {
            Some(next) if next != &cur => cur = next.clone(),
            _ => break,
        }
    }
    cur
}

/// Output PCollection of an identity leaf → its (single) input.
fn identity_aliases(transforms: &std::collections::HashMap<String, pb::PTransform>) -> BTreeMap<String, String> {
    let mut alias = BTreeMap::new();
    for t in transforms.values() {
        if t.subtransforms.is_empty() && is_identity(t) && t.inputs.len() == 1 {
            let input = t.inputs.values().next().expect("one input");
            for o in t.outputs.values() {
                if o != input {
                    alias.insert(o.clone(), input.clone());
                }
            }
        }
    }
    alias
}

fn topological(
    leaves: &[String],
    transforms: &HashMap<String, pb::PTransform>,
    producer: &HashMap<String, String>,
    resolve: &dyn Fn(&String) -> String,
) -> Result<Vec<String>, String> {
    let mut order = Vec::with_capacity(leaves.len());
    let mut state: HashMap<&str, u8> = HashMap::new(); // 1 = visiting, 2 = done
                                                       // Depth-first with an explicit stack: a chain of many thousand
                                                       // transforms must not overflow the thread's stack.
    for leaf in leaves {
        let mut stack: Vec<(&str, Vec<&str>)> = Vec::new();
        if !state.contains_key(leaf.as_str()) {
            state.insert(leaf.as_str(), 1);
            stack.push((leaf.as_str(), producers_of(leaf, transforms, producer, resolve)));
        }
        while let Some((id, pending)) = stack.last_mut() {
            match pending.pop() {
                Some(p) => match state.get(p) {
                    Some(2) => {}
                    Some(_) => return Err(format!("the pipeline has a cycle through transform '{p}'")),
                    None => {
                        state.insert(p, 1);
                        let next = producers_of(p, transforms, producer, resolve);
                        stack.push((p, next));
                    }
                },
                None => {
                    state.insert(id, 2);
                    order.push(id.to_string());
                    stack.pop();
                }
            }
        }
    }
    Ok(order)
}

/// The leaves producing `id`'s inputs, in reverse input order (popped last
/// first, so they are visited in input order).
fn producers_of<'a>(
    id: &str,
    transforms: &'a HashMap<String, pb::PTransform>,
    producer: &'a HashMap<String, String>,
    resolve: &dyn Fn(&String) -> String,
) -> Vec<&'a str> {
    let mut ps: Vec<&'a str> = transforms[id].inputs.values().filter_map(|pc| producer.get(&resolve(pc)).map(String::as_str)).collect();
    ps.reverse();
    ps
}

#[cfg(test)]
pub(crate) mod test_pipelines {
    //! Small hand-built pipelines for the core's unit tests.
    use crate::pb;
    use std::collections::HashMap;

    pub struct Builder {
        pub p: pb::Pipeline,
    }

    impl Builder {
        pub fn new() -> Self {
            let mut c = pb::Components::default();
            c.environments.insert("py".into(), pb::Environment { urn: crate::urns::ENV_EXTERNAL.into(), ..Default::default() });
            c.coders.insert(
                "bytes".into(),
                pb::Coder {
                    spec: Some(pb::FunctionSpec { urn: crate::urns::CODER_BYTES.into(), payload: vec![] }),
                    component_coder_ids: vec![],
                },
            );
            c.coders.insert(
                "gw".into(),
                pb::Coder {
                    spec: Some(pb::FunctionSpec { urn: crate::urns::CODER_GLOBAL_WINDOW.into(), payload: vec![] }),
                    component_coder_ids: vec![],
                },
            );
            c.windowing_strategies.insert("global".into(), pb::WindowingStrategy { window_coder_id: "gw".into(), ..Default::default() });
            Builder { p: pb::Pipeline { components: Some(c), ..Default::default() } }
        }

        fn comps(&mut self) -> &mut pb::Components {
            self.p.components.as_mut().unwrap()
        }

        /// Adds a leaf; `env` marks it SDK-executed.
        pub fn leaf(&mut self, id: &str, urn: &str, inputs: &[&str], outputs: &[&str], env: bool) -> &mut Self {
            let named =
                |v: &[&str]| -> HashMap<String, String> { v.iter().enumerate().map(|(i, pc)| (format!("i{i}"), pc.to_string())).collect() };
            for pc in outputs {
                self.comps().pcollections.insert(
                    pc.to_string(),
                    pb::PCollection {
                        unique_name: pc.to_string(),
                        coder_id: "bytes".into(),
                        windowing_strategy_id: "global".into(),
                        ..Default::default()
                    },
                );
            }
            let t = pb::PTransform {
                unique_name: id.to_string(),
                spec: Some(pb::FunctionSpec { urn: urn.into(), payload: vec![] }),
                inputs: named(inputs),
                outputs: named(outputs),
                environment_id: if env { "py".into() } else { String::new() },
                ..Default::default()
            };
            self.comps().transforms.insert(id.to_string(), t);
            self.p.root_transform_ids.push(id.to_string());
            self
        }

        /// Makes `pc` a side input of ParDo `transform` under `local`.
        pub fn side_input(&mut self, transform: &str, local: &str, pc: &str) -> &mut Self {
            use prost::Message;
            let t = self.comps().transforms.get_mut(transform).unwrap();
            t.inputs.insert(local.to_string(), pc.to_string());
            let mut payload = pb::ParDoPayload::decode(t.spec.as_ref().unwrap().payload.as_slice()).unwrap();
            let access = pb::FunctionSpec { urn: crate::state::side_input::ITERABLE.into(), payload: vec![] };
            payload.side_inputs.insert(local.to_string(), pb::SideInput { access_pattern: Some(access), ..Default::default() });
            t.spec.as_mut().unwrap().payload = payload.encode_to_vec();
            self
        }

        pub fn build(&self) -> pb::Pipeline {
            self.p.clone()
        }
    }

    /// Two impulses, a ParDo after each, flattened into `f`.
    pub fn two_branches_flattened() -> Builder {
        use crate::urns::{FLATTEN, IMPULSE, PAR_DO};
        let mut b = Builder::new();
        b.leaf("imp1", IMPULSE, &[], &["i1"], false)
            .leaf("imp2", IMPULSE, &[], &["i2"], false)
            .leaf("left", PAR_DO, &["i1"], &["l"], true)
            .leaf("right", PAR_DO, &["i2"], &["r"], true)
            .leaf("flatten", FLATTEN, &["l", "r"], &["f"], true);
        b
    }

    /// Makes the pipeline's SDK environment Go's.
    pub fn in_go(b: &mut Builder) {
        let env = b.p.components.as_mut().unwrap().environments.get_mut("py").unwrap();
        env.capabilities = vec![format!("{}apache/beam_go_sdk:2.73.0", crate::plan::sdk_version::SDK_BASE_PREFIX)];
    }

    /// `left` and `flatten` both read gbk1's output, and `flatten` also
    /// reads what `left` sends through gbk2: one stage cannot hold both.
    pub fn siblings_through_a_shuffle() -> pb::Pipeline {
        use crate::urns::{FLATTEN, GROUP_BY_KEY, IMPULSE, PAR_DO};
        let mut b = Builder::new();
        b.leaf("impulse", IMPULSE, &[], &["a"], false)
            .leaf("pair", PAR_DO, &["a"], &["b"], true)
            .leaf("gbk1", GROUP_BY_KEY, &["b"], &["g1"], false)
            .leaf("left", PAR_DO, &["g1"], &["l"], true)
            .leaf("gbk2", GROUP_BY_KEY, &["l"], &["g2"], false)
            .leaf("flatten", FLATTEN, &["g1", "g2"], &["f"], true);
        b.build()
    }
}

#[cfg(test)]
mod tests {
    use super::test_pipelines::Builder;
    use super::*;
    use crate::urns::*;

    #[test]
    fn leaves_come_in_topological_order_and_identity_leaves_are_skipped() {
        let mut b = Builder::new();
        // Declared out of order on purpose.
        b.leaf("map", PAR_DO, &["b"], &["c"], true)
            .leaf("identity", "beam:transform:pickled_python:v1", &["a"], &["a"], true)
            .leaf("flatmap", PAR_DO, &["a"], &["b"], true)
            .leaf("impulse", IMPULSE, &[], &["a"], false);
        let p = b.build();
        let g = PipelineGraph::new(&p).unwrap();
        assert_eq!(g.leaves, ["impulse", "flatmap", "map"]);
        assert_eq!(g.producer["b"], "flatmap");
        assert_eq!(g.consumers["a"], ["flatmap"]);
    }

    #[test]
    fn composites_are_expanded() {
        let mut b = Builder::new();
        b.leaf("impulse", IMPULSE, &[], &["a"], false).leaf("inner", PAR_DO, &["a"], &["b"], true);
        let mut p = b.build();
        let comps = p.components.as_mut().unwrap();
        comps.transforms.insert(
            "outer".into(),
            pb::PTransform { unique_name: "Outer".into(), subtransforms: vec!["inner".into()], ..Default::default() },
        );
        p.root_transform_ids = vec!["impulse".into(), "outer".into()];
        let g = PipelineGraph::new(&p).unwrap();
        assert_eq!(g.leaves, ["impulse", "inner"]);
    }

    #[test]
    fn a_missing_transform_is_an_error() {
        let mut p = Builder::new().build();
        p.root_transform_ids.push("ghost".into());
        let err = PipelineGraph::new(&p).unwrap_err();
        assert!(err.contains("ghost"));
    }

    #[test]
    fn a_cycle_is_an_error() {
        let mut b = Builder::new();
        b.leaf("x", PAR_DO, &["b"], &["a"], true).leaf("y", PAR_DO, &["a"], &["b"], true);
        let err = PipelineGraph::new(&b.build()).unwrap_err();
        assert!(err.contains("cycle"));
    }
}
