//! The model's output mapped to JSONSeq v1 events as it streams
//! (docs/jsonseq.md#mapping-the-models-output): [`Mapper`] takes the
//! answer's text ([`Mapper::text`]) and the model's reasoning
//! ([`Mapper::reasoning`]) in pieces split anywhere, and
//! [`Mapper::finish`] ends the stream. The answer is read as ThinkingML
//! (`thinkingml`), plain text (`text`) or JSON Lines (`jsonl`), or, by
//! default, as its first visible character says (`<`, `{`, anything else);
//! `think_opened` is ThinkingML begun inside a `<think>` the chat template
//! opened.
//!
//! The invariant: whatever the pieces — garbage, cut, nested, unclosed or
//! unknown tags, repeated or decreasing phase ids, missing titles, events
//! out of order, invalid JSON — the events emitted up to and including
//! `finish`, each given a `message_id` and a `request_id`, break no rule of
//! [`super::validate()`]. `sequence` keeps the contract's order and repairs
//! it; the readers (`thinkingml`, `jsonl`) only say what the model meant.
//!
//! Where the contract leaves the choice to us:
//! - Every stream has a thinking with a phase, as the validator requires: an
//!   answer without one (plain text, a ThinkingML answer with only a final)
//!   gets `thinking_start`, `phase_start(id=1, title="Ответ")` and
//!   `thinking_end` before its first `final_delta`; reasoning opens a phase
//!   titled "Размышления", and so does a phase without a title.
//! - A phase id that does not follow the last one becomes the next number;
//!   phase text always goes to the latest phase.
//! - What comes too late is dropped: a `serp_summary` (with its text) after
//!   the thinking began, phases and reasoning once the thinking ended,
//!   anything after the end of the final (`</final>`, a `final_end` line)
//!   but `serp_queries`. `final_end` itself is sent by `finish`, after the
//!   `serp_queries` (cleaned by [`clean_queries`], merged when there are
//!   several).
//! - Texts are trimmed: blanks opening a phase or the final are dropped,
//!   blanks are held back until more text follows, and dropped at the end.
//!   One call sends one delta per stretch of text, however many tags and
//!   comments the piece held.
//!   No delta is empty, except one: an answer without any final text ends
//!   with one `final_delta` whose text is empty, since `final_end` needs a
//!   `final_delta` before it and nothing should be made up for the user.
//! - ThinkingML: a tag the format does not name (`<b>`, `a < b`) is text;
//!   one that is longer than [`MAX_TAG_BYTES`] is text too. Inside
//!   `<final>`, every tag but `</final>` and the queries is the answer's
//!   text: a second `<thinking>` there is shown as written, and so is HTML's
//!   `<title>` in a code sample. Elsewhere a tag that does not fit is
//!   dropped and its text stays where it stands: text outside any tag is
//!   final text. `<think>` (open models' reasoning) is `<thinking>`.
//!   `<!-- ... -->` comments never reach the screen; those holding
//!   `<serp_queries>` give the queries.
//! - JSON Lines (`jsonl`): events are taken field by field, system
//!   events and unknown names are dropped, an app-action object shows its
//!   `text`, a line that is no JSON is final text.
//!
//! Bounded: what is held back is at most a tag ([`MAX_TAG_BYTES`]), a
//! comment or a summary (2 KiB), a JSON object ([`MAX_OBJECT_BYTES`]) and
//! 4 KiB of blanks; no recursion; the work is linear in the input.

mod jsonl;
mod sequence;
mod thinkingml;

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

use crate::jsonseq::{
    Event,
    mapper::sequence::Sequence,
    validate::{MAX_QUERIES, MAX_QUERY_CHARS, sensitive},
};

/// The longest ThinkingML tag read as a tag; a longer one is text.
pub const MAX_TAG_BYTES: usize = 256;
/// The largest JSON object read from JSON Lines; a larger one is skipped
/// (or, when it does not look like JSON, shown as text).
pub const MAX_OBJECT_BYTES: usize = 64 * 1024;
/// The title of the phase opened only so that a final may follow.
pub const ANSWER_TITLE: &str = "Ответ";
/// The title of a phase opened for the model's reasoning or given none.
pub const THINKING_TITLE: &str = "Размышления";

/// How the model's answer text is read.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum Format {
    /// As its first visible character says: `<` ThinkingML, `{` JSON Lines,
    /// anything else plain text.
    #[default]
    Auto,
    /// ThinkingML: `<serp>`, `<thinking>`, `<phase>`, `<title>`, `<final>`.
    ThinkingMl,
    /// Plain text: all of it is the final.
    Text,
    /// JSON Lines: one JSONSeq event per line.
    Jsonl,
    /// ThinkingML that starts inside a thought the chat template opened
    /// (`<think>` sent at the end of the prompt, as some reasoning models'
    /// templates do): the text up to `</think>` is thinking.
    #[serde(rename = "think_opened")]
    ThinkOpened,
}

/// One event to send: its SSE `event:` name and its `data`, without the
/// `message_id` and `request_id` the stream adds.
#[derive(Debug, Clone, PartialEq)]
pub struct SeqEvent {
    /// The `event:` name.
    pub name: &'static str,
    /// The `data` object.
    pub data: Map<String, Value>,
}

impl SeqEvent {
    fn new<const N: usize>(name: &'static str, fields: [(&str, Value); N]) -> SeqEvent {
        SeqEvent { name, data: fields.into_iter().map(|(key, value)| (key.to_owned(), value)).collect() }
    }

    /// The event as sent, with the ids every event carries
    /// (docs/jsonseq.md#on-the-wire).
    pub fn to_event(&self, message_id: &str, request_id: &str) -> Event {
        let mut data = self.data.clone();
        data.insert("message_id".into(), message_id.into());
        data.insert("request_id".into(), request_id.into());
        Event { name: self.name.to_owned(), data: Value::Object(data).to_string(), id: None, cut: false }
    }

    /// Its `text`, for the deltas and `serp_summary`.
    pub fn text(&self) -> Option<&str> {
        self.data.get("text").and_then(Value::as_str)
    }
}

/// The model's output, mapped to events as it streams. Small and `Send`:
/// one per answer.
#[derive(Debug)]
pub struct Mapper {
    sequence: Sequence,
    reader: Reader,
    /// The thought the chat template opened is still to be read as opened.
    opened: bool,
}

#[derive(Debug)]
enum Reader {
    /// Nothing visible yet, the format to be decided.
    Undecided,
    Text,
    ThinkingMl(crate::jsonseq::mapper::thinkingml::ThinkingMl),
    Jsonl(crate::jsonseq::mapper::jsonl::Jsonl),
}

impl Reader {
    fn of(format: Format) -> Reader {
        match format {
            Format::Auto => Reader::Undecided,
            Format::ThinkingMl | Format::ThinkOpened => Reader::ThinkingMl(Default::default()),
            Format::Text => Reader::Text,
            Format::Jsonl => Reader::Jsonl(Default::default()),
        }
    }
}

impl Mapper {
    /// A mapper reading the answer as `format`.
    pub fn new(format: Format) -> Mapper {
        Mapper { sequence: Sequence::default(), reader: Reader::of(format), opened: format == Format::ThinkOpened }
    }

    /// Takes a piece of the answer's text, split anywhere.
    pub fn text(&mut self, chunk: &str, out: &mut Vec<SeqEvent>) {
        if std::mem::take(&mut self.opened) {
            // The `<think>` the template wrote, read before the model's first word.
            self.text("<think>", out);
        }
        if let Reader::Undecided = self.reader {
            // Blanks before the first visible character show nothing in any format.
            self.reader = match chunk.trim_start().chars().next() {
                None => return,
                Some('<') => Reader::of(Format::ThinkingMl),
                Some('{') => Reader::of(Format::Jsonl),
                Some(_) => Reader::Text,
            };
        }
        let (sequence, start) = (&mut self.sequence, out.len());
        match &mut self.reader {
            Reader::Undecided => {}
            Reader::Text => sequence.final_text(chunk, out),
            Reader::ThinkingMl(reader) => reader.feed(chunk, sequence, out),
            Reader::Jsonl(reader) => reader.feed(chunk, sequence, out),
        }
        coalesce(out, start);
    }

    /// Takes a piece of the model's reasoning (OpenAI `reasoning_content`):
    /// text of the latest phase, dropped once the final has begun.
    pub fn reasoning(&mut self, chunk: &str, out: &mut Vec<SeqEvent>) {
        self.sequence.phase_text(chunk, THINKING_TITLE, out);
    }

    /// The answer ended: sends what was held back, closes what is open and
    /// ends with `final_end`. Later calls send nothing.
    pub fn finish(&mut self, out: &mut Vec<SeqEvent>) {
        if self.opened {
            self.text("", out);
        }
        let (sequence, start) = (&mut self.sequence, out.len());
        match &mut self.reader {
            Reader::Undecided | Reader::Text => {}
            Reader::ThinkingMl(reader) => reader.finish(sequence, out),
            Reader::Jsonl(reader) => reader.finish(sequence, out),
        }
        sequence.end(out);
        coalesce(out, start);
    }

    /// Whether the answer is read as ThinkingML: its tags set a thought
    /// apart from the final.
    pub fn reads_tags(&self) -> bool {
        matches!(self.reader, Reader::ThinkingMl(_))
    }

    /// Whether the answer is read as JSON Lines of events: they set the
    /// final apart from the rest (a summary, a thought).
    pub fn reads_events(&self) -> bool {
        matches!(&self.reader, Reader::Jsonl(reader) if reader.reads_events())
    }

    /// Whether `final_end` has been sent.
    pub fn is_finished(&self) -> bool {
        self.sequence.is_ended()
    }
}

/// Joins the deltas of one text that follow each other among the events
/// from `start` (those of one call; earlier ones may have been sent): a
/// piece of input with text and tags in it is one event per text.
fn coalesce(out: &mut Vec<SeqEvent>, start: usize) {
    if out.len() - start < 2 {
        return;
    }
    for event in out.split_off(start) {
        let ours = out.len() > start;
        let last = out.last_mut().filter(|_| ours);
        let same_text = |last: &SeqEvent| {
            last.name == event.name
                && (event.name == "final_delta" || (event.name == "phase_delta" && last.data["id"] == event.data["id"]))
        };
        match (last, event.text()) {
            (Some(last), Some(more)) if same_text(last) => {
                if let Some(Value::String(text)) = last.data.get_mut("text") {
                    text.push_str(more);
                }
            }
            _ => out.push(event),
        }
    }
}

/// The events of an answer given whole as `chunks` of text, `finish`
/// included.
pub fn map_all(format: Format, chunks: &[&str]) -> Vec<SeqEvent> {
    let mut mapper = Mapper::new(format);
    let mut out = Vec::new();
    for chunk in chunks {
        mapper.text(chunk, &mut out);
    }
    mapper.finish(&mut out);
    out
}

/// `serp_queries` as the contract wants them (docs/jsonseq.md#fields): each
/// trimmed, its blanks collapsed, cut to [`MAX_QUERY_CHARS`] characters;
/// empty ones, repeats (ignoring case) and those holding something
/// [`sensitive`] dropped; at most [`MAX_QUERIES`].
pub fn clean_queries(raw: impl IntoIterator<Item = String>) -> Vec<String> {
    let mut queries: Vec<String> = Vec::new();
    let mut seen = std::collections::HashSet::new();
    for query in raw {
        if queries.len() == MAX_QUERIES {
            break;
        }
        let collapsed = query.split_whitespace().collect::<Vec<_>>().join(" ");
        let cut: String = collapsed.chars().take(MAX_QUERY_CHARS).collect();
        let cut = cut.trim_end();
        // The whole query is checked too: a cut may split what gives it away.
        if cut.is_empty() || sensitive(cut).is_some() || sensitive(&query).is_some() {
            continue;
        }
        if seen.insert(cut.to_lowercase()) {
            queries.push(cut.to_owned());
        }
    }
    queries
}

#[cfg(test)]
mod props;
#[cfg(test)]
mod tests;
