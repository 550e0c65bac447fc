//! How a model call ended, as bytes: the value the store of model calls
//! ([the calls](super)) keeps for the requests that join a call. A
//! `TAssistantModelOutcome` protobuf message, so that a store shared by
//! replicas holds what any of them can read.
//!
//! Every [`BackendError`] comes back as it went in, detail included: readers
//! log its message and label metrics by its [`BackendError::kind`].
//!
//! What is read back is held to the bounds a backend's own answer is held
//! to (its text, its `finish_reason`, an error's detail): a shared store is
//! written by other processes, and whatever is in it reaches every joiner's
//! answer and log.

use std::time::Duration;

use bytes::Bytes;
use prost::Message;

use crate::{
    backend::{BackendError, Completion, MAX_ANSWER_BYTES, TokenUsage},
    proto::megamind_scenario::v1::{
        TAssistantCompletion, TAssistantHttpStatus, TAssistantModelError, TAssistantModelOutcome, TAssistantTokenUsage,
        t_assistant_model_error::Cause, t_assistant_model_outcome::Outcome,
    },
};

/// How a model call ended.
pub(crate) type ModelOutcome = Result<Completion, BackendError>;

/// The timeouts a backend names; a stored name is read back as one of them.
const TIMEOUTS: [&str; 4] = ["connect", "first_token", "call", "thinking"];
/// Longest detail of a stored error read back, in bytes: a backend's own
/// are shorter (a status's body is cut at 300, a malformed answer's
/// problem at 400).
const MAX_DETAIL: usize = 512;

/// `outcome` as the store keeps it.
pub(crate) fn encode(outcome: &ModelOutcome) -> Bytes {
    let outcome = match outcome {
        Ok(completion) => Outcome::Completion(TAssistantCompletion {
            text: completion.text.clone(),
            first_token_micros: completion.first_token.map(|d| u64::try_from(d.as_micros()).unwrap_or(u64::MAX)),
            attempts: completion.attempts,
            finish_reason: completion.finish_reason.clone(),
            usage: completion.usage.map(|u| TAssistantTokenUsage {
                prompt_tokens: u.prompt_tokens,
                completion_tokens: u.completion_tokens,
            }),
        }),
        Err(error) => Outcome::Error(TAssistantModelError { cause: Some(cause(error)) }),
    };
    TAssistantModelOutcome { outcome: Some(outcome) }.encode_to_vec().into()
}

/// The outcome stored as `bytes`; bytes that do not decode (another
/// version's, a damaged store) read as a failed call.
pub(crate) fn decode(bytes: &[u8]) -> ModelOutcome {
    let unreadable =
        |why: &str| Err(BackendError::BadResponse(format!("a stored model call outcome is unreadable: {why}")));
    let outcome = match TAssistantModelOutcome::decode(bytes) {
        Ok(message) => message.outcome,
        Err(error) => return unreadable(&error.to_string()),
    };
    match outcome {
        Some(Outcome::Completion(completion)) if completion.text.len() > MAX_ANSWER_BYTES => {
            unreadable(&format!("an answer of {} bytes, over {MAX_ANSWER_BYTES}", completion.text.len()))
        }
        Some(Outcome::Completion(completion)) => Ok(Completion {
            text: completion.text,
            first_token: completion.first_token_micros.map(Duration::from_micros),
            attempts: completion.attempts,
            finish_reason: completion.finish_reason.as_deref().and_then(crate::backend::bounded_finish_reason),
            usage: completion
                .usage
                .map(|u| TokenUsage { prompt_tokens: u.prompt_tokens, completion_tokens: u.completion_tokens }),
        }),
        Some(Outcome::Error(TAssistantModelError { cause: Some(cause) })) => Err(error(cause)),
        Some(Outcome::Error(_)) => unreadable("an error without its cause"),
        None => unreadable("no outcome"),
    }
}

fn cause(error: &BackendError) -> Cause {
    match error {
        BackendError::Connect(why) => Cause::Connect(why.clone()),
        BackendError::Timeout(which) => Cause::Timeout((*which).to_owned()),
        BackendError::Status { status, message } => {
            Cause::Status(TAssistantHttpStatus { code: u32::from(*status), message: message.clone() })
        }
        BackendError::BadResponse(why) => Cause::BadResponse(why.clone()),
        BackendError::CircuitOpen => Cause::CircuitOpen(true),
    }
}

fn error(cause: Cause) -> BackendError {
    let detail = |text: String| megamind_core::codec::quote::cap_at(text, MAX_DETAIL);
    match cause {
        Cause::Connect(why) => BackendError::Connect(detail(why)),
        // The whole call's timeout stands for a name this version does not know.
        Cause::Timeout(which) => BackendError::Timeout(TIMEOUTS.into_iter().find(|t| *t == which).unwrap_or("call")),
        Cause::Status(status) => {
            let status_code = u16::try_from(status.code).unwrap_or(u16::MAX);
            BackendError::Status { status: status_code, message: detail(status.message) }
        }
        Cause::BadResponse(why) => BackendError::BadResponse(detail(why)),
        Cause::CircuitOpen(_) => BackendError::CircuitOpen,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::backend::MAX_FINISH_REASON_BYTES;

    #[test]
    fn every_outcome_reads_back_as_it_was_stored() {
        let completion = Completion {
            text: "Сейчас полдень.".into(),
            first_token: Some(Duration::from_micros(123_456)),
            attempts: 2,
            finish_reason: Some("length".into()),
            usage: Some(TokenUsage { prompt_tokens: 10, completion_tokens: 20 }),
        };
        let mut outcomes = vec![Ok(completion), Ok(Completion::default())];
        outcomes.extend(
            [
                BackendError::Connect("connection reset".into()),
                BackendError::Timeout("connect"),
                BackendError::Timeout("first_token"),
                BackendError::Timeout("call"),
                BackendError::Timeout("thinking"),
                BackendError::Status { status: 429, message: "slow down".into() },
                BackendError::Status { status: 503, message: String::new() },
                BackendError::BadResponse("not JSON".into()),
                BackendError::CircuitOpen,
            ]
            .map(Err),
        );
        for outcome in outcomes {
            let read = decode(&encode(&outcome));
            assert_eq!(read, outcome);
            if let (Err(read), Err(stored)) = (&read, &outcome) {
                assert_eq!((read.kind(), read.to_string()), (stored.kind(), stored.to_string()));
            }
        }
    }

    #[test]
    fn bytes_that_do_not_decode_read_as_a_failed_call() {
        for bytes in [&b"\xff\xff"[..], b"", &TAssistantModelOutcome { outcome: None }.encode_to_vec()] {
            assert!(matches!(decode(bytes), Err(BackendError::BadResponse(_))), "{bytes:?}");
        }
        let unknown = TAssistantModelError { cause: Some(Cause::Timeout("dns".into())) };
        let bytes = TAssistantModelOutcome { outcome: Some(Outcome::Error(unknown)) }.encode_to_vec();
        assert_eq!(decode(&bytes), Err(BackendError::Timeout("call")));
    }

    #[test]
    fn what_another_process_stored_is_held_to_a_backends_own_bounds() {
        let stored = |outcome| TAssistantModelOutcome { outcome: Some(outcome) }.encode_to_vec();
        let completion = |text: String, finish_reason: Option<String>| {
            stored(Outcome::Completion(TAssistantCompletion { text, finish_reason, ..Default::default() }))
        };
        let long = decode(&completion("я".repeat(MAX_ANSWER_BYTES / 2 + 1), None));
        assert!(matches!(&long, Err(BackendError::BadResponse(why)) if why.ends_with("over 1048576")), "{long:?}");
        let longest = decode(&completion("я".repeat(MAX_ANSWER_BYTES / 2), None)).expect("within the bound");
        assert_eq!(longest.text.len(), MAX_ANSWER_BYTES);

        let reason =
            |stored: &str| decode(&completion(String::new(), Some(stored.into()))).expect("read").finish_reason;
        assert_eq!(reason(&format!("  {}", "x".repeat(1 << 20))), Some("x".repeat(MAX_FINISH_REASON_BYTES)));
        assert_eq!(reason(&format!("{} y", "x".repeat(MAX_FINISH_REASON_BYTES - 1))).map(|r| r.len()), Some(63));
        assert_eq!(reason("   "), None);

        let huge = "e".repeat(1 << 20);
        let causes = [
            Cause::Connect(huge.clone()),
            Cause::BadResponse(huge.clone()),
            Cause::Status(TAssistantHttpStatus { code: 500, message: huge }),
        ];
        for cause in causes {
            let read = decode(&stored(Outcome::Error(TAssistantModelError { cause: Some(cause) })));
            let message = read.expect_err("an error").to_string();
            assert!(message.len() < MAX_DETAIL + 64 && message.ends_with("e…"), "{}", message.len());
        }
    }
}
