//! URNs the runner recognises (Beam's standard names, see beam_runner_api.proto).

pub const IMPULSE: &str = "beam:transform:impulse:v1";
pub const PAR_DO: &str = "beam:transform:pardo:v1";
pub const FLATTEN: &str = "beam:transform:flatten:v1";
pub const GROUP_BY_KEY: &str = "beam:transform:group_by_key:v1";
pub const WINDOW_INTO: &str = "beam:transform:window_into:v1";
pub const ASSIGN_WINDOWS: &str = "beam:transform:assign_windows:v1";
pub const TEST_STREAM: &str = "beam:transform:teststream:v1";
pub const READ: &str = "beam:transform:read:v1";
pub const COMBINE_PER_KEY_PRECOMBINE: &str = "beam:transform:combine_per_key_precombine:v1";
pub const COMBINE_PER_KEY_MERGE_ACCUMULATORS: &str = "beam:transform:combine_per_key_merge_accumulators:v1";
pub const COMBINE_PER_KEY_EXTRACT_OUTPUTS: &str = "beam:transform:combine_per_key_extract_outputs:v1";
pub const COMBINE_GROUPED_VALUES: &str = "beam:transform:combine_grouped_values:v1";
pub const MAP_WINDOWS: &str = "beam:transform:map_windows:v1";
pub const MERGE_WINDOWS: &str = "beam:transform:merge_windows:v1";
pub const TO_STRING: &str = "beam:transform:to_string:v1";

/// The steps a splittable ParDo runs as (`sdf`); each carries its ParDoPayload.
pub const SDF_PAIR_WITH_RESTRICTION: &str = "beam:transform:sdf_pair_with_restriction:v1";
pub const SDF_SPLIT_AND_SIZE: &str = "beam:transform:sdf_split_and_size_restrictions:v1";
pub const SDF_PROCESS: &str = "beam:transform:sdf_process_sized_element_and_restrictions:v1";
pub const SDF_TRUNCATE: &str = "beam:transform:sdf_truncate_sized_restrictions:v1";

/// Whether a transform of this URN carries a ParDoPayload (side inputs,
/// timers, finalization).
pub fn has_pardo_payload(urn: &str) -> bool {
    matches!(urn, PAR_DO | SDF_PAIR_WITH_RESTRICTION | SDF_SPLIT_AND_SIZE | SDF_PROCESS | SDF_TRUNCATE)
}

/// Our runner-executed Kafka transforms (what our expansion service returns
/// for Beam's ReadFromKafka / WriteToKafka); payloads in kafka_io.proto.
pub const KAFKA_READ: &str = "beam:transform:beam_kafka:kafka_read:v1";
pub const KAFKA_WRITE: &str = "beam:transform:beam_kafka:kafka_write:v1";

/// Runner-synthesised endpoints of a process bundle descriptor.
pub const DATA_INPUT: &str = "beam:runner:source:v1";
pub const DATA_OUTPUT: &str = "beam:runner:sink:v1";

pub const CODER_BYTES: &str = "beam:coder:bytes:v1";
pub const CODER_WINDOWED_VALUE: &str = "beam:coder:windowed_value:v1";
pub const CODER_GLOBAL_WINDOW: &str = "beam:coder:global_window:v1";
pub const CODER_LENGTH_PREFIX: &str = "beam:coder:length_prefix:v1";

pub const ENV_EXTERNAL: &str = "beam:env:external:v1";
pub const ENV_PROCESS: &str = "beam:env:process:v1";
pub const ENV_DOCKER: &str = "beam:env:docker:v1";
pub const ENV_EMBEDDED_PYTHON: &str = "beam:env:embedded_python:v1";

pub const REQUIREMENT_STATEFUL: &str = "beam:requirement:pardo:stateful:v1";
pub const REQUIREMENT_SPLITTABLE: &str = "beam:requirement:pardo:splittable_dofn:v1";
pub const REQUIREMENT_FINALIZATION: &str = "beam:requirement:pardo:finalization:v1";
pub const REQUIREMENT_ON_WINDOW_EXPIRATION: &str = "beam:requirement:pardo:on_window_expiration:v1";
pub const REQUIREMENT_TIME_SORTED: &str = "beam:requirement:pardo:time_sorted_input:v1";
pub const REQUIREMENT_STABLE_INPUT: &str = "beam:requirement:pardo:stable_input:v1";

/// Transforms the SDK harness executes inside a fused stage.
pub const SDK_EXECUTED: &[&str] = &[
    PAR_DO,
    FLATTEN,
    WINDOW_INTO,
    ASSIGN_WINDOWS,
    COMBINE_PER_KEY_PRECOMBINE,
    COMBINE_PER_KEY_MERGE_ACCUMULATORS,
    COMBINE_PER_KEY_EXTRACT_OUTPUTS,
    COMBINE_GROUPED_VALUES,
    MAP_WINDOWS,
    MERGE_WINDOWS,
    TO_STRING,
    SDF_PAIR_WITH_RESTRICTION,
    SDF_SPLIT_AND_SIZE,
    SDF_PROCESS,
    SDF_TRUNCATE,
];

/// Human names for URNs in error messages.
pub fn friendly_name(urn: &str) -> &str {
    match urn {
        GROUP_BY_KEY => "GroupByKey",
        TEST_STREAM => "TestStream",
        IMPULSE => "Impulse",
        FLATTEN => "Flatten",
        READ => "Read",
        KAFKA_READ => "ReadFromKafka",
        KAFKA_WRITE => "WriteToKafka",
        _ => urn,
    }
}

/// Session windows: merging windows the runner merges itself.
pub const SESSIONS: &str = "beam:window_fn:session_windows:v1";
