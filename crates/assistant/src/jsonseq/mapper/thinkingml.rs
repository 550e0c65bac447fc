//! ThinkingML read as it streams: text is passed on at once, and only what
//! may still become a tag this format names is held back — from a `<` while
//! what follows is the start of `<serp>`, `</thinking>`, `<phase id="2">`,
//! `<!--` and the like, at most [`MAX_TAG_BYTES`]. Anything else (`a < b`,
//! `<b>`) is text. A comment is held back until its `-->` (at most
//! [`MAX_COMMENT_BYTES`], else it was text). Where each part belongs is
//! [`Context`]; what the tags mean is [`ThinkingMl::on_tag`].

use megamind_core::text::clip;

use crate::jsonseq::mapper::{MAX_TAG_BYTES, SeqEvent, THINKING_TITLE, sequence::Sequence};

/// The longest comment held back; a longer one is text.
const MAX_COMMENT_BYTES: usize = 2048;
/// The longest summary, title or query list read; the rest is text.
const MAX_COLLECTED_BYTES: usize = 2048;
/// Tags but `<phase ...>` are short: a name, perhaps blanks, `>`.
const MAX_PLAIN_TAG_BYTES: usize = 32;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Name {
    Serp,
    Thinking,
    Phase,
    Title,
    Final,
    SerpQueries,
}

const NAMES: [(&str, Name); 7] = [
    ("serp", Name::Serp),
    ("thinking", Name::Thinking),
    // What open models (DeepSeek R1, Qwen3) reason in.
    ("think", Name::Thinking),
    ("phase", Name::Phase),
    ("title", Name::Title),
    ("final", Name::Final),
    ("serp_queries", Name::SerpQueries),
];

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Tag {
    name: Name,
    close: bool,
}

/// What a held `<...` is so far.
#[derive(Debug, PartialEq, Eq)]
enum Class {
    /// The start of a tag or of `<!--`.
    Partial,
    /// `<phase` and a blank: attributes follow, up to `>`.
    Attributes,
    Tag(Tag),
    Comment,
    /// No tag of this format.
    Text,
}

/// Where the text read belongs.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
enum Context {
    /// Outside any tag: final text.
    #[default]
    Top,
    /// Inside `<serp>`: the summary, collected.
    Serp,
    /// Inside `<thinking>`, outside a phase: text of the latest phase.
    Thinking,
    /// After `<phase>`, before its title or text.
    PhaseHead,
    /// Inside `<title>`: collected.
    Title,
    /// Inside a started phase.
    Phase,
    /// Inside `<final>`.
    Final,
    /// Inside a bare `<serp_queries>`: collected.
    Queries,
    /// After `</final>`: only queries count.
    After,
}

#[derive(Debug, Default)]
pub(super) struct ThinkingMl {
    /// A `<...` that may be a tag.
    held: String,
    /// `held` is `<phase` and its attributes.
    attributes: bool,
    /// Inside `<!--`: its body so far.
    comment: Option<String>,
    context: Context,
    /// The summary, title or query list of the context.
    collected: String,
    /// Where a bare `<serp_queries>` was opened.
    queries_in: Context,
}

impl ThinkingMl {
    pub(super) fn feed(&mut self, chunk: &str, seq: &mut Sequence, out: &mut Vec<SeqEvent>) {
        let mut rest = chunk;
        while !rest.is_empty() {
            rest = if self.comment.is_some() { self.scan_comment(rest, seq, out) } else { self.scan(rest, seq, out) };
        }
    }

    pub(super) fn finish(&mut self, seq: &mut Sequence, out: &mut Vec<SeqEvent>) {
        if let Some(body) = self.comment.take() {
            self.on_comment(&body, true, seq, out);
        }
        let held = std::mem::take(&mut self.held);
        self.on_text(&held, seq, out);
        match self.context {
            Context::Serp => seq.summary(&self.collected, out),
            Context::Title => self.start_phase(seq, out),
            Context::Queries => seq.queries(parse_queries(&self.collected)),
            _ => {}
        }
    }

    /// Reads text up to the next `<`, or what is held up to where it is known
    /// to be a tag or text; the rest.
    fn scan<'a>(&mut self, rest: &'a str, seq: &mut Sequence, out: &mut Vec<SeqEvent>) -> &'a str {
        if self.held.is_empty() {
            let Some(at) = rest.find('<') else {
                self.on_text(rest, seq, out);
                return "";
            };
            self.on_text(&rest[..at], seq, out);
            self.held.push('<');
            return &rest[at + 1..];
        }
        if self.attributes {
            // A `<` among the attributes is no attribute: the tag was text,
            // and the `<` may start another. Holding none keeps what is held
            // the same text however the input was split.
            let room = MAX_TAG_BYTES.saturating_sub(self.held.len());
            return match rest.find(['<', '>']) {
                Some(end) if end < room && rest[end..].starts_with('>') => {
                    self.held.push_str(&rest[..=end]);
                    let source = self.take_held();
                    self.on_tag(Tag { name: Name::Phase, close: false }, &source, seq, out);
                    &rest[end + 1..]
                }
                None if rest.len() <= room => {
                    self.held.push_str(rest);
                    ""
                }
                _ => {
                    let text = self.take_held();
                    self.on_text(&text, seq, out);
                    rest
                }
            };
        }
        for (at, c) in rest.char_indices() {
            self.held.push(c);
            let after = &rest[at + c.len_utf8()..];
            match classify(&self.held) {
                Class::Partial => {}
                Class::Attributes => {
                    self.attributes = true;
                    return after;
                }
                Class::Tag(tag) => {
                    let source = self.take_held();
                    self.on_tag(tag, &source, seq, out);
                    return after;
                }
                Class::Comment => {
                    self.take_held();
                    self.comment = Some(String::new());
                    return after;
                }
                Class::Text => {
                    // The character that ruled the tag out may start another.
                    self.held.pop();
                    let text = self.take_held();
                    self.on_text(&text, seq, out);
                    return &rest[at..];
                }
            }
        }
        ""
    }

    fn take_held(&mut self) -> String {
        self.attributes = false;
        std::mem::take(&mut self.held)
    }

    /// Reads a comment's body up to its `-->`; the rest. A comment whose
    /// body and `--` take more than [`MAX_COMMENT_BYTES`] was text: its
    /// first [`MAX_COMMENT_BYTES`] are shown, and reading goes on after them.
    fn scan_comment<'a>(&mut self, rest: &'a str, seq: &mut Sequence, out: &mut Vec<SeqEvent>) -> &'a str {
        let Some(body) = self.comment.as_mut() else { return rest };
        // Where `-->` starts, counted from the body's start: it may begin in
        // the body's last dashes. No search looks past what could be kept.
        let close = if body.ends_with("--") && rest.starts_with('>') {
            Some(body.len() - 2)
        } else if body.ends_with('-') && rest.starts_with("->") {
            Some(body.len() - 1)
        } else {
            clip(rest, MAX_COMMENT_BYTES + 3).find("-->").map(|at| body.len() + at)
        };
        let close = close.filter(|at| at + 2 <= MAX_COMMENT_BYTES);
        if let Some(at) = close {
            let read = at + 3 - body.len();
            match at.checked_sub(body.len()) {
                Some(more) => body.push_str(&rest[..more]),
                None => body.truncate(at),
            }
            let body = std::mem::take(body);
            self.comment = None;
            self.on_comment(&body, false, seq, out);
            return &rest[read..];
        }
        let fits = clip(rest, MAX_COMMENT_BYTES - body.len());
        body.push_str(fits);
        if fits.len() == rest.len() {
            return "";
        }
        let text = format!("<!--{body}");
        self.comment = None;
        self.on_text(&text, seq, out);
        &rest[fits.len()..]
    }

    /// A comment never shows; one holding `<serp_queries>` gives queries.
    /// One that never closed shows unless it held queries.
    fn on_comment(&mut self, body: &str, unclosed: bool, seq: &mut Sequence, out: &mut Vec<SeqEvent>) {
        let lower = body.to_ascii_lowercase();
        match lower.find("<serp_queries>") {
            Some(at) => {
                // ASCII lowercase keeps every byte where it was.
                let start = at + "<serp_queries>".len();
                let end = lower[start..].find("</serp_queries>").map_or(body.len(), |end| start + end);
                seq.queries(parse_queries(&body[start..end]));
            }
            None if unclosed => self.on_text(&format!("<!--{body}"), seq, out),
            None => {}
        }
    }

    fn on_text(&mut self, mut text: &str, seq: &mut Sequence, out: &mut Vec<SeqEvent>) {
        while !text.is_empty() {
            match self.context {
                Context::Top | Context::Final => seq.final_text(text, out),
                Context::Thinking | Context::Phase => seq.phase_text(text, THINKING_TITLE, out),
                Context::PhaseHead if text.trim().is_empty() => {}
                Context::PhaseHead => {
                    self.start_phase(seq, out);
                    continue;
                }
                Context::Serp | Context::Title | Context::Queries => {
                    let room = MAX_COLLECTED_BYTES.saturating_sub(self.collected.len());
                    let fits = clip(text, room);
                    self.collected.push_str(fits);
                    text = &text[fits.len()..];
                    if text.is_empty() {
                        return;
                    }
                    // Too long to be what the tag holds: it ends here, the rest is text.
                    self.end_collected(seq, out);
                    continue;
                }
                Context::After => {}
            }
            return;
        }
    }

    /// Ends a summary, title or query list where it stands.
    fn end_collected(&mut self, seq: &mut Sequence, out: &mut Vec<SeqEvent>) {
        match self.context {
            Context::Serp => {
                seq.summary(&self.collected, out);
                self.context = Context::Top;
            }
            Context::Title => self.start_phase(seq, out),
            Context::Queries => {
                seq.queries(parse_queries(&self.collected));
                self.context = self.queries_in;
            }
            _ => {}
        }
        self.collected.clear();
    }

    /// Starts the phase whose head was read, with the title collected.
    fn start_phase(&mut self, seq: &mut Sequence, out: &mut Vec<SeqEvent>) {
        let title = if self.context == Context::Title { std::mem::take(&mut self.collected) } else { String::new() };
        seq.phase_start(&title, out);
        self.context = Context::Phase;
    }

    /// What a tag (written `source`) means where it stands. Inside the
    /// final only `</final>` and the queries mean something: any other tag is
    /// the answer's text (HTML's `<title>` in a code sample, a thinking
    /// misplaced). Elsewhere, tags that do not fit are dropped and the text
    /// around them stays where it is.
    fn on_tag(&mut self, tag: Tag, source: &str, seq: &mut Sequence, out: &mut Vec<SeqEvent>) {
        use Context::*;
        let closing = |name| tag.close && tag.name == name;
        let structural = closing(Name::Final) || (tag.name == Name::SerpQueries && !tag.close);
        if self.context == Final && !structural {
            return self.on_text(source, seq, out);
        }
        match self.context {
            Serp if closing(Name::Serp) => return self.end_collected(seq, out),
            Title if closing(Name::Title) => return self.end_collected(seq, out),
            Queries if closing(Name::SerpQueries) => return self.end_collected(seq, out),
            // Another tag ends what was being collected, then counts as usual.
            Serp | Title | Queries => self.end_collected(seq, out),
            _ => {}
        }
        let context = self.context;
        match (tag.name, tag.close) {
            // A summary is never the answer: one too late is read, then dropped.
            (Name::Serp, false) if context == Top => self.context = Serp,
            (Name::Thinking, false) if context == Top && seq.may_think() => {
                seq.thinking_start(out);
                self.context = Thinking;
            }
            (Name::Phase, false) if matches!(context, Top | Thinking | PhaseHead | Phase) && seq.may_think() => {
                self.context = PhaseHead;
            }
            (Name::Title, false) if matches!(context, Thinking | PhaseHead) && seq.may_think() => {
                self.context = Title;
            }
            (Name::Phase, true) if matches!(context, PhaseHead | Phase) => self.context = Thinking,
            (Name::Thinking, true) if matches!(context, Top | Thinking | PhaseHead | Phase) => {
                seq.thinking_end(out);
                self.context = Top;
            }
            (Name::Final, false) if context != Final && context != After => {
                seq.thinking_end(out);
                self.context = Final;
            }
            // A final written without `<final>` may still end with `</final>`.
            (Name::Final, true) if context == Final || (context == Top && seq.in_final()) => {
                seq.close_final();
                self.context = After;
            }
            (Name::SerpQueries, false) => {
                self.queries_in = context;
                self.context = Queries;
            }
            _ => {}
        }
    }
}

/// What `held` (from its `<`) is so far.
fn classify(held: &str) -> Class {
    let rest = held.strip_prefix('<').unwrap_or(held);
    if "!--".starts_with(rest) {
        return if rest.len() == 3 { Class::Comment } else { Class::Partial };
    }
    if held.len() > MAX_PLAIN_TAG_BYTES {
        return Class::Text;
    }
    let (close, rest) = match rest.strip_prefix('/') {
        Some(rest) => (true, rest),
        None => (false, rest),
    };
    let length = rest.bytes().take_while(|b| b.is_ascii_alphabetic() || *b == b'_').count();
    let (word, after) = rest.split_at(length);
    if after.is_empty() {
        let prefix = |name: &str| name.len() >= word.len() && name[..word.len()].eq_ignore_ascii_case(word);
        return if NAMES.iter().any(|(name, _)| prefix(name)) { Class::Partial } else { Class::Text };
    }
    let Some(&(_, name)) = NAMES.iter().find(|(known, _)| known.eq_ignore_ascii_case(word)) else {
        return Class::Text;
    };
    let blanks = after.len() - after.trim_start().len();
    match &after[blanks..] {
        ">" => Class::Tag(Tag { name, close }),
        "" if name == Name::Phase && !close => Class::Attributes,
        "" => Class::Partial,
        _ => Class::Text,
    }
}

/// The queries of a JSON list of strings; none when it is no such list.
fn parse_queries(text: &str) -> Vec<String> {
    match serde_json::from_str::<Vec<serde_json::Value>>(text.trim()) {
        Ok(items) => items.into_iter().filter_map(|item| item.as_str().map(str::to_owned)).collect(),
        Err(_) => Vec::new(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::jsonseq::mapper::{
        Format, map_all,
        tests::{final_text, valid},
    };

    /// Feeds `pieces` one by one, checking after each that no more than
    /// the bounds is held; the events.
    fn fed(pieces: &[&str]) -> Vec<SeqEvent> {
        let (mut reader, mut seq, mut out) = (ThinkingMl::default(), Sequence::default(), Vec::new());
        for piece in pieces {
            reader.feed(piece, &mut seq, &mut out);
            assert!(reader.collected.len() <= MAX_COLLECTED_BYTES, "{} bytes collected", reader.collected.len());
            assert!(reader.held.len() <= MAX_TAG_BYTES, "{} bytes held", reader.held.len());
        }
        reader.finish(&mut seq, &mut out);
        seq.end(&mut out);
        valid(out)
    }

    #[test]
    fn a_summary_title_or_query_list_of_ten_thousand_bytes_is_collected_only_up_to_its_bound() {
        let long = "x".repeat(10_000);
        let pieces: Vec<&str> = std::iter::once("<serp>").chain(std::iter::repeat_n("x", 10_000)).collect();
        for events in [fed(&pieces), fed(&["<serp>", &long, "</serp>"])] {
            let summary = events.iter().find(|e| e.name == "serp_summary").and_then(SeqEvent::text);
            assert_eq!(summary.map(str::len), Some(MAX_COLLECTED_BYTES), "the summary ends at the bound");
            // Too long to be a summary: the rest is the answer's text.
            assert_eq!(final_text(&events).len() + MAX_COLLECTED_BYTES, 10_000);
        }
        let events = fed(&["<thinking><phase><title>", &long, "</title>y</phase>"]);
        let phase = events.iter().find(|e| e.name == "phase_start").expect("a phase");
        assert!(phase.data["title"].as_str().is_some_and(|t| t.len() <= MAX_COLLECTED_BYTES), "{phase:?}");
        let queries = format!("<final>a<serp_queries>[\"{long}\"]</serp_queries>");
        let events = fed(&[&queries]);
        assert!(events.iter().all(|e| e.name != "serp_queries"), "a list past the bound is no list");
        assert!(final_text(&events).len() + MAX_COLLECTED_BYTES >= 10_000, "its rest is the answer's text");
    }

    #[test]
    fn a_plain_tag_padded_past_its_bound_is_text() {
        let padded = format!("<thinking{}>x", " ".repeat(10_000));
        let chars: Vec<String> = padded.chars().map(String::from).collect();
        let chars: Vec<&str> = chars.iter().map(String::as_str).collect();
        for events in [fed(&[&padded]), fed(&chars)] {
            assert_eq!(final_text(&events), padded, "shown as written, not read as `<thinking>`");
        }
        let (mut reader, mut seq, mut out) = (ThinkingMl::default(), Sequence::default(), Vec::new());
        for piece in chars {
            reader.feed(piece, &mut seq, &mut out);
            assert!(reader.held.len() <= MAX_PLAIN_TAG_BYTES, "{} bytes held", reader.held.len());
        }
        // Within the bound the blanks are a tag's.
        let short = format!("<thinking{}>x</thinking>y", " ".repeat(MAX_PLAIN_TAG_BYTES - "<thinking>".len()));
        assert_eq!(final_text(&valid(map_all(Format::ThinkingMl, &[&short]))), "y");
    }
}
