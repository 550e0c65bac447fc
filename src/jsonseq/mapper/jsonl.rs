//! JSON Lines read as they stream: a `{` opening a line (or following an
//! object on it) starts an object, held back until its braces close — so a
//! pretty-printed object spread over lines is one object — and read whole:
//!
//! - an object with a string `event` is that event, its fields taken one by
//!   one (`text`, `id`, `title`, `queries`): `message_id`, `request_id` and
//!   fields the contract does not name are dropped, and [`Sequence`] puts
//!   the event where it may come. System events (`status`, `heartbeat`,
//!   `error`, `completed`) are the server's to send and unknown names mean
//!   nothing to a screen: both are dropped;
//! - any other object (the app-action answer `{"session_id", "command",
//!   "args", "text"}`) shows its `text`, and nothing when it has none: raw
//!   JSON never reaches the screen;
//! - what does not parse is text when it does not look like JSON (`{oops}`),
//!   and dropped when it does (`{"event": ...` with a stray comma), as is an
//!   object larger than [`MAX_OBJECT_BYTES`]; an object cut off by the end of
//!   the answer shows its `text` when that string is whole.
//!
//! Any other line is final text, passed on at once.

use serde_json::{Map, Value};

use super::{MAX_OBJECT_BYTES, SeqEvent, THINKING_TITLE, cut_at, sequence::Sequence};
/// Blanks kept between lines of text at most.
const MAX_BLANK_BYTES: usize = 4096;

#[derive(Debug, Default, Clone, Copy)]
enum State {
    /// Between items: blanks held back.
    #[default]
    Between,
    /// In a line of text, up to its end.
    Text,
    /// In an object: its nesting, inside a string, after a backslash, and
    /// whether it is too large to keep.
    Object { depth: usize, string: bool, escaped: bool, skip: bool },
}

#[derive(Debug, Default)]
pub(super) struct Jsonl {
    state: State,
    /// The blanks between items, or the object being read.
    held: String,
}

impl Jsonl {
    pub(super) fn feed(&mut self, chunk: &str, seq: &mut Sequence, out: &mut Vec<SeqEvent>) {
        let mut rest = chunk;
        while !rest.is_empty() {
            match self.state {
                State::Between => {
                    let visible = rest.trim_start();
                    let blanks = &rest[..rest.len() - visible.len()];
                    self.held.push_str(cut_at(blanks, MAX_BLANK_BYTES.saturating_sub(self.held.len())));
                    rest = visible;
                    if rest.starts_with('{') {
                        self.held.clear();
                        self.state = State::Object { depth: 0, string: false, escaped: false, skip: false };
                    } else if !rest.is_empty() {
                        // The blanks keep the paragraphs of the text apart.
                        seq.final_text(&std::mem::take(&mut self.held), out);
                        self.state = State::Text;
                    }
                }
                State::Text => match rest.find('\n') {
                    Some(end) => {
                        seq.final_text(&rest[..=end], out);
                        rest = &rest[end + 1..];
                        self.state = State::Between;
                    }
                    None => {
                        seq.final_text(rest, out);
                        rest = "";
                    }
                },
                State::Object { .. } => rest = self.object(rest, seq, out),
            }
        }
    }

    pub(super) fn finish(&mut self, seq: &mut Sequence, out: &mut Vec<SeqEvent>) {
        if let State::Object { skip: false, .. } = self.state {
            let object = std::mem::take(&mut self.held);
            if !looks_like_json(&object) {
                seq.final_text(&object, out);
            } else if !object.contains("\"event\"") {
                if let Some(text) = whole_text(&object) {
                    seq.final_text(&text, out);
                }
            }
        }
        self.state = State::Between;
    }

    /// Reads an object up to where its braces close; the rest. One that
    /// does not close within [`MAX_OBJECT_BYTES`] is cut there.
    fn object<'a>(&mut self, rest: &'a str, seq: &mut Sequence, out: &mut Vec<SeqEvent>) -> &'a str {
        let State::Object { mut depth, mut string, mut escaped, skip } = self.state else { return rest };
        let scanned = if skip { rest } else { cut_at(rest, MAX_OBJECT_BYTES - self.held.len()) };
        let mut end = None;
        for (at, byte) in scanned.bytes().enumerate() {
            if string {
                match (escaped, byte) {
                    (true, _) => escaped = false,
                    (false, b'\\') => escaped = true,
                    (false, b'"') => string = false,
                    _ => {}
                }
                continue;
            }
            match byte {
                b'"' => string = true,
                b'{' | b'[' => depth += 1,
                b'}' | b']' => {
                    depth = depth.saturating_sub(1);
                    if depth == 0 {
                        end = Some(at + 1);
                        break;
                    }
                }
                _ => {}
            }
        }
        // Every byte the scan stops after is ASCII: a character boundary.
        let read = end.unwrap_or(scanned.len());
        self.state = State::Object { depth, string, escaped, skip };
        if !skip {
            self.held.push_str(&rest[..read]);
        }
        if end.is_some() {
            self.state = State::Between;
            let object = std::mem::take(&mut self.held);
            if !skip {
                self.on_object(&object, seq, out);
            }
        } else if read < rest.len() {
            // Too large: skipped to its end when it is JSON, else text.
            let object = std::mem::take(&mut self.held);
            if looks_like_json(&object) {
                self.state = State::Object { depth, string, escaped, skip: true };
            } else {
                seq.final_text(&object, out);
                self.state = State::Text;
            }
        }
        &rest[read..]
    }

    fn on_object(&mut self, object: &str, seq: &mut Sequence, out: &mut Vec<SeqEvent>) {
        match serde_json::from_str::<Map<String, Value>>(object) {
            Ok(fields) => match fields.get("event") {
                Some(Value::String(name)) => on_event(name, &fields, seq, out),
                _ => {
                    if let Some(text) = fields.get("text").and_then(Value::as_str) {
                        seq.final_text(text, out);
                    }
                }
            },
            Err(_) if looks_like_json(object) => {}
            Err(_) => seq.final_text(object, out),
        }
    }
}

/// One event of the model's, where it may come.
fn on_event(name: &str, fields: &Map<String, Value>, seq: &mut Sequence, out: &mut Vec<SeqEvent>) {
    let text = fields.get("text").and_then(Value::as_str);
    match (name, text) {
        ("serp_summary", Some(text)) => seq.summary(text, out),
        ("thinking_start", _) => seq.thinking_start(out),
        ("phase_start", _) => {
            let title = fields.get("title").and_then(Value::as_str).unwrap_or("");
            seq.phase_start(fields.get("id").and_then(Value::as_u64), title, out);
        }
        // Its `id` is not trusted: the text goes to the latest phase.
        ("phase_delta", Some(text)) => seq.phase_text(text, THINKING_TITLE, out),
        ("thinking_end", _) => seq.thinking_end(out),
        ("final_delta", Some(text)) => seq.final_text(text, out),
        ("serp_queries", _) => {
            let queries = fields.get("queries").and_then(Value::as_array).map(Vec::as_slice).unwrap_or_default();
            seq.queries(queries.iter().filter_map(Value::as_str).map(str::to_owned).collect());
        }
        ("final_end", _) => seq.close_final(),
        _ => {}
    }
}

/// Whether `text` starts like a JSON object: a brace, then a key.
fn looks_like_json(text: &str) -> bool {
    text.strip_prefix('{').is_some_and(|rest| rest.trim_start().starts_with('"'))
}

/// The `text` of an object cut off, when that string is whole.
fn whole_text(object: &str) -> Option<String> {
    object.match_indices("\"text\"").take(8).find_map(|(at, key)| {
        let value = object[at + key.len()..].trim_start().strip_prefix(':')?;
        serde_json::Deserializer::from_str(value).into_iter::<String>().next()?.ok()
    })
}
