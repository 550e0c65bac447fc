//! What the model is sent: the system prompt (built in, or a file) with the
//! session id it must echo in commands, the dialog history, then the user's
//! words: chat-completions order (system, alternating user and assistant
//! turns, the new user message last). The session id: see [`super::state`].
//!
//! The system prompt starts with its static text, the same bytes for every
//! session, so that a model server's prefix cache (and the warm-up) covers
//! it; the session id comes after, in the examples, so that a small model
//! which copies an example copies the right id. It is not the last line:
//! small models echo the last line into their answer.

use crate::{
    backend::{ChatMessage, Role},
    proto::megamind_scenario::v1::TAssistantTurn,
};

/// Where the session id goes in a prompt.
pub const SESSION_ID: &str = "{session_id}";

/// The built-in system prompt: the app-action answer format
/// (`{session_id, command, args, text}`), its two commands, then examples
/// carrying the session id.
pub const DEFAULT_SYSTEM_PROMPT: &str = r#"You are a voice assistant on the user's computer. Answer briefly, in the language of the user's request: your text is spoken aloud, so no Markdown, lists or links.
When the user asks to open or close an application, answer with exactly one JSON object and nothing else:
{"session_id": "<the session id>", "command": "open_app", "args": {"app_name": "<application name>"}, "text": "<short confirmation>"}
{"session_id": "<the session id>", "command": "close_app", "args": {"app_name": "<application name>"}, "text": "<short confirmation>"}
Use the application's real name as the operating system knows it ("Safari", "Calculator", "Telegram", "System Settings"). For open_app you may give "app_path" (the full path) instead of "app_name". "text" may be empty.
For anything else, answer with plain text, or with {"text": "<your answer>"}.

Examples (session id {session_id}):
User: открой Safari
{"session_id": "{session_id}", "command": "open_app", "args": {"app_name": "Safari"}, "text": "Открываю Safari."}
User: закрой калькулятор
{"session_id": "{session_id}", "command": "close_app", "args": {"app_name": "Calculator"}, "text": "Закрываю калькулятор."}
User: привет
Привет! Чем могу помочь?"#;

/// The system prompt of a session: `{session_id}` replaced where the prompt
/// has it, else the id told in a tail of its own after the prompt.
pub(crate) fn system_message(prompt: &str, session_id: &str) -> ChatMessage {
    let content = if prompt.contains(SESSION_ID) {
        prompt.replace(SESSION_ID, session_id)
    } else {
        format!("{prompt}\n\nIn commands, use the session id {session_id}.\nNow answer the user.")
    };
    ChatMessage::new(Role::System, content)
}

/// System prompt, history (oldest first), then `utterance`.
pub(crate) fn messages(
    prompt: &str,
    session_id: &str,
    history: &[TAssistantTurn],
    utterance: &str,
) -> Vec<ChatMessage> {
    let mut messages = Vec::with_capacity(2 + 2 * history.len());
    messages.push(system_message(prompt, session_id));
    for turn in history {
        messages.push(ChatMessage::new(Role::User, turn.user.clone()));
        messages.push(ChatMessage::new(Role::Assistant, turn.assistant.clone()));
    }
    messages.push(ChatMessage::new(Role::User, utterance));
    messages
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_built_in_prompt_is_static_up_to_the_session_part() {
        let one = system_message(DEFAULT_SYSTEM_PROMPT, "session_1.000001").content;
        let two = system_message(DEFAULT_SYSTEM_PROMPT, "session_2.000002").content;
        let common = one.bytes().zip(two.bytes()).take_while(|(a, b)| a == b).count();
        let static_part = &DEFAULT_SYSTEM_PROMPT[..DEFAULT_SYSTEM_PROMPT.find(SESSION_ID).unwrap()];
        assert!(common >= static_part.len() && static_part.len() > DEFAULT_SYSTEM_PROMPT.len() / 2, "{common}");
        assert_eq!(one.matches("session_1.000001").count(), 3, "the examples carry this session's id");
        assert!(!one.contains(SESSION_ID) && !one.contains("1764210832"));
        let last = one.lines().last().unwrap();
        assert!(!last.contains("session"), "the last line says no id: {last}");
    }

    #[test]
    fn messages_follow_the_chat_completions_order() {
        let history = [TAssistantTurn { user: "привет".into(), assistant: "Привет!".into() }];
        let messages = messages("PROMPT", "session_1.000001", &history, "открой Safari");
        let roles: Vec<Role> = messages.iter().map(|m| m.role).collect();
        assert_eq!(roles, [Role::System, Role::User, Role::Assistant, Role::User]);
        assert!(messages[0].content.starts_with("PROMPT"));
        assert!(messages[0].content.contains("session id session_1.000001"), "told after the prompt");
        assert!(!messages[0].content.trim_end().ends_with("session_1.000001"), "but not as the last line");
        assert_eq!(messages[3].content, "открой Safari");
        let json = serde_json::to_value(&messages[1]).unwrap();
        assert_eq!(json, serde_json::json!({"role": "user", "content": "привет"}));
    }
}
