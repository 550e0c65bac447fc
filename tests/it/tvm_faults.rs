//! TVM when things go wrong: a tvmtool that refuses this server's local
//! token or its `dst` (not ready, every call refused, one warning), a
//! flood of made-up tickets (the same one repeated costs one check, many
//! different ones no more checks at once than the cap), tvmtool down over
//! gRPC, and a check cut short by the caller's own deadline (counted).

use std::{sync::Arc, time::Duration};

use tonic::Code;

use crate::{
    helpers::{LoggedServer, TestApp, grpc_client, spawn_builtin},
    tvm::{MEGAMIND, MEGAMIND_AGAIN, config, grpc_run, post_run, tickets},
    tvmtool::{DST, TOKEN, Tvmtool},
};

const UNCHECKED: &str = "forbidden: the service ticket cannot be checked now (tvmtool unavailable)\n";

/// The value of the metric line starting with `series` (labels included).
async fn metric(app: &TestApp, series: &str) -> f64 {
    let metrics = app.get("/metrics").await.1;
    let value = metrics.lines().find_map(|line| line.strip_prefix(series)?.strip_prefix(' '));
    value.and_then(|v| v.trim().parse().ok()).unwrap_or_else(|| panic!("no {series} in {metrics}"))
}

/// Calls and probes against a server whose tvmtool refuses its own
/// requests (`token`, `dst`): every call refused, never ready, the gauge
/// at 0 throughout, and one warning naming the fault in `told`.
async fn refused_configuration(token: &str, dst: &str, told: &str) {
    let tvmtool = Tvmtool::start(tickets()).await;
    // A first check slower than 50 ms on a busy machine would be one more
    // warning (an outage) and one more change.
    let args = ["--tvmtool-url", &tvmtool.url(), "--tvm-dst", dst, "--set", "auth.check_timeout_ms=250"];
    let server = LoggedServer::start(&args, &[("TVMTOOL_LOCAL_AUTHTOKEN", token)]);
    let app = &server.app;
    for _ in 0..10 {
        assert_eq!(post_run(app, Some(MEGAMIND), None).await, (403, UNCHECKED.to_owned()));
        let (status, ready) = app.get("/readyz").await;
        assert_eq!(status, 503, "{ready}");
        assert!(ready.starts_with("not ready: tickets cannot be checked: tvmtool") && ready.contains(told), "{ready}");
        assert_eq!(metric(app, "megamind_auth_tvmtool_up").await, 0.0, "steadily down");
    }
    let log = server.stop();
    let warnings: Vec<&str> = log.lines().filter(|line| line.contains("WARN")).collect();
    assert_eq!(warnings.len(), 1, "one warning for the fault, not one per call or probe:\n{log}");
    assert!(warnings[0].contains(told), "{}", warnings[0]);
    assert!(!log.contains(token) && !log.contains(MEGAMIND), "a secret in the log:\n{log}");
}

#[tokio::test]
async fn a_tvmtool_that_refuses_the_local_token_leaves_the_server_not_ready_with_one_warning() {
    refused_configuration("not-the-local-token", DST, "refuses this server's local token").await;
}

#[tokio::test]
async fn a_tvmtool_that_does_not_know_the_dst_leaves_the_server_not_ready_with_one_warning() {
    refused_configuration(TOKEN, "some-other-service", "does not know this service's dst").await;
}

#[tokio::test]
async fn the_same_refused_ticket_repeated_costs_tvmtool_one_check() {
    let tvmtool = Tvmtool::start(tickets()).await;
    let app = Arc::new(spawn_builtin(config(&tvmtool)).await);
    let forged = "3:serv:forged";
    let refused = (403, "forbidden: the service ticket was refused: Malformed ticket\n".to_owned());
    let started = std::time::Instant::now();
    let first: Vec<_> = (0..50)
        .map(|_| {
            let app = app.clone();
            tokio::spawn(async move { post_run(&app, Some(forged), None).await })
        })
        .collect();
    for call in first {
        assert_eq!(call.await.unwrap(), refused);
    }
    for _ in 0..150 {
        assert_eq!(post_run(&app, Some(forged), None).await, refused);
    }
    let checks = tvmtool.service_checks_of(forged);
    // One check per 5 s that a refusal is kept: one, unless this machine
    // took that long for the 200 calls.
    let ttls_elapsed = 1 + started.elapsed().as_secs() / 5;
    assert!((1..=ttls_elapsed).contains(&(checks as u64)), "{checks} checks for 200 calls with one refused ticket");
    assert_eq!(metric(&app, "megamind_auth_total{result=\"invalid\"}").await, 200.0, "every refusal counted");
    assert_eq!(post_run(&app, Some(MEGAMIND), None).await.0, 200, "a good ticket still gets in");
}

#[tokio::test]
async fn many_tickets_never_seen_put_no_more_checks_at_once_to_tvmtool_than_the_cap() {
    const CAP: usize = 4;
    const CALLS: usize = 24;
    let tvmtool = Tvmtool::start(tickets()).await;
    let mut config = config(&tvmtool);
    config.auth.max_checks_in_flight = CAP;
    config.auth.check_timeout_ms = 300;
    config.budget.run_ms = 1_000;
    let app = Arc::new(spawn_builtin(config).await);
    assert_eq!(app.get("/readyz").await.0, 200);
    tvmtool.hang(true);
    let calls: Vec<_> = (0..CALLS)
        .map(|n| {
            let app = app.clone();
            tokio::spawn(async move { post_run(&app, Some(&format!("3:serv:made-up-{n}")), None).await.0 })
        })
        .collect();
    for call in calls {
        assert_eq!(call.await.unwrap(), 403);
    }
    let most = tvmtool.most_checks_at_once();
    assert!((1..=CAP).contains(&most), "{most} checks at once at tvmtool, the cap is {CAP}");
    let busy = metric(&app, "megamind_auth_total{result=\"busy\"}").await;
    let unavailable = metric(&app, "megamind_auth_total{result=\"unavailable\"}").await;
    assert!(busy >= 1.0, "the calls that found no turn are counted as busy");
    assert_eq!(busy + unavailable, CALLS as f64, "every call refused and counted once");
}

#[tokio::test]
async fn a_grpc_call_whose_ticket_cannot_be_checked_is_refused() {
    let mut tvmtool = Tvmtool::start(tickets()).await;
    let app = spawn_builtin(config(&tvmtool)).await;
    let mut client = grpc_client(&app).await;
    client.run(grpc_run(Some(MEGAMIND))).await.expect("checked and let in");
    tvmtool.kill();
    client.run(grpc_run(Some(MEGAMIND))).await.expect("a kept verdict serves");
    let status = client.run(grpc_run(Some(MEGAMIND_AGAIN))).await.expect_err("refused");
    assert_eq!(status.code(), Code::PermissionDenied, "{status:?}");
    assert_eq!(format!("{}\n", status.message()), UNCHECKED);
    assert_eq!(metric(&app, "megamind_auth_total{result=\"unavailable\"}").await, 1.0);
}

/// `/readyz` is public: a flood of it, with tvmtool hanging, costs
/// tvmtool one probe at a time, whose answer every probe waiting gets,
/// inside the check's timeout.
#[tokio::test]
async fn a_flood_of_readiness_probes_asks_tvmtool_one_probe_at_a_time() {
    const PROBES: usize = 40;
    let tvmtool = Tvmtool::start(tickets()).await;
    let mut config = config(&tvmtool);
    config.auth.check_timeout_ms = 300;
    let app = Arc::new(spawn_builtin(config).await);
    assert_eq!(app.get("/readyz").await.0, 200);
    tvmtool.hang(true);
    let before = tvmtool.pings();
    let probes: Vec<_> = (0..PROBES)
        .map(|_| {
            let app = app.clone();
            tokio::spawn(async move {
                let started = std::time::Instant::now();
                (app.get("/readyz").await, started.elapsed())
            })
        })
        .collect();
    for probe in probes {
        let ((status, why), took) = probe.await.unwrap();
        assert_eq!(status, 503, "{why}");
        assert!(why.contains("tvmtool"), "{why}");
        assert!(took < Duration::from_secs(2), "answered after {took:?}");
    }
    assert_eq!(tvmtool.most_pings_at_once(), 1, "one probe at a time");
    let pings = tvmtool.pings() - before;
    assert!(pings < PROBES / 2, "{pings} pings for {PROBES} probes at once");
    tvmtool.hang(false);
    assert_eq!(app.get("/readyz").await.0, 200, "asked anew once the last probe ended");
}

/// A `grpc` probe sees what `/readyz` sees: with tvmtool gone the health
/// check says `NOT_SERVING`, and `SERVING` again once tvmtool is back.
#[tokio::test]
async fn the_grpc_health_check_follows_readiness() {
    use tonic_health::pb::{HealthCheckRequest, health_check_response::ServingStatus, health_client::HealthClient};
    let mut tvmtool = Tvmtool::start(tickets()).await;
    let app = spawn_builtin(config(&tvmtool)).await;
    let mut health = HealthClient::new(crate::helpers::grpc_channel(&app).await);
    let mut check = async |service: &str| {
        let request = HealthCheckRequest { service: service.to_owned() };
        health.check(request).await.expect("a health check answers").into_inner().status
    };
    assert_eq!(check("").await, ServingStatus::Serving as i32);
    tvmtool.kill();
    assert_eq!(app.get("/readyz").await.0, 503);
    for service in ["", "megamind_scenario.v1.Scenario"] {
        assert_eq!(check(service).await, ServingStatus::NotServing as i32, "{service:?}");
    }
    tvmtool.restart().await;
    assert_eq!(app.get("/readyz").await.0, 200);
    assert_eq!(check("").await, ServingStatus::Serving as i32);
}

/// A health watch, with no `Check` beside it (Kubernetes probes `/readyz`),
/// is told `NOT_SERVING` once tickets cannot be checked, and `SERVING` when
/// they can again.
#[tokio::test]
async fn a_grpc_health_watch_follows_readiness_without_a_check() {
    use megamind_core::transport::grpc::WATCH_REFRESH;
    use tonic_health::pb::{HealthCheckRequest, health_check_response::ServingStatus, health_client::HealthClient};
    let mut tvmtool = Tvmtool::start(tickets()).await;
    let app = spawn_builtin(config(&tvmtool)).await;
    let mut health = HealthClient::new(crate::helpers::grpc_channel(&app).await);
    let request = HealthCheckRequest { service: "megamind_scenario.v1.Scenario".to_owned() };
    let mut watch = health.watch(request).await.expect("a watch").into_inner();
    let mut next = async || {
        let message = tokio::time::timeout(4 * WATCH_REFRESH, watch.message()).await;
        message.expect("a status within the refresh").expect("the stream goes on").expect("a message").status
    };
    assert_eq!(next().await, ServingStatus::Serving as i32);
    tvmtool.kill();
    assert_eq!(next().await, ServingStatus::NotServing as i32, "told without a check");
    tvmtool.restart().await;
    assert_eq!(next().await, ServingStatus::Serving as i32, "and told again once tickets can be checked");
}

#[tokio::test]
async fn a_check_cut_short_by_the_callers_deadline_is_refused_and_counted() {
    let tvmtool = Tvmtool::start(tickets()).await;
    let mut config = config(&tvmtool);
    config.auth.check_timeout_ms = 1_000;
    config.budget.run_ms = 2_000;
    // The server answers by the client's deadline less this reserve; the
    // client gives up at its deadline: a wide margin on a busy machine.
    config.budget.reserve_ms = 200;
    let app = spawn_builtin(config).await;
    tvmtool.hang(true);
    let mut client = grpc_client(&app).await;
    let mut request = grpc_run(Some(MEGAMIND));
    // Well inside the check's own timeout: the caller's deadline ends it.
    request.metadata_mut().insert("grpc-timeout", "500m".parse().expect("ASCII"));
    let started = std::time::Instant::now();
    let status = client.run(request).await.expect_err("refused");
    assert!(started.elapsed() < Duration::from_millis(900), "refused by the deadline, not the check's timeout");
    assert_eq!(status.code(), Code::PermissionDenied, "{status:?}");
    assert_eq!(status.message(), "forbidden: the caller's tickets could not be checked in time");
    assert_eq!(metric(&app, "megamind_auth_total{result=\"unavailable\"}").await, 1.0, "counted");
}
