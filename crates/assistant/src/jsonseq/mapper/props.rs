//! Properties of the mapper on random input: whatever the pieces, the
//! validator finds nothing; well-formed answers keep every text; how the
//! text is split changes nothing a screen shows.

use proptest::{prelude::*, sample::select};
use serde_json::json;

use crate::jsonseq::mapper::{
    tests::{final_text, joined, violations},
    *,
};

/// Pieces that random answers are made of: every tag, broken ones, JSON lines.
const VOCABULARY: &[&str] = &[
    "<thinking>",
    "</thinking>",
    "<phase id=\"3\">",
    "<phase id=\"1\">",
    "<phase id='0'>",
    "<phase>",
    "<title>",
    "</title>",
    "</phase>",
    "<final>",
    "</final>",
    "<serp>",
    "</serp>",
    "<!-- <serp_queries>",
    "[\"a\",\"a\"]",
    "[\"b@c.de\",\"q\"]",
    "</serp_queries> -->",
    "<serp_queries>",
    "</serp_queries>",
    "<!--",
    "-->",
    "-",
    "<unknown>",
    "<",
    ">",
    "</",
    "<phase id=\"2\"",
    "{\"event\":\"final_delta\",\"text\":\"x\"}\n",
    "{\"event\":\"phase_start\",\"id\":2,\"title\":\"t\"}\n",
    "{\"event\":\"phase_delta\",\"id\":9,\"text\":\"p\"}\n",
    "{\"event\":\"thinking_start\"}\n",
    "{\"event\":\"thinking_end\"}\n",
    "{\"event\":\"final_end\"}\n",
    "{\"event\":\"serp_summary\",\"text\":\"s\"}\n",
    "{\"event\":\"serp_queries\",\"queries\":[\"q\",\"Q\",1]}\n",
    "{\"event\":\"completed\"}\n",
    "{\"session_id\":\"s\",\n\"text\":\"hi\"}",
    "{",
    "}",
    "\"",
    "\\",
    "\n",
    " ",
    "text",
    "ж",
    "你好",
    "😀",
];

fn piece() -> impl Strategy<Value = String> {
    prop_oneof![3 => select(VOCABULARY).prop_map(str::to_owned), 1 => ".{0,6}"]
}

fn format() -> impl Strategy<Value = Format> {
    select(&[Format::Auto, Format::ThinkingMl, Format::Text, Format::Jsonl, Format::ThinkOpened][..])
}

/// `text` cut at each of `cuts` (taken modulo its length, moved to a character boundary).
fn split<'a>(text: &'a str, cuts: &[usize]) -> Vec<&'a str> {
    let mut points: Vec<usize> = cuts
        .iter()
        .map(|cut| {
            let mut at = cut % (text.len() + 1);
            while !text.is_char_boundary(at) {
                at -= 1;
            }
            at
        })
        .collect();
    points.sort_unstable();
    let mut chunks = Vec::new();
    let mut start = 0;
    for at in points.into_iter().chain([text.len()]) {
        chunks.push(&text[start..at]);
        start = at;
    }
    chunks
}

/// Feeds `chunks`, with `reasoning` given after the chunk each names, then finishes.
fn run(format: Format, chunks: &[&str], reasoning: &[(usize, String)]) -> Vec<SeqEvent> {
    let mut mapper = Mapper::new(format);
    let mut out = Vec::new();
    for (index, chunk) in chunks.iter().enumerate() {
        for (_, thought) in reasoning.iter().filter(|(after, _)| after % chunks.len().max(1) == index) {
            mapper.reasoning(thought, &mut out);
        }
        mapper.text(chunk, &mut out);
    }
    mapper.finish(&mut out);
    let count = out.len();
    mapper.text("<final>more</final>", &mut out);
    mapper.finish(&mut out);
    assert_eq!(out.len(), count, "nothing after finish");
    out
}

/// No delta is empty but the one final of an answer without final text.
fn no_empty_delta(events: &[SeqEvent]) -> Result<(), TestCaseError> {
    let finals = events.iter().filter(|e| e.name == "final_delta").count();
    for event in events.iter().filter(|e| e.name.ends_with("_delta")) {
        prop_assert!(event.text() != Some("") || (event.name == "final_delta" && finals == 1), "{events:?}");
    }
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 600, ..ProptestConfig::default() })]

    #[test]
    fn any_answer_and_reasoning_give_a_valid_stream(
        format in format(),
        pieces in prop::collection::vec(piece(), 0..40),
        cuts in prop::collection::vec(any::<usize>(), 0..12),
        reasoning in prop::collection::vec((any::<usize>(), piece()), 0..4),
    ) {
        let text = pieces.concat();
        let events = run(format, &split(&text, &cuts), &reasoning);
        prop_assert_eq!(violations(&events), vec![], "{:?} {:?}\n{:#?}", format, text, events);
        no_empty_delta(&events)?;
    }

    #[test]
    fn how_an_answer_is_split_changes_nothing_shown(
        format in format(),
        pieces in prop::collection::vec(piece(), 0..40),
        cuts in prop::collection::vec(any::<usize>(), 0..12),
    ) {
        let text = pieces.concat();
        let whole = map_all(format, &[&text]);
        let split = map_all(format, &split(&text, &cuts));
        prop_assert_eq!(joined(&whole), joined(&split), "{:?}", text);
    }

    #[test]
    fn well_formed_thinkingml_keeps_every_text(
        summary in "[a-z 你]{0,20}",
        phases in prop::collection::vec(("[a-cx-zж <>\n]{0,12}", TEXT), 0..4),
        answer in TEXT,
        queries in prop::collection::vec("[a-zA-Zж ]{0,10}", 0..7),
        cuts in prop::collection::vec(any::<usize>(), 0..10),
        explicit in any::<bool>(),
    ) {
        let mut text = format!("<serp>{summary}</serp>\n<thinking>\n");
        for (id, (title, body)) in phases.iter().enumerate() {
            text += &format!("<phase id=\"{}\">\n<title>{title}</title>\n{body}\n</phase>\n", id + 1);
        }
        let list = serde_json::to_string(&queries).unwrap_or_default();
        text += &format!("</thinking>\n<final>\n{answer}\n<!-- <serp_queries> {list} </serp_queries> -->\n</final>\n");
        let format = if explicit { Format::ThinkingMl } else { Format::Auto };
        let events = map_all(format, &split(&text, &cuts));
        prop_assert_eq!(violations(&events), vec![]);
        let shown = joined(&events);
        let got = |name: &str| shown.iter().filter(|(n, _)| *n == name).map(|(_, d)| d.clone()).collect::<Vec<_>>();
        let summary = summary.trim();
        prop_assert_eq!(got("serp_summary"), if summary.is_empty() { vec![] } else { vec![json!({"text": summary})] });
        let titles: Vec<_> = got("phase_start").iter().map(|d| d["title"].clone()).collect();
        let expected: Vec<_> = phases.iter().map(|(title, _)| {
            let title = title.split_whitespace().collect::<Vec<_>>().join(" ");
            json!(if title.is_empty() { THINKING_TITLE.to_owned() } else { title })
        }).collect();
        if phases.is_empty() {
            prop_assert_eq!(titles, vec![json!(ANSWER_TITLE)]);
        } else {
            prop_assert_eq!(titles, expected);
        }
        let texts: Vec<_> = got("phase_delta").iter().map(|d| d["text"].clone()).collect();
        let bodies: Vec<_> = phases.iter().map(|(_, body)| body.trim()).filter(|b| !b.is_empty()).map(|b| json!(b)).collect();
        prop_assert_eq!(texts, bodies);
        prop_assert_eq!(final_text(&events), answer.trim());
        let cleaned = clean_queries(queries);
        prop_assert_eq!(got("serp_queries"), if cleaned.is_empty() { vec![] } else { vec![json!({"queries": cleaned})] });
    }

    #[test]
    fn well_formed_json_lines_and_plain_text_keep_the_final(
        deltas in prop::collection::vec(".{0,12}", 0..6),
        plain in ".{0,60}",
        cuts in prop::collection::vec(any::<usize>(), 0..10),
    ) {
        let mut lines = vec![json!({"event": "thinking_start"}), json!({"event": "phase_start", "id": 1, "title": "t"})];
        lines.push(json!({"event": "thinking_end"}));
        lines.extend(deltas.iter().map(|text| json!({"event": "final_delta", "text": text})));
        lines.push(json!({"event": "final_end"}));
        let text = lines.iter().map(|line| format!("{line}\n")).collect::<String>();
        let events = map_all(Format::Auto, &split(&text, &cuts));
        prop_assert_eq!(violations(&events), vec![]);
        let whole = deltas.concat();
        prop_assert_eq!(final_text(&events), whole.trim());
        let events = map_all(Format::Text, &split(&plain, &cuts));
        prop_assert_eq!(violations(&events), vec![]);
        prop_assert_eq!(final_text(&events), plain.trim());
    }
}

/// Texts of well-formed answers: no letter that starts a tag name, no `!`.
const TEXT: &str = "[a-cx-zа-в你好 \n<>=\"'/&{}-]{0,40}";
