//! The model's answer read once for every listener: the words meant for
//! the user apart from the thought before them. [`read`] runs the same
//! [`Mapper`] the JSONSeq stream runs, so the voice, the card, a skill's
//! step and `/llm/answers` hear what the screen shows as the final, and
//! never what it shows as thinking.
//!
//! The thought comes as `<think>…</think>` (open reasoning models), as
//! ThinkingML's `<thinking>` before its `<final>`, or begun by the chat
//! template before the model wrote a word, so that the answer opens inside
//! it and only `</think>` closes it. Reasoning the backend hands over apart
//! (`reasoning_content`) never reaches the text read here.

use crate::jsonseq::mapper::{Format, Mapper};

/// What an answer says and what it thought.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Reading {
    /// The words for the user, as the model wrote them (an app-action
    /// object stays whole for its reader): empty when the model only thought.
    pub answer: String,
    /// The thought written in the answer's text, phases apart by a blank line.
    pub thought: String,
}

/// Reads `text`, the answer so far, as `format` (the stream's); `finished`
/// when it is whole. A thought cut before its end leaves the answer empty.
/// Read as `auto`, a whole answer that closes a thought it never opened is
/// read as `think_opened`; one still streaming is known as such only once
/// its `</think>` came.
pub fn read(format: Format, text: &str, finished: bool) -> Reading {
    let mut mapper = Mapper::new(format);
    let mut out = Vec::new();
    if format == Format::Auto && opens_inside_thought(text) {
        mapper.text("<think>", &mut out);
    }
    mapper.text(text, &mut out);
    if finished {
        mapper.finish(&mut out);
    }
    let mut reading = Reading::default();
    for event in &out {
        match (event.name, event.text()) {
            ("final_delta", Some(piece)) => reading.answer.push_str(piece),
            ("phase_delta", Some(piece)) => reading.thought.push_str(piece),
            ("phase_start", _) if !reading.thought.is_empty() => reading.thought.push_str("\n\n"),
            _ => {}
        }
    }
    // Plain text and a JSON object (an app action, read whole by its own
    // reader) are the answer as written: only tags and events set the
    // final apart from the rest.
    if !mapper.reads_tags() && !mapper.reads_events() {
        reading.answer = text.trim().to_owned();
    }
    reading.thought.truncate(reading.thought.trim_end().len());
    reading
}

/// Whether `text` closes a thought it never opened: the chat template
/// opened it for the model.
fn opens_inside_thought(text: &str) -> bool {
    let lower = text.to_ascii_lowercase();
    let Some(close) = lower.find("</think>").or_else(|| lower.find("</thinking>")) else { return false };
    !lower[..close].contains("<think")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn reading(answer: &str, thought: &str) -> Reading {
        Reading { answer: answer.into(), thought: thought.into() }
    }

    #[test]
    fn a_closed_think_is_thought_and_the_rest_is_the_answer() {
        let text = "<think>\nThe user greets me. I should answer briefly.\n</think>\n\nПривет! Чем могу помочь?";
        let expected = reading("Привет! Чем могу помочь?", "The user greets me. I should answer briefly.");
        assert_eq!(read(Format::Auto, text, true), expected);
        for split in 1..text.len() {
            let Some((head, _)) = text.split_at_checked(split) else { continue };
            let partial = read(Format::Auto, head, false);
            assert!(!partial.answer.contains("user") && !partial.answer.contains('<'), "{head:?}: {partial:?}");
        }
    }

    #[test]
    fn a_think_the_template_opened_ends_at_its_close() {
        let text = "The user greets me.\n</think>\n\nПривет!";
        assert_eq!(read(Format::Auto, text, true), reading("Привет!", "The user greets me."));
    }

    #[test]
    fn thinkingml_gives_its_final() {
        let text =
            r#"<thinking><phase id="1"><title>План</title>Поздороваться.</phase></thinking><final>Привет!</final>"#;
        assert_eq!(read(Format::Auto, text, true), reading("Привет!", "Поздороваться."));
    }

    #[test]
    fn an_app_action_after_a_thought_stays_whole() {
        let action = r#"{"session_id":"s","command":"open_app","args":{"app_name":"Safari"},"text":"Открываю."}"#;
        assert_eq!(read(Format::Auto, &format!("<think>open it</think>\n{action}"), true), reading(action, "open it"));
        assert_eq!(read(Format::Auto, action, true), reading(action, ""));
    }

    #[test]
    fn a_thought_cut_short_says_nothing() {
        assert_eq!(
            read(Format::Auto, "<think>\nThe user greets me. I sho", true),
            reading("", "The user greets me. I sho")
        );
    }

    #[test]
    fn a_thought_the_template_opens_says_nothing_before_its_close() {
        let text = "The user greets me.\n</think>\n\nПривет!";
        for split in 0..text.len() {
            let Some((head, _)) = text.split_at_checked(split) else { continue };
            let answer = read(Format::ThinkOpened, head, false).answer;
            assert!("Привет!".starts_with(&answer), "{head:?}: {answer:?}");
        }
        assert_eq!(read(Format::ThinkOpened, text, true), reading("Привет!", "The user greets me."));
        assert_eq!(read(Format::ThinkOpened, "The user gree", true), reading("", "The user gree"));
    }

    #[test]
    fn plain_text_is_the_answer_as_written() {
        assert_eq!(read(Format::Auto, "  Число 3 < 5, да.  ", true), reading("Число 3 < 5, да.", ""));
        assert_eq!(read(Format::Auto, "<b>жирный</b> текст", true), reading("<b>жирный</b> текст", ""));
    }

    #[test]
    fn json_lines_of_events_are_read_as_the_stream_shows_them() {
        let text = [
            r#"{"event":"serp_summary","text":"Сводка запроса."}"#,
            r#"{"event":"thinking_start"}"#,
            r#"{"event":"phase_start","id":1,"title":"Разбор"}"#,
            r#"{"event":"phase_delta","id":1,"text":"Думаю."}"#,
            r#"{"event":"thinking_end"}"#,
            r#"{"event":"final_delta","text":"Настоящий "}"#,
            r#"{"event":"final_delta","text":"ответ."}"#,
        ]
        .join("\n");
        for format in [Format::Auto, Format::Jsonl] {
            assert_eq!(read(format, &text, true), reading("Настоящий ответ.", "Думаю."), "{format:?}");
        }
    }

    #[test]
    fn an_app_action_object_stays_whole_for_its_reader() {
        let action = r#"{"session_id":"s1","command":"open_app","args":{"app_path":"/Applications/Safari.app"},"text":"Открываю."}"#;
        assert_eq!(read(Format::Auto, action, true).answer, action);
    }
}
