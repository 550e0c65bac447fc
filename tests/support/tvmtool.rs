//! A stand-in for tvmtool on an ephemeral port, speaking the part of its
//! HTTP API the server uses: `/tvm/ping`, `/tvm/checksrv?dst=` and
//! `/tvm/checkusr`, each checking the local token in `Authorization`,
//! refusing with 403 and tvmtool's JSON error shape. It counts its checks
//! (by ticket too) and how many were in flight at most, can hang (a slow
//! tvmtool) and can be killed and started again on the same port.

use std::{
    collections::HashMap,
    net::SocketAddr,
    sync::{
        Arc, Mutex,
        atomic::{AtomicBool, AtomicUsize, Ordering},
    },
};

use axum::{
    Router,
    extract::{Query, State},
    http::{HeaderMap, StatusCode},
    response::{IntoResponse, Response},
    routing::get,
};
use serde_json::json;
use tokio::{net::TcpListener, task::JoinSet};

/// The local token the stand-in expects.
pub const TOKEN: &str = "tvmtool-local-token-for-tests";

/// This service's alias, as the stand-in knows it.
pub const DST: &str = "megamind-scenario";

/// What tickets the stand-in knows: service tickets by the source they
/// prove, user tickets by their default uid.
#[derive(Debug, Default)]
pub struct Tickets {
    /// Service ticket → TVM id of its source.
    pub services: HashMap<String, u32>,
    /// User ticket → default uid.
    pub users: HashMap<String, u64>,
}

#[derive(Debug, Default)]
struct Shared {
    tickets: Tickets,
    checksrv: AtomicUsize,
    checkusr: AtomicUsize,
    pings: AtomicUsize,
    hang: AtomicBool,
    /// Service checks by ticket.
    by_ticket: Mutex<HashMap<String, usize>>,
    checks: Gauge,
    pinging: Gauge,
}

/// Requests of one kind in flight now, and the most there were at once.
#[derive(Debug, Default)]
struct Gauge {
    now: AtomicUsize,
    most: AtomicUsize,
}

/// A request in flight, from its arrival until it is answered or dropped.
struct InFlight<'a>(&'a Gauge);

impl<'a> InFlight<'a> {
    fn new(gauge: &'a Gauge) -> InFlight<'a> {
        let now = gauge.now.fetch_add(1, Ordering::SeqCst) + 1;
        gauge.most.fetch_max(now, Ordering::SeqCst);
        InFlight(gauge)
    }
}

impl Drop for InFlight<'_> {
    fn drop(&mut self) {
        self.0.now.fetch_sub(1, Ordering::SeqCst);
    }
}

/// A running stand-in; killed when dropped.
pub struct Tvmtool {
    addr: SocketAddr,
    shared: Arc<Shared>,
    connections: Option<JoinSet<()>>,
}

impl Tvmtool {
    /// Starts one knowing `tickets`.
    pub async fn start(tickets: Tickets) -> Tvmtool {
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("a port for tvmtool");
        let addr = listener.local_addr().expect("its address");
        let shared = Arc::new(Shared { tickets, ..Shared::default() });
        let mut tvmtool = Tvmtool { addr, shared, connections: None };
        tvmtool.serve(listener);
        tvmtool
    }

    /// Its base URL, for `[auth] tvmtool_url`.
    pub fn url(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// `/tvm/checksrv` requests served so far.
    pub fn service_checks(&self) -> usize {
        self.shared.checksrv.load(Ordering::SeqCst)
    }

    /// `/tvm/checksrv` requests with `ticket` served so far.
    pub fn service_checks_of(&self, ticket: &str) -> usize {
        self.shared.by_ticket.lock().unwrap().get(ticket).copied().unwrap_or(0)
    }

    /// The most checks (service and user) that were in flight at once.
    pub fn most_checks_at_once(&self) -> usize {
        self.shared.checks.most.load(Ordering::SeqCst)
    }

    /// `/tvm/ping` requests served so far.
    pub fn pings(&self) -> usize {
        self.shared.pings.load(Ordering::SeqCst)
    }

    /// The most pings that were in flight at once.
    pub fn most_pings_at_once(&self) -> usize {
        self.shared.pinging.most.load(Ordering::SeqCst)
    }

    /// `/tvm/checkusr` requests served so far.
    pub fn user_checks(&self) -> usize {
        self.shared.checkusr.load(Ordering::SeqCst)
    }

    /// While `hang`, every request waits for ever (a tvmtool that stopped
    /// answering); requests already waiting go on waiting.
    pub fn hang(&self, hang: bool) {
        self.shared.hang.store(hang, Ordering::SeqCst);
    }

    /// Kills it: the port refuses connections, open ones are cut.
    pub fn kill(&mut self) {
        if let Some(mut connections) = self.connections.take() {
            connections.abort_all();
        }
    }

    /// Starts it again on the same port.
    pub async fn restart(&mut self) {
        self.kill();
        let listener = TcpListener::bind(self.addr).await.expect("tvmtool's port again");
        self.serve(listener);
    }

    fn serve(&mut self, listener: TcpListener) {
        let router = Router::new()
            .route("/tvm/ping", get(ping))
            .route("/tvm/checksrv", get(checksrv))
            .route("/tvm/checkusr", get(checkusr))
            .with_state(self.shared.clone());
        let mut connections = JoinSet::new();
        // The accept loop is in the set too: aborting the set closes the port.
        let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel();
        connections.spawn(async move {
            while let Ok((stream, _)) = listener.accept().await {
                if tx.send(stream).is_err() {
                    return;
                }
            }
        });
        connections.spawn(async move {
            let mut served = JoinSet::new();
            while let Some(stream) = rx.recv().await {
                let service = hyper_util::service::TowerToHyperService::new(router.clone());
                served.spawn(async move {
                    let io = hyper_util::rt::TokioIo::new(stream);
                    let builder = hyper_util::server::conn::auto::Builder::new(hyper_util::rt::TokioExecutor::new());
                    let _ = builder.serve_connection(io, service).await;
                });
            }
        });
        self.connections = Some(connections);
    }
}

impl Drop for Tvmtool {
    fn drop(&mut self) {
        self.kill();
    }
}

/// tvmtool's refusal: 403 with its JSON error.
fn refused(error: &str) -> Response {
    let body = json!({"error": error, "debug_string": "", "logging_string": "3:serv:CBAQ:"});
    (StatusCode::FORBIDDEN, axum::Json(body)).into_response()
}

/// The token check every API request passes first, and the hang.
async fn gate(shared: &Shared, headers: &HeaderMap) -> Option<Response> {
    if shared.hang.load(Ordering::SeqCst) {
        std::future::pending::<()>().await;
    }
    if headers.get("authorization").and_then(|v| v.to_str().ok()) != Some(TOKEN) {
        let body = json!({"error": "Authorization header is wrong"});
        return Some((StatusCode::UNAUTHORIZED, axum::Json(body)).into_response());
    }
    None
}

async fn ping(State(shared): State<Arc<Shared>>) -> Response {
    shared.pings.fetch_add(1, Ordering::SeqCst);
    let _in_flight = InFlight::new(&shared.pinging);
    if shared.hang.load(Ordering::SeqCst) {
        std::future::pending::<()>().await;
    }
    (StatusCode::OK, "OK").into_response()
}

async fn checksrv(
    State(shared): State<Arc<Shared>>,
    Query(query): Query<HashMap<String, String>>,
    headers: HeaderMap,
) -> Response {
    shared.checksrv.fetch_add(1, Ordering::SeqCst);
    let ticket = headers.get("x-ya-service-ticket").and_then(|v| v.to_str().ok()).unwrap_or("");
    *shared.by_ticket.lock().unwrap().entry(ticket.to_owned()).or_default() += 1;
    let _in_flight = InFlight::new(&shared.checks);
    if let Some(refusal) = gate(&shared, &headers).await {
        return refusal;
    }
    if query.get("dst").map(String::as_str) != Some(DST) {
        let body = json!({"error": "dst is not configured in tvmtool"});
        return (StatusCode::BAD_REQUEST, axum::Json(body)).into_response();
    }
    match shared.tickets.services.get(ticket) {
        Some(src) => axum::Json(json!({
            "src": src,
            "dst": 42,
            "scopes": null,
            "debug_string": "ticket_type=service",
            "logging_string": "3:serv:CBAQ__________9_IgYIlJEGECo:",
            "issuer_uid": null,
        }))
        .into_response(),
        None => refused("Malformed ticket"),
    }
}

async fn checkusr(State(shared): State<Arc<Shared>>, headers: HeaderMap) -> Response {
    shared.checkusr.fetch_add(1, Ordering::SeqCst);
    let _in_flight = InFlight::new(&shared.checks);
    if let Some(refusal) = gate(&shared, &headers).await {
        return refusal;
    }
    let ticket = headers.get("x-ya-user-ticket").and_then(|v| v.to_str().ok()).unwrap_or("");
    match shared.tickets.users.get(ticket) {
        Some(uid) => axum::Json(json!({
            "default_uid": uid,
            "uids": [uid],
            "scopes": [],
            "debug_string": "ticket_type=user",
            "logging_string": "3:user:CA0Q__________9_GhIKBAiAq:",
        }))
        .into_response(),
        None => refused("Expired ticket"),
    }
}
