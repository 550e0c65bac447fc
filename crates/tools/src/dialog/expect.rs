//! Expectations on an answer: a field path into the decoded answer and a
//! matcher (a plain value for an exact match, `contains`, `not_contains`,
//! `regex`, `one_of`), plus `max_ms` on each handler of the turn.
//!
//! Paths use the protocol's field names (`Layout.OutputSpeech`,
//! `directives[0].OpenAppDirective.AppName`) from the answer body
//! (`TScenarioResponseBody`), with shortcuts: `speech`, `card` (the first
//! card's text), `cards`, `directives`, `should_listen`, `expects_request`,
//! `state`, and, outside the body, `irrelevant` (the `/run` declined) and
//! `error.type` / `error.message` (the protocol `Error`). Paths are checked
//! against the schema when the script loads. A value is compared as text:
//! strings as they are, numbers and booleans as written, messages in text
//! format, lists one item per line, an unset message as `<absent>`.

use std::{borrow::Cow, time::Duration};

use megamind_core::{codec, proto::n_alice::n_scenarios::TScenarioResponseBody, text::nearest};
use prost_reflect::{DynamicMessage, Kind, MessageDescriptor, ReflectMessage, Value as Field};
use serde_json::{Map, Value};

/// Largest compiled regex, in bytes: a script cannot ask for unbounded work.
const MAX_REGEX_BYTES: usize = 1 << 20;
/// Different regexes one script may hold. Each may take up to
/// [`MAX_REGEX_BYTES`] compiled (`\w{20}` takes nearly 1 MiB) and milliseconds
/// to compile: a script of thousands of them held gigabytes. A regex
/// written again is compiled once.
pub const MAX_REGEXES: usize = 64;

/// The regexes of one script, each compiled once, and their bound.
#[derive(Debug, Default)]
pub struct Regexes(std::collections::HashMap<String, regex::Regex>);

impl Regexes {
    fn compile(&mut self, pattern: String) -> Result<regex::Regex, String> {
        if let Some(regex) = self.0.get(&pattern) {
            return Ok(regex.clone());
        }
        if self.0.len() >= MAX_REGEXES {
            return Err(format!("regex: a script holds at most {MAX_REGEXES} different regexes"));
        }
        let regex = regex::RegexBuilder::new(&pattern)
            .size_limit(MAX_REGEX_BYTES)
            .build()
            .map_err(|e| format!("regex: {e}"))?;
        self.0.insert(pattern, regex.clone());
        Ok(regex)
    }
}
/// What an unset message reads as.
pub const ABSENT: &str = "<absent>";
/// The keys an `expect:` map takes besides paths from the body's own
/// fields: the shortcuts, the outcome outside the body, and `max_ms`.
pub const KEYS: &[&str] = &[
    "speech",
    "card",
    "cards",
    "directives",
    "should_listen",
    "expects_request",
    "state",
    "irrelevant",
    "error.type",
    "error.message",
    "max_ms",
];

/// The expectations of one turn.
#[derive(Debug, Clone, Default)]
pub struct Expectation {
    /// Each path and its matcher, in the order written.
    pub checks: Vec<Check>,
    /// The longest any handler of the turn may take, in ms.
    pub max_ms: Option<u64>,
}

/// One path and its matcher.
#[derive(Debug, Clone)]
pub struct Check {
    /// The path as written.
    pub path: String,
    target: Target,
    matcher: Matcher,
}

#[derive(Debug, Clone)]
enum Target {
    Body(Vec<Segment>),
    Irrelevant,
    ErrorType,
    ErrorMessage,
}

#[derive(Debug, Clone)]
struct Segment {
    field: String,
    index: Option<usize>,
}

/// How a value must look.
#[derive(Debug, Clone)]
pub enum Matcher {
    /// Equal to.
    Exact(String),
    /// Holds.
    Contains(String),
    /// Does not hold.
    NotContains(String),
    /// Matches.
    Regex(regex::Regex),
    /// Equal to one of.
    OneOf(Vec<String>),
}

/// What a turn's answer was, for the checks.
#[derive(Debug, Default)]
pub struct Answer<'a> {
    /// The last answer for the user, when there was one.
    pub body: Option<&'a TScenarioResponseBody>,
    /// The `/run` declined (`IsIrrelevant`).
    pub irrelevant: bool,
    /// The protocol `Error` (type, message), when a handler answered one.
    pub error: Option<(String, String)>,
}

/// One expectation not met.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Failure {
    /// The path, or `max_ms`.
    pub path: String,
    /// What was expected, in words.
    pub expected: String,
    /// What came.
    pub got: String,
}

impl Expectation {
    /// Compiles the `expect:` map of a turn; else every key that cannot be
    /// read, each as (the key as written, what is wrong, opening with the key).
    pub fn compile(expect: &Map<String, Value>) -> Result<Expectation, Vec<(String, String)>> {
        Expectation::compile_in(expect, &mut Regexes::default())
    }

    /// [`Expectation::compile`], its regexes among the script's `regexes`.
    pub fn compile_in(
        expect: &Map<String, Value>,
        regexes: &mut Regexes,
    ) -> Result<Expectation, Vec<(String, String)>> {
        let mut expectation = Expectation::default();
        let mut problems = Vec::new();
        for (path, value) in expect {
            if path == "max_ms" {
                match value.as_u64() {
                    Some(ms) => expectation.max_ms = Some(ms),
                    None => problems.push((path.clone(), "max_ms: write a whole number of milliseconds".into())),
                }
                continue;
            }
            match Target::parse(path).and_then(|target| Ok((target, Matcher::compile(value, regexes)?))) {
                Ok((target, matcher)) => expectation.checks.push(Check { path: path.clone(), target, matcher }),
                Err(e) => problems.push((path.clone(), format!("{path}: {e}"))),
            }
        }
        if problems.is_empty() { Ok(expectation) } else { Err(problems) }
    }

    /// The failures of `answer`, whose handlers took `took`.
    pub fn check(&self, answer: &Answer<'_>, took: &[Duration]) -> Vec<Failure> {
        let mut failures: Vec<Failure> = self
            .checks
            .iter()
            .filter_map(|check| {
                let got = check.target.read(answer);
                (!check.matcher.matches(&got)).then(|| Failure {
                    path: check.path.clone(),
                    expected: check.matcher.to_string(),
                    got,
                })
            })
            .collect();
        // A protocol `Error` is no answer to a turn that expects none: a
        // server failing every turn must not pass the turns that check
        // little (`not_contains`, or nothing at all).
        let expects_error =
            self.checks.iter().any(|check| matches!(check.target, Target::ErrorType | Target::ErrorMessage));
        if let Some((kind, message)) = answer.error.as_ref().filter(|_| !expects_error) {
            failures.push(Failure {
                path: "error".into(),
                expected: "an answer (the turn expects no error.type or error.message)".into(),
                got: format!("{kind}: {message}"),
            });
        }
        if let Some(max) = self.max_ms
            && let Some(slowest) = took.iter().max().filter(|slowest| slowest.as_millis() > u128::from(max))
        {
            failures.push(Failure {
                path: "max_ms".into(),
                expected: format!("every handler within {max} ms"),
                got: format!("{} ms", slowest.as_millis()),
            });
        }
        failures
    }
}

impl Target {
    fn parse(path: &str) -> Result<Target, String> {
        match path {
            "irrelevant" => return Ok(Target::Irrelevant),
            "error.type" => return Ok(Target::ErrorType),
            "error.message" => return Ok(Target::ErrorMessage),
            _ => {}
        }
        unknown_first(path)?;
        let mut segments = Vec::new();
        for (i, part) in path.split('.').enumerate() {
            let (name, index) = match part.split_once('[') {
                Some((name, rest)) => {
                    let index = rest.strip_suffix(']').and_then(|n| n.parse().ok());
                    (name, Some(index.ok_or_else(|| format!("{part:?}: write name[N]"))?))
                }
                None => (part, None),
            };
            let expanded: &[&str] = match (i, name) {
                (0, "speech") => &["Layout", "OutputSpeech"],
                (0, "card") => &["Layout", "Cards[0]", "Text"],
                (0, "cards") => &["Layout", "Cards"],
                (0, "directives") => &["Layout", "Directives"],
                (0, "should_listen") => &["Layout", "ShouldListen"],
                (0, "expects_request") => &["ExpectsRequest"],
                (0, "state") => &["State"],
                _ => &[],
            };
            if expanded.is_empty() {
                segments.push(Segment { field: name.to_owned(), index });
                continue;
            }
            for (j, field) in expanded.iter().enumerate() {
                let (field, fixed) = match field.split_once('[') {
                    Some((field, _)) => (field, Some(0)),
                    None => (*field, None),
                };
                let last = j + 1 == expanded.len();
                segments.push(Segment { field: field.to_owned(), index: if last { index } else { fixed } });
            }
        }
        check_schema(&TScenarioResponseBody::default().descriptor(), &segments)?;
        Ok(Target::Body(segments))
    }

    fn read(&self, answer: &Answer<'_>) -> String {
        match self {
            Target::Irrelevant => answer.irrelevant.to_string(),
            Target::ErrorType => answer.error.as_ref().map_or(String::new(), |(kind, _)| kind.clone()),
            Target::ErrorMessage => answer.error.as_ref().map_or(String::new(), |(_, message)| message.clone()),
            Target::Body(segments) => match answer.body {
                Some(body) => read(&body.transcode_to_dynamic(), segments),
                None => ABSENT.to_owned(),
            },
        }
    }
}

/// Refuses a path that opens with neither one of [`KEYS`] nor a field of
/// the body, with the key or field it likely meant (`speach` → `speech`).
fn unknown_first(path: &str) -> Result<(), String> {
    let first = path.split(['.', '[']).next().unwrap_or_default();
    let body = TScenarioResponseBody::default().descriptor();
    if KEYS.contains(&first) || body.get_field_by_name(first).is_some() {
        return Ok(());
    }
    let fields: Vec<String> = body.fields().map(|f| f.name().to_owned()).collect();
    let candidates = || KEYS.iter().copied().chain(fields.iter().map(String::as_str));
    // `error.tpye` is near as a whole; `speach.x` by its first name.
    let near = nearest(path, candidates()).or_else(|| nearest(first, candidates()));
    let near = near.map(|near| format!("; did you mean `{near}`?")).unwrap_or_default();
    Err(format!(
        "unknown key{near} (keys: {}; or a path from a {} field: {})",
        KEYS.join(", "),
        body.name(),
        fields.join(", ")
    ))
}

/// Refuses a path the schema lacks, naming the field and where.
fn check_schema(root: &MessageDescriptor, segments: &[Segment]) -> Result<(), String> {
    let mut message = root.clone();
    for (i, segment) in segments.iter().enumerate() {
        let Some(field) = message.get_field_by_name(&segment.field) else {
            let known: Vec<String> = message.fields().map(|f| f.name().to_owned()).collect();
            let near = megamind_core::text::did_you_mean(&segment.field, known.iter().map(String::as_str));
            return Err(format!(
                "{} has no field {:?}{near} (it has: {})",
                message.name(),
                segment.field,
                known.join(", ")
            ));
        };
        if segment.index.is_some() && !field.is_list() {
            return Err(format!("{}.{} is not a list", message.name(), field.name()));
        }
        // Read through, a list has no value: the check would read `<absent>` whatever came.
        if segment.index.is_none() && field.is_list() && i + 1 < segments.len() {
            return Err(format!("{}.{} is a list: write {}[N]", message.name(), field.name(), segment.field));
        }
        match field.kind() {
            Kind::Message(inner) if !field.is_map() => message = inner,
            _ if i + 1 < segments.len() => {
                return Err(format!("{}.{} has no fields", message.name(), field.name()));
            }
            _ => {}
        }
    }
    Ok(())
}

/// The value at `segments` of `message`, as text.
fn read(message: &DynamicMessage, segments: &[Segment]) -> String {
    let Some((segment, rest)) = segments.split_first() else { return render(&Field::Message(message.clone())) };
    let Some(field) = message.descriptor().get_field_by_name(&segment.field) else { return ABSENT.to_owned() };
    if matches!(field.kind(), Kind::Message(_)) && !field.is_list() && !message.has_field(&field) {
        return ABSENT.to_owned();
    }
    let value: Cow<'_, Field> = message.get_field(&field);
    let value = match (segment.index, value.as_ref()) {
        (Some(i), Field::List(items)) => match items.get(i) {
            Some(item) => item.clone(),
            None => return ABSENT.to_owned(),
        },
        _ => value.into_owned(),
    };
    match (&value, rest.is_empty()) {
        (Field::Message(inner), false) => read(inner, rest),
        (_, true) => match (&value, field.kind()) {
            (Field::EnumNumber(n), Kind::Enum(e)) => e.get_value(*n).map_or(n.to_string(), |v| v.name().to_owned()),
            _ => render(&value),
        },
        (_, false) => ABSENT.to_owned(),
    }
}

fn render(value: &Field) -> String {
    match value {
        Field::String(text) => text.clone(),
        Field::Bool(b) => b.to_string(),
        Field::I32(n) => n.to_string(),
        Field::I64(n) => n.to_string(),
        Field::U32(n) => n.to_string(),
        Field::U64(n) => n.to_string(),
        Field::F32(n) => n.to_string(),
        Field::F64(n) => n.to_string(),
        Field::EnumNumber(n) => n.to_string(),
        Field::Bytes(bytes) => String::from_utf8_lossy(bytes).into_owned(),
        Field::Message(message) => codec::text::print(message).map_or_else(|e| e.to_string(), |t| t.trim().to_owned()),
        Field::List(items) => items.iter().map(render).collect::<Vec<_>>().join("\n"),
        // One entry per line, `key: value`, in the order of the keys: a
        // map has none of its own.
        Field::Map(map) => {
            let mut entries: Vec<(String, String)> =
                map.iter().map(|(key, value)| (map_key(key), render(value))).collect();
            entries.sort();
            entries.into_iter().map(|(key, value)| format!("{key}: {value}")).collect::<Vec<_>>().join("\n")
        }
    }
}

fn map_key(key: &prost_reflect::MapKey) -> String {
    use prost_reflect::MapKey;
    match key {
        MapKey::Bool(b) => b.to_string(),
        MapKey::I32(n) => n.to_string(),
        MapKey::I64(n) => n.to_string(),
        MapKey::U32(n) => n.to_string(),
        MapKey::U64(n) => n.to_string(),
        MapKey::String(text) => text.clone(),
    }
}

impl Matcher {
    fn compile(value: &Value, regexes: &mut Regexes) -> Result<Matcher, String> {
        let Value::Object(object) = value else { return scalar(value).map(Matcher::Exact) };
        let [(kind, operand)] = object.iter().collect::<Vec<_>>()[..] else {
            return Err("write a value, or one of contains, not_contains, regex, one_of".into());
        };
        match kind.as_str() {
            "contains" => scalar(operand).map(Matcher::Contains),
            "not_contains" => scalar(operand).map(Matcher::NotContains),
            "regex" => regexes.compile(scalar(operand)?).map(Matcher::Regex),
            "one_of" => match operand {
                Value::Array(items) => items.iter().map(scalar).collect::<Result<_, _>>().map(Matcher::OneOf),
                _ => Err("one_of: write a list".into()),
            },
            other => Err(format!("unknown matcher {other:?}: use contains, not_contains, regex, one_of")),
        }
    }

    fn matches(&self, got: &str) -> bool {
        match self {
            Matcher::Exact(want) => got == want,
            Matcher::Contains(part) => got.contains(part.as_str()),
            Matcher::NotContains(part) => !got.contains(part.as_str()),
            Matcher::Regex(regex) => regex.is_match(got),
            Matcher::OneOf(options) => options.iter().any(|option| option == got),
        }
    }
}

impl std::fmt::Display for Matcher {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Matcher::Exact(want) => write!(f, "{want:?}"),
            Matcher::Contains(part) => write!(f, "to contain {part:?}"),
            Matcher::NotContains(part) => write!(f, "not to contain {part:?}"),
            Matcher::Regex(regex) => write!(f, "to match /{regex}/"),
            Matcher::OneOf(options) => write!(f, "one of {options:?}"),
        }
    }
}

/// A YAML scalar as the text it is compared as.
fn scalar(value: &Value) -> Result<String, String> {
    match value {
        Value::String(text) => Ok(text.clone()),
        Value::Bool(b) => Ok(b.to_string()),
        Value::Number(n) => Ok(n.to_string()),
        Value::Null => Ok(String::new()),
        _ => Err(format!("{value}: write a string, a number or a boolean")),
    }
}

#[cfg(test)]
mod tests;
