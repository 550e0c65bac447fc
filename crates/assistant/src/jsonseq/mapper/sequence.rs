//! The contract's order (docs/jsonseq.md#order), kept as events are sent:
//! the same stages the validator tracks. Whatever the readers ask, only
//! what may come next is sent — what must come first (a thinking, a phase,
//! its end) is sent before it, what can no longer come is dropped — so that
//! no sequence of calls breaks a rule.

use megamind_core::text::clip;
use serde_json::Value;

use crate::jsonseq::{
    mapper,
    mapper::{ANSWER_TITLE, SeqEvent, clean_queries},
};

/// Largest `serp_summary` sent, in bytes.
const MAX_SUMMARY_BYTES: usize = 2048;
/// Largest phase title sent, in bytes.
const MAX_TITLE_BYTES: usize = 512;
/// Blanks held back inside a text at most; past it they are sent.
const MAX_BLANK_BYTES: usize = 4096;
/// Phases sent at most; past it, a phase's text goes on in the latest one,
/// where a piece's texts are joined into one event. A model's eight bytes
/// (`<phase>x`) are two events: a megabyte of them would be a quarter of a
/// million, each carrying the call's ids.
pub(crate) const MAX_PHASES: u64 = 256;

#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, PartialOrd, Ord)]
enum Stage {
    #[default]
    Start,
    Summary,
    Thinking,
    Thought,
    Final,
    Ended,
}

#[derive(Debug, Default)]
pub(super) struct Sequence {
    stage: Stage,
    /// The latest phase's id.
    phase: Option<u64>,
    /// The upstream ended its final: only `serp_queries` may still come.
    closed: bool,
    /// The text being sent: the latest phase's or the final's.
    body: Body,
    queries: Vec<String>,
}

impl Sequence {
    pub(super) fn is_ended(&self) -> bool {
        self.stage == Stage::Ended
    }

    /// Whether a `serp_summary` may still come.
    fn may_summarize(&self) -> bool {
        self.stage == Stage::Start && !self.closed
    }

    /// Whether final text has been sent and more may follow.
    pub(super) fn in_final(&self) -> bool {
        self.stage == Stage::Final && !self.closed
    }

    /// Whether phases may still come.
    pub(super) fn may_think(&self) -> bool {
        self.stage <= Stage::Thinking && !self.closed
    }

    pub(super) fn summary(&mut self, text: &str, out: &mut Vec<SeqEvent>) {
        let text = clip(text.trim(), MAX_SUMMARY_BYTES).trim_end();
        if !self.may_summarize() || text.is_empty() {
            return;
        }
        out.push(SeqEvent::new("serp_summary", [("text", text.into())]));
        self.stage = Stage::Summary;
    }

    pub(super) fn thinking_start(&mut self, out: &mut Vec<SeqEvent>) {
        if self.stage <= Stage::Summary && !self.closed {
            out.push(SeqEvent::new("thinking_start", []));
            self.stage = Stage::Thinking;
        }
    }

    /// Starts a phase, numbered next after the latest (1, 2, 3, …, whatever
    /// the model numbered it: screens may count on the numbers running on
    /// without a gap); whether it started.
    pub(super) fn phase_start(&mut self, title: &str, out: &mut Vec<SeqEvent>) -> bool {
        if !self.may_think() {
            return false;
        }
        // Past the bound nothing follows: the text goes on in the latest phase.
        let Some(id) = self.phase.unwrap_or(0).checked_add(1).filter(|id| *id <= MAX_PHASES) else { return false };
        self.thinking_start(out);
        let title = clip(title.trim(), MAX_TITLE_BYTES).split_whitespace().collect::<Vec<_>>().join(" ");
        let title = if title.is_empty() { mapper::THINKING_TITLE.to_owned() } else { title };
        out.push(SeqEvent::new("phase_start", [("id", id.into()), ("title", title.into())]));
        self.phase = Some(id);
        self.body = Body::default();
        true
    }

    /// Text of the latest phase; when none has started, of a new one titled
    /// `title`.
    pub(super) fn phase_text(&mut self, text: &str, title: &str, out: &mut Vec<SeqEvent>) {
        let open = self.stage == Stage::Thinking && self.phase.is_some();
        if !self.may_think() || (!open && text.trim().is_empty()) {
            return;
        }
        if !open && !self.phase_start(title, out) {
            return;
        }
        if let (Some(text), Some(id)) = (self.body.push(text), self.phase) {
            out.push(SeqEvent::new("phase_delta", [("id", id.into()), ("text", text.into())]));
        }
    }

    pub(super) fn thinking_end(&mut self, out: &mut Vec<SeqEvent>) {
        if !self.may_think() {
            return;
        }
        if self.phase.is_none() {
            self.phase_start(ANSWER_TITLE, out);
        }
        out.push(SeqEvent::new("thinking_end", []));
        self.stage = Stage::Thought;
        self.body = Body::default();
    }

    pub(super) fn final_text(&mut self, text: &str, out: &mut Vec<SeqEvent>) {
        if self.closed || self.stage == Stage::Ended || (self.stage != Stage::Final && text.trim().is_empty()) {
            return;
        }
        self.thinking_end(out);
        if let Some(text) = self.body.push(text) {
            out.push(SeqEvent::new("final_delta", [("text", text.into())]));
            self.stage = Stage::Final;
        }
    }

    /// The upstream ended its final: later text is dropped, queries still count.
    pub(super) fn close_final(&mut self) {
        self.closed = true;
    }

    pub(super) fn queries(&mut self, raw: Vec<String>) {
        if self.stage != Stage::Ended && !raw.is_empty() {
            self.queries = clean_queries(std::mem::take(&mut self.queries).into_iter().chain(raw));
        }
    }

    /// Ends the stream: a final (empty when there was none), the queries, `final_end`.
    pub(super) fn end(&mut self, out: &mut Vec<SeqEvent>) {
        if self.stage == Stage::Ended {
            return;
        }
        if self.stage != Stage::Final {
            self.closed = false;
            self.thinking_end(out);
            out.push(SeqEvent::new("final_delta", [("text", "".into())]));
        }
        if !self.queries.is_empty() {
            let queries = std::mem::take(&mut self.queries).into_iter().map(Value::from).collect::<Vec<_>>();
            out.push(SeqEvent::new("serp_queries", [("queries", queries.into())]));
        }
        out.push(SeqEvent::new("final_end", []));
        self.stage = Stage::Ended;
    }
}

/// A text sent in pieces, trimmed: blanks before its first visible
/// character dropped, blanks after its last one held back until more text
/// follows.
#[derive(Debug, Default)]
struct Body {
    started: bool,
    blank: String,
}

impl Body {
    /// What to send of `piece`, if anything.
    fn push(&mut self, piece: &str) -> Option<String> {
        let visible = piece.trim_end();
        let trailing = &piece[visible.len()..];
        if visible.is_empty() {
            if !self.started {
                return None;
            }
            self.blank.push_str(trailing);
            return (self.blank.len() > MAX_BLANK_BYTES).then(|| std::mem::take(&mut self.blank));
        }
        let visible = if self.started { visible } else { visible.trim_start() };
        let mut text = std::mem::take(&mut self.blank);
        text.push_str(visible);
        self.blank.push_str(trailing);
        // Held only up to the bound, as blanks alone are: past it, sent.
        if self.blank.len() > MAX_BLANK_BYTES {
            text.push_str(&std::mem::take(&mut self.blank));
        }
        self.started = true;
        Some(text)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_summary_and_a_title_of_ten_thousand_bytes_are_sent_cut_to_their_bounds() {
        let (mut seq, mut out) = (Sequence::default(), Vec::new());
        // An odd byte first: each bound falls inside a two-byte `я`.
        let long = format!("x{}", "я".repeat(5_000));
        seq.summary(&long, &mut out);
        seq.phase_start(&long, &mut out);
        let field = |name: &str, key: &str| -> String {
            let event = out.iter().find(|e| e.name == name).unwrap_or_else(|| panic!("{name} in {out:?}"));
            event.data[key].as_str().unwrap_or_default().to_owned()
        };
        let summary = field("serp_summary", "text");
        assert!((MAX_SUMMARY_BYTES - 1..=MAX_SUMMARY_BYTES).contains(&summary.len()), "{} bytes", summary.len());
        assert!(long.starts_with(&summary));
        let title = field("phase_start", "title");
        assert!((MAX_TITLE_BYTES - 1..=MAX_TITLE_BYTES).contains(&title.len()), "{} bytes", title.len());
        assert!(long.starts_with(&title));
    }

    #[test]
    fn pieces_of_blanks_inside_a_text_are_held_back_only_up_to_their_bound() {
        let mut body = Body::default();
        assert_eq!(body.push("a").as_deref(), Some("a"));
        let mut sent = 0;
        for _ in 0..10 {
            sent += body.push(&" ".repeat(1000)).map_or(0, |blanks| blanks.len());
            assert!(body.blank.len() <= MAX_BLANK_BYTES, "{} bytes of blanks held", body.blank.len());
        }
        assert_eq!(sent + body.blank.len(), 10_000, "past the bound the blanks are sent, none lost");
        assert!(sent > 0, "ten thousand blanks are more than the bound: some were sent");
    }

    #[test]
    fn blanks_ending_a_piece_of_text_are_held_back_only_up_to_their_bound() {
        let mut body = Body::default();
        // Within the bound: held until more text comes.
        assert_eq!(body.push("a  ").as_deref(), Some("a"));
        assert_eq!(body.push("b").as_deref(), Some("  b"));
        // Past it: sent with the text, none held and none lost.
        let sent = body.push(&format!("c{}", " ".repeat(10_000))).unwrap_or_default();
        assert!(body.blank.len() <= MAX_BLANK_BYTES, "{} bytes of blanks held after text", body.blank.len());
        assert_eq!(sent.len() + body.blank.len(), 10_001);
    }
}
