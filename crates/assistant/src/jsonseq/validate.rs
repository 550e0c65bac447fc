//! The JSONSeq v1 validator (docs/jsonseq.md#validate-jsonseq), strict:
//! every violation of the order (docs/jsonseq.md#order) and of the events'
//! fields (docs/jsonseq.md#events and docs/jsonseq.md#fields), each with
//! the event's index (from 0) and the rule's name.
//!
//! Rules: every `data` is a JSON object carrying `message_id` and
//! `request_id`; event names are the contract's; at most one
//! `serp_summary`, before `thinking_start`; `thinking_start`, then phases
//! whose `id`s are positive and strictly increasing, each with a title, and
//! whose `phase_delta`s name the latest phase; `thinking_end`; one or more
//! `final_delta`s; at most one `serp_queries` (at most 5, distinct, each at
//! most 80 characters, nothing sensitive: no e-mail, phone or card number,
//! no token in a URL), before `final_end`; nothing but system events
//! (`status`, `heartbeat`, `error`, `completed`) after `final_end`, and
//! nothing at all after `completed`. A stream may end early with `error`
//! (then `completed`): what it lacks is not counted against it; nothing but
//! system events may follow the `error`.

use std::{collections::HashSet, sync::LazyLock};

use serde_json::{Map, Value};

use crate::jsonseq::Event;

/// Queries `serp_queries` may carry.
pub const MAX_QUERIES: usize = 5;
/// Characters one query may have.
pub const MAX_QUERY_CHARS: usize = 80;

/// One violation.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Violation {
    /// The event's index, from 0; the number of events for what the end lacks.
    pub index: usize,
    /// The event's name (`<end>` for what the end lacks).
    pub event: String,
    /// The rule, a short stable name (`order`, `phase_id`, ...).
    pub rule: &'static str,
    /// What is wrong.
    pub message: String,
}

impl std::fmt::Display for Violation {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "#{} {}: {}: {}", self.index, self.event, self.rule, self.message)
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
enum Stage {
    Start,
    Summary,
    Thinking,
    Thought,
    Final,
    Queries,
    Ended,
}

struct Checker {
    violations: Vec<Violation>,
    stage: Stage,
    phase: Option<u64>,
    failed: bool,
    completed: bool,
}

/// Every violation of `events`, in order.
pub fn validate(events: &[Event]) -> Vec<Violation> {
    let mut checker =
        Checker { violations: Vec::new(), stage: Stage::Start, phase: None, failed: false, completed: false };
    for (index, event) in events.iter().enumerate() {
        checker.event(index, event);
    }
    checker.end(events.len());
    checker.violations
}

impl Checker {
    fn flag(&mut self, index: usize, event: &str, rule: &'static str, message: impl Into<String>) {
        self.violations.push(Violation { index, event: event.to_owned(), rule, message: message.into() });
    }

    fn event(&mut self, index: usize, event: &Event) {
        let name = event.name.as_str();
        if self.completed {
            self.flag(index, name, "after_completed", "nothing may follow `completed`");
        }
        if event.cut {
            self.flag(index, name, "size", "the event's data is too large");
        }
        let data = match serde_json::from_str::<Value>(&event.data) {
            Ok(Value::Object(data)) => data,
            _ => {
                self.flag(index, name, "data", "data is not a JSON object");
                Map::new()
            }
        };
        for key in ["message_id", "request_id"] {
            if !data.get(key).is_some_and(Value::is_string) {
                self.flag(index, name, "ids", format!("data lacks the string `{key}`"));
            }
        }
        match name {
            "status" | "heartbeat" => {}
            "error" => self.failed = true,
            "completed" => self.completed = true,
            _ if self.failed => self.flag(index, name, "after_error", "only system events may follow `error`"),
            _ if self.stage == Stage::Ended => {
                self.flag(index, name, "after_final_end", "only system events may follow `final_end`")
            }
            "serp_summary" => {
                self.advance(index, name, &[Stage::Start], Stage::Summary, "`serp_summary` comes once, first");
                self.text(index, name, &data, "text");
            }
            "thinking_start" => {
                let first = [Stage::Start, Stage::Summary];
                self.advance(index, name, &first, Stage::Thinking, "`thinking_start` comes once, first")
            }
            "phase_start" => self.phase_start(index, &data),
            "phase_delta" => self.phase_delta(index, &data),
            "thinking_end" => {
                if self.stage != Stage::Thinking || self.phase.is_none() {
                    self.flag(index, name, "order", "`thinking_end` ends a thinking that had a phase");
                }
                self.stage = self.stage.max(Stage::Thought);
            }
            "final_delta" => {
                if !matches!(self.stage, Stage::Thought | Stage::Final) {
                    self.flag(index, name, "order", "`final_delta` comes after `thinking_end`, before `serp_queries`");
                }
                self.stage = self.stage.max(Stage::Final);
                self.text(index, name, &data, "text");
            }
            "serp_queries" => {
                let rule = "`serp_queries` comes once, after the final text";
                self.advance(index, name, &[Stage::Final], Stage::Queries, rule);
                self.queries(index, &data);
            }
            "final_end" => {
                if !matches!(self.stage, Stage::Final | Stage::Queries) {
                    self.flag(index, name, "order", "`final_end` follows at least one `final_delta`");
                }
                self.stage = Stage::Ended;
            }
            other => self.flag(index, other, "event", "not an event of JSONSeq v1"),
        }
    }

    /// Moves to `to`, which may come only in one of the stages `from`.
    fn advance(&mut self, index: usize, name: &str, from: &[Stage], to: Stage, rule: &str) {
        if !from.contains(&self.stage) {
            self.flag(index, name, "order", rule);
        }
        self.stage = self.stage.max(to);
    }

    fn phase_start(&mut self, index: usize, data: &Map<String, Value>) {
        if self.stage != Stage::Thinking {
            self.flag(index, "phase_start", "order", "phases come between `thinking_start` and `thinking_end`");
        }
        match data.get("id").and_then(Value::as_u64).filter(|id| *id > 0) {
            Some(id) if self.phase.is_some_and(|last| id <= last) => {
                self.flag(
                    index,
                    "phase_start",
                    "phase_id",
                    format!("id {id} does not follow {}", self.phase.unwrap_or(0)),
                );
                self.phase = Some(id);
            }
            Some(id) => self.phase = Some(id),
            None => self.flag(index, "phase_start", "phase_id", "id is not a positive integer"),
        }
        if data.get("title").and_then(Value::as_str).is_none_or(|t| t.trim().is_empty()) {
            self.flag(index, "phase_start", "phase_title", "title is missing or empty");
        }
    }

    fn phase_delta(&mut self, index: usize, data: &Map<String, Value>) {
        if self.stage != Stage::Thinking {
            self.flag(index, "phase_delta", "order", "phases come between `thinking_start` and `thinking_end`");
        }
        match (data.get("id").and_then(Value::as_u64), self.phase) {
            (_, None) => self.flag(index, "phase_delta", "phase_ref", "no phase has started"),
            (Some(id), Some(phase)) if id == phase => {}
            (id, Some(phase)) => {
                self.flag(index, "phase_delta", "phase_ref", format!("id {id:?} is not the latest phase {phase}"))
            }
        }
        self.text(index, "phase_delta", data, "text");
    }

    fn text(&mut self, index: usize, name: &str, data: &Map<String, Value>, key: &str) {
        if !data.get(key).is_some_and(Value::is_string) {
            self.flag(index, name, "text", format!("`{key}` is not a string"));
        }
    }

    fn queries(&mut self, index: usize, data: &Map<String, Value>) {
        let Some(queries) = data.get("queries").and_then(Value::as_array) else {
            return self.flag(index, "serp_queries", "queries", "`queries` is not a list");
        };
        if queries.len() > MAX_QUERIES {
            self.flag(index, "serp_queries", "queries", format!("{} queries, at most {MAX_QUERIES}", queries.len()));
        }
        let mut seen = HashSet::new();
        for query in queries {
            let Some(query) = query.as_str() else {
                self.flag(index, "serp_queries", "queries", "a query is not a string");
                continue;
            };
            if !seen.insert(query.trim().to_lowercase()) {
                self.flag(index, "serp_queries", "queries", format!("{query:?} is repeated"));
            }
            if query.chars().count() > MAX_QUERY_CHARS {
                self.flag(
                    index,
                    "serp_queries",
                    "queries",
                    format!("a query is longer than {MAX_QUERY_CHARS} characters"),
                );
            }
            if let Some(kind) = sensitive(query) {
                self.flag(index, "serp_queries", "sensitive", format!("a query holds {kind}"));
            }
        }
    }

    fn end(&mut self, count: usize) {
        if self.failed {
            return;
        }
        if self.stage != Stage::Ended {
            self.flag(count, "<end>", "incomplete", "the stream ends before `final_end`");
        }
    }
}

/// What sensitive content `text` holds, if any: an e-mail address, a phone
/// number, a card number, a token in a URL.
pub fn sensitive(text: &str) -> Option<&'static str> {
    static PATTERNS: LazyLock<[(regex::Regex, &str); 4]> = LazyLock::new(|| {
        let re = |pattern: &str| regex::Regex::new(pattern).expect("a valid pattern");
        [
            (re(r"[\w.+-]+@[\w-]+\.[\w.-]+"), "an e-mail address"),
            (re(r"(?:\d[ -]?){13,19}"), "a card number"),
            (re(r"\+?\d[\d\s().-]{8,}\d"), "a phone number"),
            (re(r"(?i)[?&](?:access_token|token|api_key|apikey|key|sig|signature|auth)=[^&\s]+"), "a token in a URL"),
        ]
    });
    PATTERNS.iter().find(|(pattern, _)| pattern.is_match(text)).map(|(_, kind)| *kind)
}

#[cfg(test)]
mod tests;
