//! The router behind the HTTP fast path: the server's own GET routes, the
//! 404 and 405 answers, routes scenarios register, and long-lived answers
//! that end cleanly when the server drains.

use std::{convert::Infallible, sync::Arc, time::Duration};

use axum::routing::{MethodRouter, any, get};
use bytes::Bytes;
use futures_util::stream;
use megamind_core::{
    app::App,
    codec::Format,
    config::Config,
    proto::n_alice::n_scenarios::{TScenarioRunRequest, TScenarioRunResponse},
    rules::metrics::ServerMetrics,
    scenario::{Scenario, ScenarioModule, Setup, SetupError, Shutdown},
};
use megamind_scenario::scenarios::demo::Demo;
use tokio::time::Instant;

use crate::helpers::{TestApp, decode_answer, fixture, fixture_body, registry_of, serve_app, served_config};

/// A scenario module that serves `GET /greeter/hello` beside its handlers.
#[derive(Debug)]
struct Greeter;

impl ScenarioModule for Greeter {
    fn name(&self) -> &'static str {
        "greeter"
    }

    fn build(&self, _table: toml::Table, setup: &mut Setup<'_>) -> Result<Arc<dyn Scenario>, SetupError> {
        setup.route("/greeter/hello", get(|| async { "hello\n" }));
        // Only for the callers the scenario's handlers admit.
        let gate = setup.gate();
        let private = get(move |headers: axum::http::HeaderMap| {
            let gate = gate.clone();
            async move {
                match gate.admit(&headers).await {
                    Ok(_) => (axum::http::StatusCode::OK, "private\n".to_owned()),
                    Err(refusal) => (axum::http::StatusCode::FORBIDDEN, format!("{refusal:?}")),
                }
            }
        });
        setup.route("/greeter/private", private);
        Ok(Arc::new(Demo::new()))
    }
}

/// A module whose stream lane route begins with a parameter: its
/// connections could not be told from any other `GET`.
#[derive(Debug)]
struct EveryGet;

impl ScenarioModule for EveryGet {
    fn name(&self) -> &'static str {
        "everyget"
    }

    fn build(&self, _table: toml::Table, setup: &mut Setup<'_>) -> Result<Arc<dyn Scenario>, SetupError> {
        setup.route_in_lane("/{id}/events", ticks());
        Ok(Arc::new(Demo::new()))
    }
}

/// A lane route that would take every `GET` connection (`/healthz` and
/// `/metrics` served at the lane's lower priority) is refused at start.
#[tokio::test]
async fn a_lane_route_that_would_take_every_get_is_refused_at_start() {
    let config = Config::default();
    let modules: Vec<Box<dyn ScenarioModule>> = vec![Box::new(EveryGet)];
    let metrics = ServerMetrics::new();
    let built = megamind_core::scenario::module::build_all(&modules, &config.scenarios, metrics.registry())
        .expect("the module builds");
    let error = App::from_built(&config, built, metrics).expect_err("refused");
    assert!(error.0.iter().any(|p| p.contains("\"/{id}/events\"") && p.contains("whole literal segment")), "{error:?}");
}

/// Streams a numbered chunk every 5 ms for as long as the server serves.
fn ticks() -> MethodRouter {
    get(|shutdown: Shutdown| async move {
        let ticks = stream::unfold(0u64, |n| async move {
            tokio::time::sleep(Duration::from_millis(5)).await;
            Some((Ok::<_, Infallible>(Bytes::from(format!("tick {n}\n"))), n + 1))
        });
        shutdown.body(ticks)
    })
}

/// The demo scenario with the greeter's routes, a ticking stream and a
/// catch-all on `/demo/apply` that the fast path must shadow for `POST`;
/// the greeter's gate bound to the server's caller checks when `bound`.
async fn spawn_gated_with_routes(config: Config, bound: bool) -> TestApp {
    let metrics = ServerMetrics::new();
    let mut setup = Setup::new(metrics.registry());
    let greeter = Greeter.build(toml::Table::new(), &mut setup).expect("greeter builds");
    let gate = setup.gate();
    let mut registry = registry_of("demo", Arc::new(Demo::new()));
    registry.register(Greeter.name(), greeter).unwrap();
    let mut routes = setup.into_routes();
    routes.push(("/test/ticks".into(), ticks()));
    routes.push(("/demo/apply".into(), any(|| async { "router\n" })));
    let app = App::with_routes(&config, registry, metrics, routes).expect("valid routes");
    if bound {
        gate.bind(app.dispatcher.authenticator().clone());
    }
    serve_app(app).await
}

async fn spawn_with_routes(config: Config) -> TestApp {
    spawn_gated_with_routes(config, true).await
}

/// A server built over `Setup::into_routes` whose gate nobody bound lets
/// nobody into the routes that ask it, rather than everyone.
#[tokio::test]
async fn a_scenario_route_behind_a_gate_never_bound_lets_nobody_in() {
    let app = spawn_gated_with_routes(served_config(), false).await;
    let (status, why) = app.get("/greeter/private").await;
    assert_eq!(status, reqwest::StatusCode::FORBIDDEN, "{why}");
    assert!(why.contains("never bound"), "{why}");
    let bound = spawn_with_routes(served_config()).await;
    assert_eq!(bound.get("/greeter/private").await, (reqwest::StatusCode::OK, "private\n".to_owned()));
}

#[tokio::test]
async fn the_servers_own_routes_and_a_scenarios_route_are_served() {
    let app = spawn_with_routes(served_config()).await;
    assert_eq!(app.get("/healthz").await, (reqwest::StatusCode::OK, "ok\n".to_owned()));
    assert_eq!(app.get("/readyz").await, (reqwest::StatusCode::OK, "ready\n".to_owned()));
    let (status, metrics) = app.get("/metrics").await;
    assert_eq!(status, 200);
    assert!(metrics.contains("# TYPE"), "{metrics}");
    assert_eq!(app.get("/greeter/hello").await, (reqwest::StatusCode::OK, "hello\n".to_owned()));
    let post = app.http.post(app.url("/greeter/hello")).send().await.unwrap();
    assert_eq!(post.status(), 405, "the route's own methods only");
}

#[tokio::test]
async fn handler_paths_keep_their_405_and_unknown_paths_their_404() {
    let app = spawn_with_routes(served_config()).await;
    let answer = app.http.get(app.url("/demo/run")).send().await.unwrap();
    assert_eq!(answer.status(), 405);
    assert_eq!(answer.headers()["allow"], "POST");
    assert_eq!(answer.text().await.unwrap(), "scenario handlers take POST\n");
    let (status, text) = app.get("/nope/run").await;
    assert_eq!(status, 404);
    assert!(text.starts_with("no such scenario handler: /nope/run\nroutes: POST /{scenario}/"), "{text}");
    assert!(text.contains("(scenarios: demo, greeter)"), "{text}");
}

#[tokio::test]
async fn a_post_naming_a_scenario_handler_takes_the_fast_path() {
    let app = spawn_with_routes(served_config()).await;
    let body = fixture_body::<TScenarioRunRequest>("poi_run_request", Format::Binary);
    for path in ["/demo/run", "/greeter/run", "/run"] {
        let (status, answer) = app.post_binary(path, body.clone()).await;
        assert_eq!(status, 200, "{path}");
        let answer: TScenarioRunResponse = decode_answer(&answer, Format::Binary);
        assert!(answer == fixture::<TScenarioRunResponse>("poi_run_response"), "{path}");
    }
    // A route registered on a handler path serves the other methods only.
    assert_eq!(app.get("/demo/apply").await, (reqwest::StatusCode::OK, "router\n".to_owned()));
    let (status, answer) = app.post_binary("/demo/apply", Vec::new()).await;
    assert_eq!((status, answer.starts_with(b"router")), (reqwest::StatusCode::OK, false));
}

#[tokio::test]
async fn a_long_lived_answer_ends_cleanly_when_the_server_drains() {
    let config = Config { shutdown_delay_ms: 0, drain_timeout_ms: 30_000, ..served_config() };
    let mut app = spawn_with_routes(config).await;
    let h2 = megamind_core::http_client::client_builder().no_proxy().http2_prior_knowledge().build().unwrap();
    let mut streams = Vec::new();
    for client in [&app.http, &h2] {
        let mut response = client.get(app.url("/test/ticks")).send().await.unwrap();
        assert_eq!(response.status(), 200);
        for _ in 0..3 {
            assert!(response.chunk().await.unwrap().is_some(), "ticks while serving");
        }
        streams.push(response);
    }
    let asked = Instant::now();
    app.begin_shutdown();
    for mut response in streams {
        let version = response.version();
        // A bound, not a wait: without the drain signal the stream never ends.
        let end = tokio::time::timeout(Duration::from_secs(10), async {
            loop {
                match response.chunk().await {
                    Ok(Some(_)) => continue,
                    ended => break ended,
                }
            }
        });
        let ended = end.await.unwrap_or_else(|_| panic!("{version:?}: the stream ends on drain"));
        assert!(ended.is_ok(), "{version:?}: a complete body, not a cut: {ended:?}");
    }
    app.join().await.unwrap();
    assert!(asked.elapsed() < Duration::from_secs(10), "serve returned well before the drain timeout");
}
