//! The server: accepts connections (HTTP/1.1 keep-alive and h2c on one
//! address), serves them, and drains them on shutdown. Each request goes to
//! one transport: gRPC (`application/grpc*`) to [`GrpcRoutes`], a `POST`
//! naming a scenario handler to the HTTP fast path, anything else to the
//! router. When draining starts, [`App::shutdown`] fires, ending long-lived
//! answers while the connections are still served.
//!
//! [`serve`] takes its listener and a shutdown future, so tests bind port 0
//! and run as many servers as they like.

use std::{convert::Infallible, future::Future, sync::Arc, time::Duration};

use bytes::Bytes;
use http_body_util::{Either, Full};
use hyper::{Request, Response, body::Incoming};
use tokio::{net::TcpListener, sync::Semaphore};
use tonic::codegen::Service;

mod accept;
mod activity;
mod connections;
mod lane;
mod signals;

pub use accept::raise_open_files_limit;
use accept::{Acceptor, Bound};
use connections::{Connections, Stage};
pub use signals::{StopSignal, StopSignals};

/// How long a stopping server waits at least for the work calls left after
/// their answers, even when the drain used up its time: enough for a
/// shared store's commands (20 ms each by default).
const SETTLE_AT_LEAST: Duration = Duration::from_millis(100);
/// How the stream lane reads a request head: open to the fuzz target
/// `stream_head`, built with the `fuzzing` feature.
#[cfg(feature = "fuzzing")]
pub mod stream_head {
    pub use super::lane::head::{NotLean, decide};
}

// Re-exported for the composition root, which builds the state and serves it.
use crate::transport::{
    grpc::{self, GrpcRoutes},
    http, router,
};
pub use crate::{app::App, rules::connections::ConnectionLimits};

/// Resolves on SIGTERM or SIGINT (Ctrl-C).
pub async fn shutdown_signal() {
    match StopSignals::new() {
        Ok(mut signals) => {
            signals.recv().await;
        }
        Err(error) => {
            tracing::warn!(%error, "cannot watch SIGINT and SIGTERM; the server stops when killed");
            std::future::pending::<()>().await;
        }
    }
}

/// Serves `listener` until `shutdown` resolves; then `/readyz` turns 503,
/// the server goes on serving for `app.shutdown_delay` (HTTP/1.1 answers say
/// `Connection: close`, HTTP/2 connections get a GOAWAY), stops accepting,
/// and waits up to `app.drain_timeout` for in-flight requests.
pub async fn serve(listener: TcpListener, app: Arc<App>, shutdown: impl Future<Output = ()>) -> std::io::Result<()> {
    serve_all(Listeners { main: listener, grpc_only: None }, app, shutdown).await
}

/// What [`serve_all`] accepts connections on.
#[derive(Debug)]
pub struct Listeners {
    /// HTTP (HTTP/1.1 and h2c) and gRPC.
    pub main: TcpListener,
    /// gRPC only: anything else is answered 415.
    pub grpc_only: Option<TcpListener>,
}

/// As [`serve`], on every listener of `listeners`, all drained together.
pub async fn serve_all(listeners: Listeners, app: Arc<App>, shutdown: impl Future<Output = ()>) -> std::io::Result<()> {
    app.dispatcher.cache().spawn_purger(Duration::from_secs(1));
    app.dispatcher.authenticator().start();
    let grpc = GrpcRoutes::new(app.clone()).await.map_err(std::io::Error::other)?;
    // One shared handle per listener: a request clones one `Arc`, not each part.
    let router = router::router(app.clone());
    let routing =
        |grpc_only| Arc::new(Routing { app: app.clone(), grpc: grpc.clone(), router: router.clone(), grpc_only });
    let mut bound = vec![Bound { listener: listeners.main, routing: routing(false) }];
    bound.extend(listeners.grpc_only.map(|listener| Bound { listener, routing: routing(true) }));
    let metrics = app.connection_metrics.clone();
    let connections = Connections::new(&app.connection_limits, &app.lane_paths, metrics.clone())?;
    let slots = Arc::new(Semaphore::new(accept::connection_cap(app.connection_limits.max_connections)));
    let acceptor = Acceptor { bound, slots, metrics };
    acceptor.run_until(shutdown, &connections).await;
    app.start_draining();
    connections.enter(Stage::Draining);
    grpc.set_serving(false).await;
    if !app.shutdown_delay.is_zero() {
        tracing::info!(delay_ms = app.shutdown_delay.as_millis() as u64, "draining: /readyz is 503, still serving");
        acceptor.run_until(tokio::time::sleep(app.shutdown_delay), &connections).await;
    }
    drop(acceptor);
    tracing::info!("shutting down: draining in-flight requests");
    connections.enter(Stage::Closing);
    grpc.close_streams();
    let drain_ends = tokio::time::Instant::now() + app.drain_timeout;
    if tokio::time::timeout_at(drain_ends, connections.closed()).await.is_err() {
        tracing::warn!(timeout_ms = app.drain_timeout.as_millis() as u64, "drain timed out; closing the rest");
        // Drops every connection still open, and the calls on them, so that no
        // connection outlives `serve` in a process that goes on.
        connections.enter(Stage::Cut);
        connections.closed().await;
    }
    // Answers given are stored and leases given back before the process
    // goes: a retry on another replica must find them. Within the drain's
    // own bound (the pod's grace period counts on it), with a moment for
    // the answers the last connections were given.
    let bound = drain_ends.saturating_duration_since(tokio::time::Instant::now()).max(SETTLE_AT_LEAST);
    let left = app.dispatcher.cache().background().settle(bound).await;
    if left > 0 {
        tracing::warn!(left, "work calls left after their answers was dropped at the end of the drain");
    }
    Ok(())
}

/// What a connection routes requests to.
#[derive(Debug)]
struct Routing {
    app: Arc<App>,
    grpc: GrpcRoutes,
    router: axum::Router,
    /// Refuse everything but gRPC (the separate gRPC address).
    grpc_only: bool,
}

/// An answer of any transport. The fast path's is not boxed: it is one
/// buffer, and boxing it would cost an allocation per call.
type AnyBody = Either<Full<Bytes>, Either<tonic::body::Body, axum::body::Body>>;

/// Sends gRPC to its routes, scenario calls to the HTTP fast path, and
/// everything else to the router.
async fn route(routing: Arc<Routing>, request: Request<Incoming>) -> Result<Response<AnyBody>, Infallible> {
    let version = request.version();
    let mut response = if grpc::is_grpc(&request) {
        routing.grpc.clone().handle(request).await.map(|body| Either::Right(Either::Left(body)))
    } else if routing.grpc_only {
        let reason = "this address serves gRPC only (Content-Type: application/grpc); HTTP is on the main address\n";
        http::plain(hyper::StatusCode::UNSUPPORTED_MEDIA_TYPE, reason).map(Either::Left)
    } else if let Some(target) = http::fast_path(&routing.app, &request) {
        http::handle(&routing.app, target, request).await.map(Either::Left)
    } else {
        let Ok(response) = routing.router.clone().call(request).await;
        response.map(|body| Either::Right(Either::Right(body)))
    };
    if routing.app.is_draining() {
        // The client reconnects, and the balancer sends it to a server that stays.
        http::close_after(version, &mut response);
    }
    Ok(response)
}
