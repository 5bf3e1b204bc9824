//! A submitted pipeline through everything Prepare and Run do with it
//! before any I/O: the shape check, combiner lifting, splittable expansion,
//! validation, planning and lowering into bundle descriptors.
#![no_main]
use beam_kafka_runtime::plan::graph::PipelineGraph;
use beam_kafka_runtime::plan::topology::TopologyPlan;
use beam_kafka_runtime::{pb, plan::lift, plan::lower, plan::sdf, plan::structure, plan::validate};
use libfuzzer_sys::fuzz_target;
use prost::Message;

fuzz_target!(|data: &[u8]| {
    let Ok(mut p) = pb::Pipeline::decode(data) else { return };
    if structure::check(&p).is_err() {
        return;
    }
    lift::lift_combiners(&mut p);
    sdf::expand_splittable(&mut p);
    if !validate::validate(&p).is_empty() {
        return;
    }
    let graph = PipelineGraph::new(&p).expect("validation accepted the pipeline, so its graph must build");
    for parallelism in [1, 3] {
        if let Ok(plan) = TopologyPlan::plan(&graph, "app", parallelism) {
            let _ = plan.describe(&graph);
            let _ = lower::lower(&graph, &plan, "job", "localhost:1");
        }
    }
});
