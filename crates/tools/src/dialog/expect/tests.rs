//! Paths and matchers over a real answer body.

use std::time::Duration;

use megamind_core::proto::n_alice::n_scenarios::{TCard, TDirective, TLayout, TOpenAppDirective, t_card, t_directive};
use serde_json::json;

use super::*;

fn body() -> TScenarioResponseBody {
    let open = TOpenAppDirective { name: "open_app".into(), app_name: "Safari".into(), ..Default::default() };
    TScenarioResponseBody {
        layout: Some(TLayout {
            output_speech: "Открываю Safari.".into(),
            cards: vec![TCard { card: Some(t_card::Card::Text("Открываю Safari.".into())) }],
            directives: vec![TDirective { directive: Some(t_directive::Directive::OpenAppDirective(open)) }],
            should_listen: false,
        }),
        ..Default::default()
    }
}

fn expectation(expect: Value) -> Expectation {
    let Value::Object(map) = expect else { panic!() };
    Expectation::compile(&map).unwrap()
}

fn failures(expect: Value) -> Vec<Failure> {
    let body = body();
    let answer = Answer { body: Some(&body), ..Default::default() };
    expectation(expect).check(&answer, &[Duration::from_millis(120)])
}

#[test]
fn an_error_fails_a_turn_unless_the_turn_expects_it() {
    let error = ("internal".to_owned(), "the scenario failed".to_owned());
    let answer = Answer { error: Some(error), ..Default::default() };
    for expect in [json!({}), json!({"speech": {"not_contains": "Chrome"}}), json!({"irrelevant": false})] {
        let failed = expectation(expect.clone()).check(&answer, &[]);
        assert!(failed.iter().any(|f| f.path == "error" && f.got.contains("internal")), "{expect}: {failed:?}");
    }
    assert!(expectation(json!({"error.type": "internal"})).check(&answer, &[]).is_empty());
    assert!(expectation(json!({"error.message": {"contains": "failed"}})).check(&answer, &[]).is_empty());
}

#[test]
fn shortcuts_and_field_paths_read_the_answer() {
    let all = json!({
        "speech": {"contains": "Safari"},
        "card": "Открываю Safari.",
        "directives[0].OpenAppDirective.AppName": "Safari",
        "directives": {"contains": "OpenAppDirective"},
        "Layout.Directives[0].OpenAppDirective.Name": {"one_of": ["open_app", "close_app"]},
        "should_listen": false,
        "speech ": {"regex": "^Откр"},
        "state": "<absent>",
        "irrelevant": false,
        "error.type": "",
        "max_ms": 300,
    });
    let Value::Object(mut map) = all else { unreachable!() };
    // A key with a trailing space is no path: take it out of this row.
    map.remove("speech ");
    map.insert("Layout.OutputSpeech".into(), json!({"regex": "^Откр"}));
    let body = body();
    let failures = Expectation::compile(&map).unwrap().check(&Answer { body: Some(&body), ..Default::default() }, &[]);
    assert!(failures.is_empty(), "{failures:?}");
}

#[test]
fn a_wrong_expectation_says_what_was_expected_and_what_came() {
    let got = failures(json!({"speech": "Закрываю Safari.", "directives[1].OpenAppDirective.AppName": "X"}));
    assert_eq!(
        got,
        [
            Failure {
                path: "speech".into(), expected: "\"Закрываю Safari.\"".into(), got: "Открываю Safari.".into()
            },
            Failure {
                path: "directives[1].OpenAppDirective.AppName".into(),
                expected: "\"X\"".into(),
                got: ABSENT.into()
            },
        ]
    );
    let slow = expectation(json!({"max_ms": 100})).check(&Answer::default(), &[Duration::from_millis(150)]);
    assert_eq!(slow[0].got, "150 ms");
    assert!(failures(json!({"speech": {"not_contains": "Safari"}}))[0].expected.contains("not to contain"));
}

#[test]
fn paths_the_schema_lacks_and_bad_matchers_are_refused() {
    let refuse = |expect: Value| {
        let Value::Object(map) = expect else { panic!() };
        let mut problems = Expectation::compile(&map).unwrap_err();
        assert_eq!(problems.len(), 1, "{problems:?}");
        problems.remove(0).1
    };
    assert!(refuse(json!({"Layout.Nope": 1})).contains("TLayout has no field \"Nope\""));
    assert!(refuse(json!({"speech[0]": 1})).contains("not a list"));
    assert!(refuse(json!({"speech.Deeper": 1})).contains("has no fields"));
    assert!(refuse(json!({"speech": {"starts_with": "x"}})).contains("unknown matcher"));
    assert!(refuse(json!({"speech": {"regex": "("}})).contains("regex"));
    assert!(refuse(json!({"max_ms": "fast"})).contains("max_ms"));
    assert!(refuse(json!({"directives[x]": 1})).contains("name[N]"));
    // Through a list with no index: once accepted, then `<absent>` whatever came.
    assert!(refuse(json!({"directives.OpenAppDirective.AppName": 1})).contains("is a list: write Directives[N]"));
    assert!(refuse(json!({"Layout.Cards.Text": 1})).contains("is a list: write Cards[N]"));
}

#[test]
fn every_bad_key_of_a_turn_is_told_and_a_misspelt_shortcut_is_named() {
    let Value::Object(map) = json!({
        "speach": "x",
        "max_msec": 300,
        "error.tpye": "bad_request",
        "Layout.OutputSpeach": "x",
        "speech": {"starts_with": "x"},
        "card": "fine",
    }) else {
        unreachable!()
    };
    let problems = Expectation::compile(&map).unwrap_err();
    let said = |key: &str| problems.iter().find(|(k, _)| k == key).map(|(_, message)| message.as_str()).unwrap_or("");
    assert_eq!(problems.len(), 5, "all but `card`: {problems:?}");
    assert!(
        said("speach").starts_with("speach: unknown key; did you mean `speech`? (keys: speech, card,"),
        "{problems:?}"
    );
    assert!(said("max_msec").starts_with("max_msec: unknown key; did you mean `max_ms`?"), "{problems:?}");
    assert!(said("error.tpye").contains("did you mean `error.type`?"), "{problems:?}");
    assert!(said("Layout.OutputSpeach").contains("did you mean `OutputSpeech`?"), "{problems:?}");
    assert!(said("speech").contains("unknown matcher"), "{problems:?}");
    let Value::Object(stranger) = json!({"nothing_like_it": 1}) else { unreachable!() };
    let (_, message) = &Expectation::compile(&stranger).unwrap_err()[0];
    assert!(!message.contains("did you mean") && message.contains("Layout"), "{message}");
}

#[test]
fn a_regex_compiled_past_the_size_bound_is_refused_saying_so() {
    // `\w` is Unicode: each repetition compiles to about 49 KB, so `\w{20}`
    // takes 0.95 MiB and `\w{40}` about 1.9 MiB. Twice the documented 1 MiB
    // is past it for sure, and cheap to compile should the bound be raised.
    let compile = |pattern: &str| {
        let Value::Object(map) = json!({"speech": {"regex": pattern}}) else { unreachable!() };
        Expectation::compile(&map)
    };
    assert!(compile(r"\w{20}").is_ok(), "a regex just under the bound compiles");
    let problems = compile(r"\w{40}")
        .map(|expectation| expectation.checks.len())
        .expect_err("a regex twice the bound must be refused");
    let said: Vec<&str> = problems.iter().map(|(_, message)| message.as_str()).collect();
    assert_eq!(
        said,
        ["speech: regex: Compiled regex exceeds size limit of 1048576 bytes."],
        "the key, and the size limit of docs/dialog.md in bytes"
    );
}

/// A map (`FrameActions`) reads as one `key: value` line per entry in the
/// order of its keys, the same whatever order it was built or hashed in.
#[test]
fn a_map_reads_in_the_order_of_its_keys() {
    use megamind_core::proto::n_alice::n_scenarios::{TCallbackDirective, TFrameAction};
    let action = |name: &str| TFrameAction {
        callback: Some(TCallbackDirective { name: name.into(), ..Default::default() }),
        ..Default::default()
    };
    let mut body = body();
    for key in ["zeta", "alpha", "mid"] {
        body.frame_actions.insert(key.into(), action(&format!("on_{key}")));
    }
    let answer = Answer { body: Some(&body), ..Default::default() };
    let read = expectation(json!({"FrameActions": "x"})).check(&answer, &[]);
    let got = &read.first().expect("x is not what the map reads as").got;
    let entries = got.lines().filter(|line| !line.starts_with(" ") && line.contains(": "));
    let keys: Vec<&str> = entries.filter_map(|line| line.split_once(": ")).map(|(key, _)| key).collect();
    assert_eq!(keys, ["alpha", "mid", "zeta"], "{got}");
    assert!(got.starts_with("alpha: Callback {") && got.contains("on_zeta"), "{got}");
}
