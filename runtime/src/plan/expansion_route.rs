//! Which expansion service expands a transform the job server's expansion
//! service is asked for: Beam's Kafka transforms are ours
//! (`runtime::plan::expansion`); a Python transform goes to Python's expansion
//! service, any other to Java's (the job server starts either on demand).
//! And which of their answers' artifacts the job server may hand out.
use beam_kafka_proto::expansion::ExpansionResponse;
use prost::Message;

use crate::pb;
use crate::plan::expansion::EXPANDABLE;

/// An expansion service of the job server's.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Backend {
    /// This runner's own (`runtime::plan::expansion`).
    Kafka,
    /// Beam's Java expansion service: Java classes by name
    /// (`JavaExternalTransform`), schema transforms, Java's registered URNs.
    Java,
    /// Beam's Python expansion service: Python transforms by name
    /// (`PythonExternalTransform`, Go's `python.CallableTransform`).
    Python,
}

impl Backend {
    pub fn language(self) -> &'static str {
        match self {
            Backend::Kafka => "Kafka",
            Backend::Java => "Java",
            Backend::Python => "Python",
        }
    }
}

/// URN prefixes of transforms Python's expansion service expands.
const PYTHON_PREFIXES: &[&str] = &["beam:transforms:python:", "beam:transform:python:", "beam:external:python:"];

/// The expansion service a transform of this URN goes to.
pub fn backend_of(urn: &str) -> Backend {
    if EXPANDABLE.contains(&urn) {
        Backend::Kafka
    } else if PYTHON_PREFIXES.iter().any(|p| urn.starts_with(p)) {
        Backend::Python
    } else {
        Backend::Java
    }
}

const FILE_ARTIFACT: &str = "beam:artifact:type:file:v1";

/// The local files an expansion's environments depend on (Java's service
/// names its own jars): what the client then fetches from the expansion
/// service to stage them, and all the job server serves there.
pub fn file_dependencies(response: &ExpansionResponse) -> Vec<String> {
    let Some(components) = &response.components else { return Vec::new() };
    components
        .environments
        .values()
        .flat_map(|e| &e.dependencies)
        .filter(|a| a.type_urn == FILE_ARTIFACT)
        .filter_map(|a| pb::ArtifactFilePayload::decode(a.type_payload.as_slice()).ok())
        .map(|p| p.path)
        .collect()
}

/// The artifacts of an expansion's environments that only the expansion
/// service that answered can turn into files (`ResolveArtifacts`): Java's
/// names its jars as `deferred` artifacts. Their payloads.
pub fn deferred_dependencies(response: &ExpansionResponse) -> Vec<Vec<u8>> {
    let Some(components) = &response.components else { return Vec::new() };
    components
        .environments
        .values()
        .flat_map(|e| &e.dependencies)
        .filter(|a| a.type_urn != FILE_ARTIFACT)
        .map(|a| a.type_payload.clone())
        .collect()
}

/// The local files among resolved artifacts.
pub fn files_of(artifacts: &[pb::ArtifactInformation]) -> Vec<String> {
    artifacts
        .iter()
        .filter(|a| a.type_urn == FILE_ARTIFACT)
        .filter_map(|a| pb::ArtifactFilePayload::decode(a.type_payload.as_slice()).ok())
        .map(|p| p.path)
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn kafka_transforms_are_ours_python_ones_pythons_and_the_rest_javas() {
        assert_eq!(backend_of(crate::kafka::io::JAVA_READ_WITHOUT_METADATA), Backend::Kafka);
        assert_eq!(backend_of(crate::kafka::io::JAVA_WRITE), Backend::Kafka);
        assert_eq!(backend_of("beam:transforms:python:fully_qualified_named:v1"), Backend::Python);
        assert_eq!(backend_of("beam:expansion:payload:java_class_lookup:v1"), Backend::Java);
        assert_eq!(backend_of("beam:expansion:payload:schematransform:v1"), Backend::Java);
        assert_eq!(backend_of("beam:external:java:sql:v1"), Backend::Java);
        assert_eq!(backend_of("beam:transform:org.apache.beam:kafka_read_something_new:v1"), Backend::Java, "a Kafka URN we do not expand");
    }

    #[test]
    fn only_file_dependencies_of_the_expansion_are_listed() {
        let file = |path: &str| pb::ArtifactInformation {
            type_urn: FILE_ARTIFACT.into(),
            type_payload: pb::ArtifactFilePayload { path: path.into(), sha256: String::new() }.encode_to_vec(),
            ..Default::default()
        };
        let url = pb::ArtifactInformation { type_urn: "beam:artifact:type:url:v1".into(), ..Default::default() };
        let env = pb::Environment { dependencies: vec![file("/jars/a.jar"), url, file("/jars/b.jar")], ..Default::default() };
        let response = ExpansionResponse {
            components: Some(pb::Components { environments: [("java".to_string(), env)].into(), ..Default::default() }),
            ..Default::default()
        };
        assert_eq!(file_dependencies(&response), ["/jars/a.jar", "/jars/b.jar"]);
        assert!(file_dependencies(&ExpansionResponse::default()).is_empty());
        assert_eq!(deferred_dependencies(&response), [Vec::<u8>::new()], "the url artifact: only its service resolves it");
        let env = &response.components.as_ref().unwrap().environments["java"];
        assert_eq!(files_of(&env.dependencies), ["/jars/a.jar", "/jars/b.jar"]);
    }
}
