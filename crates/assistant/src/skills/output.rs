//! A command's output cleaned for the model, as the skills format says
//! (docs/skills.md#command-output): ANSI escape sequences, Windows and Linux
//! terminal prompts, Microsoft Windows banners, blank and repeated lines
//! removed; then capped.
//!
//! Entry point: [`clean`]. Invariant: never panics; the result is at most
//! `max_bytes` long (the cut note included) and valid UTF-8.
//!
//! Decisions the format leaves to us:
//! - Escape sequences: CSI (`ESC [` … final byte, and the 8-bit `U+009B`),
//!   OSC (`ESC ]` … BEL or `ESC \`), DCS/PM/APC strings, and two-byte
//!   `ESC x`. Other control characters go too, except tab.
//! - A lone carriage return redraws the line (progress bars): a line keeps
//!   what follows its last `\r`, as a terminal shows it; `\r\n` is a newline.
//! - A prompt line goes whole, with the command echoed after it:
//!   `C:\Users\me>`, `PS C:\>`, `user@host:~/dir$`, `[user@host dir]#`.
//! - Banners: `Microsoft Windows [Version …]`, `(c) Microsoft Corporation…`
//!   in any language, `Windows PowerShell`, `Copyright (C) Microsoft…`, and
//!   PowerShell's `aka.ms` upgrade notices.
//! - "Repeated lines" are repeats of the line just before (after
//!   cleaning); a line seen earlier but not adjacent is kept, since output
//!   such as `git log` repeats lines that matter.
//! - Leading spaces stay (`git status --porcelain` starts lines with
//!   one, and the model must see them); trailing whitespace goes.
//! - Past the cap the output ends with [`CUT_NOTE`] on its own line.

use std::sync::LazyLock;

use regex::Regex;

/// The cap [`clean`] callers use by default: about 2-3 thousand tokens.
pub const DEFAULT_MAX_BYTES: usize = 8 * 1024;

/// The line that ends an output cut at the cap.
pub const CUT_NOTE: &str = "[output cut: too long]";

// Prompts and banners, matched on a line already free of escapes.
static NOISE: LazyLock<Vec<Regex>> = LazyLock::new(|| {
    [
        // Windows cmd and PowerShell prompts: `C:\path>` and `PS C:\path>`.
        r"^(PS )?[A-Za-z]:\\[^<>|]*>",
        // Linux prompts: `user@host:path$` / `#`, `[user@host path]$`.
        r"^[\w.-]+@[\w.-]+:\S*\s?[$#](\s|$)",
        r"^\[[\w.-]+@[\w.-]+[^\]]*\][$#](\s|$)",
        r"^Microsoft Windows \[",
        r"(?i)^(\(c\)|©|copyright \(c\)).*microsoft",
        r"^Windows PowerShell\s*$",
        r"(?i)aka\.ms/(pscore6|PSWindows)",
    ]
    .iter()
    .filter_map(|pattern| Regex::new(pattern).ok())
    .collect()
});

/// `raw` cleaned for the model and cut to at most `max_bytes`.
pub fn clean(raw: &str, max_bytes: usize) -> String {
    let text = strip_escapes(raw);
    let mut out = String::new();
    let mut previous: Option<&str> = None;
    let mut cut = false;
    for line in text.split('\n') {
        // A lone `\r` redraws the line: keep what a terminal would show.
        let line = line.strip_suffix('\r').unwrap_or(line);
        let line = line.rsplit('\r').next().unwrap_or(line).trim_end();
        if line.trim().is_empty() || previous == Some(line) || NOISE.iter().any(|re| re.is_match(line)) {
            continue;
        }
        previous = Some(line);
        let needed = out.len() + usize::from(!out.is_empty()) + line.len();
        if !out.is_empty() {
            out.push('\n');
        }
        if needed > max_bytes {
            // The start of the line that overflows is kept, as far as it
            // fits: output of one long line (minified JSON) is not all lost.
            let room = max_bytes.saturating_sub(out.len());
            out.push_str(megamind_core::text::clip(line, room));
            cut = true;
            break;
        }
        out.push_str(line);
    }
    if cut {
        cut_with_note(&mut out, max_bytes);
    }
    out
}

/// Makes room for [`CUT_NOTE`] on its own line, or, when even the note
/// does not fit, keeps what fits. The line cut in the middle keeps the
/// rules: it goes when that leaves it blank or equal to the line before.
fn cut_with_note(out: &mut String, max_bytes: usize) {
    let note = max_bytes.checked_sub(CUT_NOTE.len() + 1);
    let keep = megamind_core::text::clip(out, note.unwrap_or(max_bytes)).trim_end().len();
    out.truncate(keep);
    let (before, last) = out.rsplit_once('\n').unwrap_or(("", out.as_str()));
    if before.rsplit('\n').next() == Some(last) && !before.is_empty() {
        let keep = before.len();
        out.truncate(keep);
    }
    let last = out.rsplit('\n').next().unwrap_or("");
    if note.is_none() || last == CUT_NOTE {
        return;
    }
    if !out.is_empty() {
        out.push('\n');
    }
    out.push_str(CUT_NOTE);
}

/// `raw` without terminal escape sequences and control characters (tab,
/// newline and carriage return stay; the line pass handles `\r`).
fn strip_escapes(raw: &str) -> String {
    let mut out = String::with_capacity(raw.len());
    let mut chars = raw.chars().peekable();
    while let Some(c) = chars.next() {
        match c {
            '\u{1b}' => match chars.next() {
                Some('[') => skip_csi(&mut chars),
                // OSC, DCS, SOS, PM, APC: a string up to BEL or `ESC \`.
                Some(']' | 'P' | 'X' | '^' | '_') => skip_string(&mut chars),
                // `ESC (` and friends carry one more byte (charset choice).
                Some('(' | ')' | '*' | '+' | '#' | '%') => {
                    chars.next();
                }
                _ => {}
            },
            '\u{9b}' => skip_csi(&mut chars),
            '\t' | '\n' | '\r' => out.push(c),
            c if c.is_control() => {}
            c => out.push(c),
        }
    }
    out
}

/// Skips a CSI's parameter and intermediate bytes and its final byte.
fn skip_csi(chars: &mut std::iter::Peekable<std::str::Chars<'_>>) {
    for c in chars.by_ref() {
        if ('\u{40}'..='\u{7e}').contains(&c) {
            return;
        }
        if !('\u{20}'..='\u{3f}').contains(&c) {
            // Not a CSI byte: a broken sequence ends here.
            return;
        }
    }
}

/// Skips a control string up to BEL or the string terminator `ESC \`.
fn skip_string(chars: &mut std::iter::Peekable<std::str::Chars<'_>>) {
    while let Some(c) = chars.next() {
        match c {
            '\u{7}' | '\u{9c}' => return,
            '\u{1b}' => {
                if chars.peek() == Some(&'\\') {
                    chars.next();
                }
                return;
            }
            _ => {}
        }
    }
}

#[cfg(test)]
mod tests;
