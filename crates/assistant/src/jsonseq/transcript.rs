//! An SSE transcript (what `curl -N` prints of a `text/event-stream`) read
//! into events as an `EventSource` reads them: `event:` names one, `data:`
//! lines join with newlines, `id:` is kept, `:` lines are comments, a blank
//! line ends an event; an event without a name is a `message`, one without
//! data is none, as the SSE standard says. Bounded: at most
//! [`MAX_EVENTS`] events of at most [`MAX_EVENT_BYTES`] each are read.

/// Events read at most; past it the transcript is cut (and says so).
pub const MAX_EVENTS: usize = 100_000;
/// Largest event kept, in bytes of data.
pub const MAX_EVENT_BYTES: usize = 1 << 20;

/// One event of a transcript.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Event {
    /// Its `event:` name (`message` when none).
    pub name: String,
    /// Its `data:` lines, joined with `\n`.
    pub data: String,
    /// Its `id:`, when it had one.
    pub id: Option<String>,
    /// Its data was cut at [`MAX_EVENT_BYTES`].
    pub cut: bool,
}

/// What a transcript holds, read as an `EventSource` reads it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Transcript {
    /// Its events, in order: those a client would dispatch.
    pub events: Vec<Event>,
    /// There were more than [`MAX_EVENTS`]: the rest was not read.
    pub more: bool,
    /// It ends inside an event (or a line), with no blank line after it: a
    /// client drops that event, and so does this reader.
    pub unterminated: bool,
}

/// The events of `text`, and whether there were more than [`MAX_EVENTS`]
/// ([`read_transcript`] says more).
pub fn parse_transcript(text: &str) -> (Vec<Event>, bool) {
    let transcript = read_transcript(text);
    (transcript.events, transcript.more)
}

/// Reads `text` as the SSE standard does: a byte order mark at its start is
/// skipped, a line ends at CRLF, LF or a lone CR, an event without `data:`
/// is not dispatched, and neither is one the text ends inside of.
pub fn read_transcript(text: &str) -> Transcript {
    let mut rest = text.strip_prefix('\u{feff}').unwrap_or(text);
    let mut events = Vec::new();
    let mut current: Option<Event> = None;
    let mut has_data = false;
    // SSE's line ends are ASCII: the slices stay on char boundaries.
    while let Some(at) = rest.find(['\r', '\n']) {
        let line = &rest[..at];
        let ending = if rest[at..].starts_with("\r\n") { 2 } else { 1 };
        rest = &rest[at + ending..];
        if line.is_empty() {
            let event = current.take();
            if std::mem::take(&mut has_data)
                && let Some(event) = event
            {
                if events.len() == MAX_EVENTS {
                    return Transcript { events, more: true, unterminated: false };
                }
                events.push(event);
            }
            continue;
        }
        if line.starts_with(':') {
            continue;
        }
        let (field, value) = line.split_once(':').unwrap_or((line, ""));
        let value = value.strip_prefix(' ').unwrap_or(value);
        let event =
            current.get_or_insert_with(|| Event { name: "message".into(), data: String::new(), id: None, cut: false });
        match field {
            "event" => event.name = value.to_owned(),
            "id" => event.id = Some(value.to_owned()),
            // Once cut, an event takes no more: its later lines would
            // join data no longer whole, and each would add its newline.
            "data" if event.cut => {}
            "data" => {
                let joined = std::mem::replace(&mut has_data, true);
                if event.data.len() + usize::from(joined) + value.len() > MAX_EVENT_BYTES {
                    event.cut = true;
                } else {
                    if joined {
                        event.data.push('\n');
                    }
                    event.data.push_str(value);
                }
            }
            // `retry` and unknown fields are ignored, as the standard says.
            _ => {}
        }
    }
    Transcript { events, more: false, unterminated: current.is_some() || !rest.is_empty() }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn events_names_data_and_ids_are_read() {
        let text = ": comment\nid: 1\nevent: thinking_start\ndata: {}\n\nevent: final_delta\r\ndata: {\"text\":\r\ndata: \"a\"}\r\n\r\ndata: plain\n\n";
        let (events, more) = parse_transcript(text);
        assert!(!more);
        assert_eq!(events.len(), 3);
        assert_eq!(
            (events[0].name.as_str(), events[0].data.as_str(), events[0].id.as_deref()),
            ("thinking_start", "{}", Some("1"))
        );
        assert_eq!(events[1].data, "{\"text\":\n\"a\"}");
        assert_eq!(
            (events[2].name.as_str(), events[2].data.as_str()),
            ("message", "plain"),
            "an event without a name is a message"
        );
    }

    #[test]
    fn lines_end_as_the_standard_says_and_only_whole_events_with_data_count() {
        // A byte order mark, lone CRs, an event of an id alone, and one the
        // text ends inside of.
        let text = "\u{feff}event: a\rdata: 1\r\rid: 7\n\nevent: b\r\ndata: 2\r\n\r\nevent: c\ndata: 3\n";
        let transcript = read_transcript(text);
        let read: Vec<_> = transcript.events.iter().map(|e| (e.name.as_str(), e.data.as_str())).collect();
        assert_eq!(read, [("a", "1"), ("b", "2")]);
        assert!(transcript.unterminated, "the text ends inside event c");
        assert!(!transcript.more);
        // Ended, each is whole; a line cut short is no event either.
        assert!(!read_transcript(&format!("{text}\n")).unterminated);
        assert_eq!(read_transcript(&format!("{text}\n")).events.len(), 3);
        let cut = read_transcript("data: 1\n\ndata: 2");
        assert_eq!((cut.events.len(), cut.unterminated), (1, true));
        assert!(!read_transcript(": only a comment\n").unterminated, "a comment is no event");
    }

    #[test]
    fn an_event_is_cut_at_its_bound_whatever_follows() {
        // A megabyte of data, then millions of empty `data:` lines, each of
        // which once added its newline past the bound.
        let text = format!("data: {}\n{}data: tail\n\n", "x".repeat(MAX_EVENT_BYTES - 10), "data:\n".repeat(2_000_000));
        let (events, _) = parse_transcript(&text);
        let event = &events[0];
        assert!(event.cut);
        assert!(event.data.len() <= MAX_EVENT_BYTES, "{}", event.data.len());
        assert!(!event.data.ends_with("tail"));
        let whole = parse_transcript("data: a\ndata:\ndata: b\n\n").0;
        assert_eq!((whole[0].data.as_str(), whole[0].cut), ("a\n\nb", false));
    }

    #[test]
    fn a_transcript_of_more_events_than_the_bound_is_cut_there_and_says_so() {
        // A hundred thousand and five: past the bound by a few.
        let count = 100_005;
        let text: String = (0..count).map(|i| format!("id: {i}\ndata: x\n\n")).collect();
        let (events, more) = parse_transcript(&text);
        assert_eq!(events.len(), MAX_EVENTS, "the events stop at the bound");
        assert!(more, "the cut is reported");
        let last = events.last().and_then(|event| event.id.as_deref());
        assert_eq!(last, Some((MAX_EVENTS - 1).to_string().as_str()), "the first events are kept, in order");
        // Exactly at the bound nothing is cut.
        let at_bound: String = text.lines().take(3 * MAX_EVENTS).map(|line| format!("{line}\n")).collect();
        assert_eq!(parse_transcript(&at_bound).0.len(), MAX_EVENTS);
        assert!(!parse_transcript(&at_bound).1, "no more than the bound: no cut reported");
    }
}
