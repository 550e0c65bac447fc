//! `deploy/prometheus`, `deploy/grafana` and `deploy/RUNBOOK.md`: promtool
//! checks the alerts and runs their unit tests, every alert has a test that
//! fires it and a runbook section, the PrometheusRule holds the rules file's
//! groups, and every metric they name is on a real server's `/metrics`, so
//! that renaming a metric breaks the build rather than the on-call.

use std::{
    collections::BTreeSet,
    path::{Path, PathBuf},
    process::Command,
    sync::Arc,
    time::Duration,
};

use async_trait::async_trait;
use megamind_assistant::config::{AssistantConfig, Warmup};
use megamind_core::{
    codec::Format,
    config::Config,
    proto::n_alice::n_scenarios::{TScenarioApplyRequest, TScenarioRunRequest, TScenarioRunResponse},
    scenario::{CallContext, Scenario, ScenarioModule, ScenarioResult, Setup, SetupError},
};
use serde_json::Value;
use tokio::io::AsyncReadExt;

use crate::{
    assistant_harness::{SIGNING_KEY, client, run, signed},
    helpers::{TestApp, Transport, fixture_body, spawn_builtin, spawn_modules},
    mock_llm::{MockLlm, Reply},
    redis_server::RedisServer,
    tvmtool::{self, Tickets, Tvmtool},
};

/// Words of the metrics' shape that name no metric: the gRPC package.
const NOT_METRICS: &[&str] = &["megamind_scenario"];

/// Set to `1` to fail, not skip, when promtool is not installed.
const REQUIRE_ENV: &str = "MEGAMIND_REQUIRE_INTEROP";

fn deploy() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("deploy")
}

fn read(path: &str) -> String {
    std::fs::read_to_string(deploy().join(path)).unwrap_or_else(|e| panic!("deploy/{path}: {e}"))
}

fn yaml(path: &str) -> Value {
    serde_saphyr::from_str(&read(path)).unwrap_or_else(|e| panic!("deploy/{path} is YAML: {e}"))
}

/// Every alerting rule of `groups`.
fn alerts(groups: &Value) -> Vec<&Value> {
    let groups = groups.as_array().expect("groups");
    groups.iter().flat_map(|g| g["rules"].as_array().expect("rules")).filter(|r| r.get("alert").is_some()).collect()
}

/// `promtool`, or `None` after saying why the test checks nothing.
fn promtool(test: &str) -> Option<&'static str> {
    if Command::new("promtool").arg("--version").output().is_ok_and(|o| o.status.success()) {
        return Some("promtool");
    }
    let reason = "promtool is not installed (Debian: apt-get install prometheus)";
    if std::env::var(REQUIRE_ENV).as_deref() == Ok("1") {
        panic!("{test}: {reason}, and {REQUIRE_ENV}=1");
    }
    eprintln!("SKIPPED {test}: {reason}");
    None
}

#[test]
fn promtool_checks_the_alerts_and_runs_their_unit_tests() {
    let Some(promtool) = promtool("promtool_checks_the_alerts_and_runs_their_unit_tests") else { return };
    for args in [["check", "rules", "alerts.yaml"], ["test", "rules", "alerts_test.yaml"]] {
        let output = Command::new(promtool).args(args).current_dir(deploy().join("prometheus")).output();
        let output = output.expect("promtool runs");
        let text = format!("{}{}", String::from_utf8_lossy(&output.stdout), String::from_utf8_lossy(&output.stderr));
        assert!(output.status.success(), "promtool {}:\n{text}", args.join(" "));
        assert!(text.contains("SUCCESS"), "promtool {}:\n{text}", args.join(" "));
    }
}

#[test]
fn every_alert_fires_in_a_test_stays_quiet_in_another_and_has_a_runbook() {
    let rules = yaml("prometheus/alerts.yaml");
    let tests = yaml("prometheus/alerts_test.yaml");
    let runbook = read("RUNBOOK.md");
    let cases: Vec<&Value> = tests["tests"]
        .as_array()
        .expect("tests")
        .iter()
        .flat_map(|t| t["alert_rule_test"].as_array().expect("alert_rule_test"))
        .collect();
    let alerts = alerts(&rules["groups"]);
    assert!(alerts.len() >= 16, "{} alerts", alerts.len());
    for alert in alerts {
        let name = alert["alert"].as_str().expect("alert name");
        let fires = |case: &Value| case["exp_alerts"].as_array().is_some_and(|a| !a.is_empty());
        let of_alert: Vec<&Value> = cases.iter().copied().filter(|c| c["alertname"] == name).collect();
        assert!(of_alert.iter().any(|c| fires(c)), "{name}: a test where it fires");
        assert!(of_alert.iter().any(|c| !fires(c)), "{name}: a test where it does not fire");

        let annotations = &alert["annotations"];
        for key in ["summary", "description"] {
            assert!(annotations[key].as_str().is_some_and(|s| !s.is_empty()), "{name}: a {key}");
        }
        assert_eq!(annotations["runbook"], format!("deploy/RUNBOOK.md#{}", name.to_lowercase()), "{name}: runbook");
        assert!(runbook.lines().any(|l| l == format!("### {name}")), "{name}: a section `### {name}` in the runbook");
        assert!(["warning", "critical"].contains(&alert["labels"]["severity"].as_str().unwrap_or("")), "{name}");
    }
}

#[test]
fn the_prometheus_rule_holds_the_groups_of_the_rules_file() {
    let rules = yaml("prometheus/alerts.yaml");
    let wrapped = yaml("prometheus/prometheus-rule.yaml");
    assert_eq!(wrapped["kind"], "PrometheusRule");
    assert_eq!(wrapped["apiVersion"], "monitoring.coreos.com/v1");
    assert_eq!(wrapped["metadata"]["namespace"], "megamind-scenario");
    assert_eq!(wrapped["spec"]["groups"], rules["groups"], "prometheus-rule.yaml's spec.groups = alerts.yaml's groups");
}

/// The names of metrics `text` mentions: words `megamind_...` and `process_...`.
fn metric_names(text: &str) -> BTreeSet<String> {
    let word = regex::Regex::new(r"\b(?:megamind|process)_[a-z0-9_]+\b").expect("regex");
    word.find_iter(text).map(|m| m.as_str().to_owned()).filter(|n| !NOT_METRICS.contains(&n.as_str())).collect()
}

/// True when `/metrics` (`rendered`) holds `name`: a family of that name,
/// or a histogram's sample series (`_bucket`, `_count`, `_sum`).
fn served(rendered: &str, name: &str) -> bool {
    rendered.lines().any(|line| {
        line.strip_prefix("# TYPE ").is_some_and(|l| l.split(' ').next() == Some(name))
            || line.strip_prefix(name).is_some_and(|rest| rest.starts_with('{') || rest.starts_with(' '))
    })
}

/// A scenario whose `/run` never answers: the server answers `timeout` for it.
#[derive(Debug)]
struct Stalled;

#[async_trait]
impl Scenario for Stalled {
    async fn run(&self, _: TScenarioRunRequest, _: CallContext) -> ScenarioResult<TScenarioRunResponse> {
        std::future::pending().await
    }
}

impl ScenarioModule for Stalled {
    fn name(&self) -> &'static str {
        "stalled"
    }

    fn build(&self, _: toml::Table, _: &mut Setup<'_>) -> Result<Arc<dyn Scenario>, SetupError> {
        Ok(Arc::new(Stalled))
    }
}

/// The ticket every call of the traffic carries.
const TICKET: &str = "3:serv:megamind";

/// The built-in scenarios and a stalled one, the assistant's model a mock
/// that streams, the idempotency answers in `redis`, callers checked by
/// `tvmtool`.
async fn spawn_observed(redis: &RedisServer, mock: &MockLlm, tvmtool: &Tvmtool) -> TestApp {
    let mut config = Config::default();
    config.store.url = redis.url();
    config.auth.tvmtool_url = tvmtool.url();
    config.auth.tvmtool_token = tvmtool::TOKEN.into();
    config.auth.tvm_dst = tvmtool::DST.into();
    // Short, so that a silent connection is closed (and counted) at once.
    config.header_timeout_ms = 200;
    let mut assistant = AssistantConfig::with_base_url(mock.base_url());
    assistant.backend.warmup = Warmup::Off;
    assistant.llm.signing_key = SIGNING_KEY.into();
    let mut table = toml::Table::try_from(&assistant).expect("a table");
    // Written as a table, a secret shows only that it is set: the key goes in as itself.
    table["llm"].as_table_mut().expect("[assistant.llm]").insert("signing_key".into(), SIGNING_KEY.into());
    config.scenarios.insert("assistant".into(), table);
    let mut modules = megamind_scenario::scenarios::modules();
    modules.push(Box::new(Stalled));
    spawn_modules(config, &modules).await
}

/// A little of every kind of traffic: demo calls, a replay, a commit, a
/// call past its budget, an assistant's turn and its stream, a connection
/// closed for silence.
async fn traffic(app: &TestApp) {
    let post = |path: &'static str, body: Vec<u8>| {
        let request = app.http.post(app.url(path)).header("content-type", "application/protobuf");
        async move { request.header("x-ya-service-ticket", TICKET).body(body).send().await.unwrap().status() }
    };
    let poi = fixture_body::<TScenarioRunRequest>("poi_run_request", Format::Binary);
    assert_eq!(post("/demo/run", poi.clone()).await, 200);
    assert_eq!(post("/demo/run", poi.clone()).await, 200);
    let commit = fixture_body::<TScenarioApplyRequest>("video_commit_request", Format::Binary);
    assert_eq!(post("/demo/commit", commit).await, 200);
    assert_eq!(post("/stalled/run", poi.clone()).await, 200);
    assert_eq!(app.post_binary("/demo/run", poi).await.0, 403, "a call without a ticket");

    let assistant = client(app, Transport::Http).with_service_ticket(TICKET);
    run(&assistant, "ops-1", "который час?").await;
    let (status, _) = app.get(&signed("/llm/stream/ops-1")).await;
    assert_eq!(status, 200, "the stream of the assistant's call");

    let mut silent = tokio::net::TcpStream::connect(app.addr).await.expect("connect");
    let mut rest = Vec::new();
    let closed = tokio::time::timeout(Duration::from_secs(10), silent.read_to_end(&mut rest)).await;
    assert!(closed.is_ok(), "the server closes a connection that sends no request");
}

#[tokio::test]
async fn every_metric_the_alerts_the_dashboard_and_the_runbook_name_is_served() {
    let Some(redis) = RedisServer::start("every_metric_the_alerts_the_dashboard_and_the_runbook_name_is_served") else {
        return;
    };
    let mock = MockLlm::start(Reply::stream(&["Сейчас ", "ровно полдень."], Duration::ZERO)).await;
    let mut tickets = Tickets::default();
    tickets.services.insert(TICKET.into(), 2_000_860);
    let tvmtool = Tvmtool::start(tickets).await;
    let app = spawn_observed(&redis, &mock, &tvmtool).await;
    traffic(&app).await;

    let mut named = BTreeSet::new();
    for file in ["prometheus/alerts.yaml", "grafana/megamind-scenario.json", "RUNBOOK.md"] {
        let names = metric_names(&read(file));
        assert!(names.len() >= 10, "{file} names metrics: {names:?}");
        named.extend(names);
    }
    let dashboard: Value =
        serde_json::from_str(&read("grafana/megamind-scenario.json")).expect("the dashboard is JSON");
    let panels = dashboard["panels"].as_array().expect("panels");
    assert!(panels.iter().filter(|p| p["type"] == "timeseries").all(|p| p["targets"][0]["expr"].is_string()));

    // Some series appear only as their call ends (the model's, the connection's): wait for them.
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    let missing = loop {
        let (status, rendered) = app.get("/metrics").await;
        assert_eq!(status, 200);
        let missing: Vec<&String> = named.iter().filter(|n| !served(&rendered, n)).collect();
        if missing.is_empty() || tokio::time::Instant::now() >= deadline {
            break missing;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    };
    assert!(missing.is_empty(), "named in deploy/ but not on /metrics: {missing:?}");
}

/// The runbook's section `### {alert}`, up to the next heading.
fn runbook_section(runbook: &str, alert: &str) -> String {
    let heading = format!("### {alert}");
    let start = runbook.lines().position(|l| l == heading).unwrap_or_else(|| panic!("{heading} in the runbook"));
    let rest = runbook.lines().skip(start + 1);
    rest.take_while(|l| !l.starts_with('#')).collect::<Vec<_>>().join("\n")
}

/// The values of `label` that a matcher `label!~"a|b|c"` of `expr` leaves out.
fn excluded(expr: &str, label: &str) -> BTreeSet<String> {
    let matcher = regex::Regex::new(&format!(r#"\b{label}!~"([^"]*)""#)).expect("regex");
    let captures = matcher.captures(expr).unwrap_or_else(|| panic!("{label}!~ in {expr}"));
    captures[1].split('|').map(str::to_owned).collect()
}

/// Every `outcome` a fresh server lists in `megamind_requests_total`.
fn served_outcomes(rendered: &str) -> BTreeSet<String> {
    let outcome = regex::Regex::new(r#"^megamind_requests_total\{[^}]*\boutcome="([^"]+)""#).expect("regex");
    rendered.lines().filter_map(|line| outcome.captures(line)).map(|c| c[1].to_owned()).collect()
}

#[tokio::test]
async fn every_outcome_a_call_can_end_with_is_in_the_errors_runbook_or_left_out_of_its_alert() {
    let app = spawn_builtin(Config::default()).await;
    let (status, rendered) = app.get("/metrics").await;
    assert_eq!(status, 200);
    let outcomes = served_outcomes(&rendered);
    // Listed at 0 from the start, so the alert sees every one before it happens.
    assert!(outcomes.len() >= 15 && outcomes.contains("ok") && outcomes.contains("body_too_large"), "{outcomes:?}");

    let rules = yaml("prometheus/alerts.yaml");
    let errors = alerts(&rules["groups"]).into_iter().find(|a| a["alert"] == "MegamindErrors").expect("MegamindErrors");
    let left_out = excluded(errors["expr"].as_str().expect("an expression"), "outcome");
    let section = runbook_section(&read("RUNBOOK.md"), "MegamindErrors");
    let unexplained: Vec<&String> =
        outcomes.iter().filter(|o| !left_out.contains(*o) && !section.contains(&format!("- `{o}`:"))).collect();
    assert!(unexplained.is_empty(), "outcomes that fire MegamindErrors with no line in its runbook: {unexplained:?}");
    let stale: Vec<&String> = left_out.iter().filter(|o| !outcomes.contains(*o)).collect();
    assert!(stale.is_empty(), "MegamindErrors leaves out outcomes no call ends with: {stale:?}");
}

#[test]
fn names_are_read_from_expressions_and_histogram_series_count_as_served() {
    let names = metric_names(r#"rate(megamind_requests_total{outcome="ok"}[5m]) megamind_scenario.v1 process_threads"#);
    assert_eq!(names.into_iter().collect::<Vec<_>>(), ["megamind_requests_total", "process_threads"]);
    let rendered = "# TYPE megamind_x_seconds histogram\nmegamind_x_seconds_bucket{le=\"0.1\"} 1\nmegamind_y 2\n";
    assert!(served(rendered, "megamind_x_seconds") && served(rendered, "megamind_x_seconds_bucket"));
    assert!(served(rendered, "megamind_y") && !served(rendered, "megamind_x") && !served(rendered, "megamind_y_total"));

    let expr = r#"rate(megamind_requests_total{outcome!~"ok|timeout"}[5m])"#;
    assert_eq!(excluded(expr, "outcome").into_iter().collect::<Vec<_>>(), ["ok", "timeout"]);
    let metrics = "megamind_requests_total{scenario=\"demo\",outcome=\"internal\"} 0\nmegamind_x{outcome=\"no\"} 1\n";
    assert_eq!(served_outcomes(metrics).into_iter().collect::<Vec<_>>(), ["internal"]);
    let runbook = "### A\n- `a`: one\n### B\n- `b`: two\n";
    assert_eq!(runbook_section(runbook, "A"), "- `a`: one");
}
