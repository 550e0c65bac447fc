//! The handlers' response messages on the wire: encoding a scenario's
//! answer (with its `Version`), the protocol `Error` of each handler, and
//! the message types of each handler for JSON and text format.

use bytes::Bytes;
use prost::Message;
use prost_reflect::{MessageDescriptor, ReflectMessage};

use crate::{
    proto::n_alice::n_scenarios::{
        TError, TScenarioApplyResponse, TScenarioCommitResponse, TScenarioContinueResponse, TScenarioFeatures,
        TScenarioRunResponse, t_scenario_apply_response, t_scenario_commit_response, t_scenario_continue_response,
        t_scenario_run_response,
    },
    scenario::{Answer, Handler, Scenario},
};

/// A response message with a `Version` field, and a protocol `Error` it may be.
pub(crate) trait Versioned: Message + Clone {
    fn version(&self) -> &str;
    fn version_mut(&mut self) -> &mut String;
    /// The `Type` of the `Error` the message is, if it is one.
    fn error_type(&self) -> Option<&str>;
}

macro_rules! versioned {
    ($($response:ty => $error:path),*) => {$(
        impl Versioned for $response {
            fn version(&self) -> &str {
                &self.version
            }
            fn version_mut(&mut self) -> &mut String {
                &mut self.version
            }
            fn error_type(&self) -> Option<&str> {
                match &self.response {
                    Some($error(error)) => Some(&error.r#type),
                    _ => None,
                }
            }
        }
    )*};
}

versioned!(
    TScenarioRunResponse => t_scenario_run_response::Response::Error,
    TScenarioContinueResponse => t_scenario_continue_response::Response::Error,
    TScenarioCommitResponse => t_scenario_commit_response::Response::Error,
    TScenarioApplyResponse => t_scenario_apply_response::Response::Error
);

/// The outcome label of a scenario's own `Error` answer of type `kind`:
/// one of the protocol's types the metrics list, else `error`, so that a
/// scenario's types of its own never make label values without bound.
pub(crate) fn answered_error(kind: &str) -> &'static str {
    const SERVER_ONLY: [&str; 3] = ["ok", "replay", "replay_timeout"];
    crate::rules::metrics::OUTCOMES
        .iter()
        .find(|outcome| **outcome == kind && !SERVER_ONLY.contains(outcome))
        .copied()
        .unwrap_or("error")
}

/// Encodes an answer, writing the scenario's version into an empty `Version`
/// (which copies a shared answer only in that case); with the outcome label
/// of the `Error` it is, if it is one ([`answered_error`]).
pub(crate) fn encode<T: Versioned>(scenario: &dyn Scenario, answer: Answer<T>) -> (Vec<u8>, Option<&'static str>) {
    let error = answer.error_type().map(answered_error);
    if !answer.version().is_empty() {
        return (answer.encode_to_vec(), error);
    }
    let mut message = answer.into_owned();
    scenario.version().clone_into(message.version_mut());
    (message.encode_to_vec(), error)
}

/// Longest protocol `Error` message, in bytes. A scenario's message may
/// quote its request (a type it did not expect, a field's value): a
/// megabyte quoted would be a megabyte answered, kept and replayed.
const MAX_ERROR_MESSAGE: usize = 1024;

/// The binary protocol `Error` answer of `handler`'s response type, its
/// message cut at [`MAX_ERROR_MESSAGE`] bytes.
pub fn error_body(handler: Handler, version: &str, kind: &str, message: String) -> Bytes {
    let message = crate::codec::quote::cap_at(message, MAX_ERROR_MESSAGE);
    let error = TError { message, r#type: kind.to_owned() };
    let version = version.to_owned();
    let body = match handler {
        // Every `/run` answer has its `Features`, an error's too.
        Handler::Run => TScenarioRunResponse {
            features: Some(TScenarioFeatures::default()),
            response: Some(t_scenario_run_response::Response::Error(error)),
            version,
        }
        .encode_to_vec(),
        Handler::Continue => {
            TScenarioContinueResponse { response: Some(t_scenario_continue_response::Response::Error(error)), version }
                .encode_to_vec()
        }
        Handler::Commit => {
            TScenarioCommitResponse { response: Some(t_scenario_commit_response::Response::Error(error)), version }
                .encode_to_vec()
        }
        Handler::Apply => {
            TScenarioApplyResponse { response: Some(t_scenario_apply_response::Response::Error(error)), version }
                .encode_to_vec()
        }
    };
    body.into()
}

/// The response message type of `handler`.
pub fn response_descriptor(handler: Handler) -> MessageDescriptor {
    match handler {
        Handler::Run => TScenarioRunResponse::default().descriptor(),
        Handler::Continue => TScenarioContinueResponse::default().descriptor(),
        Handler::Commit => TScenarioCommitResponse::default().descriptor(),
        Handler::Apply => TScenarioApplyResponse::default().descriptor(),
    }
}
