//! Starting the real server on port 0 and talking to it.

#![allow(dead_code)]

use std::{net::SocketAddr, path::PathBuf, sync::Arc};

use megamind_core::{
    codec::{self, Format},
    config::Config,
    proto::megamind_scenario::v1::scenario_client::ScenarioClient,
    rules::metrics::ServerMetrics,
    scenario::{Registry, Scenario, ScenarioModule, module, module::Built},
    server::{self, App},
    store::Stores,
};
use megamind_scenario::scenarios::demo::Demo;
use megamind_tools::client::Client;
use prost_reflect::{DynamicMessage, ReflectMessage};
use tokio::{net::TcpListener, sync::oneshot, task::JoinHandle};
use tonic::transport::Channel;

/// A running server.
pub struct TestApp {
    pub addr: SocketAddr,
    /// The gRPC-only address, when the configuration asked for one.
    pub grpc_addr: Option<SocketAddr>,
    pub http: reqwest::Client,
    shutdown: Option<oneshot::Sender<()>>,
    server: Option<JoinHandle<std::io::Result<()>>>,
}

impl TestApp {
    /// A client of a server this test did not start (another process).
    pub fn external(addr: SocketAddr) -> TestApp {
        let http = megamind_core::http_client::client_builder().no_proxy().build().expect("http client");
        TestApp { addr, grpc_addr: None, http, shutdown: None, server: None }
    }

    pub fn url(&self, path: &str) -> String {
        format!("http://{}{path}", self.addr)
    }

    /// POSTs `body` with `content_type`, asking for `accept` when given.
    pub async fn post(&self, path: &str, content_type: &str, accept: Option<&str>, body: Vec<u8>) -> reqwest::Response {
        let mut request = self.http.post(self.url(path)).header("content-type", content_type).body(body);
        if let Some(accept) = accept {
            request = request.header("accept", accept);
        }
        request.send().await.expect("request reaches the server")
    }

    /// POSTs a binary body and returns status and body bytes.
    pub async fn post_binary(&self, path: &str, body: Vec<u8>) -> (reqwest::StatusCode, bytes::Bytes) {
        let response = self.post(path, "application/protobuf", None, body).await;
        let status = response.status();
        (status, response.bytes().await.expect("body"))
    }

    /// Asks the server to stop without waiting for it.
    pub fn begin_shutdown(&mut self) {
        if let Some(tx) = self.shutdown.take() {
            let _ = tx.send(());
        }
    }

    /// Waits for the server to finish (after [`TestApp::begin_shutdown`]).
    pub async fn join(mut self) -> std::io::Result<()> {
        self.server.take().expect("server task").await.expect("server task does not panic")
    }

    /// GETs `path` and returns status and text.
    pub async fn get(&self, path: &str) -> (reqwest::StatusCode, String) {
        let response = self.http.get(self.url(path)).send().await.expect("request reaches the server");
        (response.status(), response.text().await.expect("text body"))
    }

    /// Waits, up to 10 s, until `/metrics` has the line `line`, and returns
    /// the metrics; past that, fails showing what it has.
    pub async fn metrics_line(&self, line: &str) -> String {
        let seen = async {
            loop {
                let (_, text) = self.get("/metrics").await;
                if text.lines().any(|l| l == line) {
                    return text;
                }
                tokio::task::yield_now().await;
            }
        };
        match tokio::time::timeout(std::time::Duration::from_secs(10), seen).await {
            Ok(text) => text,
            Err(_) => {
                let (_, text) = self.get("/metrics").await;
                let values: Vec<&str> = text.lines().filter(|l| !l.starts_with('#')).collect();
                panic!("no {line:?} in /metrics: {values:#?}");
            }
        }
    }

    /// Asks the server to stop and waits for it to drain and exit.
    pub async fn stop(mut self) -> std::io::Result<()> {
        if let Some(tx) = self.shutdown.take() {
            let _ = tx.send(());
        }
        self.server.take().expect("server task").await.expect("server task does not panic")
    }
}

impl Drop for TestApp {
    fn drop(&mut self) {
        if let Some(tx) = self.shutdown.take() {
            let _ = tx.send(());
        }
    }
}

/// An HTTP/2 channel to the server's gRPC services.
pub async fn grpc_channel(app: &TestApp) -> Channel {
    grpc_channel_to(app.addr).await
}

/// An HTTP/2 channel to gRPC services at `addr`.
pub async fn grpc_channel_to(addr: SocketAddr) -> Channel {
    Channel::from_shared(format!("http://{addr}")).expect("valid URI").connect().await.expect("gRPC connects")
}

/// The generated client of `megamind_scenario.v1.Scenario`.
/// A bare HTTP/2 call of the demo's gRPC `method`, with `headers` besides
/// the protocol's: its answer, and its body to send the message on.
pub async fn bare_grpc_call(
    app: &TestApp,
    method: &str,
    headers: &[(&str, &str)],
) -> (h2::client::ResponseFuture, h2::SendStream<bytes::Bytes>) {
    let tcp = tokio::net::TcpStream::connect(app.addr).await.unwrap();
    let (client, connection) = h2::client::handshake(tcp).await.unwrap();
    tokio::spawn(connection);
    let mut client = client.ready().await.unwrap();
    let mut request = http::Request::post(format!("/megamind_scenario.v1.Scenario/{method}"))
        .header("te", "trailers")
        .header("x-scenario", "demo");
    // `headers` may name a content-type of their own.
    if !headers.iter().any(|(name, _)| name.eq_ignore_ascii_case("content-type")) {
        request = request.header("content-type", "application/grpc");
    }
    for (name, value) in headers {
        request = request.header(*name, *value);
    }
    client.send_request(request.body(()).unwrap(), false).unwrap()
}

pub async fn grpc_client(app: &TestApp) -> ScenarioClient<Channel> {
    ScenarioClient::new(grpc_channel(app).await)
}

/// A gRPC request naming `scenario` in `x-scenario`, or the default one for `None`.
pub fn grpc_request<T>(message: T, scenario: Option<&str>) -> tonic::Request<T> {
    let mut request = tonic::Request::new(message);
    if let Some(name) = scenario {
        request.metadata_mut().insert("x-scenario", name.parse().expect("ASCII scenario name"));
    }
    request
}

/// How a [`Client`] reaches the server.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Transport {
    Http,
    Grpc,
}

/// Both transports, for tests that hold over either.
pub const TRANSPORTS: [Transport; 2] = [Transport::Http, Transport::Grpc];

/// A protocol client of `scenario` on `app` over `transport`.
pub fn scenario_client(app: &TestApp, transport: Transport, scenario: &str) -> Client {
    let address = app.addr.to_string();
    let client = match transport {
        Transport::Http => Client::http(&address),
        Transport::Grpc => Client::grpc(&address),
    };
    client.expect("the test server's address is valid").with_scenario(scenario)
}

/// Starts the server with `config` (its addresses ignored: port 0, and a
/// gRPC-only listener when `grpc_addr` is set) over `registry`.
/// When `config` names no default scenario, the only one serves (as `serve` does).
pub async fn spawn_app(config: Config, registry: Registry) -> TestApp {
    spawn_with_metrics(config, registry, ServerMetrics::new()).await
}

/// Starts the server as `serve` does: the built-in scenarios, their metrics
/// in the server's registry. [`served_config`] is the `config` `serve` runs
/// with when nothing is set.
pub async fn spawn_builtin(config: Config) -> TestApp {
    spawn_modules(config, &megamind_scenario::scenarios::modules()).await
}

/// The configuration `serve` runs with when nothing is set: its embedded
/// defaults, `default_scenario = "demo"` among them.
pub fn served_config() -> Config {
    megamind_scenario::cli::default_config().expect("the embedded defaults are valid")
}

/// Starts the server as `serve` does over `modules`: each built from its
/// table of `config`, its metrics in the server's registry.
pub async fn spawn_modules(config: Config, modules: &[Box<dyn ScenarioModule>]) -> TestApp {
    let metrics = ServerMetrics::new();
    let stores = Stores::of(&config.store, metrics.registry()).expect("the store's settings are right");
    let built =
        module::build_all_with(modules, &config.scenarios, metrics.registry(), stores).expect("the scenarios build");
    spawn_built(config, built, metrics).await
}

async fn spawn_with_metrics(config: Config, registry: Registry, metrics: ServerMetrics) -> TestApp {
    spawn_built(config, Built { registry, ..Built::default() }, metrics).await
}

async fn spawn_built(config: Config, built: Built, metrics: ServerMetrics) -> TestApp {
    let app = Arc::new(App::from_built(&config, built, metrics).expect("valid test configuration"));
    let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind port 0");
    let addr = listener.local_addr().expect("local addr");
    let grpc_only = match config.grpc_addr {
        Some(_) => Some(TcpListener::bind("127.0.0.1:0").await.expect("bind port 0")),
        None => None,
    };
    let grpc_addr = grpc_only.as_ref().map(|l| l.local_addr().expect("local addr"));
    let (tx, rx) = oneshot::channel::<()>();
    let listeners = server::Listeners { main: listener, grpc_only };
    let server = tokio::spawn(server::serve_all(listeners, app, async move {
        let _ = rx.await;
    }));
    let http = megamind_core::http_client::client_builder().no_proxy().build().expect("http client");
    TestApp { addr, grpc_addr, http, shutdown: Some(tx), server: Some(server) }
}

/// Serves `app` on port 0 (the main address only), as `serve` would.
pub async fn serve_app(app: App) -> TestApp {
    let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind port 0");
    let addr = listener.local_addr().expect("local addr");
    let (tx, rx) = oneshot::channel::<()>();
    let server = tokio::spawn(server::serve(listener, Arc::new(app), async move {
        let _ = rx.await;
    }));
    let http = megamind_core::http_client::client_builder().no_proxy().build().expect("http client");
    TestApp { addr, grpc_addr: None, http, shutdown: Some(tx), server: Some(server) }
}

/// A registry of one scenario.
pub fn registry_of(name: &str, scenario: Arc<dyn Scenario>) -> Registry {
    let mut registry = Registry::new();
    registry.register(name, scenario).expect("a valid scenario name");
    registry
}

/// Starts the server with the default configuration hosting `demo`.
pub async fn spawn_demo() -> (TestApp, Arc<Demo>) {
    let demo = Arc::new(Demo::new());
    (spawn_app(Config::default(), registry_of("demo", demo.clone())).await, demo)
}

pub fn fixture_path(name: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/megamind").join(format!("{name}.pb.txt"))
}

/// The text of `tests/fixtures/megamind/{name}.pb.txt`.
pub fn fixture_text(name: &str) -> String {
    std::fs::read_to_string(fixture_path(name)).unwrap_or_else(|e| panic!("fixture {name}: {e}"))
}

/// A fixture parsed into `T`.
pub fn fixture<T: ReflectMessage + Default>(name: &str) -> T {
    DynamicMessage::parse_text_format(T::default().descriptor(), &fixture_text(name))
        .unwrap_or_else(|e| panic!("fixture {name}: {e}"))
        .transcode_to()
        .expect("transcode")
}

/// A fixture encoded in `format`.
pub fn fixture_body<T: ReflectMessage + Default>(name: &str, format: Format) -> Vec<u8> {
    let desc = T::default().descriptor();
    let message = codec::decode_dynamic(desc, fixture_text(name).as_bytes(), Format::Text).expect("fixture parses");
    codec::encode_dynamic(&message, format).expect("fixture encodes").to_vec()
}

/// Decodes an answer of any format into `T`.
pub fn decode_answer<T: prost::Message + ReflectMessage + Default>(body: &[u8], format: Format) -> T {
    codec::decode(body, format).unwrap_or_else(|e| panic!("answer decodes: {e}\n{}", String::from_utf8_lossy(body)))
}

/// Runs the binary's `convert` with `args`, `input` on its standard input.
pub fn convert(args: &[&str], input: &[u8]) -> std::process::Output {
    let args: Vec<&str> = std::iter::once("convert").chain(args.iter().copied()).collect();
    run_binary(&args, input)
}

/// The server binary as a command that sees none of the `MEGAMIND_*`
/// settings of the environment the tests run in (a `MEGAMIND_STORE_URL` set
/// there would point every test at that Redis): each test sets its own.
pub fn binary() -> std::process::Command {
    without_our_variables(std::process::Command::new(env!("CARGO_BIN_EXE_megamind-scenario")))
}

/// The server binary run by `sh` with at most `files` open files (soft and
/// hard limit alike, so that it cannot raise its own).
pub fn binary_with_open_files(files: u32) -> std::process::Command {
    let mut command = std::process::Command::new("sh");
    let script = format!("ulimit -n {files} && exec \"$0\" \"$@\"");
    command.args(["-c", &script, env!("CARGO_BIN_EXE_megamind-scenario")]);
    without_our_variables(command)
}

/// `command` without the `MEGAMIND_` variables of the test's environment.
fn without_our_variables(mut command: std::process::Command) -> std::process::Command {
    for (name, _) in std::env::vars_os() {
        if name.to_string_lossy().starts_with("MEGAMIND_") {
            command.env_remove(name);
        }
    }
    command
}

/// Runs the binary with `args`, `input` on its standard input, to its end.
pub fn run_binary(args: &[&str], input: &[u8]) -> std::process::Output {
    run_command(binary().args(args), input)
}

/// Runs `command` with `input` on its standard input to its end, and what it printed.
pub fn run_command(command: &mut std::process::Command, input: &[u8]) -> std::process::Output {
    use std::{io::Write, process::Stdio};
    let mut child =
        command.stdin(Stdio::piped()).stdout(Stdio::piped()).stderr(Stdio::piped()).spawn().expect("the command runs");
    child.stdin.take().expect("piped stdin").write_all(input).expect("input written");
    child.wait_with_output().expect("the command ends")
}

/// The address the binary serves on, from the first `serving` line of its
/// log `lines` (which go on after it).
pub fn serving_addr_in(lines: impl Iterator<Item = String>) -> String {
    let mut lines = lines;
    let serving = lines.find(|l| l.contains("serving") && l.contains("addr=")).expect("a serving line");
    serving_addr(&serving).expect("addr in the line")
}

/// The address in the binary's `serving` log line (`addr=HOST:PORT`).
pub fn serving_addr(line: &str) -> Option<String> {
    line.split("addr=").nth(1).and_then(|s| s.split_whitespace().next()).map(str::to_owned)
}

/// The server binary in a process of its own, serving on port 0 with its
/// log kept: for tests of what it logs. Killed when dropped.
pub struct LoggedServer {
    child: std::process::Child,
    stdout: std::io::BufReader<std::process::ChildStdout>,
    /// The log up to its `serving` line.
    head: Vec<String>,
    pub app: TestApp,
}

impl LoggedServer {
    /// `serve` on port 0 with no shutdown delay, `args` and the
    /// environment `env` besides.
    pub fn start(args: &[&str], env: &[(&str, &str)]) -> LoggedServer {
        let mut command = binary();
        command.envs(env.iter().copied());
        LoggedServer::start_as(command, args)
    }

    /// As [`LoggedServer::start`], `binary` being the server binary's
    /// command, e.g. [`binary_with_open_files`].
    pub fn start_as(mut binary: std::process::Command, args: &[&str]) -> LoggedServer {
        use std::{io::BufRead, process::Stdio};
        let mut child = binary
            .args(["serve", "--addr", "127.0.0.1:0", "--shutdown-delay-ms", "0"])
            .args(args)
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("the binary starts");
        let mut stdout = std::io::BufReader::new(child.stdout.take().expect("piped stdout"));
        let mut head = Vec::new();
        let addr = serving_addr_in(std::iter::from_fn(|| {
            let mut line = String::new();
            (stdout.read_line(&mut line).ok()? > 0).then(|| {
                head.push(line.trim_end().to_owned());
                line
            })
        }));
        let app = TestApp::external(addr.parse().expect("an address"));
        LoggedServer { child, stdout, head, app }
    }

    /// Its process id.
    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// Stops it with SIGTERM (its log is flushed then) and returns its
    /// whole log, standard error after it.
    pub fn stop(mut self) -> String {
        use std::io::{BufRead, Read};
        let pid = self.child.id().to_string();
        let status = std::process::Command::new("kill").args(["-TERM", &pid]).status().expect("kill runs");
        assert!(status.success());
        let mut log = std::mem::take(&mut self.head);
        log.extend((&mut self.stdout).lines().map_while(Result::ok));
        let mut stderr = String::new();
        if let Some(mut pipe) = self.child.stderr.take() {
            let _ = pipe.read_to_string(&mut stderr);
        }
        let _ = self.child.wait();
        format!("{}\n{stderr}", log.join("\n"))
    }
}

impl Drop for LoggedServer {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// `/demo/run`'s count of calls refused before the scenario as `outcome`.
pub fn refused_series(transport: &str, outcome: &str, count: u32) -> String {
    format!(
        r#"megamind_requests_total{{handler="run",outcome="{outcome}",scenario="demo",transport="{transport}"}} {count}"#
    )
}
