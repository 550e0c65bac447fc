//! The app-action answer rules, one row each.

use serde_json::json;

use super::*;

/// What a row expects: speech, then the command as (name, app_name, app_path)
/// or the reason it was dropped.
#[derive(Debug)]
enum Want {
    Text(&'static str),
    Command(&'static str, &'static str, &'static str, &'static str),
    Drop(&'static str, Dropped),
}

const SAFARI: &str = r#"{"session_id": "session_1764210832.530743", "command": "open_app", "args": {"app_name": "Safari"}, "text": "Открываю Safari."}"#;

fn table() -> Vec<(&'static str, String, Want)> {
    use Want::*;
    vec![
        // The examples of the app-action format (docs/assistant.md#the-models-answers-the-app-action-format).
        ("seed: plain JSON text", r#"{"text": "Привет! Как дела? Чем могу помочь?"}"#.into(), Text("Привет! Как дела? Чем могу помочь?")),
        ("seed: plain string", "Привет! Как дела? Чем могу помочь?".into(), Text("Привет! Как дела? Чем могу помочь?")),
        ("seed: open Safari", SAFARI.into(), Command("open_app", "Safari", "", "Открываю Safari.")),
        (
            "seed example 1: open Calculator",
            r#"{"session_id":"session_1764210832.530743","command":"open_app","args":{"app_name":"Calculator"},"text":"Открываю калькулятор."}"#.into(),
            Command("open_app", "Calculator", "", "Открываю калькулятор."),
        ),
        (
            "seed example 1.1: close Safari",
            r#"{"session_id":"session_123","command":"close_app","args":{"app_name":"Safari"},"text":"Закрываю Safari."}"#.into(),
            Command("close_app", "Safari", "", "Закрываю Safari."),
        ),
        (
            "seed example 2: text only",
            r#"{"text": "Калькулятор уже открыт. Что вы хотите вычислить?"}"#.into(),
            Text("Калькулятор уже открыт. Что вы хотите вычислить?"),
        ),
        (
            "seed example 3: empty text, action only",
            r#"{"session_id":"session_1764210832.530743","command":"open_app","args":{"app_name":"Safari"},"text":""}"#.into(),
            Command("open_app", "Safari", "", ""),
        ),
        // The validation rules.
        (
            "open_app by path",
            r#"{"session_id":"s","command":"open_app","args":{"app_path":"/Applications/Safari.app"},"text":"Ок."}"#.into(),
            Command("open_app", "", "/Applications/Safari.app", "Ок."),
        ),
        (
            "open_app with both",
            r#"{"session_id":"s","command":"open_app","args":{"app_name":"Safari","app_path":"/A/S.app"},"text":""}"#.into(),
            Command("open_app", "Safari", "/A/S.app", ""),
        ),
        (
            "close_app by path only is dropped",
            r#"{"session_id":"s","command":"close_app","args":{"app_path":"/A/S.app"},"text":"Закрываю."}"#.into(),
            Drop("Закрываю.", Dropped::NoAppName),
        ),
        (
            "missing session_id",
            r#"{"command":"open_app","args":{"app_name":"Safari"},"text":"Открываю Safari."}"#.into(),
            Drop("Открываю Safari.", Dropped::NoSessionId),
        ),
        (
            "args nested past the payload depth",
            format!(
                r#"{{"session_id": "s", "command": "open_app", "args": {{"app_name": "Safari", "x": {}1{}}}, "text": "Открываю."}}"#,
                "{\"k\": ".repeat(46),
                "}".repeat(46)
            ),
            Drop("Открываю.", Dropped::OversizedPayload),
        ),
        (
            "a payload over the size limit",
            format!(
                r#"{{"session_id": "s", "command": "open_app", "args": {{"app_name": "Safari", "junk": "{}"}}, "text": "Да."}}"#,
                "x".repeat(MAX_PAYLOAD_BYTES)
            ),
            Drop("Да.", Dropped::OversizedPayload),
        ),
        (
            "empty session_id",
            r#"{"session_id":" ","command":"open_app","args":{"app_name":"Safari"},"text":"Т"}"#.into(),
            Drop("Т", Dropped::NoSessionId),
        ),
        (
            "session_id not a string",
            r#"{"session_id":17,"command":"close_app","args":{"app_name":"Safari"},"text":"Т"}"#.into(),
            Drop("Т", Dropped::NoSessionId),
        ),
        ("missing args", r#"{"session_id":"s","command":"open_app","text":"Т"}"#.into(), Drop("Т", Dropped::NoAppName)),
        (
            "args not an object",
            r#"{"session_id":"s","command":"open_app","args":"Safari","text":"Т"}"#.into(),
            Drop("Т", Dropped::NoAppName),
        ),
        (
            "empty app_name",
            r#"{"session_id":"s","command":"close_app","args":{"app_name":""},"text":"Т"}"#.into(),
            Drop("Т", Dropped::NoAppName),
        ),
        (
            "app_name not a string",
            r#"{"session_id":"s","command":"open_app","args":{"app_name":42},"text":"Т"}"#.into(),
            Drop("Т", Dropped::NoAppName),
        ),
        (
            "unknown command",
            r#"{"session_id":"s","command":"delete_everything","args":{"app_name":"Safari"},"text":"Не могу."}"#.into(),
            Drop("Не могу.", Dropped::UnknownCommand),
        ),
        (
            "command not a string",
            r#"{"session_id":"s","command":{"name":"open_app"},"args":{"app_name":"Safari"},"text":"Т"}"#.into(),
            Drop("Т", Dropped::BadCommand),
        ),
        ("null command is no command", r#"{"command":null,"text":"Просто текст."}"#.into(), Text("Просто текст.")),
        ("empty command is no command", r#"{"command":"","text":"Просто текст."}"#.into(), Text("Просто текст.")),
        // Types and emptiness of text.
        (
            "missing text with a command",
            r#"{"session_id":"s","command":"open_app","args":{"app_name":"Notes"}}"#.into(),
            Command("open_app", "Notes", "", ""),
        ),
        ("text not a string", r#"{"text": 42}"#.into(), Text("")),
        ("text null", r#"{"text": null}"#.into(), Text("")),
        ("empty text", r#"{"text": ""}"#.into(), Text("")),
        ("text is trimmed", "{\"text\": \"  Да.\\n\"}".into(), Text("Да.")),
        // Wrappers the models add.
        ("fenced json", format!("```json\n{SAFARI}\n```"), Command("open_app", "Safari", "", "Открываю Safari.")),
        ("fenced without language", format!("```\n{SAFARI}\n```"), Command("open_app", "Safari", "", "Открываю Safari.")),
        ("unclosed fence", format!("```json\n{SAFARI}"), Command("open_app", "Safari", "", "Открываю Safari.")),
        (
            "prose around a fence",
            format!("Конечно! Вот ответ:\n```json\n{SAFARI}\n```\nГотово."),
            Command("open_app", "Safari", "", "Открываю Safari."),
        ),
        ("prose around bare json", format!("Sure: {SAFARI} Hope it helps."), Command("open_app", "Safari", "", "Открываю Safari.")),
        (
            "a stray brace before the object",
            format!("Use {{braces}} like this: {SAFARI}"),
            Command("open_app", "Safari", "", "Открываю Safari."),
        ),
        ("a JSON string", r#""Привет!""#.into(), Text("Привет!")),
        // Not an answer object: raw JSON is never read aloud.
        ("other JSON object", r#"{"answer": 42}"#.into(), Text("")),
        ("prose with braces", "Множество {1, 2} пусто?".into(), Text("Множество {1, 2} пусто?")),
        ("prose before an object that is no answer", r#"Вот данные: {"answer": 42}"#.into(), Text("Вот данные:")),
        ("a JSON array: raw JSON, never said", "[1, 2]".into(), Text("")),
        ("a number", "42".into(), Text("42")),
        // Broken JSON is never read aloud.
        ("truncated object", SAFARI[..60].into(), Drop("", Dropped::Truncated)),
        (
            "cut after the nested args: never the inner object, never raw",
            r#"{"session_id": "s", "command": "open_app", "args": {"app_name": "Safari"}, "text": "Откры"#.into(),
            Drop("", Dropped::Truncated),
        ),
        (
            "cut after a whole text: the text, never the command",
            r#"{"text": "Открываю Safari.", "command": "open_app", "args": {"app_na"#.into(),
            Drop("Открываю Safari.", Dropped::Truncated),
        ),
        (
            "prose, then a cut object: the prose",
            r#"Конечно! {"session_id": "s", "command": "open_app", "args": {"app_name": "Safari"}"#.into(),
            Drop("Конечно!", Dropped::Truncated),
        ),
        ("a cut text-only object", r#"{"text": "Привет, как"#.into(), Text("")),
        ("fence around garbage", "```json\n{oops\n```".into(), Text("")),
        ("empty", "".into(), Text("")),
        ("whitespace", " \n\t ".into(), Text("")),
    ]
}

#[test]
fn every_rule_of_the_app_action_format() {
    for (name, raw, want) in table() {
        let got = parse(&raw);
        match want {
            Want::Text(text) => {
                assert_eq!(got.text, text, "{name}");
                assert_eq!((&got.command, got.dropped), (&None, None), "{name}");
            }
            Want::Drop(text, reason) => {
                assert_eq!(got.text, text, "{name}");
                assert_eq!((&got.command, got.dropped), (&None, Some(reason)), "{name}");
            }
            Want::Command(command, name_, path, text) => {
                assert_eq!(got.text, text, "{name}");
                assert_eq!(got.dropped, None, "{name}");
                let command_got = got.command.as_ref().unwrap_or_else(|| panic!("{name}: no command in {got:?}"));
                assert_eq!(command_got.name(), command, "{name}");
                let (app_name, app_path) = match command_got {
                    Command::OpenApp { app_name, app_path, .. } => (app_name.as_str(), app_path.as_str()),
                    Command::CloseApp { app_name, .. } => (app_name.as_str(), ""),
                };
                assert_eq!((app_name, app_path), (name_, path), "{name}");
            }
        }
    }
}

#[test]
fn no_prefix_of_an_answer_object_yields_a_command_or_speaks_json() {
    for (end, _) in SAFARI.char_indices().skip(1) {
        let cut = parse(&SAFARI[..end]);
        assert!(cut.command.is_none(), "cut at {end}: {cut:?}");
        assert!(!cut.text.contains('{') && !cut.text.contains('"'), "cut at {end}: {cut:?}");
    }
    assert!(parse(SAFARI).command.is_some());
}

#[test]
fn a_command_of_another_session_is_dropped() {
    let answer = parse(SAFARI).for_session("session_1764210832.530743");
    assert!(answer.command.is_some() && answer.dropped.is_none());
    let answer = parse(SAFARI).for_session("session_1.000001");
    assert_eq!((answer.command, answer.dropped), (None, Some(Dropped::WrongSession)));
    assert_eq!(answer.text, "Открываю Safari.", "the text is still said");
    let plain = parse("Привет!").for_session("x");
    assert_eq!((plain.text.as_str(), plain.dropped), ("Привет!", None));
}

#[test]
fn an_answer_cut_at_max_tokens_keeps_whole_sentences_and_no_command() {
    let cut = parse("Жили-были дед и баба. У них была кур").truncated();
    assert_eq!(cut.text, "Жили-были дед и баба.");
    let cut = parse("Одно длинное предложение без конца и кр").truncated();
    assert_eq!(cut.text, "Одно длинное предложение без конца и…", "whole words when no sentence is");
    let cut = parse(SAFARI).truncated();
    assert_eq!((cut.command, cut.dropped), (None, Some(Dropped::Truncated)), "never a command from a cut answer");
    assert_eq!(cut.text, "Открываю Safari.");
    // Prose that starts with a mark is still prose, cut where it was cut.
    let cut = parse("`ls` показывает файлы. Также можно исполь").truncated();
    assert_eq!(cut.text, "`ls` показывает файлы.");
    // An object's text closed before the cut is whole, prose around it or not.
    let cut = parse(&format!("Хорошо. {SAFARI} И ещё одно")).truncated();
    assert_eq!(cut.text, "Открываю Safari.");
}

#[test]
fn a_json_array_is_never_said_and_a_bare_number_is() {
    for raw in ["[1, 2]", "[\n  \"open_app\",\n  \"Safari\"\n]", "[]"] {
        assert_eq!(parse(raw).text, "", "{raw}");
    }
    assert_eq!(parse("4").text, "4");
    assert_eq!(
        parse("[Ссылка](https://example.com) на документацию.").text,
        "[Ссылка](https://example.com) на документацию."
    );
}

#[test]
fn the_payload_is_the_models_whole_object() {
    let Some(Command::OpenApp { payload, .. }) = parse(&format!("```json\n{SAFARI}\n```")).command else {
        panic!("a command")
    };
    let mut keys: Vec<&str> = payload.fields.keys().map(String::as_str).collect();
    keys.sort_unstable();
    assert_eq!(keys, ["args", "command", "session_id", "text"]);
    let Some(Kind::StructValue(args)) = &payload.fields["args"].kind else { panic!("args is an object") };
    assert_eq!(args.fields["app_name"].kind, Some(Kind::StringValue("Safari".into())));
    assert_eq!(payload.fields["session_id"].kind, Some(Kind::StringValue("session_1764210832.530743".into())));
}

#[test]
fn every_json_type_converts() {
    let object = json!({"n": 1.5, "b": true, "z": null, "l": [1, "a"], "o": {"k": "v"}});
    let Value::Object(object) = object else { unreachable!() };
    let s = megamind_core::codec::structs::struct_from_json(object);
    assert_eq!(s.fields["n"].kind, Some(Kind::NumberValue(1.5)));
    assert_eq!(s.fields["b"].kind, Some(Kind::BoolValue(true)));
    assert_eq!(s.fields["z"].kind, Some(Kind::NullValue(0)));
    assert!(matches!(&s.fields["l"].kind, Some(Kind::ListValue(l)) if l.values.len() == 2));
    assert!(matches!(&s.fields["o"].kind, Some(Kind::StructValue(o)) if o.fields.contains_key("k")));
}

#[test]
fn hostile_input_neither_panics_nor_takes_long() {
    let long_braces = "{".repeat(200_000);
    let started = std::time::Instant::now();
    for raw in [
        long_braces.as_str(),
        "```",
        "```\n",
        "{\"text\":",
        "\u{0}\u{1}",
        "}{",
        "```json\n```",
        "{\"text\": \"\\ud800\"}",
    ] {
        let _ = parse(raw);
    }
    assert!(started.elapsed() < std::time::Duration::from_secs(2), "{:?}", started.elapsed());
    let huge = format!("{{\"text\": \"{}\"}}", "а".repeat(1 << 20));
    assert_eq!(parse(&huge).text.chars().count(), 1 << 20);
}

#[test]
fn an_answer_object_is_looked_for_only_at_the_first_braces() {
    // `{x}` is a brace no JSON starts at, and no answer object cut off.
    let junk = |count: usize| "{x} ".repeat(count);
    let whole = r#"{"text": "Готово."}"#;
    let cut = r#"{"text": "Почти.", "command": "open_app", "args": {"app_name": "Saf"#;
    let found = parse(&format!("Вот: {}{whole}", junk(MAX_OBJECT_STARTS - 1)));
    assert_eq!(found.text, "Готово.", "the last brace within the bound is tried");
    let salvaged = parse(&format!("Вот: {}{cut}", junk(MAX_OBJECT_STARTS - 1)));
    assert_eq!((salvaged.text.as_str(), salvaged.dropped), ("Почти.", Some(Dropped::Truncated)));
    // Past the bound, however long the answer, nothing is looked for: it is prose.
    for count in [MAX_OBJECT_STARTS, 100, 100_000] {
        for object in [whole, cut] {
            let raw = format!("Вот: {}{object}", junk(count));
            let started = std::time::Instant::now();
            let answer = parse(&raw);
            assert_eq!(
                (answer.text.len(), answer.command, answer.dropped),
                (raw.len(), None, None),
                "{count} braces before {object}"
            );
            assert!(started.elapsed() < std::time::Duration::from_secs(5), "{:?}", started.elapsed());
        }
    }
    // Objects that parse but are no answer stop the search at the first.
    let plain = format!("{}{cut}", "{\"a\":1} ".repeat(100_000));
    assert_eq!(parse(&plain), ModelAnswer { text: String::new(), command: None, dropped: None, text_closed: false });
}
