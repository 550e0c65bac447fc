//! The server: accepts connections (HTTP/1.1 keep-alive and h2c on one
//! address), serves them, and drains them on shutdown. gRPC requests
//! (`application/grpc*`) go to [`GrpcRoutes`], everything else to HTTP.
//!
//! [`serve`] takes its listener and a shutdown future, so tests bind port 0
//! and run as many servers as they like.

use std::{
    convert::Infallible,
    future::Future,
    net::SocketAddr,
    sync::{
        Arc,
        atomic::{AtomicBool, Ordering},
    },
    task::Poll,
    time::Duration,
};

use bytes::Bytes;
use http_body_util::{Either, Full};
use hyper::{Request, Response, body::Incoming, service::service_fn};
use hyper_util::{
    rt::{TokioExecutor, TokioIo},
    server::{conn::auto, graceful::GracefulShutdown},
};
use tokio::net::{TcpListener, TcpStream};
use tokio_util::sync::CancellationToken;

use crate::{
    config::{Config, ConfigError},
    dispatch::Dispatcher,
    rules::{idempotency::IdempotencyCache, metrics::Metrics, overload::Admission},
    scenario::Registry,
    transport::{
        grpc::{self, GrpcRoutes},
        http,
    },
};

/// Everything a connection needs, shared by all of them.
#[derive(Debug)]
pub struct App {
    /// Runs calls under the server's rules.
    pub dispatcher: Dispatcher,
    /// Largest request body accepted, in bytes.
    pub body_limit: usize,
    /// How long `/readyz` says "draining" while the server still serves,
    /// before it stops accepting: time for load balancers to notice.
    pub shutdown_delay: Duration,
    /// How long in-flight requests may take to finish once accepting stopped.
    pub drain_timeout: Duration,
    draining: AtomicBool,
}

impl App {
    /// Builds the server state for `config` over the scenarios of `registry`.
    pub fn new(config: &Config, registry: Registry) -> Result<App, ConfigError> {
        App::with_metrics(config, registry, Metrics::new())
    }

    /// As [`App::new`], recording into `metrics` (whose registry the
    /// scenarios may already have registered their own collectors in).
    pub fn with_metrics(config: &Config, registry: Registry, metrics: Metrics) -> Result<App, ConfigError> {
        if registry.get(&config.default_scenario).is_none() {
            return Err(ConfigError(vec![format!(
                "default_scenario {:?} is not registered (scenarios: {})",
                config.default_scenario,
                registry.listed()
            )]));
        }
        let cache = IdempotencyCache::new(config.cache_limits());
        let admission = Admission::new(config.max_in_flight, config.priority_reserve);
        let limits = config.dispatch_limits();
        let dispatcher = Dispatcher::new(registry, Some(&config.default_scenario), limits, cache, admission, metrics);
        Ok(App {
            dispatcher,
            body_limit: config.body_limit,
            shutdown_delay: Duration::from_millis(config.shutdown_delay_ms),
            drain_timeout: Duration::from_millis(config.drain_timeout_ms),
            draining: AtomicBool::new(false),
        })
    }

    /// Whether shutdown has started (`/readyz` answers 503 then).
    pub fn is_draining(&self) -> bool {
        self.draining.load(Ordering::Acquire)
    }
}

/// Resolves on SIGTERM or SIGINT (Ctrl-C).
pub async fn shutdown_signal() {
    let interrupt = tokio::signal::ctrl_c();
    #[cfg(unix)]
    {
        let mut terminate = match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
            Ok(signal) => signal,
            Err(error) => {
                tracing::warn!(%error, "cannot watch SIGTERM; only SIGINT stops the server");
                let _ = interrupt.await;
                return;
            }
        };
        tokio::select! {
            _ = interrupt => {}
            _ = terminate.recv() => {}
        }
    }
    #[cfg(not(unix))]
    let _ = interrupt.await;
}

/// Serves `listener` until `shutdown` resolves; then `/readyz` turns 503,
/// the server goes on serving for `app.shutdown_delay`, stops accepting, and
/// waits up to `app.drain_timeout` for in-flight requests.
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
    let grpc = GrpcRoutes::new(app.clone()).await.map_err(std::io::Error::other)?;
    // One shared handle per listener: a request clones one `Arc`, not each part.
    let routing = |grpc_only| Arc::new(Routing { app: app.clone(), grpc: grpc.clone(), grpc_only });
    let mut bound = vec![Bound { listener: listeners.main, routing: routing(false) }];
    bound.extend(listeners.grpc_only.map(|listener| Bound { listener, routing: routing(true) }));
    let connections = Connections {
        builder: auto::Builder::new(TokioExecutor::new()),
        graceful: GracefulShutdown::new(),
        closing: CancellationToken::new(),
    };
    let connect = |stream, peer, routing: &Arc<Routing>| connections.serve(stream, peer, routing.clone());
    accept_until(&bound, shutdown, &connect).await;
    app.draining.store(true, Ordering::Release);
    grpc.set_serving(false).await;
    if !app.shutdown_delay.is_zero() {
        tracing::info!(delay_ms = app.shutdown_delay.as_millis() as u64, "draining: /readyz is 503, still serving");
        accept_until(&bound, tokio::time::sleep(app.shutdown_delay), &connect).await;
    }
    drop(bound);
    tracing::info!("shutting down: draining in-flight requests");
    let Connections { graceful, closing, .. } = connections;
    if tokio::time::timeout(app.drain_timeout, graceful.shutdown()).await.is_err() {
        tracing::warn!(timeout_ms = app.drain_timeout.as_millis() as u64, "drain timed out; closing the rest");
        // Drops every connection still open, and the calls on them, so that no
        // connection outlives `serve` in a process that goes on.
        closing.cancel();
    }
    Ok(())
}

/// A listener and what its connections route to.
struct Bound {
    listener: TcpListener,
    routing: Arc<Routing>,
}

/// Accepts connections on every listener and hands them to `connect` until `until` resolves.
async fn accept_until(
    bound: &[Bound],
    until: impl Future<Output = ()>,
    connect: &impl Fn(TcpStream, SocketAddr, &Arc<Routing>),
) {
    tokio::pin!(until);
    // Each round starts at the next listener, so a flood on one cannot starve another.
    let mut first = 0;
    loop {
        first = (first + 1) % bound.len();
        let accept_any = std::future::poll_fn(|cx| {
            for at in (first..bound.len()).chain(0..first) {
                if let Poll::Ready(accepted) = bound[at].listener.poll_accept(cx) {
                    return Poll::Ready((accepted, &bound[at].routing));
                }
            }
            Poll::Pending
        });
        tokio::select! {
            () = &mut until => return,
            (accepted, routing) = accept_any => match accepted {
                Ok((stream, peer)) => connect(stream, peer, routing),
                Err(error) => {
                    // Out of file descriptors and the like: back off, keep serving.
                    tracing::warn!(%error, "accept failed");
                    tokio::time::sleep(Duration::from_millis(50)).await;
                }
            },
        }
    }
}

/// How connections are served, and the handles that end them.
struct Connections {
    builder: auto::Builder<TokioExecutor>,
    graceful: GracefulShutdown,
    /// Cancelled when the drain times out: ends the connections left.
    closing: CancellationToken,
}

impl Connections {
    fn serve(&self, stream: TcpStream, peer: SocketAddr, routing: Arc<Routing>) {
        // Small protobuf answers must not wait for Nagle.
        let _ = stream.set_nodelay(true);
        let service = service_fn(move |request| route(routing.clone(), request));
        let connection = self.builder.serve_connection(TokioIo::new(stream), service).into_owned();
        let connection = self.graceful.watch(connection);
        let closing = self.closing.clone();
        tokio::spawn(async move {
            tokio::select! {
                result = connection => if let Err(error) = result {
                    tracing::debug!(%peer, %error, "connection ended with an error");
                },
                () = closing.cancelled() => tracing::debug!(%peer, "connection closed: the drain timed out"),
            }
        });
    }
}

/// What a connection routes requests to.
#[derive(Debug)]
struct Routing {
    app: Arc<App>,
    grpc: GrpcRoutes,
    /// Refuse everything but gRPC (the separate gRPC address).
    grpc_only: bool,
}

/// Sends gRPC to its routes and everything else to the HTTP handler.
async fn route(
    routing: Arc<Routing>,
    request: Request<Incoming>,
) -> Result<Response<Either<Full<Bytes>, tonic::body::Body>>, Infallible> {
    if grpc::is_grpc(&request) {
        return Ok(routing.grpc.clone().handle(request).await.map(Either::Right));
    }
    if routing.grpc_only {
        let reason = "this address serves gRPC only (Content-Type: application/grpc); HTTP is on the main address\n";
        return Ok(http::plain(hyper::StatusCode::UNSUPPORTED_MEDIA_TYPE, reason).map(Either::Left));
    }
    // Not boxed: the HTTP answer is one buffer, and boxing it costs an allocation per call.
    Ok(http::handle(&routing.app, request).await?.map(Either::Left))
}
