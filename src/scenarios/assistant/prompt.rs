//! What the model is sent: the system prompt (built in, or a file), the
//! session id it must echo in commands, the dialog history, then the user's
//! words: chat-completions order (system, alternating user and assistant
//! turns, the new user message last). The session id: see [`super::state`].

use super::backend::{ChatMessage, Role};
use crate::proto::megamind_scenario::v1::TAssistantTurn;

/// The built-in system prompt: the app-action answer format
/// (`{session_id, command, args, text}`) and its two commands.
pub const DEFAULT_SYSTEM_PROMPT: &str = r#"You are a voice assistant on the user's computer. Answer briefly, in the language of the user's request: your text is spoken aloud, so no Markdown, lists or links.

When the user asks to open or close an application, answer with exactly one JSON object and nothing else:
{"session_id": "<the session id below>", "command": "open_app", "args": {"app_name": "<application name>"}, "text": "<short confirmation>"}
{"session_id": "<the session id below>", "command": "close_app", "args": {"app_name": "<application name>"}, "text": "<short confirmation>"}
Use the application's real name as the operating system knows it ("Safari", "Calculator", "Telegram", "System Settings"). For open_app you may give "app_path" (the full path) instead of "app_name". "text" may be empty.

For anything else, answer with plain text, or with {"text": "<your answer>"}.

Examples:
User: открой Safari
{"session_id": "session_1764210832.530743", "command": "open_app", "args": {"app_name": "Safari"}, "text": "Открываю Safari."}
User: закрой калькулятор
{"session_id": "session_1764210832.530743", "command": "close_app", "args": {"app_name": "Calculator"}, "text": "Закрываю калькулятор."}
User: привет
Привет! Чем могу помочь?"#;

/// The system prompt, with the line naming the session.
pub(crate) fn system_message(prompt: &str, session_id: &str) -> ChatMessage {
    ChatMessage::new(Role::System, format!("{prompt}\n\nThe session id is: {session_id}"))
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
    fn messages_follow_seed_001_order() {
        let history = [TAssistantTurn { user: "привет".into(), assistant: "Привет!".into() }];
        let messages = messages("PROMPT", "session_1.000001", &history, "открой Safari");
        let roles: Vec<Role> = messages.iter().map(|m| m.role).collect();
        assert_eq!(roles, [Role::System, Role::User, Role::Assistant, Role::User]);
        assert!(messages[0].content.starts_with("PROMPT") && messages[0].content.ends_with("session_1.000001"));
        assert_eq!(messages[3].content, "открой Safari");
        let json = serde_json::to_value(&messages[1]).unwrap();
        assert_eq!(json, serde_json::json!({"role": "user", "content": "привет"}));
    }
}
