//! The `/llm` API for screen clients, beside the voice answer:
//! - `GET /llm/stream/{request_id}`: the answer of the model call that
//!   `/run` started for that `RequestId`, as a live JSONSeq v1 event stream
//!   ([`super::stream`]); `Last-Event-ID` or `?after=N` resumes;
//! - `GET /llm/answers/{request_id}`: the same call's whole answer as JSON;
//! - `GET /llm/schema`: the endpoints, their answers' JSON Schemas and how to
//!   reassemble an answer served in parts.
//!
//! A call's stream and answer open only by the signed address
//! `ShowStreamDirective` gave (`?exp=...&sig=...`, one signature for both
//! routes and every part): a bare `RequestId` opens nothing (403).
//! `/llm/skills` asks the server's authenticator, as a scenario call would;
//! `/llm/schema` is public, it describes the API.
//!
//! JSON answers longer than `chunk_bytes` are served in parts
//! ([`crate::parts`]). Errors are JSON, `{"error": {"code", "message"}}`:
//! an unsigned or expired address 403, an unknown call 404, an expired one
//! 410, a bad `Last-Event-ID` 400, past `max_streams` open streams 503, a
//! call whose journal the shared store cannot give now 503. Resuming after the last event of an
//! ended call answers 204, with no body. Every route follows a call and never
//! starts one.

use std::sync::Arc;

use axum::{
    extract::{Path, State},
    http::{HeaderMap, HeaderValue, StatusCode, Uri, header},
    response::{IntoResponse, Response},
    routing::get,
};
use futures_util::StreamExt;
use megamind_core::{
    dispatch::{Gate, Refusal},
    rules::auth::{AddressKey, signed::unix_now},
    scenario::{Setup, Shutdown},
};
use prost_reflect::ReflectMessage;
use serde_json::{Value, json};
use tokio::sync::{OwnedSemaphorePermit, Semaphore};

use crate::{
    backend::ModelEvent,
    calls::{
        Calls, Lookup,
        record::{CallRecord, Ending, View},
    },
    config::AssistantConfig,
    dialog::{answer, reply},
    jsonseq,
    llm::{
        kept::KeptAnswers,
        render, schema,
        stream::{self, Sequencer, Subscription},
    },
    metrics::AssistantMetrics,
    parts,
    parts::{Older, PartQuery, Parts, PartsConfig, Version, no_older},
    skills::dialog::SkillPolicy,
};

/// Longest call id looked up, in bytes: a call's id is its `RequestId` (at
/// most 256) and, for a skill's later step, the step's mark after it.
const MAX_ID_BYTES: usize = crate::dialog::state::MAX_CALL_ID;

/// How long a later part of a running call's answer waits for this
/// replica's copy of the call to hold the events its snapshot was made of
/// (the replica running the call writes them to the journal as they come).
const CATCH_UP: std::time::Duration = std::time::Duration::from_secs(1);

/// What the routes share.
#[derive(Debug)]
struct Api {
    sources: Sources,
    streams: Arc<Semaphore>,
    parts: Parts,
    gate: Gate,
    answers: KeptAnswers,
}

/// What the `/llm` routes read: the assistant's settings and metrics, its
/// model calls and its skills.
#[derive(Debug)]
pub(crate) struct Sources {
    /// The `[assistant]` table.
    pub(crate) config: AssistantConfig,
    /// Where the routes count their answers.
    pub(crate) metrics: AssistantMetrics,
    /// The model calls the streams and answers follow.
    pub(crate) calls: Calls,
    /// The skills policy, when it is the policy: for the catalog's route.
    pub(crate) skills: Option<Arc<SkillPolicy>>,
    /// What the addresses the routes open by are signed with.
    pub(crate) addresses: Arc<AddressKey>,
}

/// Registers the `/llm` routes over `sources`.
pub(crate) fn routes(sources: Sources, setup: &mut Setup<'_>) {
    let config = &sources.config;
    let parts = Parts::new(PartsConfig { chunk_bytes: config.llm.chunk_bytes, ..PartsConfig::default() });
    let streams = Arc::new(Semaphore::new(config.llm.max_streams));
    let api = Arc::new(Api { streams, parts, sources, gate: setup.gate(), answers: KeptAnswers::default() });
    setup.route_in_lane("/llm/stream/{request_id}", get(stream_route).with_state(api.clone()));
    setup.route("/llm/answers/{request_id}", get(answers_route).with_state(api.clone()));
    setup.route("/llm/skills", get(skills_route).with_state(api.clone()));
    setup.route("/llm/schema", get(schema_route).with_state(api));
}

/// The skills catalog: each skill's name, description, triggers,
/// parameters and allowed tools (not its body: the model's instructions).
async fn skills_route(State(api): State<Arc<Api>>, uri: Uri, headers: HeaderMap) -> Response {
    if let Err(refusal) = api.gate.admit(&headers).await {
        let why = match refusal {
            Refusal::Forbidden(why) => why,
            other => other.error_type().to_owned(),
        };
        api.sources.metrics.llm_api.with_label_values(&["skills", "forbidden"]).inc();
        return error(StatusCode::FORBIDDEN, "forbidden", &why);
    }
    let catalog = api.sources.skills.as_ref().map(|skills| skills.catalog());
    let skills: Vec<serde_json::Value> = catalog
        .iter()
        .flat_map(|catalog| catalog.skills())
        .map(|skill| {
            serde_json::json!({
                "name": skill.name,
                "description": skill.description,
                "triggers": skill.triggers,
                "parameters": skill.parameters.iter().map(|p| serde_json::json!({"name": p.name, "description": p.description})).collect::<Vec<_>>(),
                "allowed_tools": skill.allowed_tools,
                "compatibility": skill.compatibility,
                "license": skill.license,
            })
        })
        .collect();
    let whole = serde_json::json!({ "skills": skills }).to_string();
    api.respond("skills", "/llm/skills", || Arc::<str>::from(whole).into(), &no_older, &uri, &headers).await
}

async fn stream_route(
    State(api): State<Arc<Api>>,
    Path(id): Path<String>,
    uri: Uri,
    headers: HeaderMap,
    shutdown: Shutdown,
) -> Response {
    let metrics = &api.sources.metrics;
    let refuse = |status, code: &str, message: String| {
        metrics.llm_api.with_label_values(&["stream", code]).inc();
        error(status, code, &message)
    };
    // `Last-Event-ID`, else `?after=N`: resume after that event. Read here,
    // not by an extractor, so that a bad value gets our JSON error.
    let last = headers.get("last-event-id").map(|v| v.to_str().unwrap_or("-").to_owned());
    let after_query = || {
        url::form_urlencoded::parse(uri.query().unwrap_or("").as_bytes())
            .find(|(key, _)| key == "after")
            .map(|(_, value)| value.into_owned())
    };
    if let Err((status, code, message)) = api.admitted(&id, &uri) {
        return refuse(status, code, message);
    }
    let after = match last.or_else(after_query).map(|n| n.trim().parse::<u64>()) {
        None => 0,
        Some(Ok(after)) => after,
        Some(Err(_)) => {
            let message = "Last-Event-ID (or ?after=) must be the id of an event: a whole number".into();
            return refuse(StatusCode::BAD_REQUEST, "bad_request", message);
        }
    };
    let record = match api.lookup(&id).await {
        Ok(record) => record,
        Err((status, code, message)) => return refuse(status, code, message),
    };
    let Ok(permit) = api.streams.clone().try_acquire_owned() else {
        let max = api.sources.config.llm.max_streams;
        let message = format!("{max} streams are open, the most this server serves; retry shortly");
        let mut response = refuse(StatusCode::SERVICE_UNAVAILABLE, "refused", message);
        response.headers_mut().insert(header::RETRY_AFTER, HeaderValue::from_static("1"));
        return response;
    };
    let config = &api.sources.config;
    let subscription = Subscription {
        format: config.llm.stream_format,
        heartbeat: std::time::Duration::from_secs(config.llm.heartbeat_secs),
        after,
        delay: Some(metrics.stream_delay.clone()),
    };
    // A stream resumed far into a long call renders all it skips.
    let events = match render::aside(|| stream::sse(&id, &record, subscription, shutdown)) {
        Ok(events) => events,
        // Resumed after the last event of an ended call: 204 tells an
        // EventSource to stop reconnecting, which an empty 200 would not.
        Err(stream::Unserved::Ended) => {
            metrics.llm_api.with_label_values(&["stream", "ended"]).inc();
            return (StatusCode::NO_CONTENT, [(header::CACHE_CONTROL, HeaderValue::from_static("no-store"))])
                .into_response();
        }
        Err(stream::Unserved::Past { last }) => {
            let message = stream::Unserved::past_message(last, after);
            return refuse(StatusCode::BAD_REQUEST, "bad_request", message);
        }
    };
    metrics.llm_api.with_label_values(&["stream", "ok"]).inc();
    let open = Open::new(permit, metrics.streams_open.clone());
    let events = events.map(move |chunk| {
        // Held as long as the body: the stream counts as open until it ends.
        let _ = &open;
        chunk
    });
    (
        [
            (header::CONTENT_TYPE, HeaderValue::from_static("text/event-stream; charset=utf-8")),
            // The address is a secret: what it opens is kept by no cache.
            (header::CACHE_CONTROL, HeaderValue::from_static("no-store")),
            // Proxies that buffer (nginx) would hold the events back.
            (header::HeaderName::from_static("x-accel-buffering"), HeaderValue::from_static("no")),
        ],
        axum::body::Body::from_stream(events),
    )
        .into_response()
}

async fn answers_route(State(api): State<Arc<Api>>, Path(id): Path<String>, uri: Uri, headers: HeaderMap) -> Response {
    let metrics = &api.sources.metrics;
    let record = match api.admitted(&id, &uri) {
        Ok(()) => api.lookup(&id).await,
        Err(refused) => Err(refused),
    };
    let record = match record {
        Ok(record) => record,
        Err((status, code, message)) => {
            metrics.llm_api.with_label_values(&["answers", code]).inc();
            return error(status, code, &message);
        }
    };
    // Rendered only when the part needs it: a later part of a running call
    // comes from the snapshot its part 1 kept, or is made again from the
    // steps that snapshot held.
    let (record, id, api) = (&record, &id, &*api);
    let whole = || {
        if record.has_ended() {
            let render = || render::aside(|| api.answer(id, &record.view().0).to_string());
            return api.answers.get_or_render(record, render).into();
        }
        render::aside(|| {
            let (view, mark) = record.view();
            let json = api.answer(id, &view).to_string().into();
            Version { json, mark: mark.map(|mark| mark as u64) }
        })
    };
    // One wait, however many tags the request names.
    let older = OlderViews { record, id, api, deadline: tokio::time::Instant::now() + CATCH_UP };
    api.respond("answers", &format!("/llm/answers/{id}"), whole, &older, &uri, &headers).await
}

async fn schema_route(State(api): State<Arc<Api>>, uri: Uri, headers: HeaderMap) -> Response {
    let whole = || Arc::<str>::from(schema::schema(api.parts.config()).to_string()).into();
    api.respond("schema", "/llm/schema", whole, &no_older, &uri, &headers).await
}

/// The older versions of a call's answer, made again from its record at a
/// mark, the record followed until `deadline` while it lags.
struct OlderViews<'a> {
    record: &'a CallRecord,
    id: &'a str,
    api: &'a Api,
    deadline: tokio::time::Instant,
}

impl Older for OlderViews<'_> {
    async fn reached(&self, mark: u64) -> bool {
        match usize::try_from(mark) {
            Ok(mark) => self.record.reached(mark, self.deadline).await,
            Err(_) => false,
        }
    }

    fn make(&self, mark: u64) -> Option<Arc<str>> {
        render::aside(|| {
            let view = self.record.view_at(usize::try_from(mark).ok()?)?;
            Some(self.api.answer(self.id, &view).to_string().into())
        })
    }
}

impl Api {
    /// Whether call `id` may be opened at the address asked: an id no
    /// longer than a RequestId's bound, signed and not expired; the error
    /// answer's status, code and message when not. The length comes first:
    /// checking the signature hashes the whole id.
    fn admitted(&self, id: &str, uri: &Uri) -> Result<(), (StatusCode, &'static str, String)> {
        if id.len() > MAX_ID_BYTES {
            let message = format!("a call id is at most {MAX_ID_BYTES} bytes");
            return Err((StatusCode::BAD_REQUEST, "bad_request", message));
        }
        self.signed(id, uri).map_err(|why| (StatusCode::FORBIDDEN, "forbidden", why))
    }

    /// Whether the address asked (its query) is signed for call `id` and
    /// not expired; why not, when not.
    fn signed(&self, id: &str, uri: &Uri) -> Result<(), String> {
        self.sources.addresses.verify(id, uri.query(), unix_now()).map_err(|error| {
            let replicas = if self.sources.addresses.is_shared() {
                ""
            } else {
                " (this server signs with a key of its own: an address from another replica or from before a restart opens nothing here)"
            };
            format!("{error}; open the address given in ShowStreamDirective{replicas}")
        })
    }

    /// The record of call `id`, or the error answer's status, code and message.
    async fn lookup(&self, id: &str) -> Result<Arc<CallRecord>, (StatusCode, &'static str, String)> {
        match self.sources.calls.lookup(id).await {
            Lookup::Kept(record) => Ok(record),
            Lookup::Gone => Err((StatusCode::GONE, "gone", "the answer of this request expired; ask again".into())),
            Lookup::Unavailable => Err((
                StatusCode::SERVICE_UNAVAILABLE,
                "unavailable",
                "the model calls' journal is out of reach for now; retry".into(),
            )),
            Lookup::Unknown => Err((
                StatusCode::NOT_FOUND,
                "not_found",
                "no model call was started for this request id (it starts with the request's /run)".into(),
            )),
        }
    }

    /// The answer `whole` renders as the part the request asks for
    /// (`?part=N&snapshot=...`; read by `parts`, so that a bad value gets
    /// its JSON error).
    async fn respond(
        &self,
        route: &str,
        resource: &str,
        whole: impl FnOnce() -> Version,
        older: &impl Older,
        uri: &Uri,
        headers: &HeaderMap,
    ) -> Response {
        let query = PartQuery::from_query(uri.query());
        let response = self.parts.respond(resource, whole, older, &query, headers.get(header::IF_MATCH)).await;
        let status = response.status();
        let outcome = if status.is_success() { "ok" } else { status.as_str() };
        self.sources.metrics.llm_api.with_label_values(&[route, outcome]).inc();
        response
    }

    /// The whole answer of call `id` as `view` sees it, as `/llm/answers` gives it.
    fn answer(&self, id: &str, view: &View) -> Value {
        let config = &self.sources.config;
        let View { events, truncated, ending, timings } = view;
        let (truncated, ending) = (*truncated, ending.clone());
        let mut sequencer = Sequencer::new(id, config.llm.stream_format);
        let mut numbered = Vec::new();
        sequencer.start(&mut numbered);
        let (mut raw, mut reasoning) = (String::new(), String::new());
        for event in events {
            sequencer.model_event(event, &mut numbered);
            match event {
                ModelEvent::TextDelta(text) => raw.push_str(text),
                ModelEvent::ReasoningDelta(text) => reasoning.push_str(text),
                ModelEvent::Finish { .. } | ModelEvent::Usage { .. } => {}
            }
        }
        sequencer.end(&ending, &mut numbered);
        let finish_reason = sequencer.finish_reason();
        let (status, failure) = match &ending {
            Ending::Running => ("running", None),
            Ending::Completed => ("completed", None),
            Ending::Failed(reason) => ("failed", Some(reason.clone())),
        };
        // The words apart from the thought, as the voice hears them.
        let reading = jsonseq::read(config.llm.stream_format, &raw, ending == Ending::Completed);
        if !reading.thought.is_empty() {
            if !reasoning.is_empty() {
                reasoning.push_str("\n\n");
            }
            reasoning.push_str(&reading.thought);
        }
        // What the answer says and does, once it is whole.
        let understood = (ending == Ending::Completed).then(|| {
            let parsed = answer::parse(&reading.answer);
            let cut = truncated || finish_reason == Some("length");
            if cut { parsed.truncated() } else { parsed }
        });
        let command = understood.as_ref().and_then(|a| a.command.as_ref());
        let directive = command.map(|command| {
            let directive = reply::directive(command).transcode_to_dynamic();
            megamind_core::codec::json::to_value(&directive).unwrap_or(Value::Null)
        });
        let ms = |d: std::time::Duration| d.as_secs_f64() * 1e3;
        json!({
            "request_id": id,
            "message_id": stream::message_id(id),
            "model": if config.is_offline() { "offline" } else { config.backend.model.as_str() },
            "status": status,
            "text": understood.as_ref().map_or(reading.answer.as_str(), |a| a.text.as_str()),
            "raw_text": raw,
            "reasoning": reasoning,
            "truncated": truncated,
            "finish_reason": finish_reason,
            "error": failure,
            "command": command.map(command_json),
            "directive": directive,
            "events": numbered.iter().map(|e| json!({"id": e.id, "event": e.name, "data": Value::Object(e.data.clone())})).collect::<Vec<_>>(),
            "timings": {
                "first_token_ms": timings.first_event.map(ms),
                "total_ms": ms(timings.elapsed),
            },
            "usage": sequencer.usage(),
        })
    }
}

/// A command as the model gave it, understood.
fn command_json(command: &answer::Command) -> Value {
    let (app_name, app_path) = match command {
        answer::Command::OpenApp { app_name, app_path, .. } => (app_name, app_path.as_str()),
        answer::Command::CloseApp { app_name, .. } => (app_name, ""),
    };
    json!({"command": command.name(), "app_name": app_name, "app_path": app_path, "session_id": command.session_id()})
}

/// A JSON error answer, in the shape of the parts' errors.
fn error(status: StatusCode, code: &str, message: &str) -> Response {
    parts::json_error(status, code, message)
}

/// An open stream: its permit and its place in the gauge, given back when
/// the body is dropped, however it ends.
#[derive(Debug)]
struct Open {
    _permit: OwnedSemaphorePermit,
    gauge: prometheus::IntGauge,
}

impl Open {
    fn new(permit: OwnedSemaphorePermit, gauge: prometheus::IntGauge) -> Open {
        gauge.inc();
        Open { _permit: permit, gauge }
    }
}

impl Drop for Open {
    fn drop(&mut self) {
        self.gauge.dec();
    }
}
