//! The gRPC transport: service `megamind_scenario.v1.Scenario` (unary `Run`,
//! `Continue`, `Commit`, `Apply`) next to the standard health and reflection
//! services, all in one [`GrpcRoutes`] that the server mounts beside HTTP.
//!
//! Message bytes pass through untouched ([`BytesCodec`]): the request goes to
//! the [`crate::dispatch::Dispatcher`] as binary protobuf and its binary answer
//! goes back as is, so budget, idempotency, overload and logs are exactly
//! HTTP's. The scenario is chosen by the `x-scenario` metadata key (the default
//! scenario when absent). Like HTTP's 200, protocol failures (bad body, missing
//! `RequestId`, timeout, scenario error) are OK responses carrying the protocol
//! `Error`; gRPC statuses are kept for what the protocol cannot answer: an
//! unknown method (`UNIMPLEMENTED`), a message over the body limit
//! (`OUT_OF_RANGE`, from tonic's decoder), and each [`Refusal`], mapped once
//! by [`status`]: an unknown scenario (`NOT_FOUND`), `Run` under overload
//! (`RESOURCE_EXHAUSTED`), a caller the authenticator refuses
//! (`PERMISSION_DENIED`), a message that does not arrive in time
//! (`DEADLINE_EXCEEDED`).

use std::{
    convert::Infallible,
    future::Future,
    pin::Pin,
    sync::{
        Arc,
        atomic::{AtomicBool, Ordering},
    },
    task::{Context, Poll},
    time::Duration,
};

use bytes::{Buf, BufMut, Bytes};
use futures_util::future::BoxFuture;
use http::{Request, Response, header};
use hyper::body::{Frame, SizeHint};
use tokio::time::Instant;
use tonic::{
    Code, Status,
    body::Body,
    codec::{Codec, DecodeBuf, Decoder, EncodeBuf, Encoder},
    server::{Grpc, NamedService, UnaryService},
    service::Routes,
};
use tonic_health::{ServingStatus, server::HealthReporter};

mod streams;

pub use crate::scenario::meta::SCENARIO_KEY;
use crate::{
    app::App,
    codec::Format,
    dispatch::{Admitted, Call, CallMeta, Refusal, Reply, Transport},
    proto::{self, megamind_scenario::v1::scenario_server::SERVICE_NAME},
    scenario::{Handler, registry::Registered},
    transport::pieces,
};
pub use streams::MAX_OPEN as MAX_PUBLIC_STREAMS;
use streams::PublicStreams;

/// The longest a health or reflection call's message may take after its
/// head, however long the header timeout.
const PUBLIC_MESSAGE_WAIT: Duration = Duration::from_secs(1);

/// The health check's path, answered by what `/readyz` would say.
const HEALTH_CHECK: &str = "/grpc.health.v1.Health/Check";
const HEALTH_WATCH: &str = "/grpc.health.v1.Health/Watch";
/// How often readiness is asked again while a health watch is open: a
/// watch is told of tickets that can no longer be checked this late at most.
pub const WATCH_REFRESH: std::time::Duration = std::time::Duration::from_secs(2);

/// Whether `request` is gRPC (`application/grpc`, `application/grpc+proto`, ...).
pub fn is_grpc<B>(request: &Request<B>) -> bool {
    request.headers().get(header::CONTENT_TYPE).is_some_and(|value| value.as_bytes().starts_with(b"application/grpc"))
}

/// Why the gRPC services could not be built.
#[derive(Debug, thiserror::Error)]
#[error("cannot build the gRPC reflection service: {0}")]
pub struct GrpcError(#[from] tonic_reflection::server::Error);

/// Every gRPC service of one server: built once, cloned cheaply per request.
#[derive(Debug, Clone)]
pub struct GrpcRoutes {
    routes: Routes,
    health: HealthReporter,
    streams: PublicStreams,
    app: Arc<App>,
    /// Whether the status reported is `SERVING`: reported again only when
    /// it changes, as each report wakes every watch.
    serving: Arc<tokio::sync::Mutex<bool>>,
    /// Whether a task asks readiness again every [`WATCH_REFRESH`]: one for
    /// all the open health watches, which no `Check` may come to refresh.
    refreshing: Arc<std::sync::atomic::AtomicBool>,
}

impl GrpcRoutes {
    /// The scenario service over `app`'s dispatcher, `grpc.health.v1.Health`
    /// (SERVING for the server and for the scenario service), and server
    /// reflection `v1` and `v1alpha` describing all of them; health's and
    /// reflection's streams last the idle timeout at most.
    pub async fn new(app: Arc<App>) -> Result<GrpcRoutes, GrpcError> {
        let streams = PublicStreams::new(app.connection_limits.idle_timeout);
        let (health, health_service) = tonic_health::server::health_reporter();
        health.set_service_status(SERVICE_NAME, ServingStatus::Serving).await;
        // Older grpcurl, ghz and Python's grpcio-reflection speak only v1alpha.
        // Reflection lists only services whose descriptors are registered, so
        // every version lists every service, both reflections included.
        let reflection = || {
            tonic_reflection::server::Builder::configure()
                .register_encoded_file_descriptor_set(proto::FILE_DESCRIPTOR_SET)
                .register_encoded_file_descriptor_set(tonic_health::pb::FILE_DESCRIPTOR_SET)
                .register_encoded_file_descriptor_set(tonic_reflection::pb::v1::FILE_DESCRIPTOR_SET)
                .register_encoded_file_descriptor_set(tonic_reflection::pb::v1alpha::FILE_DESCRIPTOR_SET)
        };
        let routes = Routes::new(ScenarioService { app: app.clone() })
            .add_service(health_service)
            .add_service(reflection().build_v1()?)
            .add_service(reflection().build_v1alpha()?)
            .prepare();
        let serving = Arc::new(tokio::sync::Mutex::new(true));
        Ok(GrpcRoutes { routes, health, streams, app, serving, refreshing: Arc::default() })
    }

    /// Reports the serving status of the whole server (service `""`) and of
    /// the scenario service, for health checks that should see a drain.
    pub async fn set_serving(&self, serving: bool) {
        let mut reported = self.serving.lock().await;
        // Asked under the lock: a check that found the server ready just
        // before the drain began must not report it serving after the
        // drain's own report.
        let serving = serving && !self.app.is_draining();
        if *reported == serving {
            return;
        }
        *reported = serving;
        let status = if serving { ServingStatus::Serving } else { ServingStatus::NotServing };
        for service in ["", SERVICE_NAME] {
            self.health.set_service_status(service, status).await;
        }
    }

    /// Reports what `/readyz` would answer before a health check is
    /// answered: a replica whose callers' tickets cannot be checked is not
    /// serving to a `grpc` probe either. A draining server stays
    /// `NOT_SERVING`.
    async fn refresh_health(&self) {
        let ready = !self.app.is_draining() && self.app.dispatcher.authenticator().ready().await.is_ok();
        // Asked again: the drain may have begun while tvmtool was asked.
        self.set_serving(ready && !self.app.is_draining()).await;
    }

    /// Asks readiness again every [`WATCH_REFRESH`] while public streams
    /// are open, on one task however many watches there are: a watch
    /// learns that tickets can no longer be checked without a `Check`
    /// (Kubernetes probes `/readyz`, which reports nothing to gRPC).
    fn keep_refreshing(&self) {
        use std::sync::atomic::Ordering::SeqCst;
        if self.refreshing.swap(true, SeqCst) {
            return;
        }
        let routes = self.clone();
        tokio::spawn(async move {
            loop {
                tokio::time::sleep(WATCH_REFRESH).await;
                if routes.streams.closing() {
                    break;
                }
                if !routes.streams.any_open() {
                    routes.refreshing.store(false, SeqCst);
                    // A watch opened meanwhile found the flag still set and
                    // left the asking to this task: it goes on for it.
                    if routes.streams.any_open() && !routes.refreshing.swap(true, SeqCst) {
                        continue;
                    }
                    break;
                }
                routes.refresh_health().await;
            }
        });
    }

    /// Ends health's and reflection's open streams: the server is closing.
    pub fn close_streams(&self) {
        self.streams.close();
    }

    /// Answers one gRPC request (on a clone: the routes are shared behind `Arc`s).
    pub async fn handle<B>(mut self, request: Request<B>) -> Response<Body>
    where
        B: hyper::body::Body<Data = Bytes> + Send + 'static,
        B::Error: Into<Box<dyn std::error::Error + Send + Sync>>,
    {
        use tonic::codegen::Service;
        if request.uri().path() == HEALTH_CHECK {
            self.refresh_health().await;
        } else if request.uri().path() == HEALTH_WATCH {
            // Its first message says what `/readyz` would now.
            self.refresh_health().await;
            self.keep_refreshing();
        }
        let slot = match PublicStreams::is_public_stream(request.uri().path()).then(|| self.streams.admit()) {
            Some(None) => return PublicStreams::refused(),
            Some(slot) => slot,
            None => None,
        };
        // The scenario's calls bound their message by the budget. Health
        // and reflection read theirs before answering (`Watch` before it
        // streams, so before its lifetime starts): it must come within the
        // header timeout, as a request's head must, or a message never
        // finished would hold the connection, and a watch's slot, for ever;
        // and within a second, for it comes with its head: meanwhile the
        // call counts among the requests open server-wide, which anyone may
        // fill with such calls to refuse HTTP/2 clients their streams.
        let path = request.uri().path();
        let scenario =
            path.strip_prefix('/').and_then(|p| p.strip_prefix(SERVICE_NAME)).is_some_and(|m| m.starts_with('/'));
        let within = self.app.connection_limits.header_timeout.min(PUBLIC_MESSAGE_WAIT);
        // axum's router, under the routes, is always ready: no `poll_ready` needed.
        let call = self.routes.call(request);
        let called = if scenario { Ok(call.await) } else { tokio::time::timeout(within, call).await };
        let response = match called {
            Ok(Ok(response)) => response,
            Ok(Err(infallible)) => match infallible {},
            Err(_elapsed) => {
                let message = format!("the request message did not arrive within {} ms", within.as_millis());
                return Status::deadline_exceeded(message).into_http();
            }
        };
        match slot {
            Some(slot) => self.streams.bound(response, slot),
            None => response,
        }
    }
}

/// `megamind_scenario.v1.Scenario` over the dispatcher.
#[derive(Debug, Clone)]
pub struct ScenarioService {
    app: Arc<App>,
}

impl NamedService for ScenarioService {
    const NAME: &'static str = SERVICE_NAME;
}

impl tonic::codegen::Service<Request<Body>> for ScenarioService {
    type Response = Response<Body>;
    type Error = Infallible;
    type Future = BoxFuture<'static, Result<Response<Body>, Infallible>>;

    fn poll_ready(&mut self, _: &mut Context<'_>) -> Poll<Result<(), Infallible>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, request: Request<Body>) -> Self::Future {
        // The budget counts from arrival, before the body is read.
        let started = Instant::now();
        let app = self.app.clone();
        Box::pin(async move { Ok(serve_call(app, started, request).await) })
    }
}

async fn serve_call(app: Arc<App>, started: Instant, request: Request<Body>) -> Response<Body> {
    let path = request.uri().path();
    let Some(handler) = method_handler(path) else {
        return Status::unimplemented(format!("no method {path}: {SERVICE_NAME} has Run, Continue, Commit, Apply"))
            .into_http();
    };
    let name = match request.headers().get(SCENARIO_KEY).map(|value| value.to_str()) {
        None => None,
        Some(Ok(name)) => Some(name),
        Some(Err(_)) => return unknown_scenario(&app, "(not ASCII)"),
    };
    let Some(scenario) = app.dispatcher.scenario(name).cloned() else {
        return unknown_scenario(&app, name.unwrap_or_default());
    };
    let client_timeout = request.headers().get(GRPC_TIMEOUT).and_then(|value| {
        let timeout = parse_timeout(value.as_bytes());
        if timeout.is_none() {
            // As tonic's own server does: a malformed timeout is no timeout.
            tracing::debug!(value = ?value, "ignoring a malformed grpc-timeout");
        }
        timeout
    });
    // The message must arrive within the call's time, as HTTP's body must.
    let budget = app.budgets.of(handler);
    let limit = client_timeout.map_or(budget, |client| client.min(budget));
    // The reserve kept, as for the scenario's answer: the status too must
    // reach the client before its deadline.
    let deadline = app.budgets.deadline_within(handler, started, client_timeout);
    let request =
        request.map(|body| Body::new(BodyDeadline { body, deadline, handler, limit, timer: None, pieces: 0 }));
    let meta = CallMeta::from_headers(request.headers());
    // Asked before anything else of the call is read (the HTTP transport's
    // order too): a caller let in nowhere costs no message, and its calls
    // are counted as forbidden, not as whatever else is wrong with them.
    let by = app.budgets.deadline_within(handler, started, client_timeout);
    let admitted = match app.dispatcher.admit(&meta, by).await {
        Ok(admitted) => Some(admitted),
        Err(refusal) => {
            app.dispatcher.refused_early(&scenario, handler, Transport::Grpc, started, &refusal);
            return status(&refusal).into_http();
        }
    };
    // Only protobuf messages: `grpc+json` or gRPC-Web (base64) would be
    // read as protobuf and answer nonsense, or tonic's `INTERNAL`.
    let content_type = request.headers().get(header::CONTENT_TYPE).map(|value| value.as_bytes());
    if !matches!(content_type, Some(b"application/grpc" | b"application/grpc+proto")) {
        let shown = String::from_utf8_lossy(content_type.unwrap_or_default());
        let refusal =
            Refusal::UnsupportedMediaType(crate::text::clip(&shown, crate::dispatch::call::MAX_ECHO).to_owned());
        app.dispatcher.refused_early(&scenario, handler, Transport::Grpc, started, &refusal);
        return status(&refusal).into_http();
    }
    let reached = Arc::new(AtomicBool::new(false));
    let method = Method {
        app: app.clone(),
        scenario: scenario.clone(),
        handler,
        started,
        client_timeout,
        meta,
        admitted,
        reached,
    };
    let reached = method.reached.clone();
    let response =
        Grpc::new(BytesCodec).apply_max_message_size_config(Some(app.body_limit), None).unary(method, request).await;
    if !reached.load(Ordering::Relaxed) {
        // Refused before the dispatcher: counted and logged as its calls are.
        let given = Status::from_header_map(response.headers());
        let code = given.as_ref().map(Status::code);
        let refusal = match code {
            Some(Code::OutOfRange) => Refusal::BodyTooLarge { limit: app.body_limit },
            Some(Code::DeadlineExceeded) => Refusal::BodyTooSlow { handler, limit },
            _ => Refusal::BodyUnreadable(given.map(|given| given.message().to_owned()).unwrap_or_default()),
        };
        app.dispatcher.refused_early(&scenario, handler, Transport::Grpc, started, &refusal);
        // tonic says `INTERNAL` of a message cut short or missing: the
        // caller's mistake, `INVALID_ARGUMENT` as every unreadable message.
        if matches!(code, Some(Code::Internal | Code::Unknown)) {
            return status(&refusal).into_http();
        }
    }
    response
}

/// A request body that fails with `DEADLINE_EXCEEDED` when it has not ended by `deadline`.
struct BodyDeadline {
    body: Body,
    deadline: tokio::time::Instant,
    handler: Handler,
    limit: Duration,
    /// Set the first time the body is not ready: most messages arrive at once.
    timer: Option<Pin<Box<tokio::time::Sleep>>>,
    /// DATA frames read, bounded ([`pieces::MAX_PIECES`]).
    pieces: usize,
}

impl hyper::body::Body for BodyDeadline {
    type Data = Bytes;
    type Error = Status;

    fn poll_frame(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Result<Frame<Bytes>, Status>>> {
        if let Poll::Ready(frame) = Pin::new(&mut self.body).poll_frame(cx) {
            if matches!(frame, Some(Ok(_)))
                && let Err(too_many) = pieces::count(&mut self.pieces)
            {
                return Poll::Ready(Some(Err(Status::invalid_argument(too_many.to_string()))));
            }
            return Poll::Ready(frame);
        }
        let deadline = self.deadline;
        let timer = self.timer.get_or_insert_with(|| Box::pin(tokio::time::sleep_until(deadline)));
        if timer.as_mut().poll(cx).is_pending() {
            return Poll::Pending;
        }
        Poll::Ready(Some(Err(status(&Refusal::BodyTooSlow { handler: self.handler, limit: self.limit }))))
    }

    fn is_end_stream(&self) -> bool {
        self.body.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.body.size_hint()
    }
}

/// The handler behind a method path such as `/megamind_scenario.v1.Scenario/Run`.
fn method_handler(path: &str) -> Option<Handler> {
    let method = path.strip_prefix('/')?.strip_prefix(SERVICE_NAME)?.strip_prefix('/')?;
    match method {
        "Run" => Some(Handler::Run),
        "Continue" => Some(Handler::Continue),
        "Commit" => Some(Handler::Commit),
        "Apply" => Some(Handler::Apply),
        _ => None,
    }
}

fn unknown_scenario(app: &App, name: &str) -> Response<Body> {
    let known = app.dispatcher.registry().listed();
    let name = crate::text::clip(name, crate::dispatch::call::MAX_ECHO).to_owned();
    status(&Refusal::UnknownScenario { name, known }).into_http()
}

/// The gRPC status of each refusal.
pub fn status(refusal: &Refusal) -> Status {
    match refusal {
        Refusal::Overloaded => Status::resource_exhausted("overloaded: Run is refused, retry later"),
        Refusal::Forbidden(why) => Status::permission_denied(format!("forbidden: {why}")),
        Refusal::UnknownScenario { name, known } => {
            Status::not_found(format!("no scenario {name:?} ({SCENARIO_KEY}); scenarios: {known}"))
        }
        Refusal::BodyTooLarge { limit } => {
            Status::out_of_range(format!("request message is over the limit of {limit} bytes"))
        }
        Refusal::BodyTooSlow { limit, .. } => {
            Status::deadline_exceeded(format!("the request message did not arrive within {} ms", limit.as_millis()))
        }
        Refusal::BodyUnreadable(why) => Status::invalid_argument(format!("cannot read the request message: {why}")),
        Refusal::UnsupportedMediaType(value) => {
            Status::invalid_argument(format!("unsupported content-type {value:?} for gRPC"))
        }
    }
}

/// The header a gRPC client states its deadline in.
const GRPC_TIMEOUT: &str = "grpc-timeout";

/// How a `grpc-timeout` header is read: open to the fuzz target
/// `request_values`, built with the `fuzzing` feature.
#[cfg(feature = "fuzzing")]
pub mod timeout_header {
    /// A `grpc-timeout` value read as a call reads it.
    pub fn parse_timeout(value: &[u8]) -> Option<std::time::Duration> {
        super::parse_timeout(value)
    }
}

/// A `grpc-timeout` value: at most 8 digits and a unit (`H`, `M`, `S`, `m`,
/// `u`, `n`), as the gRPC over HTTP/2 specification has it.
fn parse_timeout(value: &[u8]) -> Option<Duration> {
    let (&unit, digits) = value.split_last()?;
    if digits.is_empty() || digits.len() > 8 || !digits.iter().all(u8::is_ascii_digit) {
        return None;
    }
    let amount: u64 = std::str::from_utf8(digits).ok()?.parse().ok()?;
    Some(match unit {
        b'H' => Duration::from_secs(amount * 3600),
        b'M' => Duration::from_secs(amount * 60),
        b'S' => Duration::from_secs(amount),
        b'm' => Duration::from_millis(amount),
        b'u' => Duration::from_micros(amount),
        b'n' => Duration::from_nanos(amount),
        _ => return None,
    })
}

/// One unary call of one scenario handler.
struct Method {
    app: Arc<App>,
    scenario: Registered,
    handler: Handler,
    started: Instant,
    client_timeout: Option<Duration>,
    meta: CallMeta,
    /// What the caller was let in as, asked before the message was read.
    admitted: Option<Admitted>,
    /// Set when tonic hands the message over: a call it refuses first
    /// (too large, too slow, badly framed) never reaches the dispatcher.
    reached: Arc<AtomicBool>,
}

impl UnaryService<Bytes> for Method {
    type Response = Bytes;
    type Future = BoxFuture<'static, Result<tonic::Response<Bytes>, Status>>;

    fn call(&mut self, request: tonic::Request<Bytes>) -> Self::Future {
        self.reached.store(true, Ordering::Relaxed);
        let call = Call {
            handler: self.handler,
            body: request.into_inner(),
            format: Format::Binary,
            started: self.started,
            client_timeout: self.client_timeout,
            // Called once per request: the tickets move into the call.
            meta: std::mem::take(&mut self.meta),
            transport: Transport::Grpc,
            admitted: self.admitted.take(),
        };
        let (app, scenario) = (self.app.clone(), self.scenario.clone());
        Box::pin(async move {
            match app.dispatcher.dispatch(&scenario, call).await {
                Reply::Answer(body) => Ok(tonic::Response::new(body)),
                Reply::Refused(refusal) => Err(status(&refusal)),
            }
        })
    }
}

/// A gRPC codec that hands over message bytes as they are: the dispatcher
/// decodes requests and its answers are already encoded.
#[derive(Debug, Clone, Copy, Default)]
pub struct BytesCodec;

impl Codec for BytesCodec {
    type Encode = Bytes;
    type Decode = Bytes;
    type Encoder = BytesCodec;
    type Decoder = BytesCodec;

    fn encoder(&mut self) -> BytesCodec {
        BytesCodec
    }

    fn decoder(&mut self) -> BytesCodec {
        BytesCodec
    }
}

impl Encoder for BytesCodec {
    type Item = Bytes;
    type Error = Status;

    fn encode(&mut self, item: Bytes, dst: &mut EncodeBuf<'_>) -> Result<(), Status> {
        dst.reserve(item.len());
        dst.put(item);
        Ok(())
    }
}

impl Decoder for BytesCodec {
    type Item = Bytes;
    type Error = Status;

    fn decode(&mut self, src: &mut DecodeBuf<'_>) -> Result<Option<Bytes>, Status> {
        // Splits the frame off tonic's buffer: no copy.
        Ok(Some(src.copy_to_bytes(src.remaining())))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn method_paths_map_to_handlers() {
        assert_eq!(method_handler("/megamind_scenario.v1.Scenario/Run"), Some(Handler::Run));
        assert_eq!(method_handler("/megamind_scenario.v1.Scenario/Continue"), Some(Handler::Continue));
        assert_eq!(method_handler("/megamind_scenario.v1.Scenario/Commit"), Some(Handler::Commit));
        assert_eq!(method_handler("/megamind_scenario.v1.Scenario/Apply"), Some(Handler::Apply));
        assert_eq!(method_handler("/megamind_scenario.v1.Scenario/run"), None);
        assert_eq!(method_handler("/megamind_scenario.v1.ScenarioX/Run"), None);
        assert_eq!(method_handler("/other.Service/Run"), None);
    }

    #[tokio::test]
    async fn a_draining_server_is_never_reported_serving() {
        let app = Arc::new(App::new(&crate::config::Config::default(), crate::scenario::Registry::new()).unwrap());
        let routes = GrpcRoutes::new(app.clone()).await.unwrap();
        // The drain begins and says so; a health check that found the
        // server ready an instant before reports after it.
        app.start_draining();
        routes.set_serving(false).await;
        routes.set_serving(true).await;
        assert!(!*routes.serving.lock().await, "reported serving while draining");
    }

    #[test]
    fn grpc_is_told_by_content_type() {
        let request = |content_type: &str| Request::builder().header("content-type", content_type).body(()).unwrap();
        assert!(is_grpc(&request("application/grpc")));
        assert!(is_grpc(&request("application/grpc+proto")));
        assert!(!is_grpc(&request("application/protobuf")));
        assert!(!is_grpc(&Request::new(())));
    }

    #[test]
    fn grpc_timeouts_parse_in_every_unit_and_nothing_else() {
        assert_eq!(parse_timeout(b"1H"), Some(Duration::from_secs(3600)));
        assert_eq!(parse_timeout(b"2M"), Some(Duration::from_secs(120)));
        assert_eq!(parse_timeout(b"3S"), Some(Duration::from_secs(3)));
        assert_eq!(parse_timeout(b"250m"), Some(Duration::from_millis(250)));
        assert_eq!(parse_timeout(b"99999999u"), Some(Duration::from_micros(99_999_999)));
        assert_eq!(parse_timeout(b"5n"), Some(Duration::from_nanos(5)));
        for bad in [&b""[..], b"m", b"100", b"100x", b"123456789m", b"-1m", b"1.5S", b" 1m"] {
            assert_eq!(parse_timeout(bad), None, "{:?}", String::from_utf8_lossy(bad));
        }
    }
}
