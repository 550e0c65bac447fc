//! What may be spoken of a text: its complete sentences, up to a voice-length
//! cap. A sentence ends at `.`, `!`, `?` or `…` (closing quotes and brackets
//! after it belong to it) followed by white space; at the end of a finished
//! text the end counts too, but not at the end of one still streaming, where
//! "3." may become "3.5". A cap cuts at the last sentence end that fits, or,
//! when not even the first sentence fits, at the last word that does.

/// Characters that end a sentence.
fn ends_sentence(c: char) -> bool {
    matches!(c, '.' | '!' | '?' | '…' | '。' | '！' | '？')
}

/// Characters that close a sentence after its end mark.
fn closes(c: char) -> bool {
    matches!(c, '"' | '\'' | '»' | '”' | '’' | ')' | ']')
}

/// Byte offsets just past each sentence end in `text`, in order; `finished`
/// says whether the end of `text` is the end of the answer.
fn sentence_ends(text: &str, finished: bool) -> impl Iterator<Item = usize> + '_ {
    let mut chars = text.char_indices().peekable();
    std::iter::from_fn(move || {
        while let Some((_, c)) = chars.next() {
            if !ends_sentence(c) {
                continue;
            }
            // Runs of marks ("?!", "...") and the quotes after them.
            while let Some(&(_, next)) = chars.peek() {
                if ends_sentence(next) || closes(next) {
                    chars.next();
                } else {
                    break;
                }
            }
            match chars.peek() {
                Some(&(at, next)) if next.is_whitespace() => return Some(at),
                Some(_) => continue,
                None if finished => return Some(text.len()),
                None => return None,
            }
        }
        None
    })
}

/// The complete sentences at the start of `text`, trimmed; empty when there
/// is none yet. `finished`: the text is the whole answer.
pub(crate) fn complete_sentences(text: &str, finished: bool) -> &str {
    let text = text.trim_start();
    sentence_ends(text, finished).last().map_or("", |end| text[..end].trim_end())
}

/// `text` cut for the voice: at most `max_chars` characters, ending at a
/// sentence end when one fits, else at a word end. Whole when it fits.
pub(crate) fn voice_cap(text: &str, max_chars: usize) -> &str {
    let text = text.trim();
    let Some((limit, _)) = text.char_indices().nth(max_chars) else { return text };
    if let Some(end) = sentence_ends(text, true).take_while(|&end| end <= limit).last() {
        return text[..end].trim_end();
    }
    // Not even one sentence fits: the words that do.
    let words = text[..limit].rfind(char::is_whitespace).map_or(&text[..limit], |space| &text[..space]);
    words.trim_end()
}

/// Whether `text` so far reads as prose that can be spoken as it comes: not
/// the start of a JSON answer (or a code fence around one), where a command
/// may still follow.
pub(crate) fn is_prose(text: &str) -> bool {
    !matches!(text.trim_start().chars().next(), Some('{' | '[' | '`') | None)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn complete_sentences_wait_for_what_follows_an_end_mark_while_streaming() {
        assert_eq!(complete_sentences("Привет! Сейчас полд", false), "Привет!");
        assert_eq!(complete_sentences("  Раз. Два? Три", false), "Раз. Два?");
        assert_eq!(complete_sentences("Число 3.", false), "", "may become 3.5");
        assert_eq!(complete_sentences("Число 3.", true), "Число 3.");
        assert_eq!(complete_sentences("Число 3.5 больше", false), "", "a decimal point ends nothing");
        assert_eq!(complete_sentences("Он сказал: «Да!» Потом", false), "Он сказал: «Да!»");
        assert_eq!(complete_sentences("Ну... ладно. Итак", false), "Ну... ладно.");
        assert_eq!(complete_sentences("без конца", true), "");
        assert_eq!(complete_sentences("", true), "");
    }

    #[test]
    fn a_cap_cuts_at_the_last_sentence_that_fits() {
        let text = "Первое предложение. Второе предложение! Третье?";
        assert_eq!(voice_cap(text, 1000), text);
        assert_eq!(voice_cap(text, 45), "Первое предложение. Второе предложение!");
        assert_eq!(voice_cap(text, 25), "Первое предложение.");
        assert_eq!(voice_cap("Одно очень длинное предложение без точки", 20), "Одно очень длинное");
        assert_eq!(voice_cap("Слово", 3), "Сло", "a single long word is cut inside");
        let long = "Ж".repeat(50);
        assert_eq!(voice_cap(&long, 10).chars().count(), 10, "counted in characters, not bytes");
    }

    #[test]
    fn json_and_fences_are_not_prose() {
        assert!(is_prose("Привет"));
        assert!(!is_prose("  {\"text\": \"Привет. Как"));
        assert!(!is_prose("```json\n{"));
        assert!(!is_prose("   "));
    }
}
