//! Any model output, split anywhere, with reasoning between the pieces:
//! mapped to JSONSeq v1 events that break no rule of the validator, no
//! empty delta but the one final of an answer without text, nothing after
//! `finish`; and, without reasoning, the same events shown whatever the
//! split.
//!
//! Input: one byte for the format (modulo 4: auto, thinkingml, text,
//! jsonl), one seeding the lengths of the pieces (1 to 16 bytes), then the
//! output as UTF-8 (lossy); `\u{1}` toggles between the answer's text and
//! the reasoning.

#![no_main]

use libfuzzer_sys::fuzz_target;
use megamind_assistant::jsonseq::{Format, Mapper, SeqEvent, validate};
use serde_json::Value;

const FORMATS: [Format; 4] = [Format::Auto, Format::ThinkingMl, Format::Text, Format::Jsonl];

fuzz_target!(|data: &[u8]| {
    let [format, seed, rest @ ..] = data else { return };
    let format = FORMATS[usize::from(*format) % FORMATS.len()];
    let input = String::from_utf8_lossy(rest);
    let mut lengths = Lengths(u32::from(*seed) | 0x100);

    let mut mapper = Mapper::new(format);
    let mut events = Vec::new();
    for (index, part) in input.split('\u{1}').enumerate() {
        let reasoning = index % 2 == 1;
        for chunk in lengths.split(part) {
            if reasoning { mapper.reasoning(chunk, &mut events) } else { mapper.text(chunk, &mut events) }
        }
    }
    mapper.finish(&mut events);
    let count = events.len();
    mapper.text("<final>more</final>", &mut events);
    mapper.reasoning("more", &mut events);
    mapper.finish(&mut events);
    assert_eq!(events.len(), count, "events after finish");

    let sent: Vec<_> = events.iter().map(|event| event.to_event("m-1", "r-1")).collect();
    let violations = validate(&sent);
    assert!(violations.is_empty(), "{format:?} {input:?}\n{violations:#?}\n{events:#?}");
    let finals = events.iter().filter(|e| e.name == "final_delta").count();
    for event in events.iter().filter(|e| e.name.ends_with("_delta")) {
        assert!(
            event.text() != Some("") || (event.name == "final_delta" && finals == 1),
            "an empty delta: {events:#?}"
        );
    }

    if !input.contains('\u{1}') {
        let mut whole = Mapper::new(format);
        let mut at_once = Vec::new();
        whole.text(&input, &mut at_once);
        whole.finish(&mut at_once);
        assert_eq!(joined(&at_once), joined(&events), "the split changed what is shown: {input:?}");
    }
});

/// Lengths of pieces from a small xorshift generator.
struct Lengths(u32);

impl Lengths {
    fn split<'a>(&mut self, text: &'a str) -> Vec<&'a str> {
        let mut chunks = Vec::new();
        let mut start = 0;
        while start < text.len() {
            self.0 ^= self.0 << 13;
            self.0 ^= self.0 >> 17;
            self.0 ^= self.0 << 5;
            let mut end = (start + 1 + (self.0 % 16) as usize).min(text.len());
            while !text.is_char_boundary(end) {
                end += 1;
            }
            chunks.push(&text[start..end]);
            start = end;
        }
        chunks
    }
}

/// Events with consecutive deltas of one text joined, as a screen shows them.
fn joined(events: &[SeqEvent]) -> Vec<(&'static str, Value)> {
    let mut list: Vec<(&'static str, Value)> = Vec::new();
    for event in events {
        if let Some((name, last)) = list.last_mut() {
            let same = *name == event.name
                && (*name == "final_delta" || (*name == "phase_delta" && last["id"] == event.data["id"]));
            if same {
                let text = format!("{}{}", last["text"].as_str().unwrap_or(""), event.text().unwrap_or(""));
                last["text"] = text.into();
                continue;
            }
        }
        list.push((event.name, Value::Object(event.data.clone())));
    }
    list
}
