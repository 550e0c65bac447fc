//! The HTTP fast path: `POST /{scenario}/{handler}` and `POST /{handler}`
//! for the default scenario, bodies in binary, JSON or text format. It takes
//! only a `POST` naming a scenario handler ([`fast_path`]), and allocates
//! nothing of its own but the call's body and answer; every other request
//! goes to the router ([`super::router`]).
//!
//! Everything inside a call is a 200 with the protocol answer; a refusal
//! gets its status and a plain-text reason from [`refused`], the one mapping
//! (429 for `/run` under overload, 403, 413, 408, 400, 415). The body must
//! arrive within the handler's budget; an answer given without reading the
//! whole body closes an HTTP/1.1 connection and says so.

use bytes::Bytes;
use http::{HeaderMap, HeaderValue, Method, Request, Response, StatusCode, Version, header};
use http_body_util::Full;
use hyper::body::Body;
use tokio::time::Instant;

use crate::{
    app::App,
    codec::{self, CodecError, Format},
    dispatch::{Call, CallMeta, Refusal, Reply, Transport, response_descriptor},
    scenario::{Handler, registry::Registered},
    transport::pieces::{self, Uncollected},
};

/// The scenario handler a request calls.
#[derive(Debug, Clone, Copy)]
pub struct Target<'a> {
    /// The scenario.
    pub scenario: &'a Registered,
    /// The handler.
    pub handler: Handler,
}

/// The scenario handler `path` names: `/{scenario}/{handler}`, or
/// `/{handler}` of the default scenario.
pub fn target<'a>(app: &'a App, path: &str) -> Option<Target<'a>> {
    let mut parts = path.trim_matches('/').splitn(3, '/');
    let (scenario, handler) = match [parts.next(), parts.next(), parts.next()] {
        [Some(handler), None, None] => (None, handler),
        [Some(scenario), Some(handler), None] => (Some(scenario), handler),
        _ => return None,
    };
    let handler = Handler::from_name(handler)?;
    Some(Target { scenario: app.dispatcher.scenario(scenario)?, handler })
}

/// The call `request` makes when the fast path takes it: a `POST` naming a
/// scenario handler.
pub fn fast_path<'a, B>(app: &'a App, request: &Request<B>) -> Option<Target<'a>> {
    if request.method() != Method::POST {
        return None;
    }
    target(app, request.uri().path())
}

/// Answers one call of `target`. A request refused before the dispatcher
/// (its format, its body) is counted and logged as a call of `target` too.
pub async fn handle<B>(
    app: &App,
    Target { scenario, handler }: Target<'_>,
    request: Request<B>,
) -> Response<Full<Bytes>>
where
    B: Body<Data = Bytes> + Unpin,
    B::Error: Into<Box<dyn std::error::Error + Send + Sync>>,
{
    let started = Instant::now();
    let version = request.version();
    match read_call(app, handler, started, request).await {
        Ok((call, answer_format)) => match app.dispatcher.dispatch(scenario, call).await {
            Reply::Answer(binary) => render(handler, binary, answer_format),
            Reply::Refused(refusal) => refused(version, &refusal),
        },
        Err(refusal) => {
            app.dispatcher.refused_early(scenario, handler, Transport::Http, started, &refusal);
            refused(version, &refusal)
        }
    }
}

/// The call `request` makes, and the format its answer is asked in; or why
/// it cannot be made.
async fn read_call<B>(
    app: &App,
    handler: Handler,
    started: Instant,
    request: Request<B>,
) -> Result<(Call, Format), Refusal>
where
    B: Body<Data = Bytes> + Unpin,
    B::Error: Into<Box<dyn std::error::Error + Send + Sync>>,
{
    let headers = request.headers();
    let meta = CallMeta::from_headers(headers);
    // Asked before anything else: a caller let in nowhere learns nothing of
    // the request's form, and its calls are counted as forbidden, not as
    // whatever else is wrong with them. Before the body is read too: such a
    // caller costs no body.
    let admitted = app.dispatcher.admit(&meta, app.budgets.deadline(handler, started)).await?;
    let format = match headers.get(header::CONTENT_TYPE).map(HeaderValue::to_str) {
        None => Format::Binary,
        Some(Ok(value)) => match Format::from_media_type(value) {
            Some(format) => format,
            None => {
                let value = crate::text::clip(value, crate::dispatch::call::MAX_ECHO);
                return Err(Refusal::UnsupportedMediaType(value.to_owned()));
            }
        },
        Some(Err(_)) => return Err(Refusal::UnsupportedMediaType("(not ASCII)".into())),
    };
    let answer_format =
        headers.get(header::ACCEPT).and_then(|v| v.to_str().ok()).and_then(Format::from_accept).unwrap_or(format);
    let too_large = Refusal::BodyTooLarge { limit: app.body_limit };
    if declared_length(headers).is_some_and(|length| length > app.body_limit as u64) {
        return Err(too_large);
    }
    // A client that never finishes its body must not hold the call past its budget.
    // Due as the scenario's answer is, the reserve kept: the refusal too
    // must reach the client within the budget.
    let budget = app.budgets.of(handler);
    let deadline = app.budgets.deadline(handler, started);
    let read = pieces::collect(request.into_body(), app.body_limit);
    let body = match tokio::time::timeout_at(deadline, read).await {
        Ok(Ok(body)) => body,
        Ok(Err(Uncollected::TooLarge)) => return Err(too_large),
        Ok(Err(Uncollected::Unreadable(why))) => return Err(Refusal::BodyUnreadable(why)),
        Err(_elapsed) => return Err(Refusal::BodyTooSlow { handler, limit: budget }),
    };
    let transport = Transport::Http;
    let call = Call { handler, body, format, started, client_timeout: None, meta, transport, admitted: Some(admitted) };
    Ok((call, answer_format))
}

/// The HTTP answer of each refusal: its status and a plain-text reason. A
/// refusal given before the body was read to its end closes an HTTP/1.1
/// connection, which cannot carry another request after it.
pub fn refused(version: Version, refusal: &Refusal) -> Response<Full<Bytes>> {
    let (status, reason): (StatusCode, Bytes) = match refusal {
        Refusal::Overloaded => {
            (StatusCode::TOO_MANY_REQUESTS, Bytes::from_static(b"overloaded: /run is refused, retry later\n"))
        }
        Refusal::Forbidden(why) => (StatusCode::FORBIDDEN, format!("forbidden: {why}\n").into()),
        Refusal::UnknownScenario { name, known } => {
            (StatusCode::NOT_FOUND, format!("no scenario {name:?}; scenarios: {known}\n").into())
        }
        Refusal::BodyTooLarge { limit } => {
            (StatusCode::PAYLOAD_TOO_LARGE, format!("request body is over the limit of {limit} bytes\n").into())
        }
        Refusal::BodyTooSlow { handler, limit } => (
            StatusCode::REQUEST_TIMEOUT,
            format!("the request body did not arrive within the {} ms budget of /{handler}\n", limit.as_millis())
                .into(),
        ),
        Refusal::BodyUnreadable(why) => {
            (StatusCode::BAD_REQUEST, format!("cannot read the request body: {why}\n").into())
        }
        Refusal::UnsupportedMediaType(value) => (
            StatusCode::UNSUPPORTED_MEDIA_TYPE,
            format!(
                "unsupported Content-Type {value:?}: use application/protobuf (or application/x-protobuf), \
                 application/json, or text/protobuf (or text/plain)\n"
            )
            .into(),
        ),
    };
    let mut response = plain(status, reason);
    // A caller refused is refused before its body is read, as are bodies refused.
    let unread = matches!(
        refusal,
        Refusal::Forbidden(_) | Refusal::BodyTooLarge { .. } | Refusal::BodyTooSlow { .. } | Refusal::BodyUnreadable(_)
    );
    if unread {
        close_after(version, &mut response);
    }
    response
}

fn render(handler: Handler, binary: Bytes, format: Format) -> Response<Full<Bytes>> {
    let body = match format {
        // The common case: no descriptor lookup, no copy.
        Format::Binary => Ok(binary),
        _ => codec::transcode(response_descriptor(handler), &binary, format),
    };
    match body {
        Ok(body) => {
            let mut response = Response::new(Full::new(body));
            response.headers_mut().insert(header::CONTENT_TYPE, HeaderValue::from_static(format.media_type()));
            response
        }
        // The answer exists (and is cached); only this format cannot carry it.
        Err(error) => {
            let instead = match error {
                CodecError::TooManyValues { .. } | CodecError::TooNested { .. } | CodecError::TooLong { .. } => {
                    "application/protobuf"
                }
                _ => "application/protobuf or text/protobuf",
            };
            let again = "the answer is kept: repeat the call with its RequestId";
            plain(StatusCode::NOT_ACCEPTABLE, format!("{error}; {again}, asking for {instead}\n"))
        }
    }
}

fn declared_length(headers: &HeaderMap) -> Option<u64> {
    headers.get(header::CONTENT_LENGTH)?.to_str().ok()?.parse().ok()
}

/// Says `Connection: close` on an HTTP/1 answer, after which the connection
/// closes (HTTP/2 has no such header: its connections close by GOAWAY).
pub fn close_after<B>(version: Version, response: &mut Response<B>) {
    if version < Version::HTTP_2 {
        response.headers_mut().insert(header::CONNECTION, HeaderValue::from_static("close"));
    }
}

/// A plain-text answer.
pub fn plain(status: StatusCode, text: impl Into<Bytes>) -> Response<Full<Bytes>> {
    let mut response = Response::new(Full::new(text.into()));
    *response.status_mut() = status;
    response.headers_mut().insert(header::CONTENT_TYPE, HeaderValue::from_static("text/plain; charset=utf-8"));
    response
}
