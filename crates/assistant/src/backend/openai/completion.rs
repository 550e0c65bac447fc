//! A whole (not streamed) OpenAI-compatible chat completion:
//! `choices[0].message` with `content` and, from reasoning models,
//! `reasoning_content` (or `reasoning`); `choices[0].finish_reason`; `usage`.
//! What a server that ignores `stream`, or is asked not to, answers.

use megamind_core::text::clip;
use serde::Deserialize;
use serde_json::Value;

use crate::backend::{BackendError, TokenUsage, openai::sse};

#[derive(Deserialize)]
struct ChatCompletion {
    #[serde(default)]
    choices: Vec<Choice>,
    // Read leniently, as in the stream.
    usage: Option<Value>,
}

#[derive(Deserialize)]
struct Choice {
    message: Option<AnswerMessage>,
    finish_reason: Option<Value>,
}

#[derive(Deserialize)]
struct AnswerMessage {
    content: Option<String>,
    reasoning_content: Option<String>,
    reasoning: Option<String>,
}

/// A whole (not streamed) answer.
#[derive(Debug, PartialEq, Eq)]
pub(crate) struct WholeAnswer {
    /// `message.content`: never blank.
    pub(crate) text: String,
    /// `message.reasoning_content` (or `message.reasoning`), when not empty.
    pub(crate) reasoning: Option<String>,
    /// `finish_reason`, clipped.
    pub(crate) finish_reason: Option<String>,
    /// `usage`.
    pub(crate) usage: Option<TokenUsage>,
}

/// Reads a whole chat completion.
pub(crate) fn parse_completion(body: &[u8]) -> Result<WholeAnswer, BackendError> {
    let completion: ChatCompletion = serde_json::from_slice(body).map_err(|e| {
        let start = clip(&String::from_utf8_lossy(body), 80).to_owned();
        BackendError::BadResponse(format!("not a chat completion ({e}): {start:?}"))
    })?;
    let usage = sse::usage(completion.usage.as_ref());
    let Some(choice) = completion.choices.into_iter().next() else {
        return Err(BackendError::BadResponse("the answer carried no text".into()));
    };
    let finish_reason = sse::finish_reason(choice.finish_reason.as_ref());
    let (text, reasoning) = match choice.message {
        Some(m) => (m.content, [m.reasoning_content, m.reasoning].into_iter().flatten().find(|r| !r.is_empty())),
        None => (None, None),
    };
    match text {
        Some(text) if !text.trim().is_empty() => Ok(WholeAnswer { text, reasoning, finish_reason, usage }),
        _ => Err(BackendError::BadResponse("the answer carried no text".into())),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn completions_parse_and_garbage_does_not() {
        let ok = br#"{"id":"x","choices":[{"index":0,"message":{"role":"assistant","content":"Hi"}}]}"#;
        assert_eq!(parse_completion(ok).unwrap().text, "Hi");
        for bad in [&b"<html>"[..], b"{}", br#"{"choices":[]}"#, br#"{"choices":[{"message":{"content":null}}]}"#] {
            assert!(matches!(parse_completion(bad), Err(BackendError::BadResponse(_))), "{bad:?}");
        }
        assert!(parse_completion(b"\xff\xfe{").is_err());
    }

    #[test]
    fn reasoning_finish_reason_and_usage_are_read_from_a_whole_answer() {
        let body = br#"{"choices":[{"message":{"role":"assistant","content":"Hi","reasoning_content":"greet"},
            "finish_reason":"stop"}],"usage":{"prompt_tokens":9,"completion_tokens":2,"total_tokens":11}}"#;
        let usage = TokenUsage { prompt_tokens: 9, completion_tokens: 2 };
        let whole = WholeAnswer {
            text: "Hi".into(),
            reasoning: Some("greet".into()),
            finish_reason: Some("stop".into()),
            usage: Some(usage),
        };
        assert_eq!(parse_completion(body).unwrap(), whole);
        let bare = br#"{"choices":[{"message":{"content":"Hi","reasoning":""},"finish_reason":7}],"usage":[]}"#;
        let whole = WholeAnswer { text: "Hi".into(), reasoning: None, finish_reason: None, usage: None };
        assert_eq!(parse_completion(bare).unwrap(), whole, "what says nothing is nothing, and no failure");
    }
}
