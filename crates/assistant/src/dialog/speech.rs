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

/// What is left to say of `voice` once `spoken` was said: what follows it
/// when `voice` goes on from it, else `voice` without its leading sentences
/// that were said already (scrubbing may have dropped a line between them,
/// or the object may say what its prose said). Never a sentence twice.
pub(crate) fn unspoken<'a>(voice: &'a str, spoken: &str) -> &'a str {
    if spoken.is_empty() {
        return voice;
    }
    if let Some(rest) = voice.strip_prefix(spoken) {
        return rest.trim_start();
    }
    let mut start = 0;
    for end in sentence_ends(voice, true) {
        let sentence = voice[start..end].trim();
        if !sentence.is_empty() && !spoken.contains(sentence) {
            break;
        }
        start = end;
    }
    voice[start..].trim_start()
}

/// Whether `text` so far reads as prose that can be spoken as it comes: not
/// the start of a JSON answer (or a code fence around one), where a command
/// may still follow.
pub(crate) fn is_prose(text: &str) -> bool {
    !matches!(text.trim_start().chars().next(), Some('{' | '[' | '`') | None)
}

/// `text` without the lines that only echo the prompt's session line (a
/// small model repeats what it was told last) or name the session id.
pub(crate) fn scrub(text: &str, session_id: &str) -> String {
    let echoes = |line: &str| {
        let lower = line.trim().to_lowercase();
        (!session_id.is_empty() && line.contains(session_id))
            || lower.starts_with("the session id")
            || lower.starts_with("session id")
            || lower.starts_with("in commands, use the session id")
    };
    let kept: Vec<&str> = text.lines().filter(|line| !echoes(line)).collect();
    kept.join("\n").trim().to_owned()
}

/// `text` for a voice: without the Markdown marks a speech synthesizer would
/// read aloud (emphasis, headings, bullets, backticks) and without code
/// blocks. Prose comes out as it went in; an answer that was all code keeps
/// its words rather than going silent.
pub(crate) fn unmark(text: &str) -> String {
    let mut lines = Vec::new();
    let mut in_code = false;
    for line in text.lines() {
        let trimmed = line.trim_start();
        if trimmed.starts_with("```") {
            in_code = !in_code;
            continue;
        }
        if in_code {
            continue;
        }
        let line = trimmed.trim_start_matches('#').trim_start();
        let line = ["- ", "* ", "+ "].iter().find_map(|bullet| line.strip_prefix(bullet)).unwrap_or(line);
        lines.push(line.replace("**", "").replace("__", "").replace('`', ""));
    }
    let spoken = lines.join("\n").trim().to_owned();
    if spoken.is_empty() { text.replace("```", "").trim().to_owned() } else { spoken }
}

/// What of `text` is said: no session echoes, no Markdown, voice-length.
pub(crate) fn for_voice(text: &str, session_id: &str, max_chars: usize) -> String {
    voice_cap(&unmark(&scrub(text, session_id)), max_chars).to_owned()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn what_was_said_is_never_said_again() {
        assert_eq!(unspoken("Привет! Как дела?", "Привет!"), "Как дела?");
        assert_eq!(unspoken("Привет!", ""), "Привет!");
        // A line dropped between what was said and the end.
        assert_eq!(unspoken("Привет!\nЧем ещё помочь?", "Привет!\nОткрываю Safari."), "Чем ещё помочь?");
        // The object says what its prose said.
        assert_eq!(unspoken("Открываю Safari.", "Открываю Safari."), "");
        assert_eq!(unspoken("Открываю Safari.", "Хорошо. Открываю Safari."), "");
        // Nothing in common: all of it.
        assert_eq!(unspoken("Другой ответ.", "Привет!"), "Другой ответ.");
    }

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
    fn session_echoes_are_not_said() {
        let text = "Привет!\nThe session id is: session_1.000001\nЧем помочь?";
        assert_eq!(scrub(text, "session_1.000001"), "Привет!\nЧем помочь?");
        assert_eq!(scrub("Ваш id session_9.1 вот", "session_9.1"), "");
        assert_eq!(scrub("Session id: x\nОк.", ""), "Ок.");
        assert_eq!(scrub("Открываю Safari.", "session_1.000001"), "Открываю Safari.");
    }

    #[test]
    fn markdown_marks_are_not_read_aloud() {
        assert_eq!(unmark("## Итог\n- **раз**\n* два\nвызови `ls`"), "Итог\nраз\nдва\nвызови ls");
        assert_eq!(unmark("Вот:\n```sh\nrm -rf /\n```\nГотово."), "Вот:\nГотово.");
        assert_eq!(unmark("```\nтолько код\n```"), "только код", "never silent");
        assert_eq!(unmark("Обычная фраза."), "Обычная фраза.");
    }

    #[test]
    fn json_and_fences_are_not_prose() {
        assert!(is_prose("Привет"));
        assert!(!is_prose("  {\"text\": \"Привет. Как"));
        assert!(!is_prose("```json\n{"));
        assert!(!is_prose("   "));
    }
}
