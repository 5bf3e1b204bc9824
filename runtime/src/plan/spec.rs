//! What a job runs, as plain data: per sub-topology its input topics (and
//! the GroupByKey or ReadFromKafka in front of the stage), side inputs,
//! outputs, WriteToKafka sinks and timer families, with the coders the
//! runner reads each with. Built once at job start from the plan
//! (`crate::plan::lower`), read by the actors.
use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;

use crate::codec::coder::Coder;
use crate::kafka::sink::SinkCodec;
use crate::kafka::source::ElementEncoder;
use crate::state::side_input::{Access, SideWindowing};
use crate::state::timers::{TimeDomain, TimerCodec};
use crate::window::windowing::WindowingSpec;
use beam_kafka_proto::envelope::KafkaReadSpec;

/// One input topic of a sub-topology, ready to run.
pub struct InputSpec {
    pub topic: String,
    pub partitions: u32,
    /// Who reports watermarks on the topic.
    pub upstream: String,
    /// The stage's data source this input feeds.
    pub source_transform: String,
    /// The GroupByKey in front of the stage: its windowing and input coder.
    pub gbk: Option<(WindowingSpec, Coder)>,
    /// Set when the topic is a user topic read by ReadFromKafka.
    pub source: Option<Arc<SourceInput>>,
    /// How the windows of the elements it feeds the stage are encoded.
    pub window_coder: Coder,
    /// The allowed lateness of that windowing.
    pub allowed_lateness: i64,
    /// The descriptors through which the SDK merges windows or tells their
    /// ends for the GroupByKey, if its WindowFn needs that.
    pub window_fns: Option<WindowFnDescriptors>,
    /// The stateful ParDo with an OnWindowExpiration callback that reads
    /// this input, and the key coder of its elements: each key and window
    /// it sees arms the callback's timer.
    pub expiry: Option<(String, Coder)>,
    /// The stateful ParDo reading this input requires it time-sorted: its
    /// elements are held until the watermark passed them (see `held`).
    pub time_sorted: bool,
}

/// Helper descriptors of a custom WindowFn (see `window_fns`), by id.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct WindowFnDescriptors {
    /// The SDK environment whose harness runs them (the WindowFn's).
    pub environment_id: String,
    pub merge: Option<String>,
    pub end: Option<String>,
}

/// A timer family of a stateful ParDo: its time domain and how its timers
/// are encoded.
#[derive(Clone, Debug)]
pub struct TimerFamilySpec {
    pub transform: String,
    pub family: String,
    pub domain: TimeDomain,
    pub codec: TimerCodec,
    /// The family of the ParDo's OnWindowExpiration callback, which the
    /// runner sets (`Timers::arm_expiry`).
    pub on_window_expiration: bool,
}

/// A stage output written to a user topic by WriteToKafka.
pub struct KafkaSinkSpec {
    pub sink_transform: String,
    pub name: String,
    pub codec: SinkCodec,
}

/// A sub-topology, its descriptor registered with the worker.
pub struct SubTopologySpec {
    pub id: u32,
    pub partitions: u32,
    pub descriptor_id: String,
    /// The SDK environment whose harnesses run its stage.
    pub environment_id: String,
    /// The descriptor its bundles use once the job drains (splittable DoFn
    /// restrictions truncated first).
    pub drain_descriptor_id: Option<String>,
    pub display_name: String,
    /// Every data sink of the descriptor.
    pub sinks: Vec<String>,
    pub inputs: Vec<InputSpec>,
    pub side_inputs: Vec<SideInputSpec>,
    /// Its stage has a stateful ParDo (user state served to its bundles).
    pub stateful: bool,
    /// The timer families of its stateful ParDos.
    pub timers: Vec<TimerFamilySpec>,
    /// The value coders of its ParDos' map and multimap states.
    pub multimap_values: HashMap<crate::state::multimap_state::StateName, Coder>,
    pub outputs: Vec<OutputSink>,
    pub kafka_sinks: Vec<KafkaSinkSpec>,
    /// Splittable DoFn process steps of its stage → the data source their
    /// residuals (work a bundle left of a restriction) go back to.
    pub residual_sources: BTreeMap<String, String>,
}

/// A side input of a sub-topology's stage, ready to run.
#[derive(Clone, Debug)]
pub struct SideInputSpec {
    pub topic: String,
    /// Who reports watermarks on the topic (the producing sub-topology).
    pub upstream: String,
    /// The ParDo reading it and its local name for it (as in state keys).
    pub transform: String,
    pub local_name: String,
    pub access: Access,
    pub windowing: SideWindowing,
    pub element_coder: Coder,
    pub window_coder: Coder,
    /// The SDK maps main windows onto side windows for the runner (the
    /// side input's WindowFn, or the main input's windows, are custom).
    pub mapping: Option<SideMapping>,
}

/// Helper descriptors that tell which side window a main window needs, and
/// when that side window ends (see `window_fns`).
#[derive(Clone, Debug, PartialEq)]
pub struct SideMapping {
    /// Maps a main window onto its side window.
    pub map: String,
    /// Tells a side window's end, if the runner cannot read side windows.
    pub end: Option<String>,
    /// The side input's wire window coder.
    pub side_window_coder: Coder,
}

/// One ReadFromKafka transform of the pipeline.
pub struct SourceInput {
    /// The transform's id and its user-visible name.
    pub transform: String,
    pub name: String,
    /// Its spec, and how its records become the stage's elements.
    pub encoder: ElementEncoder,
}

impl SourceInput {
    pub fn spec(&self) -> &KafkaReadSpec {
        self.encoder.spec()
    }
}

/// One stage output and the topic it goes to.
#[derive(Clone, Debug)]
pub struct OutputSink {
    pub sink_transform: String,
    pub topic: String,
    pub partitions: u32,
    pub window_coder: Coder,
    pub element_coder: Coder,
    /// Spread evenly over the partitions instead of by key: the restrictions
    /// a splittable DoFn's input was split into, which no reader needs by
    /// key, and which should reach as many tasks as there are.
    pub spread: bool,
    /// Keyless elements all go to the first partition, in the order the
    /// stage wrote them: a TestStream's, whose order within a step Beam's
    /// tests count on.
    pub in_order: bool,
}

/// The TestStreams to replay: each with the topic of each of its outputs,
/// and the tasks whose passing an epoch on means its step was processed.
#[derive(Clone, Debug)]
pub struct TestStreamRun {
    pub streams: Vec<(crate::test_stream::TestStreamSpec, Vec<String>)>,
    pub awaited: Vec<crate::plan::topology::TaskId>,
}
