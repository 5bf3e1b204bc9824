//! The expansion services the job server's own forwards to
//! (`runtime::plan::expansion_route` decides which): Beam's Java expansion service
//! (`--java-expansion-dir`, filled by `scripts/java-harness.sh
//! --expansion-service`) and Python's (`--python-expansion-command`), each
//! started as a process of the job server on the first request it gets and
//! kept running (started again if it ended). A client then needs one
//! address for every transform: the job server's expansion port.
use std::collections::{HashMap, HashSet};
use std::path::PathBuf;
use std::sync::Mutex;
use std::time::Duration;

use beam_kafka_proto::expansion::expansion_service_client::ExpansionServiceClient;
use beam_kafka_proto::job_management::artifact_retrieval_service_client::ArtifactRetrievalServiceClient;
use beam_kafka_runtime::plan::expansion_route::Backend;
use tokio::process::{Child, Command};
use tonic::transport::Channel;

/// How long a starting expansion service may take to listen (a JVM loading
/// Beam's jars, a Python interpreter importing Beam: seconds).
const START_TIMEOUT: Duration = Duration::from_secs(120);

/// How to start one expansion service: a program, its arguments up to its
/// port, how the port is given, and the arguments after it.
#[derive(Clone, Debug)]
pub struct Launch {
    program: PathBuf,
    before_port: Vec<String>,
    /// The flag the port follows (Python's `--port`); none: the port is an
    /// argument of its own (Java's, after the main class).
    port_flag: Option<&'static str>,
    after_port: Vec<String>,
    /// What to tell a user whose job needs it when it cannot start.
    what: &'static str,
}

impl Launch {
    /// Beam's Java expansion service from the jars in `dir`, looking Java
    /// classes up by name as `allowlist` allows (a file of Beam's
    /// `--javaClassLookupAllowlistFile`, or `*`: any class).
    pub fn java(dir: &std::path::Path, allowlist: Option<&str>) -> Result<Launch, String> {
        let setup = beam_kafka_fnapi::java_harness::JavaHarnessSetup::from_jar_dir(dir, "beam-sdks-java-expansion-service")?;
        Ok(Launch {
            program: setup.java,
            before_port: vec!["-cp".into(), setup.jars.join(":"), "org.apache.beam.sdk.expansion.service.ExpansionService".into()],
            port_flag: None,
            after_port: allowlist.map(|a| format!("--javaClassLookupAllowlistFile={a}")).into_iter().collect(),
            what: "Java expansion service",
        })
    }

    /// Python's expansion service, as `command` runs it (e.g. `python -m
    /// apache_beam.runners.portability.expansion_service_main
    /// --fully_qualified_name_glob=*`); `--port` is added.
    pub fn python(command: &str) -> Result<Launch, String> {
        let mut words = command.split_whitespace().map(str::to_string);
        let program = words.next().ok_or("--python-expansion-command is empty")?;
        Ok(Launch {
            program: program.into(),
            before_port: words.collect(),
            port_flag: Some("--port"),
            after_port: Vec::new(),
            what: "Python expansion service",
        })
    }

    fn command(&self, port: u16) -> Command {
        let mut c = Command::new(&self.program);
        c.args(&self.before_port).args(self.port_flag).arg(port.to_string()).args(&self.after_port);
        c
    }
}

struct Started {
    client: ExpansionServiceClient<Channel>,
    channel: Channel,
    child: Child,
}

/// The expansion services the job server may start, those it started, the
/// files their answers named (what its artifact retrieval may serve), and
/// which of them answered with artifacts only it can resolve (Java's
/// service names its jars as `deferred` artifacts).
#[derive(Default)]
pub struct ExpansionBackends {
    launches: HashMap<Backend, Launch>,
    started: tokio::sync::Mutex<HashMap<Backend, Started>>,
    files: Mutex<HashSet<String>>,
    deferred: Mutex<HashMap<Vec<u8>, Backend>>,
}

impl ExpansionBackends {
    pub fn new(java: Option<Launch>, python: Option<Launch>) -> ExpansionBackends {
        let launches = [(Backend::Java, java), (Backend::Python, python)].into_iter().filter_map(|(b, l)| Some((b, l?))).collect();
        ExpansionBackends { launches, ..Default::default() }
    }

    pub fn can_start(&self, backend: Backend) -> bool {
        self.launches.contains_key(&backend)
    }

    /// A client of `backend`'s expansion service, started now if it is not running.
    pub async fn client(&self, backend: Backend) -> Result<ExpansionServiceClient<Channel>, String> {
        Ok(self.started(backend).await?.0)
    }

    /// A client of the artifact retrieval `backend`'s expansion service serves beside it.
    pub async fn artifacts(&self, backend: Backend) -> Result<ArtifactRetrievalServiceClient<Channel>, String> {
        let channel = self.started(backend).await?.1;
        Ok(ArtifactRetrievalServiceClient::new(channel).max_decoding_message_size(64 << 20))
    }

    async fn started(&self, backend: Backend) -> Result<(ExpansionServiceClient<Channel>, Channel), String> {
        let launch = self.launches.get(&backend).ok_or_else(|| not_configured(backend))?;
        let mut started = self.started.lock().await;
        if let Some(s) = started.get_mut(&backend) {
            if matches!(s.child.try_wait(), Ok(None)) {
                return Ok((s.client.clone(), s.channel.clone()));
            }
            tracing::warn!("the {} ended; starting it again", launch.what);
            started.remove(&backend);
        }
        let s = start(launch).await?;
        let handles = (s.client.clone(), s.channel.clone());
        started.insert(backend, s);
        Ok(handles)
    }

    /// Remembers the local files an expansion (or a resolution) named as dependencies.
    pub fn allow_files(&self, paths: Vec<String>) {
        self.files.lock().unwrap_or_else(|e| e.into_inner()).extend(paths);
    }

    /// Remembers which service answered with these artifacts to resolve.
    pub fn remember_deferred(&self, backend: Backend, payloads: Vec<Vec<u8>>) {
        let mut deferred = self.deferred.lock().unwrap_or_else(|e| e.into_inner());
        deferred.extend(payloads.into_iter().map(|p| (p, backend)));
    }

    /// The service that can resolve an artifact of this payload, if one named it.
    pub fn resolver_of(&self, payload: &[u8]) -> Option<Backend> {
        self.deferred.lock().unwrap_or_else(|e| e.into_inner()).get(payload).copied()
    }

    pub fn may_serve(&self, path: &str) -> bool {
        self.files.lock().unwrap_or_else(|e| e.into_inner()).contains(path)
    }
}

/// Why a transform of `backend`'s language cannot be expanded here, and what to do.
pub fn not_configured(backend: Backend) -> String {
    match backend {
        Backend::Java => "it is a Java transform: start the job server with --java-expansion-dir (scripts/java-harness.sh \
                          --expansion-service fetches Beam's Java expansion service) to have it expanded here, or give the \
                          transform the address of a Java expansion service you run"
            .into(),
        Backend::Python => "it is a Python transform: start the job server with --python-expansion-command (e.g. \"python -m \
                            apache_beam.runners.portability.expansion_service_main --fully_qualified_name_glob=*\") to have it \
                            expanded here, or give the transform the address of a Python expansion service you run"
            .into(),
        Backend::Kafka => "it is expanded by the job server itself".into(),
    }
}

async fn start(launch: &Launch) -> Result<Started, String> {
    let port = free_port().map_err(|e| format!("cannot find a free port for the {}: {e}", launch.what))?;
    let mut command = launch.command(port);
    command.stdout(std::process::Stdio::piped()).stderr(std::process::Stdio::piped()).kill_on_drop(true);
    let mut child = command.spawn().map_err(|e| format!("cannot start the {} ({}): {e}", launch.what, launch.program.display()))?;
    for out in [
        child.stdout.take().map(|o| Box::new(o) as Box<dyn tokio::io::AsyncRead + Send + Unpin>),
        child.stderr.take().map(|e| Box::new(e) as _),
    ]
    .into_iter()
    .flatten()
    {
        tokio::spawn(forward_lines(out, launch.what));
    }
    tracing::info!("starting the {} on port {port} (pid {:?})", launch.what, child.id());
    let address = format!("http://127.0.0.1:{port}");
    let deadline = tokio::time::Instant::now() + START_TIMEOUT;
    loop {
        if let Ok(Some(status)) = child.try_wait() {
            return Err(format!("the {} ended as it started ({status}); its output is in the job server's log", launch.what));
        }
        if tokio::net::TcpStream::connect(("127.0.0.1", port)).await.is_ok() {
            break;
        }
        if tokio::time::Instant::now() > deadline {
            return Err(format!("the {} did not listen within {START_TIMEOUT:?}; its output is in the job server's log", launch.what));
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let channel = Channel::from_shared(address).expect("a valid address").connect().await.map_err(|e| format!("{}: {e}", launch.what))?;
    let client = ExpansionServiceClient::new(channel.clone()).max_decoding_message_size(256 << 20).max_encoding_message_size(256 << 20);
    Ok(Started { client, channel, child })
}

fn free_port() -> std::io::Result<u16> {
    Ok(std::net::TcpListener::bind(("127.0.0.1", 0))?.local_addr()?.port())
}

async fn forward_lines(from: impl tokio::io::AsyncRead + Unpin, what: &'static str) {
    use tokio::io::AsyncBufReadExt;
    let mut lines = tokio::io::BufReader::new(from).lines();
    while let Ok(Some(line)) = lines.next_line().await {
        tracing::info!("{what}: {line}");
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn args(c: &Command) -> Vec<String> {
        c.as_std().get_args().map(|a| a.to_string_lossy().into_owned()).collect()
    }

    #[test]
    fn each_service_is_told_its_port_its_own_way() {
        let python =
            Launch::python("python3 -m apache_beam.runners.portability.expansion_service_main --fully_qualified_name_glob=*").unwrap();
        assert_eq!(
            args(&python.command(4100)),
            ["-m", "apache_beam.runners.portability.expansion_service_main", "--fully_qualified_name_glob=*", "--port", "4100"]
        );
        assert!(Launch::python("  ").is_err());
        let java = Launch {
            program: "java".into(),
            before_port: vec!["-cp".into(), "a.jar".into(), "Main".into()],
            port_flag: None,
            after_port: vec!["--javaClassLookupAllowlistFile=*".into()],
            what: "Java expansion service",
        };
        assert_eq!(args(&java.command(4200)), ["-cp", "a.jar", "Main", "4200", "--javaClassLookupAllowlistFile=*"]);
    }

    #[tokio::test]
    async fn a_language_without_a_service_is_refused_with_the_flag_to_set() {
        let backends = ExpansionBackends::new(None, None);
        let error = backends.client(Backend::Java).await.unwrap_err();
        assert!(error.contains("--java-expansion-dir"), "{error}");
        assert!(backends.client(Backend::Python).await.unwrap_err().contains("--python-expansion-command"));
        assert!(!backends.may_serve("/etc/passwd"));
        backends.allow_files(vec!["/jars/beam.jar".into()]);
        assert!(backends.may_serve("/jars/beam.jar") && !backends.may_serve("/jars/other.jar"));
    }

    #[tokio::test]
    async fn a_service_that_ends_as_it_starts_is_reported() {
        let launch =
            Launch { program: "false".into(), before_port: vec![], port_flag: None, after_port: vec![], what: "Java expansion service" };
        let backends = ExpansionBackends::new(Some(launch), None);
        let error = backends.client(Backend::Java).await.unwrap_err();
        assert!(error.contains("ended as it started"), "{error}");
    }
}
