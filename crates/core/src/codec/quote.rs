//! How error messages quote a client's body: short, and redacted.
//!
//! A parser's message quotes what it choked on (an unknown field's name, a
//! value of the wrong type). That message goes into the protocol `Error` and
//! the log, so a body could smuggle personal data, or a megabyte, into both.
//! Names of the schema's shape (identifiers) are kept, being what a client
//! needs to fix its body; anything else quoted is cut to a short prefix.

/// Longest identifier quoted as it is.
const MAX_NAME: usize = 40;
/// Characters of any other quoted content kept.
const PREFIX: usize = 3;
/// Longest sanitized message, in bytes.
const MAX_MESSAGE: usize = 320;

/// `message` with every quoted segment (in backticks, double or single
/// quotes) shortened, and the whole capped.
pub fn sanitize(message: &str) -> String {
    let mut out = String::with_capacity(message.len().min(MAX_MESSAGE));
    let mut rest = message;
    while let Some(open) = rest.find(['`', '"', '\'']) {
        let quote = rest[open..].chars().next().unwrap_or('"');
        out.push_str(&rest[..=open]);
        let after = &rest[open + 1..];
        let Some(close) = closing(after, quote) else {
            // An unclosed quote: the rest is content.
            out.push_str(&shorten(after));
            rest = "";
            break;
        };
        out.push_str(&shorten(&after[..close]));
        out.push(quote);
        rest = &after[close + 1..];
    }
    out.push_str(rest);
    cap(out)
}

/// Where the quote opened just before `text` closes, past escaped quotes.
fn closing(text: &str, quote: char) -> Option<usize> {
    let mut escaped = false;
    for (at, c) in text.char_indices() {
        match c {
            _ if escaped => escaped = false,
            '\\' => escaped = true,
            c if c == quote => return Some(at),
            _ => {}
        }
    }
    None
}

/// A quoted segment as it may appear: an identifier whole, anything else as
/// a few characters and the count of the rest.
fn shorten(content: &str) -> String {
    if is_name(content) {
        return content.to_owned();
    }
    let kept: String = content.chars().take(PREFIX).filter(|c| !c.is_control()).collect();
    let total = content.chars().count();
    if total <= PREFIX { kept } else { format!("{kept}…({total} characters)") }
}

fn is_name(text: &str) -> bool {
    let mut chars = text.chars();
    text.len() <= MAX_NAME
        && chars.next().is_some_and(|c| c.is_ascii_alphabetic() || c == '_')
        && chars.all(|c| c.is_ascii_alphanumeric() || matches!(c, '_' | '.' | '/'))
}

/// At most [`MAX_MESSAGE`] bytes, cut at a character boundary.
pub fn cap(text: String) -> String {
    cap_at(text, MAX_MESSAGE)
}

/// At most `max` bytes, cut at a character boundary, an ellipsis added.
pub fn cap_at(mut text: String, max: usize) -> String {
    if text.len() <= max {
        return text;
    }
    let mut end = max;
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    text.truncate(end);
    text.push('…');
    text
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_are_kept_and_other_content_is_cut() {
        assert_eq!(
            sanitize("unknown field `RequestIdd`, expected `RequestId`"),
            "unknown field `RequestIdd`, expected `RequestId`"
        );
        assert_eq!(
            sanitize("invalid type: string \"109.252.86.235\", expected i64"),
            "invalid type: string \"109…(14 characters)\", expected i64"
        );
        assert_eq!(sanitize("unknown field `+79161234567`"), "unknown field `+79…(12 characters)`");
        assert_eq!(
            sanitize("field 'Utterancee' not found for message 'NAlice.NScenarios.TInput'"),
            "field 'Utterancee' not found for message 'NAlice.NScenarios.TInput'"
        );
    }

    #[test]
    fn unclosed_quotes_and_huge_messages_are_bounded() {
        let long = format!("bad value \"{}", "x".repeat(100_000));
        let out = sanitize(&long);
        assert!(out.len() < 64, "{out}");
        let many = "`a` ".repeat(10_000);
        assert!(sanitize(&many).len() <= MAX_MESSAGE + '…'.len_utf8());
        let cyrillic = "я".repeat(1_000);
        assert!(cap(cyrillic).ends_with('…'));
        assert_eq!(cap_at("яя".into(), 3), "я…", "cut at a character boundary");
        assert_eq!(cap_at("short".into(), 5), "short");
    }
}
