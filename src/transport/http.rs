//! The HTTP transport: `POST /{scenario}/{handler}` and `POST /{handler}`
//! for the default scenario, bodies in binary, JSON or text format.
//!
//! Routing problems get their HTTP status (404, 405, 413, 415) with a plain
//! text reason; everything inside a routed call is a 200 with the protocol
//! answer, except `/run` under overload (429). The body must arrive within
//! the handler's budget (408 otherwise); an answer given without reading the
//! whole body (408, 413, 400) closes an HTTP/1.1 connection and says so.

use std::convert::Infallible;

use bytes::Bytes;
use http::{HeaderMap, HeaderValue, Method, Request, Response, StatusCode, Version, header};
use http_body_util::{BodyExt, Full, LengthLimitError, Limited};
use hyper::body::Body;
use tokio::time::Instant;

use crate::{
    app::App,
    codec::{self, Format},
    dispatch::{Call, Reply, Transport, response_descriptor},
    scenario::Handler,
};

/// The header Megamind puts the user's TVM ticket in.
pub const USER_TICKET: &str = "x-ya-user-ticket";

/// Answers one HTTP request.
pub async fn handle<B>(app: &App, request: Request<B>) -> Result<Response<Full<Bytes>>, Infallible>
where
    B: Body<Data = Bytes>,
    B::Error: Into<Box<dyn std::error::Error + Send + Sync>>,
{
    let started = Instant::now();
    let version = request.version();
    let path = request.uri().path();
    let mut parts = path.trim_matches('/').splitn(3, '/');
    let (scenario_name, handler_name) = match [parts.next(), parts.next(), parts.next()] {
        [Some("healthz"), None, None] => return Ok(plain(StatusCode::OK, "ok\n")),
        [Some("readyz"), None, None] if app.is_draining() => {
            return Ok(plain(StatusCode::SERVICE_UNAVAILABLE, "draining\n"));
        }
        [Some("readyz"), None, None] => return Ok(plain(StatusCode::OK, "ready\n")),
        [Some("metrics"), None, None] => {
            let mut response = plain(StatusCode::OK, app.dispatcher.metrics().render());
            let content_type = HeaderValue::from_static("text/plain; version=0.0.4; charset=utf-8");
            response.headers_mut().insert(header::CONTENT_TYPE, content_type);
            return Ok(response);
        }
        [Some(handler), None, None] => (None, handler),
        [Some(scenario), Some(handler), None] => (Some(scenario), handler),
        _ => return Ok(not_found(app, path)),
    };
    let Some(handler) = Handler::from_name(handler_name) else {
        return Ok(not_found(app, path));
    };
    let Some(scenario) = app.dispatcher.scenario(scenario_name) else {
        return Ok(not_found(app, path));
    };
    if request.method() != Method::POST {
        let mut response = plain(StatusCode::METHOD_NOT_ALLOWED, "scenario handlers take POST\n");
        response.headers_mut().insert(header::ALLOW, HeaderValue::from_static("POST"));
        return Ok(response);
    }
    let headers = request.headers();
    let format = match headers.get(header::CONTENT_TYPE).map(HeaderValue::to_str) {
        None => Format::Binary,
        Some(Ok(value)) => match Format::from_media_type(value) {
            Some(format) => format,
            None => return Ok(unsupported_media_type(value)),
        },
        Some(Err(_)) => return Ok(unsupported_media_type("(not ASCII)")),
    };
    let answer_format =
        headers.get(header::ACCEPT).and_then(|v| v.to_str().ok()).and_then(Format::from_accept).unwrap_or(format);
    let user_ticket = header_string(headers, USER_TICKET);
    if declared_length(headers).is_some_and(|length| length > app.body_limit as u64) {
        return Ok(closing(version, too_large(app.body_limit)));
    }
    // A client that never finishes its body must not hold the call past its budget.
    let budget = app.budgets.of(handler);
    let deadline = started + budget;
    let read = Limited::new(request.into_body(), app.body_limit).collect();
    let body = match tokio::time::timeout_at(deadline, read).await {
        Ok(Ok(collected)) => collected.to_bytes(),
        Ok(Err(error)) if error.is::<LengthLimitError>() => return Ok(closing(version, too_large(app.body_limit))),
        Ok(Err(error)) => {
            let reason = format!("cannot read the request body: {error}\n");
            return Ok(closing(version, plain(StatusCode::BAD_REQUEST, reason)));
        }
        Err(_elapsed) => {
            let reason =
                format!("the request body did not arrive within the {} ms budget of /{handler}\n", budget.as_millis());
            return Ok(closing(version, plain(StatusCode::REQUEST_TIMEOUT, reason)));
        }
    };
    let call = Call { handler, body, format, started, client_timeout: None, user_ticket, transport: Transport::Http };
    match app.dispatcher.dispatch(scenario, call).await {
        Reply::Answer(binary) => Ok(render(handler, binary, answer_format)),
        Reply::Overloaded => Ok(plain(StatusCode::TOO_MANY_REQUESTS, "overloaded: /run is refused, retry later\n")),
    }
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
        Err(error) => plain(
            StatusCode::NOT_ACCEPTABLE,
            format!("{error}; ask for application/protobuf or text/protobuf instead\n"),
        ),
    }
}

fn declared_length(headers: &HeaderMap) -> Option<u64> {
    headers.get(header::CONTENT_LENGTH)?.to_str().ok()?.parse().ok()
}

fn header_string(headers: &HeaderMap, name: &str) -> Option<String> {
    headers.get(name).and_then(|v| v.to_str().ok()).map(str::to_owned)
}

/// Says `Connection: close` on an HTTP/1 answer, after which the connection
/// closes (HTTP/2 has no such header: its connections close by GOAWAY).
pub fn close_after<B>(version: Version, response: &mut Response<B>) {
    if version < Version::HTTP_2 {
        response.headers_mut().insert(header::CONNECTION, HeaderValue::from_static("close"));
    }
}

/// `response`, closing the connection after it: the request body was not
/// read to its end, so the connection cannot carry another request.
fn closing(version: Version, mut response: Response<Full<Bytes>>) -> Response<Full<Bytes>> {
    close_after(version, &mut response);
    response
}

/// A plain-text answer.
pub fn plain(status: StatusCode, text: impl Into<Bytes>) -> Response<Full<Bytes>> {
    let mut response = Response::new(Full::new(text.into()));
    *response.status_mut() = status;
    response.headers_mut().insert(header::CONTENT_TYPE, HeaderValue::from_static("text/plain; charset=utf-8"));
    response
}

fn not_found(app: &App, path: &str) -> Response<Full<Bytes>> {
    plain(
        StatusCode::NOT_FOUND,
        format!(
            "no such scenario handler: {path}\nroutes: POST /{{scenario}}/{{run|continue|commit|apply}} \
             (scenarios: {}), POST /{{run|continue|commit|apply}} for the default scenario\n",
            app.dispatcher.registry().listed()
        ),
    )
}

fn unsupported_media_type(value: &str) -> Response<Full<Bytes>> {
    plain(
        StatusCode::UNSUPPORTED_MEDIA_TYPE,
        format!(
            "unsupported Content-Type {value:?}: use application/protobuf (or application/x-protobuf), \
             application/json, or text/protobuf (or text/plain)\n"
        ),
    )
}

fn too_large(limit: usize) -> Response<Full<Bytes>> {
    plain(StatusCode::PAYLOAD_TOO_LARGE, format!("request body is over the limit of {limit} bytes\n"))
}
