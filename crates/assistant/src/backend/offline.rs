//! The embedded offline backend: no network, no model, the same answer for
//! the same words. It opens and closes common apps ("открой Safari",
//! "закрой калькулятор", "open Telegram"), greets, explains what it can do,
//! and says it cannot do the rest offline; always in the app-action answer format, so
//! everything behind the backend works the same as with a real model.

use std::sync::Arc;

use async_trait::async_trait;
use prometheus::IntCounter;
use serde_json::json;

use crate::{
    backend::{BackendError, Completion, EventSink, ModelBackend, ModelEvent, ModelRequest, config::BackendConfig},
    error::AssistantError,
};

/// The offline backend.
#[derive(Debug, Clone, Copy, Default)]
pub struct Offline;

/// The factory of `kind = "offline"`: nothing to configure.
pub(crate) fn build(_config: &BackendConfig, _retries: &IntCounter) -> Result<Arc<dyn ModelBackend>, AssistantError> {
    Ok(Arc::new(Offline))
}

#[async_trait]
impl ModelBackend for Offline {
    fn name(&self) -> &'static str {
        "offline"
    }

    fn follows_prompts(&self) -> bool {
        false
    }

    async fn complete(&self, request: &ModelRequest, events: &dyn EventSink) -> Result<Completion, BackendError> {
        let text = answer(request.utterance(), &request.session_id);
        events.event(ModelEvent::TextDelta(text.clone()));
        events.event(ModelEvent::Finish { reason: STOP.into() });
        Ok(Completion { text, attempts: 1, finish_reason: Some(STOP.into()), ..Completion::default() })
    }
}

/// The finish reason of every answer: it is always whole.
const STOP: &str = "stop";

/// Verbs that open, then verbs that close, in both languages.
const OPEN: &[&str] =
    &["открой", "открыть", "откройте", "запусти", "запустить", "запустите", "open", "launch", "start"];
const CLOSE: &[&str] =
    &["закрой", "закрыть", "закройте", "выключи", "заверши", "завершить", "close", "quit", "exit", "stop"];
/// Words between the verb and the app name that carry nothing.
const FILLER: &[&str] = &["пожалуйста", "please", "мне", "приложение", "программу", "the", "app", "application"];
/// Words after an app's name that are not part of it.
const TRAILING: &[&str] = &["пожалуйста", "please", "приложение", "app", "application"];

/// Spoken or typed names of common apps, lowercase, and the app's own name.
const APPS: &[(&[&str], &str)] = &[
    (&["safari", "сафари"], "Safari"),
    (&["calculator", "калькулятор"], "Calculator"),
    (&["telegram", "телеграм", "телеграмм", "телегу"], "Telegram"),
    (&["terminal", "терминал"], "Terminal"),
    (&["notes", "заметки"], "Notes"),
    (&["music", "музыку", "музыка"], "Music"),
    (&["mail", "почту", "почта"], "Mail"),
    (&["calendar", "календарь"], "Calendar"),
    (&["finder", "файндер", "проводник"], "Finder"),
    (&["settings", "system settings", "настройки", "системные настройки"], "System Settings"),
    (&["chrome", "google chrome", "хром", "гугл хром"], "Google Chrome"),
    (&["firefox", "файрфокс"], "Firefox"),
    (&["photos", "фото", "фотографии"], "Photos"),
    (&["maps", "карты"], "Maps"),
    (&["messages", "сообщения"], "Messages"),
    (&["slack", "слак"], "Slack"),
    (&["zoom", "зум"], "zoom.us"),
    (&["spotify", "спотифай"], "Spotify"),
    (&["vs code", "vscode", "visual studio code"], "Visual Studio Code"),
];

const GREETINGS: &[&str] = &["привет", "здравствуй", "здравствуйте", "добрый день", "hello", "hi", "hey"];
const HELP: &[&str] = &["помощь", "помоги", "что ты умеешь", "help", "what can you do"];

/// The app-action answer (`{session_id, command, args, text}`) to `utterance`.
pub(crate) fn answer(utterance: &str, session_id: &str) -> String {
    let words = normalize(utterance);
    let russian = utterance.chars().any(|c| matches!(c, 'а'..='я' | 'А'..='Я' | 'ё' | 'Ё'));
    let say = |ru: &str, en: &str| if russian { ru.to_owned() } else { en.to_owned() };
    if let Some((verb, rest)) = words.split_first() {
        let command = if OPEN.contains(&verb.as_str()) {
            Some(("open_app", "Открываю", "Opening"))
        } else if CLOSE.contains(&verb.as_str()) {
            Some(("close_app", "Закрываю", "Closing"))
        } else {
            None
        };
        if let Some((command, ru, en)) = command {
            let mut rest: Vec<&str> =
                rest.iter().map(String::as_str).skip_while(|w| FILLER.contains(w)).collect::<Vec<_>>();
            // "закрой калькулятор, пожалуйста": the name ends before the courtesy.
            let after = rest.iter().rev().take_while(|w| TRAILING.contains(w)).count();
            rest.truncate(rest.len() - after);
            if let Some((app, spoken)) = app_name(&rest, utterance, after) {
                let text = format!("{} {spoken}.", say(ru, en));
                return json!({
                    "session_id": session_id,
                    "command": command,
                    "args": {"app_name": app},
                    "text": text,
                })
                .to_string();
            }
        }
    }
    let phrase = words.join(" ");
    let text = if GREETINGS.iter().any(|g| phrase == *g || phrase.starts_with(&format!("{g} "))) {
        say("Привет! Я могу открыть или закрыть приложение.", "Hi! I can open or close an app for you.")
    } else if HELP.iter().any(|h| phrase.contains(h)) {
        say(
            "Без подключения к модели я умею открывать и закрывать приложения: скажите «открой Safari» или «закрой калькулятор».",
            "Without a language model I can open and close apps: say \"open Safari\" or \"close Calculator\".",
        )
    } else {
        say(
            "Без подключения к модели я этого не умею. Могу открыть или закрыть приложение.",
            "I can't do that offline. I can open or close an app.",
        )
    };
    json!({ "text": text }).to_string()
}

/// Lowercase words without punctuation.
fn normalize(utterance: &str) -> Vec<String> {
    utterance
        .split(|c: char| {
            c.is_whitespace() || (c.is_ascii_punctuation() && c != '.' && c != '-') || "«»“”„!?,;:".contains(c)
        })
        .map(|w| w.trim_matches(|c: char| !c.is_alphanumeric()).to_lowercase().replace('ё', "е"))
        .filter(|w| !w.is_empty())
        .collect()
}

/// The app `words` name, twice: the app's own name for the directive (a
/// known app by any of its names, else the words as the user wrote them:
/// an app we do not know may still exist on the client), and the name to
/// say, in the user's words and language ("закрой калькулятор" closes
/// "Calculator", saying "Закрываю калькулятор."). The name ends `after`
/// words before the utterance does.
fn app_name(words: &[&str], utterance: &str, after: usize) -> Option<(String, String)> {
    if words.is_empty() {
        return None;
    }
    // The user's spelling of the name: the last words of the utterance
    // before the `after` words that follow it.
    let mut original: Vec<&str> = utterance
        .split_whitespace()
        .map(|w| w.trim_matches(|c: char| !c.is_alphanumeric() && c != '.'))
        .filter(|w| !w.is_empty())
        .collect();
    original.truncate(original.len().checked_sub(after)?);
    let start = original.len().checked_sub(words.len())?;
    let joined = original[start..].join(" ");
    // A dot inside a name stays ("zoom.us"), the sentence's own goes.
    let spoken = joined.trim_end_matches('.').to_owned();
    let phrase = words.join(" ");
    if let Some((_, app)) = APPS.iter().find(|(names, _)| names.contains(&phrase.as_str())) {
        // The app's own name when the user said just that, whatever the case.
        let said = if spoken.to_lowercase() == app.to_lowercase() { (*app).to_owned() } else { spoken };
        return Some(((*app).to_owned(), said));
    }
    let mut chars = spoken.chars();
    let first = chars.next()?;
    Some((first.to_uppercase().chain(chars).collect(), spoken))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::dialog::answer::{Command, parse};

    #[test]
    fn utterances_give_the_expected_commands_and_speech() {
        // (utterance, command, app, speech)
        let table: &[(&str, Option<&str>, &str, &str)] = &[
            ("открой Safari", Some("open_app"), "Safari", "Открываю Safari."),
            ("Открой сафари!", Some("open_app"), "Safari", "Открываю сафари."),
            ("закрой калькулятор", Some("close_app"), "Calculator", "Закрываю калькулятор."),
            ("запусти, пожалуйста, телеграм", Some("open_app"), "Telegram", "Открываю телеграм."),
            ("закрой калькулятор, пожалуйста", Some("close_app"), "Calculator", "Закрываю калькулятор."),
            ("открой Обсидиан пожалуйста", Some("open_app"), "Обсидиан", "Открываю Обсидиан."),
            ("open Figma app please", Some("open_app"), "Figma", "Opening Figma."),
            ("open Telegram", Some("open_app"), "Telegram", "Opening Telegram."),
            ("Close the calculator.", Some("close_app"), "Calculator", "Closing Calculator."),
            ("открой системные настройки", Some("open_app"), "System Settings", "Открываю системные настройки."),
            ("open Figma", Some("open_app"), "Figma", "Opening Figma."),
            ("открой блокнот", Some("open_app"), "Блокнот", "Открываю блокнот."),
            ("quit Google Chrome", Some("close_app"), "Google Chrome", "Closing Google Chrome."),
            ("открой", None, "", "Без подключения к модели я этого не умею. Могу открыть или закрыть приложение."),
            ("привет", None, "", "Привет! Я могу открыть или закрыть приложение."),
            ("Hello there", None, "", "Hi! I can open or close an app for you."),
            (
                "что ты умеешь?",
                None,
                "",
                "Без подключения к модели я умею открывать и закрывать приложения: скажите «открой Safari» или «закрой калькулятор».",
            ),
            (
                "what can you do",
                None,
                "",
                "Without a language model I can open and close apps: say \"open Safari\" or \"close Calculator\".",
            ),
            (
                "какая погода завтра",
                None,
                "",
                "Без подключения к модели я этого не умею. Могу открыть или закрыть приложение.",
            ),
            ("book a flight", None, "", "I can't do that offline. I can open or close an app."),
            ("", None, "", "I can't do that offline. I can open or close an app."),
        ];
        for (utterance, command, app, speech) in table {
            let raw = answer(utterance, "session_7");
            let parsed = parse(&raw);
            assert_eq!(parsed.text, *speech, "{utterance}: {raw}");
            match (command, &parsed.command) {
                (Some("open_app"), Some(Command::OpenApp { app_name, app_path, .. })) => {
                    assert_eq!((app_name.as_str(), app_path.as_str()), (*app, ""), "{utterance}");
                }
                (Some("close_app"), Some(Command::CloseApp { app_name, .. })) => {
                    assert_eq!(app_name, app, "{utterance}")
                }
                (None, None) => {}
                (want, got) => panic!("{utterance}: want {want:?}, got {got:?} from {raw}"),
            }
            assert_eq!(answer(utterance, "session_7"), raw, "deterministic");
        }
    }

    #[test]
    fn commands_carry_the_session_id_in_the_app_action_format() {
        let raw: serde_json::Value = serde_json::from_str(&answer("открой Safari", "session_1.5")).unwrap();
        assert_eq!(
            raw,
            json!({"session_id": "session_1.5", "command": "open_app", "args": {"app_name": "Safari"}, "text": "Открываю Safari."})
        );
    }

    #[tokio::test]
    async fn the_answer_is_one_text_event_then_the_finish() {
        #[derive(Default)]
        struct Collect(std::sync::Mutex<Vec<ModelEvent>>);
        impl EventSink for Collect {
            fn event(&self, event: ModelEvent) {
                self.0.lock().unwrap().push(event);
            }
        }
        let request = ModelRequest {
            messages: vec![crate::backend::ChatMessage::new(crate::backend::Role::User, "привет")],
            session_id: "s".into(),
            deadline: tokio::time::Instant::now(),
            sampling: None,
        };
        let events = Collect::default();
        let completion = Offline.complete(&request, &events).await.unwrap();
        assert_eq!(completion.finish_reason.as_deref(), Some("stop"));
        assert_eq!(
            events.0.into_inner().unwrap(),
            [ModelEvent::TextDelta(completion.text), ModelEvent::Finish { reason: "stop".into() }]
        );
    }
}
