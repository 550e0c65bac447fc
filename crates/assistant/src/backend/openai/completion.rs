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
        // Its start tells an HTML page or a proxy's text from a completion;
        // its quoted strings (the model's words, the user's) are shortened.
        let start = megamind_core::codec::quote::sanitize(clip(&String::from_utf8_lossy(body), 80));
        BackendError::BadResponse(format!("not a chat completion ({}): {start:?}", sse::json_problem(&e)))
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

/// Reads `body` as a whole chat completion and checks what is taken of it;
/// panics when an invariant breaks: an answer taken has text that is not
/// blank, reasoning that is not empty, a `finish_reason` within its bound,
/// and reads back the same from a completion that says only what was
/// taken; a refusal quotes the body only shortened. For the fuzz target
/// `model_completion`, built with the `fuzzing` feature.
#[cfg(any(test, feature = "fuzzing"))]
pub fn fuzz_completion(body: &[u8]) {
    let whole = match parse_completion(body) {
        Ok(whole) => whole,
        Err(BackendError::BadResponse(why)) => {
            // The JSON parser's word, its quotes shortened (320 bytes at
            // most), and the body's start (80 characters, each at most 4
            // bytes or escaped in 10).
            assert!(why.len() <= 64 + 320 + 10 * 80, "a refusal of {} bytes", why.len());
            return;
        }
        Err(other) => panic!("a whole answer refused as {other:?}"),
    };
    assert!(!whole.text.trim().is_empty(), "a blank answer taken");
    assert!(whole.reasoning.as_ref().is_none_or(|reasoning| !reasoning.is_empty()), "empty reasoning taken");
    let reason = whole.finish_reason.as_deref();
    assert!(
        reason.is_none_or(|r| r.len() <= crate::backend::MAX_FINISH_REASON_BYTES && !r.trim().is_empty()),
        "{reason:?}"
    );
    let mut completion = serde_json::json!({
        "choices": [{"message": {"content": whole.text, "reasoning_content": whole.reasoning}, "finish_reason": reason}],
    });
    if let Some(usage) = whole.usage {
        completion["usage"] =
            serde_json::json!({"prompt_tokens": usage.prompt_tokens, "completion_tokens": usage.completion_tokens});
    }
    let again = parse_completion(completion.to_string().as_bytes());
    assert_eq!(again.as_ref(), Ok(&whole), "taken otherwise from what it said");
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn whole_answers_hold_what_the_fuzz_target_checks() {
        let bodies = [
            &br#"{"choices":[{"message":{"content":" Hi ","reasoning":"hm"},"finish_reason":"  stop "}],"usage":{}}"#[..],
            br#"{"choices":[{"message":{"content":"Hi"},"finish_reason":"xxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx"}]}"#,
            br#"{"choices":[{"message":{"content":"   "}}]}"#,
            // Found by the fuzz target: cut at its bound, the reason ended in blanks.
            br#"{"choices":[{"message":{"content":"Hi"},"finish_reason":"xxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx \r\f y"}]}"#,
            b"not json at all, and long enough to be cut: aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa",
        ];
        bodies.into_iter().for_each(fuzz_completion);
        let quoted = format!(r#"{{"choices":"{}"}}"#, "a".repeat(4000));
        fuzz_completion(quoted.as_bytes());
    }

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
