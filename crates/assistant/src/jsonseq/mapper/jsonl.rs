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

use megamind_core::text::clip;
use serde_json::{Map, Value};

use crate::jsonseq::mapper::{MAX_OBJECT_BYTES, SeqEvent, THINKING_TITLE, sequence::Sequence};
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
    /// Whether an object named an `event`: the answer is a stream of
    /// events, not one object (an app action) to be read whole.
    events: bool,
}

impl Jsonl {
    /// Whether the answer named events (JSON Lines of the contract's events).
    pub(super) fn reads_events(&self) -> bool {
        self.events
    }

    pub(super) fn feed(&mut self, chunk: &str, seq: &mut Sequence, out: &mut Vec<SeqEvent>) {
        let mut rest = chunk;
        while !rest.is_empty() {
            match self.state {
                State::Between => {
                    let visible = rest.trim_start();
                    let blanks = &rest[..rest.len() - visible.len()];
                    self.held.push_str(clip(blanks, MAX_BLANK_BYTES.saturating_sub(self.held.len())));
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
            } else if !object.contains("\"event\"")
                && let Some(text) = whole_text(&object)
            {
                seq.final_text(&text, out);
            }
        }
        self.state = State::Between;
    }

    /// Reads an object up to where its braces close; the rest. One that
    /// does not close within [`MAX_OBJECT_BYTES`] is cut there.
    fn object<'a>(&mut self, rest: &'a str, seq: &mut Sequence, out: &mut Vec<SeqEvent>) -> &'a str {
        let State::Object { mut depth, mut string, mut escaped, skip } = self.state else { return rest };
        let scanned = if skip { rest } else { clip(rest, MAX_OBJECT_BYTES - self.held.len()) };
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
                Some(Value::String(name)) => {
                    self.events = true;
                    on_event(name, &fields, seq, out)
                }
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
            seq.phase_start(title, out);
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

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::{Jsonl, MAX_BLANK_BYTES};
    use crate::jsonseq::mapper::{
        Format, MAX_OBJECT_BYTES, map_all,
        sequence::Sequence,
        tests::{final_text, joined, names, valid},
    };

    #[test]
    fn json_lines_events_are_forwarded_with_their_own_fields_only() {
        let lines = [
            r#"{"event":"serp_summary","text":"Нужен план","message_id":"model's","extra":1}"#,
            r#"{"event":"thinking_start"}"#,
            r#"{"event":"phase_start","id":1,"title":"Разбор"}"#,
            r#"{"event":"phase_delta","id":7,"text":"цель"}"#,
            r#"{"event":"thinking_end"}"#,
            r#"{"event":"final_delta","text":"План "}"#,
            r#"{"event":"final_delta","text":"готов"}"#,
            r#"{"event":"serp_queries","queries":["план","ПЛАН"]}"#,
            r#"{"event":"final_end"}"#,
        ];
        let answer = lines.join("\n");
        let expected = [
            ("serp_summary", json!({"text": "Нужен план"})),
            ("thinking_start", json!({})),
            ("phase_start", json!({"id": 1, "title": "Разбор"})),
            ("phase_delta", json!({"id": 1, "text": "цель"})),
            ("thinking_end", json!({})),
            ("final_delta", json!({"text": "План готов"})),
            ("serp_queries", json!({"queries": ["план"]})),
            ("final_end", json!({})),
        ];
        for format in [Format::Auto, Format::Jsonl] {
            assert_eq!(joined(&valid(map_all(format, &[&answer]))), expected);
            for (at, _) in answer.char_indices().step_by(7) {
                assert_eq!(joined(&valid(map_all(format, &[&answer[..at], &answer[at..]]))), expected, "split at {at}");
            }
        }
    }

    #[test]
    fn json_lines_out_of_order_are_put_in_order_or_dropped() {
        let answer = [
            r#"{"event":"final_delta","text":"Сразу ответ"}"#,
            r#"{"event":"phase_start","id":1,"title":"поздно"}"#,
            r#"{"event":"serp_summary","text":"поздно"}"#,
            r#"{"event":"heartbeat"}"#,
            r#"{"event":"error","message":"model says"}"#,
            r#"{"event":"content_delta","text":"unknown"}"#,
            r#"{"event":"final_end"}"#,
            r#"{"event":"final_delta","text":" после конца"}"#,
            r#"{"event":"serp_queries","queries":["запрос"]}"#,
            r#"{"event":"final_end"}"#,
        ]
        .join("\n");
        let events = valid(map_all(Format::Auto, &[&answer]));
        assert_eq!(
            names(&events),
            ["thinking_start", "phase_start", "thinking_end", "final_delta", "serp_queries", "final_end"]
        );
        assert_eq!(final_text(&events), "Сразу ответ");
        let phases = r#"{"event":"phase_delta","id":1,"text":"x"}
    {"event":"phase_start","id":0,"title":""}
    {"event":"phase_start","id":5,"title":"b"}
    {"event":"phase_start","id":2,"title":"c"}
    {"event":"thinking_start"}"#;
        let events = valid(map_all(Format::Jsonl, &[phases]));
        let ids: Vec<_> = events.iter().filter(|e| e.name == "phase_start").map(|e| e.data["id"].clone()).collect();
        assert_eq!(ids, [json!(1), json!(2), json!(3), json!(4)], "numbered from 1, whatever the model wrote");
    }

    #[test]
    fn json_lines_that_are_not_events() {
        let answer = "{\n  \"session_id\": \"s-1\",\n  \"command\": \"open_app\",\n  \"args\": {\"app_name\": \"Музыка {}\"},\n  \"text\": \"Открываю музыку\"\n}\n";
        for (at, _) in answer.char_indices() {
            let events = valid(map_all(Format::Auto, &[&answer[..at], &answer[at..]]));
            assert_eq!(final_text(&events), "Открываю музыку", "an app-action answer shows its text; split at {at}");
        }
        let final_of = |answer: &str| final_text(&valid(map_all(Format::Jsonl, &[answer])));
        assert_eq!(final_of("{oops} and more\nplain line\n\nlast"), "{oops} and more\nplain line\n\nlast");
        assert_eq!(
            final_of("{\"event\":\"final_delta\",\"text\":\"x\",}\n{\"event\":\"final_delta\",\"text\":\"y\"}"),
            "y"
        );
        assert_eq!(final_of("{\"no\":\"text\"}\n"), "", "raw JSON never shows");
        assert_eq!(
            final_of("{\"session_id\":\"s\",\"text\":\"Готово\",\"command\":\"open_"),
            "Готово",
            "a cut object's whole text"
        );
        assert_eq!(final_of("{\"event\":\"final_delta\",\"text\":\"cut"), "");
        assert_eq!(
            final_of("{\"event\":\"final_delta\",\"text\":\"a\"}{\"event\":\"final_delta\",\"text\":\"b\"} c"),
            "ab c"
        );
        let huge = format!("{{\"event\":\"final_delta\",\"text\":\"{}\"}}\nafter", "x".repeat(MAX_OBJECT_BYTES));
        assert_eq!(final_of(&huge), "after", "an object too large is skipped");
        let huge_text = format!("{{{}\nafter", "x".repeat(MAX_OBJECT_BYTES + 10));
        assert_eq!(final_of(&huge_text), huge_text, "and text that only opened with a brace stays text");
    }

    #[test]
    fn blanks_between_lines_are_held_and_sent_only_up_to_their_bound() {
        let (mut jsonl, mut seq, mut out) = (Jsonl::default(), Sequence::default(), Vec::new());
        jsonl.feed("a\n", &mut seq, &mut out);
        for _ in 0..100 {
            jsonl.feed(&"\n".repeat(1000), &mut seq, &mut out);
            assert!(jsonl.held.len() <= MAX_BLANK_BYTES, "{} bytes of blanks held", jsonl.held.len());
        }
        // Blanks between lines keep paragraphs apart: a hundred thousand of
        // them are cut to the bound (after the newline ending the line).
        let text = final_text(&valid(map_all(Format::Jsonl, &["a\n", &"\n".repeat(100_000), "b"])));
        assert_eq!(text, format!("a\n{}b", "\n".repeat(MAX_BLANK_BYTES)), "{} bytes", text.len());
    }
}
