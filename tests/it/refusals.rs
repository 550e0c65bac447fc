//! Refusals as each transport says them: what the authenticator refuses is
//! HTTP 403 and gRPC `PERMISSION_DENIED`, for every handler, before the cache.

use std::sync::Arc;

use megamind_core::{
    app::App,
    codec::Format,
    config::Config,
    dispatch::{Admitted, Authenticator, CallMeta, Check, Refusal},
    proto::n_alice::n_scenarios::{TScenarioApplyRequest, TScenarioRunRequest},
};
use megamind_scenario::scenarios::demo::Demo;
use tonic::Code;

use crate::helpers::{fixture, fixture_body, grpc_client, grpc_request, registry_of, serve_app};

/// Lets in only callers with a service ticket.
#[derive(Debug)]
struct ServiceTicketRequired;

impl Authenticator for ServiceTicketRequired {
    fn authenticate(&self, meta: &CallMeta) -> Check {
        Check::Done(match meta.service_ticket {
            Some(_) => Ok(Admitted::default()),
            None => Err(Refusal::Forbidden("a service ticket is needed".into())),
        })
    }
}

#[tokio::test]
async fn a_caller_the_authenticator_refuses_is_forbidden_on_both_transports() {
    let app = App::new(&Config::default(), registry_of("demo", Arc::new(Demo::new()))).unwrap();
    let app = serve_app(app.with_authenticator(Arc::new(ServiceTicketRequired))).await;
    let body = fixture_body::<TScenarioRunRequest>("poi_run_request", Format::Binary);
    let ticketed = |path: &str| {
        app.http
            .post(app.url(path))
            .header("content-type", "application/protobuf")
            .header("x-ya-service-ticket", "3:serv")
    };
    assert_eq!(ticketed("/demo/run").body(body.clone()).send().await.unwrap().status(), 200);
    // The same RequestId, answered and cached, is still refused without a ticket.
    let answer = app.post("/demo/run", "application/protobuf", None, body).await;
    assert_eq!(answer.status(), 403);
    assert_eq!(answer.text().await.unwrap(), "forbidden: a service ticket is needed\n");
    let commit = fixture_body::<TScenarioApplyRequest>("video_commit_request", Format::Binary);
    assert_eq!(app.post("/demo/commit", "application/protobuf", None, commit).await.status(), 403);

    let mut client = grpc_client(&app).await;
    let status = client.run(grpc_request(fixture::<TScenarioRunRequest>("poi_run_request"), None)).await.unwrap_err();
    assert_eq!(status.code(), Code::PermissionDenied, "{status:?}");
    let mut ticketed = grpc_request(fixture::<TScenarioRunRequest>("poi_run_request"), None);
    ticketed.metadata_mut().insert("x-ya-service-ticket", "3:serv".parse().unwrap());
    client.run(ticketed).await.expect("a ticketed call is answered");
    assert_eq!(app.get("/healthz").await.0, 200, "the server's own routes ask no ticket");
}

/// A server built with its scenarios' routes, then given another
/// authenticator: the routes guarded as scenario calls are (the assistant's
/// skills catalog) ask the new one too.
#[tokio::test]
async fn a_replaced_authenticator_guards_the_scenarios_own_routes_too() {
    let config = Config::default();
    let metrics = megamind_core::rules::metrics::ServerMetrics::new();
    let modules = megamind_scenario::scenarios::modules();
    let built = megamind_core::scenario::module::build_all(&modules, &config.scenarios, metrics.registry())
        .expect("the scenarios build");
    let app = App::from_built(&config, built, metrics).unwrap();
    let app = serve_app(app.with_authenticator(Arc::new(ServiceTicketRequired))).await;
    let skills = |ticket: Option<&'static str>| {
        let mut request = app.http.get(app.url("/llm/skills"));
        if let Some(ticket) = ticket {
            request = request.header("x-ya-service-ticket", ticket);
        }
        async move { request.send().await.unwrap().status().as_u16() }
    };
    assert_eq!(skills(None).await, 403, "no ticket, no catalog");
    assert_ne!(skills(Some("3:serv")).await, 403, "a ticketed caller is let in");
}
