//! Which Beam SDK releases this runner accepts. Every SDK names its release
//! in an environment capability, `beam:version:sdk_base:<container image>`
//! (e.g. `apache/beam_python3.11_sdk:2.77.0`, `go:apache/beam_go_sdk:2.73.0`,
//! `apache/beam_java17_sdk:2.73.0`). A release outside the supported range
//! is refused at Prepare with the range named, so a newer SDK's new URNs and
//! requirements never meet a runner that does not know them.
use crate::pb;

/// Prefix of the capability that names the SDK's release.
pub const SDK_BASE_PREFIX: &str = "beam:version:sdk_base:";

/// Oldest supported release: the Beam model the runner is built against.
pub const OLDEST: Release = Release(2, 73, 0);
/// Newest supported release: the newest the test suites ran on. Beam's model
/// protos of 2.74.0 to 2.77.0 add to those of 2.73.0 without changing them
/// (a named data stream, element value kinds, a timestamp logical type), and
/// nothing the runner does depends on what they add.
pub const NEWEST: Release = Release(2, 77, 0);

/// A Beam release number.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub struct Release(pub u32, pub u32, pub u32);

impl std::fmt::Display for Release {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}.{}.{}", self.0, self.1, self.2)
    }
}

/// The SDK an environment's capability names.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SdkRelease {
    /// `Python`, `Go`, `Java` or the image's name for another SDK.
    pub sdk: String,
    pub release: Release,
    /// The version text as the SDK wrote it (`2.78.0.dev`, `2.74.0rc1`).
    pub version: String,
    /// A development or release-candidate build, not a published release.
    pub prerelease: bool,
}

/// Reads the SDK release from one `beam:version:sdk_base:` capability;
/// `None` when the capability is another one or names no version.
pub fn parse_capability(capability: &str) -> Option<SdkRelease> {
    let image = capability.strip_prefix(SDK_BASE_PREFIX)?;
    let (name, version) = image.rsplit_once(':')?;
    let release = parse_release(version)?;
    let base = name.rsplit('/').next().unwrap_or(name);
    let sdk = if base.starts_with("beam_python") {
        "Python"
    } else if base.starts_with("beam_go") {
        "Go"
    } else if base.starts_with("beam_java") {
        "Java"
    } else {
        base
    };
    // Anything after the three numbers marks a development or candidate build.
    let prerelease = version != release.to_string();
    Some(SdkRelease { sdk: sdk.to_string(), release, version: version.to_string(), prerelease })
}

/// The SDK an environment names (`Python`, `Go`, `Java`, ...), if any.
pub fn sdk_of(env: &pb::Environment) -> Option<String> {
    env.capabilities.iter().find_map(|c| parse_capability(c)).map(|r| r.sdk)
}

/// Whether environment `id` of `components` is `sdk`'s.
pub fn is_sdk(components: &pb::Components, id: &str, sdk: &str) -> bool {
    components.environments.get(id).and_then(sdk_of).is_some_and(|s| s == sdk)
}

/// `2.77.0`, `2.78.0.dev`, `2.74.0rc1` → the release's three numbers.
fn parse_release(version: &str) -> Option<Release> {
    let mut parts = version.splitn(3, '.');
    let major = parts.next()?.parse().ok()?;
    let minor = parts.next()?.parse().ok()?;
    let rest = parts.next()?;
    let digits: String = rest.chars().take_while(char::is_ascii_digit).collect();
    Some(Release(major, minor, digits.parse().ok()?))
}

/// Why an environment's SDK cannot run here, if it cannot. An environment
/// that names no release (a hand-built one) is accepted.
pub fn release_problem(env: &pb::Environment) -> Option<String> {
    let sdk = env.capabilities.iter().find_map(|c| parse_capability(c))?;
    let range = format!("this runner supports Beam SDK releases {OLDEST} to {NEWEST}");
    if sdk.release < OLDEST {
        return Some(format!(
            "the pipeline was built by Beam's {} SDK {}, which is older than {range}; upgrade the SDK (e.g. pip install 'apache-beam>={OLDEST},<={NEWEST}')",
            sdk.sdk, sdk.version
        ));
    }
    if sdk.release > NEWEST || (sdk.release == NEWEST && sdk.prerelease) {
        return Some(format!(
            "the pipeline was built by Beam's {} SDK {}, which is newer than {range}: its model may carry URNs and requirements \
             this runner does not know; use an SDK release in that range (e.g. pip install 'apache-beam>={OLDEST},<={NEWEST}') \
             or a newer beam-kafka",
            sdk.sdk, sdk.version
        ));
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    fn env(capabilities: &[&str]) -> pb::Environment {
        pb::Environment { capabilities: capabilities.iter().map(|c| c.to_string()).collect(), ..Default::default() }
    }

    #[test]
    fn each_sdk_names_its_release_its_own_way() {
        let py = parse_capability("beam:version:sdk_base:apache/beam_python3.11_sdk:2.77.0").unwrap();
        assert_eq!((py.sdk.as_str(), py.release, py.prerelease), ("Python", Release(2, 77, 0), false));
        let go = parse_capability("beam:version:sdk_base:go:apache/beam_go_sdk:2.73.0").unwrap();
        assert_eq!((go.sdk.as_str(), go.release), ("Go", Release(2, 73, 0)));
        let java = parse_capability("beam:version:sdk_base:apache/beam_java17_sdk:2.75.0").unwrap();
        assert_eq!((java.sdk.as_str(), java.release), ("Java", Release(2, 75, 0)));
        let dev = parse_capability("beam:version:sdk_base:apache/beam_python3.12_sdk:2.78.0.dev").unwrap();
        assert_eq!((dev.release, dev.prerelease), (Release(2, 78, 0), true));
        let rc = parse_capability("beam:version:sdk_base:registry:5000/beam_python3.11_sdk:2.74.0rc1").unwrap();
        assert_eq!((rc.release, rc.prerelease), (Release(2, 74, 0), true));
        assert_eq!(parse_capability("beam:coder:bytes:v1"), None);
        assert_eq!(parse_capability("beam:version:sdk_base:apache/beam_python3.11_sdk:latest"), None);
    }

    #[test]
    fn the_supported_range_is_inclusive_at_both_ends() {
        for v in ["2.73.0", "2.75.1", "2.77.0", "2.76.0rc2"] {
            let cap = format!("beam:version:sdk_base:apache/beam_python3.11_sdk:{v}");
            assert_eq!(release_problem(&env(&["beam:coder:bytes:v1", &cap])), None, "{v}");
        }
    }

    #[test]
    fn releases_outside_the_range_are_refused_naming_it() {
        let old = release_problem(&env(&["beam:version:sdk_base:apache/beam_python3.11_sdk:2.72.0"])).unwrap();
        assert!(old.contains("Python SDK 2.72.0, which is older"), "{old}");
        assert!(old.contains(&format!("{OLDEST} to {NEWEST}")), "{old}");
        let new = release_problem(&env(&["beam:version:sdk_base:go:apache/beam_go_sdk:2.78.0"])).unwrap();
        assert!(new.contains("Go SDK 2.78.0, which is newer"), "{new}");
        let dev = release_problem(&env(&[&format!("beam:version:sdk_base:apache/beam_java17_sdk:{NEWEST}.dev")])).unwrap();
        assert!(dev.contains("newer"), "{dev}");
    }

    #[test]
    fn the_range_is_the_one_ci_tests() {
        let scripts = include_str!("../../../scripts/common.sh");
        assert!(scripts.contains(&format!("BEAM_VERSION=\"{OLDEST}\"")), "scripts/common.sh pins another oldest release");
        assert!(scripts.contains(&format!("BEAM_PYTHON_SDK_NEWEST=\"{NEWEST}\"")), "scripts/common.sh tests another newest release");
    }

    #[test]
    fn an_environment_naming_no_release_is_accepted() {
        assert_eq!(release_problem(&env(&[])), None);
        assert_eq!(release_problem(&env(&["beam:version:sdk_base:custom-image"])), None);
    }
}
