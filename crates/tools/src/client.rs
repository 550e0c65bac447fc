//! A protocol client that plays a scenario the way Megamind does, over HTTP
//! (binary protobuf) or gRPC.
//!
//! [`Client::say`] plays one turn: `/run` with the user's words and a fresh
//! `RequestId`, then what the answer asks for under the same `RequestId`
//! (`/continue` with `ContinueArguments`, `/commit` after a
//! `CommitCandidate`, `/apply` with `ApplyArguments`). An answer carrying a
//! `CallbackDirective` is followed by a new `/run` with `Input.Callback`, up
//! to [`Client::with_max_callbacks`] times. Each answer's `State` goes into
//! the next request's `BaseRequest.State`; the first `/run` of a session has
//! `IsNewSession`. [`Client::call`] sends one raw request instead.
//!
//! ```no_run
//! use megamind_tools::client::Client;
//!
//! # async fn example() -> Result<(), megamind_tools::client::ClientError> {
//! let mut client = Client::http("http://127.0.0.1:8080")?.with_scenario("assistant");
//! let turn = client.say("открой Safari").await?;
//! for hop in &turn.hops {
//!     println!("/{} took {:?}", hop.handler(), hop.took);
//! }
//! println!("{}", turn.speech());
//! // The State of the first turn's answer goes along.
//! let next = client.say("а теперь закрой").await?;
//! assert!(!next.is_irrelevant());
//! # Ok(())
//! # }
//! ```

mod error;
mod hop;
mod ticket;
mod turn;
mod wire;

use std::{
    sync::{
        Arc,
        atomic::{AtomicU64, AtomicUsize, Ordering},
    },
    time::{Duration, SystemTime, UNIX_EPOCH},
};

pub use error::ClientError;
pub use hop::{Hop, Request, Response};
use megamind_core::{
    proto::{
        megamind_scenario::v1::scenario_client::ScenarioClient,
        n_alice::n_scenarios::{
            TAsrResult, TAsrWord, TCallbackDirective, TError, TInput, TRunCommandDirective, TScenarioApplyRequest,
            TScenarioBaseRequest, TScenarioResponseBody, TScenarioRunRequest, TTextInput, TVoiceInput, t_directive,
            t_input, t_scenario_commit_response, t_scenario_run_response,
        },
    },
    scenario::Handler,
};
use prost_types::Any;
pub use ticket::Ticket;
use tonic::transport::Channel;
pub use turn::Turn;
use wire::{Route, Wire};

/// How many callbacks one turn follows unless told otherwise.
pub const DEFAULT_MAX_CALLBACKS: usize = 128;
/// The longest answer read over HTTP, in bytes ([`ClientError::TooLarge`]
/// past it). A protocol answer is kilobytes: more comes from a broken or
/// hostile server, which must not fill the client's memory.
pub const MAX_ANSWER_BYTES: usize = 64 << 20;
/// Bytes of an error answer's body kept in [`ClientError::Status`]: enough
/// for the reason, not a whole error page.
pub const MAX_ERROR_BODY_BYTES: usize = 1024;

/// A dialog with one scenario on one server: its transport, its settings and
/// the session it carries (`State`, whether the session is new, the
/// `RequestId`s given so far).
#[derive(Debug)]
pub struct Client {
    wire: Wire,
    route: Route,
    template: TScenarioBaseRequest,
    request_id_prefix: String,
    max_callbacks: usize,
    follow_callbacks: bool,
    state: Option<Any>,
    new_session: bool,
    requests: u64,
    command: Option<TRunCommandDirective>,
}

impl Client {
    /// A client that POSTs binary protobuf to `{base_url}/{scenario}/{handler}`
    /// (`http://` assumed when `base_url` names no scheme). It connects
    /// directly, ignoring proxy settings, as Megamind does.
    pub fn http(base_url: &str) -> Result<Client, ClientError> {
        Client::http_round_robin(&[base_url], 0)
    }

    /// A client of several replicas of one server, as a round-robin
    /// balancer in front of them sends a dialog's requests: its `n`-th call
    /// (counting every `/run`, hand-over and callback from 0) goes to
    /// `base_urls[(first + n) % base_urls.len()]`. Otherwise as [`Client::http`].
    pub fn http_round_robin(base_urls: &[&str], first: usize) -> Result<Client, ClientError> {
        if base_urls.is_empty() {
            return Err(ClientError::Setting { name: "server address", reason: "no server given".into() });
        }
        let mut bases = Vec::with_capacity(base_urls.len());
        for base_url in base_urls {
            let base = with_scheme(base_url);
            let url = reqwest::Url::parse(&base).map_err(|e| ClientError::Setting {
                name: "server address",
                reason: format!("{:?}: {e}", shown_address(base_url)),
            })?;
            if !matches!(url.scheme(), "http" | "https") {
                let reason = format!("{:?} is not an http:// or https:// URL", shown_address(base_url));
                return Err(ClientError::Setting { name: "server address", reason });
            }
            bases.push(base.trim_end_matches('/').to_owned());
        }
        // No redirect is followed: Megamind follows none, and the tickets
        // are headers of our own, which reqwest would send on to the
        // host a redirect names.
        let http = megamind_core::http_client::client_builder()
            .no_proxy()
            .redirect(reqwest::redirect::Policy::none())
            .build()
            .map_err(|e| ClientError::Setting { name: "HTTP client", reason: e.to_string() })?;
        let next = Arc::new(AtomicUsize::new(first % bases.len()));
        Ok(Client::over(Wire::Http { http, bases: bases.into(), next }))
    }

    /// A client of the gRPC service at `address` (`http://` assumed when it
    /// names no scheme). It connects on the first call, so a server that
    /// cannot be reached shows as that call's `UNAVAILABLE`; it must be made
    /// inside a tokio runtime.
    pub fn grpc(address: &str) -> Result<Client, ClientError> {
        let channel = Channel::from_shared(with_scheme(address))
            .map_err(|e| ClientError::Setting {
                name: "server address",
                reason: format!("{:?}: {e}", shown_address(address)),
            })?
            .connect_lazy();
        Ok(Client::over(Wire::Grpc(ScenarioClient::new(channel))))
    }

    fn over(wire: Wire) -> Client {
        Client {
            wire,
            route: Route::default(),
            template: TScenarioBaseRequest::default(),
            request_id_prefix: unique_prefix(),
            max_callbacks: DEFAULT_MAX_CALLBACKS,
            follow_callbacks: true,
            state: None,
            new_session: true,
            requests: 0,
            command: None,
        }
    }

    /// Talks to scenario `name` (by default, the server's default scenario).
    pub fn with_scenario(mut self, name: &str) -> Client {
        self.route.scenario = Some(name.to_owned());
        self
    }

    /// Gives up on a call after `timeout` with [`ClientError::Timeout`]. By
    /// default the client waits as long as the server takes (the server
    /// itself answers within its budget).
    pub fn with_timeout(mut self, timeout: Duration) -> Client {
        self.route.timeout = Some(timeout);
        self
    }

    /// `RequestId`s become `{prefix}1`, `{prefix}2`, ... in the order the
    /// turns' `/run`s are sent. The default prefix is unique to the client,
    /// so that two clients never share a `RequestId` (the server would
    /// answer the second from its cache).
    pub fn with_request_id_prefix(mut self, prefix: &str) -> Client {
        self.request_id_prefix = prefix.to_owned();
        self
    }

    /// Sends `ticket` as the caller's TVM service ticket
    /// (`X-Ya-Service-Ticket`), for a server that checks who calls.
    pub fn with_service_ticket(mut self, ticket: &str) -> Client {
        self.route.service_ticket = Some(Ticket::new(ticket));
        self
    }

    /// Sends `ticket` as the user's TVM ticket (`X-Ya-User-Ticket`).
    pub fn with_user_ticket(mut self, ticket: &str) -> Client {
        self.route.user_ticket = Some(Ticket::new(ticket));
        self
    }

    /// Every `BaseRequest` starts as a copy of `template`: client info,
    /// location, experiments, `ServerTimeMs` (the current time when zero)...
    /// `RequestId`, `State` and `IsNewSession` are always the client's.
    pub fn with_base_request(mut self, template: TScenarioBaseRequest) -> Client {
        self.template = template;
        self
    }

    /// Follows at most `max` callbacks in one turn (default
    /// [`DEFAULT_MAX_CALLBACKS`]); one more is [`ClientError::TooManyCallbacks`].
    pub fn with_max_callbacks(mut self, max: usize) -> Client {
        self.max_callbacks = max;
        self.follow_callbacks = true;
        self
    }

    /// Plays a client that does not follow callbacks: a turn ends with the
    /// first answer for the user, whatever directives it carries.
    pub fn ignoring_callbacks(mut self) -> Client {
        self.follow_callbacks = false;
        self
    }

    /// The `State` the next turn sends.
    pub fn state(&self) -> Option<&Any> {
        self.state.as_ref()
    }

    /// Starts a new session: no `State`, and the next `/run` has `IsNewSession`.
    pub fn new_session(&mut self) {
        self.state = None;
        self.new_session = true;
    }

    /// One turn of the user's typed `words` (`Input.Text`).
    pub async fn say(&mut self, words: &str) -> Result<Turn, ClientError> {
        let text = TTextInput { utterance: words.to_owned(), raw_utterance: words.to_owned() };
        self.send(input_of(t_input::Event::Text(text))).await
    }

    /// One turn of the user's spoken `words` (`Input.Voice`, recognised with
    /// full confidence).
    pub async fn say_voice(&mut self, words: &str) -> Result<Turn, ClientError> {
        let asr_words = words.split_whitespace().map(|word| TAsrWord { value: word.to_owned(), confidence: 1.0 });
        let asr = TAsrResult { utterance: words.to_owned(), confidence: 1.0, words: asr_words.collect() };
        let voice = TVoiceInput { utterance: words.to_owned(), asr_data: vec![asr], ..Default::default() };
        self.send(input_of(t_input::Event::Voice(voice))).await
    }

    /// The command an answer asked the client to run (`RunCommandDirective`)
    /// that no result was sent for yet: the latest such, kept across turns
    /// that carry none, as a device keeps running a command while the user
    /// speaks.
    pub fn pending_command(&self) -> Option<&TRunCommandDirective> {
        self.command.as_ref()
    }

    /// Sends the result of the [pending command](Client::pending_command):
    /// its callback, the payload completed with `output`, `exit_code` and
    /// `skipped`, as a client that ran (or skipped) it does.
    pub async fn command_result(&mut self, output: &str, exit_code: i32, skipped: bool) -> Result<Turn, ClientError> {
        let mut callback = self.command.take().and_then(|run| run.callback).ok_or(ClientError::NoCommand)?;
        let fields = &mut callback.payload.get_or_insert_with(Default::default).fields;
        let value = |kind| prost_types::Value { kind: Some(kind) };
        use prost_types::value::Kind;
        fields.insert("output".into(), value(Kind::StringValue(output.to_owned())));
        fields.insert("exit_code".into(), value(Kind::NumberValue(f64::from(exit_code))));
        fields.insert("skipped".into(), value(Kind::BoolValue(skipped)));
        self.send(input_of(t_input::Event::Callback(callback))).await
    }

    /// One turn of any `input` (semantic frames, a callback of the user's
    /// choosing, ...), played as [`Client::say`] plays words.
    pub async fn send(&mut self, mut input: TInput) -> Result<Turn, ClientError> {
        let mut hops = Vec::new();
        let mut callbacks = 0;
        loop {
            self.requests += 1;
            let request_id = format!("{}{}", self.request_id_prefix, self.requests);
            let (body, irrelevant) = self.play(&request_id, input, &mut hops).await?;
            self.new_session = false;
            // Megamind keeps the state of the scenario that answered: a
            // declined turn leaves the dialog's state as it was.
            if !irrelevant {
                self.state = body.state.clone();
                if let Some(run) = run_command_of(&body) {
                    self.command = Some(run.clone());
                }
            }
            let Some(callback) = callback_of(&body).filter(|_| self.follow_callbacks) else {
                return Ok(Turn::new(hops, body, irrelevant));
            };
            if callbacks == self.max_callbacks {
                return Err(ClientError::TooManyCallbacks { max: self.max_callbacks });
            }
            callbacks += 1;
            input = input_of(t_input::Event::Callback(callback.clone()));
        }
    }

    /// Sends one request as it is and returns the answer, protocol `Error`
    /// included: for requests a dialog would not send.
    pub async fn call(&self, request: Request) -> Result<Hop, ClientError> {
        self.wire.call(&self.route, request).await
    }

    /// `/run` of `input` and the handler its answer hands over to, all under
    /// `request_id`; returns the answer for the user and whether `/run`
    /// declined.
    async fn play(
        &self,
        request_id: &str,
        input: TInput,
        hops: &mut Vec<Hop>,
    ) -> Result<(TScenarioResponseBody, bool), ClientError> {
        use t_scenario_run_response::Response as Run;

        let base = self.base_request(request_id);
        let run = TScenarioRunRequest { base_request: Some(base.clone()), input: Some(input.clone()) };
        let hop = self.call(Request::Run(run)).await?;
        let unexpected = |what| ClientError::Unexpected { handler: Handler::Run, what };
        let Response::Run(answer) = &hop.response else { return Err(unexpected("not a TScenarioRunResponse")) };
        let irrelevant = answer.features.as_ref().is_some_and(|features| features.is_irrelevant);
        // Megamind sends the handed-over arguments with the same BaseRequest and Input.
        let apply = |arguments: Option<&Any>| TScenarioApplyRequest {
            arguments: arguments.cloned(),
            base_request: Some(base.clone()),
            input: Some(input.clone()),
        };
        let (request, spoken) = match &answer.response {
            Some(Run::ResponseBody(body)) => {
                let body = body.clone();
                hops.push(hop);
                return Ok((body, irrelevant));
            }
            Some(Run::ContinueArguments(arguments)) => (Request::Continue(apply(Some(arguments))), None),
            Some(Run::ApplyArguments(arguments)) => (Request::Apply(apply(Some(arguments))), None),
            Some(Run::CommitCandidate(candidate)) => {
                let body =
                    candidate.response_body.clone().ok_or(unexpected("a CommitCandidate without ResponseBody"))?;
                (Request::Commit(apply(candidate.arguments.as_ref())), Some(body))
            }
            Some(Run::Error(error)) => return Err(protocol(Handler::Run, error)),
            None => return Err(unexpected("no Response: none of ResponseBody, CommitCandidate, arguments, Error")),
        };
        hops.push(hop);

        let hop = self.call(request).await?;
        let handler = hop.handler();
        if let Some(error) = hop.response.error() {
            return Err(protocol(handler, error));
        }
        let body = match (&hop.response, spoken) {
            // The candidate's answer was spoken; /commit only performs the side effect.
            (Response::Commit(answer), Some(body)) => match answer.response {
                Some(t_scenario_commit_response::Response::Success(_)) => body,
                _ => return Err(ClientError::Unexpected { handler, what: "neither Success nor Error" }),
            },
            (response, _) => {
                response.body().cloned().ok_or(ClientError::Unexpected { handler, what: "no ResponseBody" })?
            }
        };
        hops.push(hop);
        Ok((body, irrelevant))
    }

    fn base_request(&self, request_id: &str) -> TScenarioBaseRequest {
        let mut base = self.template.clone();
        base.request_id = request_id.to_owned();
        base.state = self.state.clone();
        base.is_new_session = self.new_session;
        if base.server_time_ms == 0 {
            base.server_time_ms = SystemTime::now().duration_since(UNIX_EPOCH).unwrap_or_default().as_millis() as u64;
        }
        base
    }
}

fn protocol(handler: Handler, error: &TError) -> ClientError {
    ClientError::Protocol { handler, kind: error.r#type.clone(), message: error.message.clone() }
}

/// The first `CallbackDirective` of the answer's layout.
fn callback_of(body: &TScenarioResponseBody) -> Option<&TCallbackDirective> {
    let directives = body.layout.as_ref().map_or(&[][..], |layout| &layout.directives);
    directives.iter().find_map(|directive| match &directive.directive {
        Some(t_directive::Directive::CallbackDirective(callback)) => Some(callback),
        _ => None,
    })
}

/// The first `RunCommandDirective` of the answer's layout.
fn run_command_of(body: &TScenarioResponseBody) -> Option<&TRunCommandDirective> {
    let directives = body.layout.as_ref().map_or(&[][..], |layout| &layout.directives);
    directives.iter().find_map(|directive| match &directive.directive {
        Some(t_directive::Directive::RunCommandDirective(run)) => Some(run),
        _ => None,
    })
}

fn input_of(event: t_input::Event) -> TInput {
    TInput { event: Some(event), ..Default::default() }
}

fn with_scheme(address: &str) -> String {
    if address.contains("://") { address.to_owned() } else { format!("http://{address}") }
}

/// A server's `address` fit for an error message or a log: without the
/// password a URL may carry (`http://user:<hidden>@host/`). When it does not
/// parse as a URL, where the password ends is anyone's guess, so everything
/// between the scheme and the last `@` is hidden.
pub fn shown_address(address: &str) -> String {
    let full = with_scheme(address);
    if reqwest::Url::parse(&full).is_ok() {
        return megamind_core::text::redact_url(&full);
    }
    match full.rsplit_once('@') {
        Some((before, host)) => {
            let scheme = before.split_once("://").map_or("", |(scheme, _)| scheme);
            format!("{scheme}://{}@{host}", megamind_core::text::HIDDEN)
        }
        None => full,
    }
}

/// A `RequestId` prefix no other client shares: this process, the time it
/// was made, and its number among this process's clients.
fn unique_prefix() -> String {
    static CLIENTS: AtomicU64 = AtomicU64::new(0);
    let client = CLIENTS.fetch_add(1, Ordering::Relaxed);
    let nanos = SystemTime::now().duration_since(UNIX_EPOCH).unwrap_or_default().as_nanos();
    format!("{:x}-{nanos:x}-{client}-", std::process::id())
}
