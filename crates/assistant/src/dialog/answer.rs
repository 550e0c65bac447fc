//! Reading the model's answer (the app-action format): plain text, or a JSON object
//! `{session_id, command, args, text}`, also inside a Markdown code fence or
//! with prose around it.
//!
//! The rules: `text` (a string, possibly empty) is spoken; `open_app` needs a
//! non-empty `args.app_name` or `args.app_path`, `close_app` a non-empty
//! `args.app_name`; a command without a `session_id` or its app name is
//! dropped and only `text` is kept; an unknown command is dropped too. When
//! JSON is found, it decides: prose around it is not spoken. Raw JSON is never
//! read aloud: an object with neither `text` nor `command` says nothing, and
//! so does JSON that does not parse (a fence around garbage). An answer
//! object cut off (by `max_tokens`, a dropped stream) is never mistaken for
//! the objects nested in it; its `text` is kept when that string is whole,
//! its command never. Parsing never fails: any input is a [`ModelAnswer`].
//! Whether the command is this session's, and what a completion cut at
//! `max_tokens` keeps, are [`ModelAnswer::for_session`] and
//! [`ModelAnswer::truncated`].

use megamind_core::codec::structs::struct_from_json;
use prost_types::{Struct, value::Kind};
use serde_json::{Map, Value};

use crate::dialog::speech;

/// How many `{` positions are tried when looking for JSON inside prose:
/// bounds the work on long garbage.
const MAX_OBJECT_STARTS: usize = 32;

/// Deepest answer object kept as a directive's payload, in JSON levels. The
/// payload sits six messages deep in a `/run` answer and each JSON level
/// costs three more (`Struct`, map entry, `Value`): 20 levels keep every
/// answer well inside protobuf's recursion limit of 100, so that it decodes
/// anywhere. An app action needs two.
pub const MAX_PAYLOAD_DEPTH: usize = 20;
/// Largest answer object kept as a payload, serialized, in bytes.
pub const MAX_PAYLOAD_BYTES: usize = 16 * 1024;

/// The model's answer, understood.
#[derive(Debug, Clone, PartialEq)]
pub struct ModelAnswer {
    /// What to say (and show); may be empty when a command speaks for itself.
    pub text: String,
    /// A valid command for the client.
    pub command: Option<Command>,
    /// Why a command the model gave was not kept.
    pub dropped: Option<Dropped>,
    /// The text is a JSON string that closed: whole, whatever cut the
    /// answer after it. Prose is never known to be whole this way.
    pub text_closed: bool,
}

/// A command for the client.
#[derive(Debug, Clone, PartialEq)]
pub enum Command {
    /// `open_app`.
    OpenApp {
        /// `args.app_name`, possibly empty when `app_path` is set.
        app_name: String,
        /// `args.app_path`, possibly empty.
        app_path: String,
        /// The model's whole object, for clients that forward it.
        payload: Struct,
    },
    /// `close_app`.
    CloseApp {
        /// `args.app_name`.
        app_name: String,
        /// The model's whole object.
        payload: Struct,
    },
}

impl Command {
    /// The `session_id` of the model's object.
    pub fn session_id(&self) -> &str {
        let (Command::OpenApp { payload, .. } | Command::CloseApp { payload, .. }) = self;
        match payload.fields.get("session_id").and_then(|v| v.kind.as_ref()) {
            Some(Kind::StringValue(id)) => id.trim(),
            _ => "",
        }
    }

    /// The command's name as the model gives it.
    pub fn name(&self) -> &'static str {
        match self {
            Command::OpenApp { .. } => "open_app",
            Command::CloseApp { .. } => "close_app",
        }
    }
}

/// Why a command was dropped; also the metric label.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Dropped {
    /// `session_id` missing, empty or not a string.
    NoSessionId,
    /// The app name (or, for `open_app`, path) missing, empty or not a string.
    NoAppName,
    /// A command this scenario does not know.
    UnknownCommand,
    /// `command` is not a string.
    BadCommand,
    /// The object is nested deeper than [`MAX_PAYLOAD_DEPTH`] or larger than
    /// [`MAX_PAYLOAD_BYTES`]: it cannot travel as a payload.
    OversizedPayload,
    /// The answer was cut off (unclosed JSON, or `max_tokens` reached): what
    /// it would have done is unknown.
    Truncated,
    /// The `session_id` is not this session's (a small model copies ids from
    /// the examples it was shown).
    WrongSession,
}

impl Dropped {
    /// Every reason, for the metrics listed at 0 from the start.
    pub const ALL: [Dropped; 7] = [
        Dropped::NoSessionId,
        Dropped::NoAppName,
        Dropped::UnknownCommand,
        Dropped::BadCommand,
        Dropped::OversizedPayload,
        Dropped::Truncated,
        Dropped::WrongSession,
    ];

    /// The label.
    pub fn as_str(self) -> &'static str {
        match self {
            Dropped::NoSessionId => "no_session_id",
            Dropped::NoAppName => "no_app_name",
            Dropped::UnknownCommand => "unknown_command",
            Dropped::BadCommand => "bad_command",
            Dropped::OversizedPayload => "oversized_payload",
            Dropped::Truncated => "truncated",
            Dropped::WrongSession => "wrong_session",
        }
    }
}

/// Understands `raw`, whatever it is.
pub fn parse(raw: &str) -> ModelAnswer {
    let raw = raw.trim();
    let nothing = |dropped| ModelAnswer { text: String::new(), command: None, dropped, text_closed: false };
    let prose =
        |text: &str| ModelAnswer { text: text.trim().to_owned(), command: None, dropped: None, text_closed: false };
    // A JSON array is no answer and never said (a bare number or word is).
    if raw.starts_with('[') && serde_json::from_str::<Vec<Value>>(raw).is_ok() {
        return nothing(None);
    }
    match find_object(raw) {
        Some(object) if object.contains_key("text") || object.contains_key("command") => from_object(object),
        Some(_) if raw.starts_with('{') || raw.starts_with("```") => nothing(None),
        // Prose around an object that is no answer: the prose before it.
        Some(_) => {
            let start = top_level_braces(raw).next().unwrap_or(raw.len());
            prose(&raw[..start])
        }
        None => match cut_object(raw) {
            // An answer object cut off: its whole `text`, else the prose before it.
            Some(start) => {
                let cut = &raw[start..];
                let dropped = cut.contains("\"command\"").then_some(Dropped::Truncated);
                match salvaged_text(cut) {
                    Some(text) => ModelAnswer { text, command: None, dropped, text_closed: true },
                    None => ModelAnswer { dropped, ..prose(&raw[..start]) },
                }
            }
            None if raw.starts_with('{') || raw.starts_with("```") => nothing(None),
            None => prose(raw),
        },
    }
}

impl ModelAnswer {
    /// The answer with its command dropped unless it names `session_id`.
    pub fn for_session(mut self, session_id: &str) -> ModelAnswer {
        let named = self.command.as_ref().map(Command::session_id);
        if named.is_some_and(|named| named != session_id) {
            self.command = None;
            self.dropped = Some(Dropped::WrongSession);
        }
        self
    }

    /// The answer of a completion cut at `max_tokens`: no command, whatever
    /// it said, and its text up to the last complete sentence (or word),
    /// unless it is whole (a JSON string that closed before the cut).
    pub fn truncated(mut self) -> ModelAnswer {
        if self.command.take().is_some() {
            self.dropped = Some(Dropped::Truncated);
        }
        if self.text_closed {
            return self;
        }
        let text = self.text.trim();
        let sentences = speech::complete_sentences(text, false);
        self.text = if !sentences.is_empty() {
            sentences.to_owned()
        } else {
            // Not one whole sentence: the whole words, marked as cut.
            match text.rfind(char::is_whitespace) {
                Some(space) => format!("{}…", text[..space].trim_end()),
                None => String::new(),
            }
        };
        self
    }
}

/// Where an answer object that does not close starts: the first `{` outside
/// any other, followed by a key, that does not parse.
fn cut_object(raw: &str) -> Option<usize> {
    top_level_braces(raw).take(MAX_OBJECT_STARTS).find(|&start| {
        raw[start + 1..].trim_start().starts_with('"')
            && serde_json::Deserializer::from_str(&raw[start..]).into_iter::<Value>().next().is_some_and(|r| r.is_err())
    })
}

/// The `text` of a cut answer object, when its string value is whole.
fn salvaged_text(cut: &str) -> Option<String> {
    cut.match_indices("\"text\"").find_map(|(at, key)| {
        let value = cut[at + key.len()..].trim_start().strip_prefix(':')?.trim_start();
        match serde_json::Deserializer::from_str(value).into_iter::<String>().next() {
            Some(Ok(text)) => Some(text.trim().to_owned()),
            _ => None,
        }
    })
}

/// Positions of the `{`s of `raw` that no other `{` encloses: an object
/// nested in an answer cut off is never taken for the answer. Strings are
/// followed inside braces only, where they are JSON; prose quotes outside.
fn top_level_braces(raw: &str) -> impl Iterator<Item = usize> + '_ {
    let (mut depth, mut in_string, mut escaped) = (0usize, false, false);
    raw.char_indices().filter_map(move |(at, c)| {
        if in_string {
            match (escaped, c) {
                (true, _) => escaped = false,
                (false, '\\') => escaped = true,
                (false, '"') => in_string = false,
                _ => {}
            }
            return None;
        }
        match c {
            '"' if depth > 0 => in_string = true,
            '{' => {
                depth += 1;
                return (depth == 1).then_some(at);
            }
            '}' => depth = depth.saturating_sub(1),
            _ => {}
        }
        None
    })
}

fn find_object(raw: &str) -> Option<Map<String, Value>> {
    if let Ok(value) = serde_json::from_str::<Value>(raw) {
        return match value {
            Value::Object(object) => Some(object),
            // A JSON string is a plain answer in quotes.
            Value::String(text) => Some(Map::from_iter([("text".to_owned(), Value::String(text))])),
            _ => None,
        };
    }
    if let Some(Value::Object(object)) = fenced(raw).and_then(|inner| serde_json::from_str::<Value>(inner).ok()) {
        return Some(object);
    }
    // Prose around the object: the first `{` outside any other that starts a
    // whole object.
    top_level_braces(raw).take(MAX_OBJECT_STARTS).find_map(|start| {
        match serde_json::Deserializer::from_str(&raw[start..]).into_iter::<Value>().next() {
            Some(Ok(Value::Object(object))) => Some(object),
            _ => None,
        }
    })
}

/// The inside of the first Markdown code fence: after the opening line
/// (which may name a language), up to the closing fence or the end.
fn fenced(raw: &str) -> Option<&str> {
    let open = raw.find("```")?;
    let after = &raw[open + 3..];
    let body = &after[after.find('\n')? + 1..];
    Some(body.find("```").map_or(body, |close| &body[..close]).trim())
}

fn from_object(object: Map<String, Value>) -> ModelAnswer {
    let text = match object.get("text") {
        Some(Value::String(text)) => text.trim().to_owned(),
        _ => String::new(),
    };
    let checked = command(&object).and_then(|command| match command {
        Some(_) if !fits_a_payload(&object) => Err(Dropped::OversizedPayload),
        command => Ok(command),
    });
    let (command, dropped) = match checked {
        Ok(command) => (command, None),
        Err(reason) => (None, Some(reason)),
    };
    let command = command.map(|c| c.with_payload(struct_from_json(object)));
    ModelAnswer { text, command, dropped, text_closed: true }
}

fn command(object: &Map<String, Value>) -> Result<Option<Command>, Dropped> {
    let name = match object.get("command") {
        None | Some(Value::Null) => return Ok(None),
        Some(Value::String(name)) if name.trim().is_empty() => return Ok(None),
        Some(Value::String(name)) => name.trim(),
        Some(_) => return Err(Dropped::BadCommand),
    };
    if name != "open_app" && name != "close_app" {
        return Err(Dropped::UnknownCommand);
    }
    if non_empty(object.get("session_id")).is_none() {
        return Err(Dropped::NoSessionId);
    }
    let args = object.get("args").and_then(Value::as_object);
    let arg = |key: &str| non_empty(args.and_then(|a| a.get(key))).unwrap_or_default().to_owned();
    let (app_name, app_path) = (arg("app_name"), arg("app_path"));
    let empty = Struct::default();
    match name {
        "open_app" if !app_name.is_empty() || !app_path.is_empty() => {
            Ok(Some(Command::OpenApp { app_name, app_path, payload: empty }))
        }
        // close_app takes only the name: a path alone does not say which app.
        "close_app" if !app_name.is_empty() => Ok(Some(Command::CloseApp { app_name, payload: empty })),
        _ => Err(Dropped::NoAppName),
    }
}

impl Command {
    fn with_payload(self, object: Struct) -> Command {
        match self {
            Command::OpenApp { app_name, app_path, .. } => Command::OpenApp { app_name, app_path, payload: object },
            Command::CloseApp { app_name, .. } => Command::CloseApp { app_name, payload: object },
        }
    }
}

/// Whether the model's object is small and shallow enough to be a payload.
fn fits_a_payload(object: &Map<String, Value>) -> bool {
    fn depth(value: &Value, level: usize) -> usize {
        if level > MAX_PAYLOAD_DEPTH {
            return level;
        }
        match value {
            Value::Array(items) => items.iter().map(|v| depth(v, level + 1)).max().unwrap_or(level),
            Value::Object(object) => object.values().map(|v| depth(v, level + 1)).max().unwrap_or(level),
            _ => level,
        }
    }
    let deepest = object.values().map(|v| depth(v, 1)).max().unwrap_or(0);
    deepest < MAX_PAYLOAD_DEPTH && serde_json::to_vec(object).is_ok_and(|json| json.len() <= MAX_PAYLOAD_BYTES)
}

fn non_empty(value: Option<&Value>) -> Option<&str> {
    match value {
        Some(Value::String(s)) if !s.trim().is_empty() => Some(s.trim()),
        _ => None,
    }
}

#[cfg(test)]
mod tests;
