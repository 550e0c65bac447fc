//! The decode step: a request body of either type, checked against the
//! limits a scenario must not have to think about (`RequestId` length,
//! nesting of `Any` payloads).

use prost_reflect::ReflectMessage;

use crate::{
    codec::{self, Format},
    proto::n_alice::n_scenarios::{TScenarioApplyRequest, TScenarioBaseRequest, TScenarioRunRequest},
    rules::logging,
    scenario::Handler,
};

/// Longest `BaseRequest.RequestId` accepted, in bytes: it keys the cache and
/// is written into every log line.
pub const MAX_REQUEST_ID: usize = 256;

/// A decoded request of either type, boxed: it is most of a kilobyte, and
/// the call's futures carry it from the decode step to the scenario.
pub(super) enum Request {
    Run(Box<TScenarioRunRequest>),
    Apply(Box<TScenarioApplyRequest>),
}

/// Why a request body was refused before any scenario saw it.
#[derive(Debug, thiserror::Error)]
pub(super) enum BadRequest {
    #[error(transparent)]
    Codec(#[from] codec::CodecError),
    #[error("BaseRequest.RequestId is missing or empty")]
    NoRequestId,
    #[error("BaseRequest.RequestId is {0} bytes long, over the limit of {MAX_REQUEST_ID}")]
    RequestIdTooLong(usize),
    #[error("{0} is nested deeper than the limit of {max} levels", max = codec::depth::MAX_DEPTH)]
    TooDeep(&'static str),
}

impl Request {
    pub(super) fn decode(handler: Handler, body: &[u8], format: Format) -> Result<Request, BadRequest> {
        let request = match handler {
            Handler::Run => Request::Run(Box::new(codec::decode(body, format)?)),
            _ => Request::Apply(Box::new(codec::decode(body, format)?)),
        };
        let length = request.request_id().len();
        if length > MAX_REQUEST_ID {
            return Err(BadRequest::RequestIdTooLong(length));
        }
        // JSON and text were measured whole as they were parsed; binary `Any`
        // payloads are still bytes, which a printer or a scenario may expand.
        if format == Format::Binary {
            request.check_any_depth()?;
        }
        if length == 0 {
            return Err(BadRequest::NoRequestId);
        }
        Ok(request)
    }

    pub(super) fn request_id(&self) -> &str {
        self.base().map_or("", |b| b.request_id.as_str())
    }

    fn arguments(&self) -> Option<&prost_types::Any> {
        match self {
            Request::Run(_) => None,
            Request::Apply(r) => r.arguments.as_ref(),
        }
    }

    fn base(&self) -> Option<&TScenarioBaseRequest> {
        match self {
            Request::Run(r) => r.base_request.as_ref(),
            Request::Apply(r) => r.base_request.as_ref(),
        }
    }

    /// Measures the `Any` fields of a request: `BaseRequest.State` sits at
    /// level 3 (request, `BaseRequest`, `State`), `Arguments` at level 2.
    fn check_any_depth(&self) -> Result<(), BadRequest> {
        use codec::depth::check_any;
        if let Some(state) = self.base().and_then(|b| b.state.as_ref()) {
            check_any(state, 3).map_err(|_| BadRequest::TooDeep("BaseRequest.State"))?;
        }
        if let Some(arguments) = self.arguments() {
            check_any(arguments, 2).map_err(|_| BadRequest::TooDeep("Arguments"))?;
        }
        Ok(())
    }

    /// Writes the redacted request, decoded from `body` in `format`, to the
    /// debug log. A binary body may hold more than text format prints in
    /// good time (JSON and text ones were bounded as they were parsed):
    /// such a body is not printed.
    pub(super) fn log(&self, body: &[u8], format: Format) {
        let desc = match self {
            Request::Run(r) => r.descriptor(),
            Request::Apply(r) => r.descriptor(),
        };
        let measured = if format == Format::Binary { codec::depth::check_binary_as_text(body, &desc) } else { Ok(()) };
        let text = match measured {
            Err(shape) => Err(shape.to_string()),
            Ok(()) => match self {
                Request::Run(r) => codec::redact::redacted_text(&**r).map_err(|e| e.to_string()),
                Request::Apply(r) => codec::redact::redacted_text(&**r).map_err(|e| e.to_string()),
            },
        };
        log_text("request", text);
    }
}

/// `body` decoded as the dispatcher decodes a request of each handler, for
/// the fuzz targets `decode_binary`, `decode_json` and `decode_text`, built
/// with the `fuzzing` feature.
/// Panics when what it lets in breaks its checks: a `RequestId` empty or
/// past [`MAX_REQUEST_ID`], `Arguments` measured within the nesting limit
/// that decode past it.
#[cfg(feature = "fuzzing")]
pub fn fuzz_decode(body: &[u8], format: Format) {
    use prost::Message;
    for handler in [Handler::Run, Handler::Apply] {
        let Ok(request) = Request::decode(handler, body, format) else { continue };
        let id = request.request_id().len();
        assert!(id > 0 && id <= MAX_REQUEST_ID, "a RequestId of {id} bytes let in");
        // The debug log's path: printed (or refused) without a panic.
        request.log(body, format);
        let Some(arguments) = request.arguments() else { continue };
        let any = crate::proto::DESCRIPTOR_POOL.get_message_by_name("google.protobuf.Any").expect("Any");
        let decoded = prost_reflect::DynamicMessage::decode(any, arguments.encode_to_vec().as_slice()).expect("an Any");
        if let Err(error) = codec::depth::check_message(&decoded, 2) {
            panic!("Arguments let in decode past the nesting limit: {error}");
        }
    }
}

/// Writes a body's text to the debug log (the log line caps its length).
pub(super) fn log_text(what: &str, text: Result<String, impl std::fmt::Display>) {
    match text {
        Ok(text) => tracing::debug!(target: logging::ACCESS_TARGET, "{what}\n{text}"),
        Err(error) => tracing::debug!(target: logging::ACCESS_TARGET, "{what} not printable: {error}"),
    }
}
