//! The mapper on a reference answer at every split point, on plain text and
//! ThinkingML (JSON Lines' tests are in `jsonl`), on reasoning, on what the
//! model gets wrong, and on `serp_queries` cleaning; helpers the other
//! tests share.

use serde_json::{Value, json};

use super::*;
use crate::jsonseq::validate;

/// A reference answer as ThinkingML: a summary, one phase, a final with
/// its queries comment; every ThinkingML element the mapping knows
/// (docs/jsonseq.md#thinkingml).
pub(super) const EXAMPLE: &str = r#"<serp>用户要一份三分化训练计划，包含频率与动作选择。</serp>
<thinking>
<phase id="1">
<title>需求拆解</title>
目标=增肌；器械=健身房；每周3-4练。
</phase>
</thinking>
<final>
# 三分化训练方案
- Day1 推...
<!-- <serp_queries> ["三分化训练怎么安排","三分化训练动作选择","三分化训练频率与恢复"] </serp_queries> -->
</final>
"#;

/// The violations the validator finds in `events`, given the ids the stream adds.
pub(super) fn violations(events: &[SeqEvent]) -> Vec<validate::Violation> {
    let sent: Vec<_> = events.iter().map(|event| event.to_event("m-1", "r-1")).collect();
    validate::validate(&sent)
}

/// `events` with consecutive deltas of one text joined, as a screen shows them.
pub(super) fn joined(events: &[SeqEvent]) -> Vec<(&'static str, Value)> {
    let mut list: Vec<(&'static str, Value)> = Vec::new();
    for event in events {
        let data = Value::Object(event.data.clone());
        if let Some((name, last)) = list.last_mut() {
            let same_phase = *name == "phase_delta" && last["id"] == data["id"];
            if event.name == *name && (same_phase || *name == "final_delta") {
                let text = format!("{}{}", last["text"].as_str().unwrap_or(""), event.text().unwrap_or(""));
                last["text"] = text.into();
                continue;
            }
        }
        list.push((event.name, data));
    }
    list
}

/// The final text, joined.
pub(super) fn final_text(events: &[SeqEvent]) -> String {
    events.iter().filter(|e| e.name == "final_delta").filter_map(SeqEvent::text).collect()
}

pub(super) fn names(events: &[SeqEvent]) -> Vec<&'static str> {
    events.iter().map(|e| e.name).collect()
}

pub(super) fn valid(events: Vec<SeqEvent>) -> Vec<SeqEvent> {
    assert_eq!(violations(&events), [], "{events:#?}");
    events
}

fn example_events() -> Vec<(&'static str, Value)> {
    vec![
        ("serp_summary", json!({"text": "用户要一份三分化训练计划，包含频率与动作选择。"})),
        ("thinking_start", json!({})),
        ("phase_start", json!({"id": 1, "title": "需求拆解"})),
        ("phase_delta", json!({"id": 1, "text": "目标=增肌；器械=健身房；每周3-4练。"})),
        ("thinking_end", json!({})),
        ("final_delta", json!({"text": "# 三分化训练方案\n- Day1 推..."})),
        ("serp_queries", json!({"queries": ["三分化训练怎么安排", "三分化训练动作选择", "三分化训练频率与恢复"]})),
        ("final_end", json!({})),
    ]
}

#[test]
fn the_contract_example_gives_its_events_at_every_split_point() {
    for format in [Format::Auto, Format::ThinkingMl] {
        assert_eq!(joined(&valid(map_all(format, &[EXAMPLE]))), example_events(), "{format:?}");
        for (at, _) in EXAMPLE.char_indices().skip(1) {
            let events = valid(map_all(format, &[&EXAMPLE[..at], &EXAMPLE[at..]]));
            assert_eq!(joined(&events), example_events(), "split at {at}: {:?}", &EXAMPLE[..at]);
        }
        let chars: Vec<String> = EXAMPLE.chars().map(String::from).collect();
        let chars: Vec<&str> = chars.iter().map(String::as_str).collect();
        assert_eq!(joined(&valid(map_all(format, &chars))), example_events(), "one character at a time");
    }
}

#[test]
fn text_is_sent_as_soon_as_it_cannot_be_a_tag() {
    let mut mapper = Mapper::new(Format::Auto);
    let mut out = Vec::new();
    mapper.text("<final>Жим лёжа", &mut out);
    assert_eq!(names(&out), ["thinking_start", "phase_start", "thinking_end", "final_delta"]);
    assert_eq!(out[1].data["title"], ANSWER_TITLE);
    assert_eq!(out[3].text(), Some("Жим лёжа"));
    out.clear();
    mapper.text(" 3 подхода <", &mut out);
    assert_eq!(final_text(&out), " 3 подхода", "the blank before `<` waits with it");
    out.clear();
    mapper.text("b> и <fi", &mut out);
    assert_eq!(final_text(&out), " <b> и");
    out.clear();
    mapper.text("x", &mut out);
    assert_eq!(final_text(&out), " <fix");
    mapper.finish(&mut out);
    assert_eq!(out.last().map(|e| e.name), Some("final_end"));
}

#[test]
fn a_piece_gives_one_event_per_text_and_earlier_events_stay_as_sent() {
    let mut mapper = Mapper::new(Format::Auto);
    let mut out = Vec::new();
    mapper.text("<final>a", &mut out);
    let sent = out.len();
    mapper.text(" <b> c <!-- note --> d <", &mut out);
    assert_eq!(out.len(), sent + 1);
    assert_eq!(out[sent - 1].text(), Some("a"), "an event of an earlier call is never changed");
    assert_eq!(out[sent].text(), Some(" <b> c  d"));
}

#[test]
fn plain_text_is_the_final_after_a_thinking_of_one_phase() {
    for format in [Format::Auto, Format::Text] {
        let events = valid(map_all(format, &["\n  Три подхода ", "по 10 повторений.\n\n"]));
        assert_eq!(
            joined(&events),
            [
                ("thinking_start", json!({})),
                ("phase_start", json!({"id": 1, "title": ANSWER_TITLE})),
                ("thinking_end", json!({})),
                ("final_delta", json!({"text": "Три подхода по 10 повторений."})),
                ("final_end", json!({})),
            ]
        );
    }
    let tags = valid(map_all(Format::Text, &["<final>x</final>"]));
    assert_eq!(final_text(&tags), "<final>x</final>", "plain text has no tags");
}

#[test]
fn an_empty_answer_ends_with_one_empty_final_delta() {
    for chunks in [&[][..], &[" \n\t"], &["<final></final>"], &["<thinking>", "</thinking>"], &["{\"a\":1}"]] {
        let events = valid(map_all(Format::Auto, chunks));
        assert_eq!(names(&events), ["thinking_start", "phase_start", "thinking_end", "final_delta", "final_end"]);
        assert_eq!(events[3].text(), Some(""), "{chunks:?}");
    }
}

#[test]
fn nothing_is_sent_after_finish() {
    let mut mapper = Mapper::new(Format::Auto);
    let mut out = Vec::new();
    mapper.text("Ответ", &mut out);
    mapper.finish(&mut out);
    assert!(mapper.is_finished());
    let count = out.len();
    mapper.text(" ещё", &mut out);
    mapper.reasoning("мысль", &mut out);
    mapper.finish(&mut out);
    assert_eq!(out.len(), count);
}

#[test]
fn reasoning_is_phase_text_until_the_final_begins() {
    let mut mapper = Mapper::new(Format::Auto);
    let mut out = Vec::new();
    mapper.reasoning("  ", &mut out);
    assert!(out.is_empty(), "blank reasoning opens nothing");
    mapper.reasoning("Пользователь хочет ", &mut out);
    mapper.reasoning("план.", &mut out);
    mapper.text("<thinking><phase id=\"1\"><title>План</title>Три дня</phase></thinking>", &mut out);
    mapper.reasoning("ещё", &mut out);
    mapper.text("<final>Вот план", &mut out);
    mapper.reasoning("поздно", &mut out);
    mapper.finish(&mut out);
    assert_eq!(
        joined(&valid(out)),
        [
            ("thinking_start", json!({})),
            ("phase_start", json!({"id": 1, "title": THINKING_TITLE})),
            ("phase_delta", json!({"id": 1, "text": "Пользователь хочет план."})),
            ("phase_start", json!({"id": 2, "title": "План"})),
            ("phase_delta", json!({"id": 2, "text": "Три дня"})),
            ("thinking_end", json!({})),
            ("final_delta", json!({"text": "Вот план"})),
            ("final_end", json!({})),
        ],
        "the model's phase 1 follows the reasoning's, and reasoning after `</thinking>` is dropped"
    );
}

#[test]
fn reasoning_before_a_thinkingml_answer_leaves_its_parts_where_they_were() {
    let mut mapper = Mapper::new(Format::Auto);
    let mut out = Vec::new();
    mapper.reasoning("Сначала подумаю.", &mut out);
    mapper.text(EXAMPLE, &mut out);
    mapper.finish(&mut out);
    let seed = example_events();
    let mut expected = vec![
        ("thinking_start", json!({})),
        ("phase_start", json!({"id": 1, "title": THINKING_TITLE})),
        ("phase_delta", json!({"id": 1, "text": "Сначала подумаю."})),
        ("phase_start", json!({"id": 2, "title": "需求拆解"})),
        ("phase_delta", json!({"id": 2, "text": "目标=增肌；器械=健身房；每周3-4练。"})),
    ];
    expected.extend(seed[4..].iter().cloned());
    assert_eq!(joined(&valid(out)), expected, "the summary comes too late and is dropped, not shown");
}

#[test]
fn phase_ids_run_from_one_whatever_the_model_wrote_and_titles_are_never_empty() {
    let answer = "<thinking><phase id=\"3\"><title> A\n b </title>a</phase><phase id='2'><title>B</title>b</phase>\
                  <phase><title> </title>c</phase><phase id=\"9\">d<title>late</title></phase>\
                  <title>T</title>e</thinking><final>f</final>";
    let events = valid(map_all(Format::Auto, &[answer]));
    let phases: Vec<_> = events
        .iter()
        .filter(|e| e.name == "phase_start")
        .map(|e| (e.data["id"].clone(), e.data["title"].clone()))
        .collect();
    assert_eq!(
        phases,
        [
            (json!(1), json!("A b")),
            (json!(2), json!("B")),
            (json!(3), json!(THINKING_TITLE)),
            (json!(4), json!(THINKING_TITLE)),
            (json!(5), json!("T"))
        ]
    );
    let texts: Vec<_> = events.iter().filter(|e| e.name == "phase_delta").filter_map(SeqEvent::text).collect();
    assert_eq!(texts, ["a", "b", "c", "dlate", "e"], "a title after the text is text");
    assert_eq!(final_text(&events), "f");
}

#[test]
fn stray_unknown_and_unclosed_tags() {
    let final_of = |answer: &str| final_text(&valid(map_all(Format::Auto, &[answer])));
    assert_eq!(
        final_of("<final>a <b>b</b> & 1 < 2 <thinking>x</thinking> <title>y</title></final>"),
        "a <b>b</b> & 1 < 2 <thinking>x</thinking> <title>y</title>",
        "inside the final, tags are the answer's"
    );
    assert_eq!(final_of("<thinking>t</thinking>a <phase id=\"2\">b</phase>"), "a b", "outside, late tags are dropped");
    let think = valid(map_all(Format::Auto, &["<think>Хм.</think>\n\nОтвет"]));
    assert_eq!(
        joined(&think)[1..4],
        [
            ("phase_start", json!({"id": 1, "title": THINKING_TITLE})),
            ("phase_delta", json!({"id": 1, "text": "Хм."})),
            ("thinking_end", json!({})),
        ]
    );
    assert_eq!(final_text(&think), "Ответ");
    assert_eq!(final_of("<final>a<!-- note -->b</final>"), "ab", "comments never show");
    assert_eq!(final_of("<final>a <!-- b"), "a <!-- b", "a comment that never closed was text");
    assert_eq!(final_of("<final>a <fin"), "a <fin");
    assert_eq!(final_of("<final>a</final> after <final>b"), "a", "nothing after the final's end");
    assert_eq!(final_of("<thinking>t</thinking>top text</final>dropped"), "top text");
    assert_eq!(final_of("<serp>s</serp><final>x</final>"), "x");
    let long = format!("<final><phase id=\"1\" {}>x", "a".repeat(MAX_TAG_BYTES));
    assert_eq!(final_of(&long), long["<final>".len()..], "a tag too long is text");
    let comment = format!("<final>a<!--{}-->b", "c".repeat(3000));
    assert_eq!(final_of(&comment), format!("a<!--{}-->b", "c".repeat(3000)), "a comment too long is text");
    let unclosed = valid(map_all(Format::Auto, &["<thinking><phase id=\"1\"><title>Шаг"]));
    assert_eq!(unclosed[1].data["title"], "Шаг");
    let summary = valid(map_all(Format::Auto, &["<serp>summary", "<final>x"]));
    assert_eq!(joined(&summary)[0], ("serp_summary", json!({"text": "summary"})));
    let late_summary = valid(map_all(Format::Auto, &["<thinking></thinking><serp>s</serp>x"]));
    assert!(!names(&late_summary).contains(&"serp_summary"));
    assert_eq!(final_text(&late_summary), "x", "a late `<serp>` is dropped with its text");
}

#[test]
fn a_tag_that_turns_out_text_shows_the_same_however_split() {
    // Found by the fuzzer: a `<` inside attributes too long was held as text
    // in small pieces but read as a tag when whole.
    let answer = format!("<phase id=\"{}] </serp_queries>nki <phase id=\"1\" <final>x", "\u{fffd}".repeat(80));
    let whole = joined(&valid(map_all(Format::Auto, &[&answer])));
    let chars: Vec<String> = answer.chars().map(String::from).collect();
    let chars: Vec<&str> = chars.iter().map(String::as_str).collect();
    assert_eq!(joined(&valid(map_all(Format::Auto, &chars))), whole);
    for (at, _) in answer.char_indices() {
        assert_eq!(joined(&valid(map_all(Format::Auto, &[&answer[..at], &answer[at..]]))), whole, "split at {at}");
    }
}

#[test]
fn serp_queries_leave_the_final_and_come_before_final_end() {
    let events = valid(map_all(
        Format::Auto,
        &[
            "<final>План.\n<!-- <serp_queries> [\"a\", \"A\", \" b  c \", 1] </serp_queries> -->\n</final>\n",
            "<!--<serp_queries>[\"d\"]</serp_queries>-->",
        ],
    ));
    assert_eq!(final_text(&events), "План.");
    let queries = &events[events.len() - 2];
    assert_eq!((queries.name, &queries.data["queries"]), ("serp_queries", &json!(["a", "b c", "d"])));
    let bare = valid(map_all(Format::Auto, &["<final>x<serp_queries>[\"q\"]</serp_queries></final>"]));
    assert_eq!(bare[bare.len() - 2].data["queries"], json!(["q"]));
    let broken = valid(map_all(Format::Auto, &["<final>x<!-- <serp_queries> not a list --></final>"]));
    assert!(!names(&broken).contains(&"serp_queries"));
}

#[test]
fn clean_queries_keeps_few_short_distinct_harmless_ones() {
    let long = "я".repeat(100);
    let raw = [
        " тренировка ",
        "",
        "   ",
        "Тренировка",
        "ivan@example.com план",
        "+7 (495) 739-00-33",
        "4111 1111 1111 1111",
        "https://x.ru/?token=abc",
        &long,
        "a",
        "b",
        "c",
        "d",
    ];
    let cleaned = clean_queries(raw.iter().map(|q| q.to_string()));
    assert_eq!(cleaned, ["тренировка", &long[..160], "a", "b", "c"]);
    let event = SeqEvent::new("serp_queries", [("queries", cleaned.into())]);
    let mut stream = valid(map_all(Format::Text, &["x"]));
    stream.insert(stream.len() - 1, event);
    assert_eq!(violations(&stream), []);
}

#[test]
fn format_names_and_mapper_traits() {
    for (name, format) in
        [("auto", Format::Auto), ("thinkingml", Format::ThinkingMl), ("text", Format::Text), ("jsonl", Format::Jsonl)]
    {
        assert_eq!(serde_json::from_value::<Format>(json!(name)).ok(), Some(format));
        assert_eq!(serde_json::to_value(format).ok(), Some(json!(name)));
    }
    assert_eq!(Format::default(), Format::Auto);
    fn send<T: Send + std::fmt::Debug>() {}
    send::<Mapper>();
    assert!(std::mem::size_of::<Mapper>() <= 256, "{}", std::mem::size_of::<Mapper>());
}

#[test]
fn a_piece_holding_thousands_of_tags_or_lines_is_a_bounded_number_of_events() {
    let max_phases = usize::try_from(super::sequence::MAX_PHASES).unwrap();
    let phase = "{\"event\":\"phase_start\",\"title\":\"t\"}\n{\"event\":\"phase_delta\",\"id\":1,\"text\":\"x\"}\n";
    let pieces = [
        (Format::ThinkingMl, format!("<thinking>{}", "<phase>x".repeat(10_000)), 10_000),
        (Format::Jsonl, "{\"event\":\"final_delta\",\"text\":\"x\"}\n".repeat(10_000), 10_000),
        (Format::Jsonl, phase.repeat(5_000), 5_000),
    ];
    for (format, piece, texts) in pieces {
        let mut mapper = Mapper::new(format);
        let mut events = Vec::new();
        mapper.text(&piece, &mut events);
        assert!(events.len() <= 2 * max_phases + 2, "{format:?}: {} events", events.len());
        let phases = events.iter().filter(|e| e.name == "phase_start").count();
        assert!(phases <= max_phases, "{phases} phases");
        let text: String = events.iter().filter_map(SeqEvent::text).collect();
        assert_eq!(text.matches('x').count(), texts, "no text lost");
        mapper.finish(&mut events);
        let sent: Vec<_> = events.iter().map(|event| event.to_event("m-1", "r-1")).collect();
        assert!(crate::jsonseq::validate(&sent).is_empty(), "{format:?}");
    }
}
