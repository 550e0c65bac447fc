//! How one request reaches the server: `POST {base}/{scenario}/{handler}`
//! with a binary protobuf body, or the unary gRPC method of
//! `megamind_scenario.v1.Scenario` with the scenario in `x-scenario`.
//! Either way the answer comes back decoded and timed, as a [`Hop`].

use std::{
    sync::{
        Arc,
        atomic::{AtomicUsize, Ordering},
    },
    time::Duration,
};

use megamind_core::{
    codec::{self, Format},
    proto::{megamind_scenario::v1::scenario_client::ScenarioClient, n_alice::n_scenarios::TScenarioRunResponse},
    scenario::{
        Handler,
        meta::{SCENARIO_KEY, SERVICE_TICKET, USER_TICKET},
    },
};
use prost::Message;
// tokio's clock, as the server's timers use: a test that pauses time sees
// the same durations here as in the server.
use tokio::time::Instant;
use tonic::{
    metadata::{AsciiMetadataValue, MetadataMap},
    transport::Channel,
};

use super::{
    ClientError, MAX_ANSWER_BYTES, MAX_ERROR_BODY_BYTES, Ticket,
    hop::{Hop, Request, Response},
};

/// The transport to one server, or over HTTP to several replicas of one.
#[derive(Debug, Clone)]
pub(super) enum Wire {
    /// HTTP with binary protobuf bodies; no base has a trailing `/`. Call
    /// `n` goes to `bases[n % len]`, `next` counting the calls.
    Http { http: reqwest::Client, bases: Arc<[String]>, next: Arc<AtomicUsize> },
    /// gRPC over one HTTP/2 channel.
    Grpc(ScenarioClient<Channel>),
}

/// What every call carries besides its message.
#[derive(Debug, Clone, Default)]
pub(super) struct Route {
    /// The scenario; `None` for the server's default one.
    pub(super) scenario: Option<String>,
    /// `X-Ya-Service-Ticket`, for a server that checks who calls.
    pub(super) service_ticket: Option<Ticket>,
    /// `X-Ya-User-Ticket`, when the user is logged in.
    pub(super) user_ticket: Option<Ticket>,
    /// How long to wait for one answer.
    pub(super) timeout: Option<Duration>,
}

impl Route {
    /// The tickets to send: their header, their name for errors, their value.
    fn tickets(&self) -> impl Iterator<Item = (&'static str, &'static str, &str)> {
        let service = self.service_ticket.as_ref().map(|t| (SERVICE_TICKET, "service ticket", t.expose()));
        let user = self.user_ticket.as_ref().map(|t| (USER_TICKET, "user ticket", t.expose()));
        service.into_iter().chain(user)
    }
}

impl Wire {
    /// Sends `request` and waits for its answer, within `route.timeout` if set.
    pub(super) async fn call(&self, route: &Route, request: Request) -> Result<Hop, ClientError> {
        let handler = request.handler();
        let exchange = async {
            match self {
                Wire::Http { http, bases, next } => {
                    let base = &bases[next.fetch_add(1, Ordering::Relaxed) % bases.len()];
                    http_call(http, base, route, &request).await
                }
                Wire::Grpc(client) => grpc_call(client.clone(), route, request.clone()).await,
            }
        };
        let (took, response) = match route.timeout {
            Some(after) => {
                tokio::time::timeout(after, exchange).await.map_err(|_| ClientError::Timeout { handler, after })??
            }
            None => exchange.await?,
        };
        Ok(Hop { request, took, response })
    }
}

async fn http_call(
    http: &reqwest::Client,
    base: &str,
    route: &Route,
    request: &Request,
) -> Result<(Duration, Response), ClientError> {
    let handler = request.handler();
    let url = match &route.scenario {
        Some(scenario) => format!("{base}/{scenario}/{handler}"),
        None => format!("{base}/{handler}"),
    };
    let body = match request {
        Request::Run(message) => message.encode_to_vec(),
        Request::Continue(message) | Request::Commit(message) | Request::Apply(message) => message.encode_to_vec(),
    };
    let mut post = http.post(url).header(http::header::CONTENT_TYPE, "application/protobuf").body(body);
    for (header, name, ticket) in route.tickets() {
        let ticket = http::HeaderValue::from_str(ticket)
            .map_err(|_| ClientError::Setting { name, reason: unsendable(ticket) })?;
        post = post.header(header, ticket);
    }
    let unreachable = |source| ClientError::Unreachable { handler, source };
    let started = Instant::now();
    let mut answer = post.send().await.map_err(unreachable)?;
    let status = answer.status();
    if status != http::StatusCode::OK {
        // Only what the error keeps is read: a huge error page costs nothing.
        let bytes = read_body(&mut answer, MAX_ERROR_BODY_BYTES).await.map_err(unreachable)?;
        let text = String::from_utf8_lossy(&bytes);
        // Shown on a terminal: its control characters escaped.
        let body = crate::stdout::shown(megamind_core::text::clip(text.trim_end(), MAX_ERROR_BODY_BYTES));
        return Err(ClientError::Status { handler, status, body });
    }
    let too_large = ClientError::TooLarge { handler, limit: MAX_ANSWER_BYTES };
    // A length announced past the bound is refused before a byte is read.
    if answer.content_length().is_some_and(|length| length > MAX_ANSWER_BYTES as u64) {
        return Err(too_large);
    }
    let bytes = read_body(&mut answer, MAX_ANSWER_BYTES).await.map_err(unreachable)?;
    if bytes.len() > MAX_ANSWER_BYTES {
        return Err(too_large);
    }
    let took = started.elapsed();
    let decode = |source| ClientError::Decode { handler, source };
    // Counted before it is decoded, as the server counts a request.
    let binary = Format::Binary;
    let response = match handler {
        Handler::Run => Response::Run(codec::decode::<TScenarioRunResponse>(&bytes, binary).map_err(decode)?),
        Handler::Continue => Response::Continue(codec::decode(&bytes, binary).map_err(decode)?),
        Handler::Commit => Response::Commit(codec::decode(&bytes, binary).map_err(decode)?),
        Handler::Apply => Response::Apply(codec::decode(&bytes, binary).map_err(decode)?),
    };
    Ok((took, response))
}

/// The body of `answer`, chunk by chunk, until it ends or holds more than
/// `limit` bytes: then it stops reading, and what it returns is longer than
/// `limit` by less than a chunk.
async fn read_body(answer: &mut reqwest::Response, limit: usize) -> Result<Vec<u8>, reqwest::Error> {
    let mut body = Vec::new();
    while let Some(chunk) = answer.chunk().await? {
        body.extend_from_slice(&chunk);
        if body.len() > limit {
            break;
        }
    }
    Ok(body)
}

/// Why `ticket` cannot be sent, without its text: a ticket is a credential,
/// and error messages end up in logs.
fn unsendable(ticket: &str) -> String {
    format!("the {}-byte ticket holds a character other than visible ASCII, which a header cannot carry", ticket.len())
}

async fn grpc_call(
    mut client: ScenarioClient<Channel>,
    route: &Route,
    request: Request,
) -> Result<(Duration, Response), ClientError> {
    let handler = request.handler();
    let metadata = &metadata(route)?;
    let started = Instant::now();
    let answer = match request {
        Request::Run(message) => {
            client.run(grpc_request(message, metadata)).await.map(|a| Response::Run(a.into_inner()))
        }
        Request::Continue(message) => {
            let request = grpc_request(message, metadata);
            client.r#continue(request).await.map(|a| Response::Continue(a.into_inner()))
        }
        Request::Commit(message) => {
            client.commit(grpc_request(message, metadata)).await.map(|a| Response::Commit(a.into_inner()))
        }
        Request::Apply(message) => {
            client.apply(grpc_request(message, metadata)).await.map(|a| Response::Apply(a.into_inner()))
        }
    };
    let took = started.elapsed();
    let response = answer.map_err(|status| ClientError::Grpc {
        handler,
        code: status.code(),
        message: crate::stdout::shown(status.message()),
    })?;
    Ok((took, response))
}

// No `grpc-timeout`: the server would answer its own `timeout` Error at
// the deadline, racing the client's timer; over HTTP nothing tells the server
// either, so both transports end a late call the same way.
fn grpc_request<T>(message: T, metadata: &MetadataMap) -> tonic::Request<T> {
    let mut request = tonic::Request::new(message);
    *request.metadata_mut() = metadata.clone();
    request
}

fn metadata(route: &Route) -> Result<MetadataMap, ClientError> {
    let mut metadata = MetadataMap::new();
    let value = |name, text: &str, reason: fn(&str) -> String| {
        AsciiMetadataValue::try_from(text).map_err(|_| ClientError::Setting { name, reason: reason(text) })
    };
    if let Some(scenario) = &route.scenario {
        metadata.insert(
            SCENARIO_KEY,
            value("scenario name", scenario, |text| format!("{text:?} is not a valid metadata value"))?,
        );
    }
    for (key, name, ticket) in route.tickets() {
        metadata.insert(key, value(name, ticket, unsendable)?);
    }
    Ok(metadata)
}
