//! The validator on a reference stream and on each rule broken.

use super::*;
use crate::jsonseq::parse_transcript;

/// A reference stream: one answer event of each kind, in the contract's
/// order (docs/jsonseq.md#order), with the ids every event carries.
fn example() -> Vec<(String, String)> {
    [
        ("serp_summary", r#"{"text":"用户要一份三分化训练计划，包含频率与动作选择。"}"#),
        ("thinking_start", "{}"),
        ("phase_start", r#"{"id":1,"title":"需求拆解"}"#),
        ("phase_delta", r#"{"id":1,"text":"目标=增肌；器械=健身房；每周3-4练。"}"#),
        ("thinking_end", "{}"),
        ("final_delta", r##"{"text":"# 三分化训练方案\n- Day1 推...\n"}"##),
        ("serp_queries", r#"{"queries":["三分化训练怎么安排","三分化训练动作选择","三分化训练频率与恢复"]}"#),
        ("final_end", "{}"),
    ]
    .into_iter()
    .map(|(name, data)| (name.to_owned(), data.to_owned()))
    .collect()
}

fn events(list: &[(String, String)]) -> Vec<Event> {
    list.iter()
        .map(|(name, data)| {
            let mut data: Value = serde_json::from_str(data).unwrap_or(Value::Null);
            if let Value::Object(object) = &mut data {
                object.insert("message_id".into(), "m-1".into());
                object.insert("request_id".into(), "r-1".into());
            }
            Event { name: name.clone(), data: data.to_string(), id: None, cut: false }
        })
        .collect()
}

fn rules(list: &[(String, String)]) -> Vec<&'static str> {
    validate(&events(list)).iter().map(|v| v.rule).collect()
}

fn with(mut list: Vec<(String, String)>, edit: impl FnOnce(&mut Vec<(String, String)>)) -> Vec<(String, String)> {
    edit(&mut list);
    list
}

fn event(name: &str, data: &str) -> (String, String) {
    (name.to_owned(), data.to_owned())
}

#[test]
fn the_contract_example_is_valid_and_so_is_its_transcript() {
    assert_eq!(rules(&example()), Vec::<&str>::new());
    let transcript: String =
        events(&example()).iter().map(|e| format!("event: {}\ndata: {}\n\n", e.name, e.data)).collect();
    let (parsed, _) = parse_transcript(&transcript);
    assert!(validate(&parsed).is_empty(), "{:?}", validate(&parsed));
    let heartbeat = with(example(), |l| {
        l.insert(3, event("heartbeat", "{}"));
        l.push(event("status", "{}"));
        l.push(event("completed", "{}"));
    });
    assert_eq!(rules(&heartbeat), Vec::<&str>::new(), "system events anywhere");
}

#[test]
fn each_order_rule_is_reported_with_the_events_index() {
    let early_final = with(example(), |l| l.insert(4, event("final_delta", r#"{"text":"x"}"#)));
    let found = validate(&events(&early_final));
    assert_eq!((found[0].index, found[0].rule), (4, "order"), "{found:?}");
    let no_phase = with(example(), |l| {
        l.remove(2);
    });
    assert_eq!(rules(&no_phase), ["phase_ref", "order"], "a delta with no phase, no phase at all");
    assert_eq!(rules(&with(example(), |l| l.push(event("final_delta", r#"{"text":"x"}"#)))), ["after_final_end"]);
    assert_eq!(
        rules(&with(example(), |l| {
            l.pop();
        })),
        ["incomplete"]
    );
    assert_eq!(rules(&with(example(), |l| l.swap(0, 1))), ["order"], "serp_summary after thinking_start");
    let completed_first = with(example(), |l| {
        l.insert(7, event("completed", "{}"));
    });
    assert_eq!(rules(&completed_first), ["after_completed"]);
    assert_eq!(rules(&with(example(), |l| l.insert(0, event("content_delta", "{}")))), ["event"]);
}

#[test]
fn phases_ids_titles_and_texts() {
    let second = |id: &str, title: &str| {
        with(example(), |l| {
            l.insert(4, event("phase_start", &format!(r#"{{"id":{id},"title":"{title}"}}"#)));
        })
    };
    assert_eq!(rules(&second("2", "Plan")), Vec::<&str>::new());
    assert_eq!(rules(&second("1", "Plan")), ["phase_id"], "not increasing");
    assert_eq!(rules(&second("0", "Plan")), ["phase_id"]);
    assert_eq!(rules(&second("\"2\"", "Plan")), ["phase_id"]);
    assert_eq!(rules(&second("2", " ")), ["phase_title"]);
    let stale = with(second("2", "Plan"), |l| l.insert(5, event("phase_delta", r#"{"id":1,"text":"x"}"#)));
    assert_eq!(rules(&stale), ["phase_ref"], "a delta names the latest phase");
    assert_eq!(rules(&with(example(), |l| l[5] = event("final_delta", r#"{"text":1}"#))), ["text"]);
}

#[test]
fn every_event_carries_the_ids_and_an_object() {
    let mut list = events(&example());
    list[1].data = "{}".into();
    list[2].data = "not json".into();
    let found = validate(&list);
    let got: Vec<(usize, &str)> = found.iter().map(|v| (v.index, v.rule)).collect();
    assert_eq!(&got[..2], [(1, "ids"), (1, "ids")]);
    assert!(got.contains(&(2, "data")), "{got:?}");
}

#[test]
fn serp_queries_are_few_distinct_short_and_harmless() {
    let queries = |list: &str| with(example(), |l| l[6] = event("serp_queries", &format!(r#"{{"queries":{list}}}"#)));
    assert_eq!(rules(&queries(r#"["a","b","c","d","e","f"]"#)), ["queries"]);
    assert_eq!(rules(&queries(r#"["a","A"]"#)), ["queries"]);
    assert_eq!(rules(&queries(&format!(r#"["{}"]"#, "я".repeat(81)))), ["queries"]);
    for leak in ["write to ivan@example.com", "+7 (495) 739-00-33", "4111 1111 1111 1111", "https://x.ru/?token=abc"] {
        assert_eq!(rules(&queries(&format!(r#"["{leak}"]"#))), ["sensitive"], "{leak}");
    }
    assert_eq!(sensitive("три дня в неделю, 45 минут"), None);
}

#[test]
fn a_failed_stream_may_end_early_but_say_nothing_more() {
    let failed =
        vec![event("thinking_start", "{}"), event("error", r#"{"message":"model failed"}"#), event("completed", "{}")];
    assert_eq!(rules(&failed), Vec::<&str>::new());
    let more = with(failed, |l| l.insert(2, event("final_delta", r#"{"text":"x"}"#)));
    assert_eq!(rules(&more), ["after_error"]);
}
