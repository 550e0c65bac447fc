//! Replay of logged traffic: the requests a server wrote to its debug log
//! (`serve --log-level debug`: each request and answer in text format, then
//! the call's summary line) sent again to a server, typically a new build,
//! and each answer compared with the logged one, volatile fields aside.
//!
//! A request is paired with its summary line (scenario, handler) by its
//! `RequestId`, in order, and so is an answer (its head names the call's
//! `RequestId`; a log of an older server's, whose answers name none, pairs
//! an answer with the summary line that follows it). The server's log writer keeps
//! each thread's lines in order but may write another thread's batch
//! first, and a call's task may move between threads: entries are read in
//! the order of their timestamps, not of the file. Personal data the log redacted
//! stays redacted in what is sent.

use std::{
    collections::{HashMap, VecDeque},
    path::Path,
};

use megamind_core::{
    codec::{self, Format, redact::redacted_text},
    dispatch::MAX_REQUEST_ID,
    proto::n_alice::n_scenarios::{TScenarioApplyRequest, TScenarioBaseRequest, TScenarioRunRequest},
    rules::logging::ACCESS_TARGET,
    scenario::Handler,
};
use prost_reflect::ReflectMessage;

use super::{DialogArgs, Unplayable};
use crate::{
    bounded::read_file_at_most,
    client::{Request, Response},
};

/// Largest log read, in bytes.
const MAX_LOG_BYTES: u64 = 256 << 20;
/// Largest logged request or answer kept, in bytes.
const MAX_ENTRY_BYTES: usize = 4 << 20;
/// Fields that differ between any two runs, never compared.
const VOLATILE: &[&str] = &["Version", "ServerTimeMs", "RandomSeed", "RequestId"];

/// One logged call.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Logged {
    /// The scenario called.
    pub scenario: String,
    /// The handler called.
    pub handler: Handler,
    /// Its `RequestId`.
    pub request_id: String,
    /// The request, in text format; empty when the server could not print
    /// it (`request not printable: …`), and then it is not replayed.
    pub request: String,
    /// The answer, in text format, when it was logged.
    pub answer: Option<String>,
    /// Whether the request or the answer was longer than an entry may be
    /// ([`MAX_ENTRY_BYTES`]): kept only up to it, it is not replayed.
    pub cut: bool,
}

/// The calls of a debug log, in the order they ended.
pub fn parse_log(log: &str) -> Vec<Logged> {
    let mut requests: HashMap<String, VecDeque<(String, bool)>> = HashMap::new();
    // `None`: an answer the server could not print.
    let mut answers: HashMap<String, VecDeque<(Option<String>, bool)>> = HashMap::new();
    // Requests the server could not print: their RequestIds are unknown,
    // and the next summaries that find no request are theirs.
    let mut unprintable = 0_usize;
    // An answer whose head names no call (an older server's log).
    let mut answer: Option<(String, bool)> = None;
    let mut calls = Vec::new();
    let mut entries: Vec<Entry> = entries(log).collect();
    // Stable: entries of one instant keep the file's order. The timestamps
    // are RFC 3339 of one width, so their text sorts as their time.
    entries.sort_by_key(|entry| entry.head.split_whitespace().next().unwrap_or_default());
    for Entry { head, body, cut } in entries {
        let Some(what) = head.split_once(&format!("{ACCESS_TARGET}: ")).map(|(_, what)| what.trim()) else { continue };
        match what {
            "request" => {
                let request_id = request_id_of(&body).unwrap_or_default();
                requests.entry(request_id).or_default().push_back((body, cut));
            }
            "answer" => answer = Some((body, cut)),
            request if request.starts_with("request not printable:") => unprintable += 1,
            named if named.starts_with("answer ") => {
                let (named, printed) = match named.split_once(" not printable:") {
                    Some((named, _)) => (named, None),
                    None => (named, Some(body)),
                };
                let request_id = summary_fields(&named["answer ".len()..]).remove("request_id").unwrap_or_default();
                answers.entry(request_id).or_default().push_back((printed, cut));
            }
            summary if summary.starts_with("transport=") => {
                let fields = summary_fields(summary);
                let handler = match fields.get("handler").map(String::as_str) {
                    Some("run") => Handler::Run,
                    Some("continue") => Handler::Continue,
                    Some("commit") => Handler::Commit,
                    Some("apply") => Handler::Apply,
                    _ => continue,
                };
                let request_id = fields.get("request_id").cloned().unwrap_or_default();
                let (request, request_cut) = match requests.get_mut(&request_id).and_then(VecDeque::pop_front) {
                    Some(request) => request,
                    // A call refused before its request was read has no RequestId.
                    None if unprintable > 0 && !request_id.is_empty() => {
                        unprintable -= 1;
                        (String::new(), false)
                    }
                    None => continue,
                };
                let scenario = fields.get("scenario").cloned().unwrap_or_default();
                let named = answers.get_mut(&request_id).and_then(VecDeque::pop_front);
                let (answer, answer_cut) =
                    named.or_else(|| answer.take().map(|(answer, cut)| (Some(answer), cut))).unwrap_or((None, false));
                let cut = request_cut || answer_cut;
                calls.push(Logged { scenario, handler, request_id, request, answer, cut });
            }
            _ => {}
        }
    }
    calls
}

/// Replays the log at `path` against `args.server`; `true` when no answer differs.
pub async fn run(args: &DialogArgs, path: &Path) -> Result<bool, Unplayable> {
    let text = read_log(path)?;
    let calls = parse_log(&text);
    if calls.is_empty() {
        return Err(Unplayable(format!(
            "{}: no logged requests (run the server with --log-level debug)",
            path.display()
        )));
    }
    let ignored: Vec<&str> = VOLATILE.iter().copied().chain(args.ignore.iter().map(String::as_str)).collect();
    // One client (and its connections) per scenario, for the whole run.
    let mut clients = HashMap::new();
    let mut fresh = args.fresh_ids.then(FreshIds::new);
    let (mut same, mut differ, mut skipped) = (0, 0, 0);
    for call in &calls {
        let label = format!("/{}/{} {}", call.scenario, call.handler.as_str(), call.request_id);
        if call.cut {
            let most = MAX_ENTRY_BYTES >> 20;
            crate::outln!("? {label}: its request or answer is over {most} MiB in the log, not replayed");
            skipped += 1;
            continue;
        }
        if call.request.is_empty() {
            crate::outln!("? {label}: its request was not logged (the server could not print it), not replayed");
            skipped += 1;
            continue;
        }
        // Nothing to compare with: not sent (a `/commit` would run its side effect for nothing).
        let Some(logged) = &call.answer else {
            crate::outln!("? {label}: no answer logged, not replayed");
            skipped += 1;
            continue;
        };
        let client = match clients.entry(call.scenario.clone()) {
            std::collections::hash_map::Entry::Occupied(client) => client.into_mut(),
            std::collections::hash_map::Entry::Vacant(slot) => slot.insert(super::client(args, &call.scenario)?),
        };
        let id = fresh.as_mut().map(|fresh| fresh.of(&call.request_id)).unwrap_or_default();
        let request = request_of(call, &id)?;
        let hop = client.call(request).await.map_err(|e| Unplayable(e.to_string()))?;
        // The answer as it would name the logged call (the assistant's call
        // id is its RequestId).
        let now = if id.is_empty() {
            answer_text(&hop.response)
        } else {
            answer_text(&hop.response).replace(&id, &call.request_id)
        };
        let (old, new) = (normalized(logged, &ignored), normalized(&now, &ignored));
        if old == new {
            same += 1;
            crate::outln!("= {label}");
            continue;
        }
        differ += 1;
        crate::outln!("≠ {label}");
        for line in diff(&old, &new) {
            crate::outln!("    {line}");
        }
    }
    crate::outln!("{} calls replayed: {same} the same, {differ} differ, {skipped} not replayed", same + differ);
    if same + differ == 0 {
        return Err(Unplayable(format!("{}: none of its {skipped} logged calls could be replayed", path.display())));
    }
    Ok(differ == 0)
}

/// A RequestId of its own for each logged one, the same for each of its
/// calls (a `/run` and its `/continue`), with `--fresh-ids`: a server that
/// saw the logged one within its cache's TTL (the one that wrote the log,
/// or a new build sharing its Redis) would answer from its cache, the
/// logged answer byte for byte, whatever the build answers now. Not by
/// default: a scenario may answer with values made from the RequestId (the
/// assistant's session ids), which then differ.
struct FreshIds {
    /// Tells this run's ids from another's.
    run: String,
    ids: HashMap<String, String>,
}

impl FreshIds {
    fn new() -> FreshIds {
        let now = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap_or_default();
        let run = format!("{:08x}", (now.as_nanos() as u32) ^ std::process::id().rotate_left(16));
        FreshIds { run, ids: HashMap::new() }
    }

    /// The id the call logged as `logged` is sent with: empty for none
    /// logged, else the logged id and a mark of this run, within the
    /// server's bound (a long one is named by its place instead).
    fn of(&mut self, logged: &str) -> String {
        if logged.is_empty() {
            return String::new();
        }
        let (run, count) = (&self.run, self.ids.len());
        let id = self.ids.entry(logged.to_owned()).or_insert_with(|| {
            let marked = format!("{logged}-replay-{run}");
            if marked.len() <= MAX_REQUEST_ID { marked } else { format!("replay-{run}-{count}") }
        });
        id.clone()
    }
}

/// The logged request of `call`, sent with the RequestId `id` (empty: the logged one).
fn request_of(call: &Logged, id: &str) -> Result<Request, Unplayable> {
    let bad = |e: codec::CodecError| {
        Unplayable(format!("{} {}: the logged request: {e}", call.request_id, call.handler.as_str()))
    };
    let body = call.request.as_bytes();
    let with_id = |base: &mut Option<TScenarioBaseRequest>| {
        if let Some(base) = base.as_mut().filter(|_| !id.is_empty()) {
            base.request_id = id.to_owned();
        }
    };
    let apply = || {
        let mut request = codec::decode::<TScenarioApplyRequest>(body, Format::Text).map_err(bad)?;
        with_id(&mut request.base_request);
        Ok(request)
    };
    Ok(match call.handler {
        Handler::Run => {
            let mut request = codec::decode::<TScenarioRunRequest>(body, Format::Text).map_err(bad)?;
            with_id(&mut request.base_request);
            Request::Run(request)
        }
        Handler::Continue => Request::Continue(apply()?),
        Handler::Commit => Request::Commit(apply()?),
        Handler::Apply => Request::Apply(apply()?),
    })
}

/// The live answer as the server's debug log writes one: personal data and
/// signed addresses' signatures redacted. Compared with a logged answer as
/// such (a `ShowStreamDirective` differed every time), and printed with no
/// signature in it.
fn answer_text(response: &Response) -> String {
    match response {
        Response::Run(answer) => logged_text(answer),
        Response::Continue(answer) => logged_text(answer),
        Response::Commit(answer) => logged_text(answer),
        Response::Apply(answer) => logged_text(answer),
    }
}

fn logged_text(message: &impl ReflectMessage) -> String {
    redacted_text(message).unwrap_or_else(|e| format!("<{e}>"))
}

/// The log at `path`, refused past [`MAX_LOG_BYTES`]: a log cut there
/// would lose its last calls, or end inside a character.
fn read_log(path: &Path) -> Result<String, Unplayable> {
    let failed = |e: &dyn std::fmt::Display| Unplayable(format!("{}: {e}", path.display()));
    let read = read_file_at_most(path, MAX_LOG_BYTES);
    let Some(bytes) = read.map_err(|e| failed(&e))? else {
        let most = MAX_LOG_BYTES >> 20;
        return Err(failed(&format!("larger than {most} MiB; replay a part of it (e.g. `tail -n 100000`)")));
    };
    String::from_utf8(bytes).map_err(|e| failed(&format!("not UTF-8: {e}")))
}

/// One entry of the log: a line starting with a timestamp, and the lines
/// after it up to the next such line, kept up to [`MAX_ENTRY_BYTES`].
struct Entry<'a> {
    head: &'a str,
    body: String,
    /// Lines past the bound were left out: the body is only a start.
    cut: bool,
}

/// The log's entries.
fn entries(log: &str) -> impl Iterator<Item = Entry<'_>> {
    let mut lines = log.lines().peekable();
    std::iter::from_fn(move || {
        let head = loop {
            let line = lines.next()?;
            if starts_with_timestamp(line) {
                break line;
            }
        };
        let (mut body, mut cut) = (String::new(), false);
        while let Some(line) = lines.next_if(|line| !starts_with_timestamp(line)) {
            // Once a line is left out, so are the ones after it: a body
            // missing its middle could still read as a request.
            cut |= body.len() + line.len() >= MAX_ENTRY_BYTES;
            if !cut {
                body.push_str(line);
                body.push('\n');
            }
        }
        // The server's log cuts a body of more than 64 KiB itself.
        cut |= capped_by_the_log(&body);
        Some(Entry { head, body, cut })
    })
}

/// Whether `body` ends as the server's log ends a message it cut at its
/// bound (`…(+N bytes)`): only its start was logged. A text-format body
/// never ends so: a string's text ends with its quote.
fn capped_by_the_log(body: &str) -> bool {
    let Some(rest) = body.trim_end().strip_suffix(" bytes)") else { return false };
    rest.rsplit_once("…(+").is_some_and(|(_, count)| !count.is_empty() && count.bytes().all(|b| b.is_ascii_digit()))
}

/// `2026-11-24T00:21:34...`
fn starts_with_timestamp(line: &str) -> bool {
    let bytes = line.as_bytes();
    bytes.len() > 19 && bytes[..4].iter().all(u8::is_ascii_digit) && bytes[4] == b'-' && bytes[10] == b'T'
}

/// The `RequestId` of a text-format request, read by the protocol's own
/// text parser (its escapes and octal bytes, as the server's printer
/// writes them).
fn request_id_of(body: &str) -> Option<String> {
    body.lines().find_map(|line| {
        let field = line.trim();
        field.strip_prefix("RequestId")?.trim_start().strip_prefix(':')?;
        Some(codec::decode::<TScenarioBaseRequest>(field.as_bytes(), Format::Text).ok()?.request_id)
    })
}

/// `key=value key="quoted value"` of a summary line, a quoted value's
/// escapes read as the log writes them (Rust's: `\"`, `\\`, `\u{…}`).
fn summary_fields(line: &str) -> HashMap<String, String> {
    let mut fields = HashMap::new();
    let mut rest = line.trim();
    while let Some((key, after)) = rest.split_once('=') {
        let (value, next) = match after.strip_prefix('"') {
            Some(quoted) => debug_unquoted(quoted),
            None => {
                let (value, next) = after.split_once(' ').unwrap_or((after, ""));
                (value.to_owned(), next)
            }
        };
        fields.insert(key.trim().to_owned(), value);
        rest = next.trim_start();
    }
    fields
}

/// The value of a quoted field whose opening quote is gone (Rust's escapes
/// read), and what follows its closing quote.
fn debug_unquoted(quoted: &str) -> (String, &str) {
    let mut value = String::new();
    let mut chars = quoted.char_indices();
    while let Some((at, c)) = chars.next() {
        match c {
            '"' => return (value, &quoted[at + 1..]),
            '\\' => match chars.next().map(|(_, escaped)| escaped) {
                Some('n') => value.push('\n'),
                Some('r') => value.push('\r'),
                Some('t') => value.push('\t'),
                Some('0') => value.push('\0'),
                Some('u') => {
                    // `\u{1f600}`
                    let hex: String = chars.by_ref().map(|(_, c)| c).skip(1).take_while(|&c| c != '}').collect();
                    value.extend(u32::from_str_radix(&hex, 16).ok().and_then(char::from_u32));
                }
                Some(other) => value.push(other),
                None => break,
            },
            c => value.push(c),
        }
    }
    (value, "")
}

/// The lines of a text-format message without the fields named in
/// `ignored` (a message field with its whole block).
fn normalized(text: &str, ignored: &[&str]) -> Vec<String> {
    let mut kept = Vec::new();
    let mut skipping: Option<usize> = None;
    for line in text.lines() {
        let indent = line.len() - line.trim_start().len();
        if let Some(depth) = skipping {
            if indent == depth && line.trim() == "}" {
                skipping = None;
            }
            continue;
        }
        let trimmed = line.trim();
        if trimmed.is_empty() {
            continue;
        }
        let name = trimmed.split([':', ' ']).next().unwrap_or("");
        if ignored.contains(&name) {
            if trimmed.ends_with('{') {
                skipping = Some(indent);
            }
            continue;
        }
        kept.push(line.trim_end().to_owned());
    }
    kept
}

/// The differing middle of two line lists, as `- old` and `+ new` lines.
fn diff(old: &[String], new: &[String]) -> Vec<String> {
    let prefix = old.iter().zip(new).take_while(|(a, b)| a == b).count();
    let suffix = old[prefix..].iter().rev().zip(new[prefix..].iter().rev()).take_while(|(a, b)| a == b).count();
    let removed = old[prefix..old.len() - suffix].iter().map(|line| format!("- {line}"));
    let added = new[prefix..new.len() - suffix].iter().map(|line| format!("+ {line}"));
    removed.chain(added).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    const LOG: &str = "2026-11-24T00:21:34.450000Z DEBUG megamind_scenario::access: request
BaseRequest {
  RequestId: \"r-1\"
}
Input {
  Text {
    Utterance: \"кафе\"
  }
}
2026-11-24T00:21:34.452590Z DEBUG megamind_scenario::access: answer
Version: \"1\"
ResponseBody {
  Layout {
    OutputSpeech: \"Вот.\"
  }
}
2026-11-24T00:21:34.452780Z  INFO megamind_scenario::access: transport=http scenario=demo handler=run request_id=r-1 outcome=ok latency_us=5234
2026-11-24T00:21:35.000000Z  INFO megamind_scenario::cli: something else
";

    #[test]
    fn requests_pair_with_their_answers_and_summaries() {
        let calls = parse_log(LOG);
        assert_eq!(calls.len(), 1);
        let call = &calls[0];
        assert_eq!((call.scenario.as_str(), call.handler, call.request_id.as_str()), ("demo", Handler::Run, "r-1"));
        assert!(call.request.contains("Utterance: \"кафе\""));
        assert!(call.answer.as_deref().unwrap().contains("OutputSpeech"));
        assert!(parse_log("no log at all\n").is_empty());
    }

    #[test]
    fn each_logged_request_id_is_sent_as_one_of_the_run_s_own() {
        let mut fresh = FreshIds::new();
        let id = fresh.of("r-1");
        assert!(id.starts_with("r-1-replay-"), "{id}");
        assert_eq!(fresh.of("r-1"), id, "a /run and its /continue keep one id");
        assert_ne!(fresh.of("r-2"), id);
        assert_ne!(FreshIds { run: "other".into(), ids: HashMap::new() }.of("r-1"), id, "another run's differ");
        assert_eq!(fresh.of(""), "", "none logged, none made");
        assert!(fresh.of(&"x".repeat(MAX_REQUEST_ID)).len() <= MAX_REQUEST_ID);

        let call = &parse_log(LOG)[0];
        let Request::Run(request) = request_of(call, &id).unwrap() else { panic!("a /run") };
        assert_eq!(request.base_request.unwrap().request_id, id);
        let Request::Run(request) = request_of(call, "").unwrap() else { panic!("a /run") };
        assert_eq!(request.base_request.unwrap().request_id, "r-1", "an id left as logged");
    }

    #[test]
    fn a_log_past_256_mib_is_refused_unread() {
        // The bound as docs/dialog.md states it, written out: a constant
        // raised by mistake fails here.
        const DOCUMENTED: u64 = 256 * 1024 * 1024;
        let dir = std::env::temp_dir().join(format!("replay-bound-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("debug.log");
        std::fs::write(&path, LOG).unwrap();
        assert!(read_log(&path).is_ok());
        // Sparse: no such file is written to disk, and none is read.
        std::fs::OpenOptions::new().write(true).open(&path).unwrap().set_len(DOCUMENTED + 1).unwrap();
        let error = read_log(&path).unwrap_err().0;
        assert!(error.ends_with("larger than 256 MiB; replay a part of it (e.g. `tail -n 100000`)"), "{error}");
        std::fs::remove_dir_all(&dir).unwrap();
    }

    /// Two calls at once: their answers logged before either summary. Each
    /// answer goes with its own call, by the `RequestId` its head names.
    #[test]
    fn answers_of_calls_at_once_go_with_their_own_call() {
        let request = |t: &str, id: &str| {
            format!(
                "2026-11-24T00:00:00.00000{t}Z DEBUG megamind_scenario::access: request\nBaseRequest {{\n  RequestId: \"{id}\"\n}}\n"
            )
        };
        let answer = |t: &str, id: &str, said: &str| {
            format!(
                "2026-11-24T00:00:00.00000{t}Z DEBUG megamind_scenario::access: answer request_id={id}\nOutputSpeech: \"{said}\"\n"
            )
        };
        let summary = |t: &str, id: &str| {
            format!(
                "2026-11-24T00:00:00.00000{t}Z  INFO megamind_scenario::access: transport=http scenario=demo \
                 handler=run request_id={id} outcome=ok latency_us=9\n"
            )
        };
        let log = [
            request("1", "a"),
            request("2", "b"),
            answer("3", "b", "Б"),
            answer("4", "a", "А"),
            summary("5", "a"),
            summary("6", "b"),
        ]
        .concat();
        let calls = parse_log(&log);
        let said: Vec<(&str, Option<&str>)> =
            calls.iter().map(|c| (c.request_id.as_str(), c.answer.as_deref())).collect();
        assert_eq!(said, [("a", Some("OutputSpeech: \"А\"\n")), ("b", Some("OutputSpeech: \"Б\"\n"))], "{log}");
    }

    #[test]
    fn entries_are_read_in_the_order_of_their_time() {
        // A call's summary written out before its request, as a log
        // writer's batches of two threads may.
        let (request, rest) = LOG.split_at(LOG.find("2026-11-24T00:21:34.452590Z").unwrap());
        let shuffled = format!("{rest}{request}");
        let calls = parse_log(&shuffled);
        assert_eq!(calls.len(), 1, "{shuffled}");
        assert!(calls[0].request.contains("Utterance: \"кафе\""));
        assert!(calls[0].answer.as_deref().unwrap().contains("OutputSpeech"));
    }

    #[test]
    fn volatile_fields_and_their_blocks_are_not_compared() {
        let text = "Version: \"2\"\nState {\n  x: 1\n}\nResponseBody {\n  Layout {\n  }\n}\n";
        assert_eq!(normalized(text, &["Version", "State"]), ["ResponseBody {", "  Layout {", "  }", "}"]);
        let old: Vec<String> = ["a", "b", "c"].map(String::from).to_vec();
        let new: Vec<String> = ["a", "B", "c"].map(String::from).to_vec();
        assert_eq!(diff(&old, &new), ["- b", "+ B"]);
    }

    #[test]
    fn a_logged_request_past_the_entry_bound_is_cut_to_it() {
        // The bound the constant documents, written out rather than read
        // from it: a constant raised by mistake fails here.
        const DOCUMENTED_BYTES: usize = 4 << 20;
        // Lines of 1 KiB up to 5 MiB: the bound cuts the body, not one line.
        let line = format!("# {}\n", "x".repeat(1021));
        let padding = line.repeat((5 << 20) / line.len());
        let log = LOG.replacen("Input {\n", &format!("{padding}Input {{\n"), 1);
        let calls = parse_log(&log);
        assert_eq!(calls.len(), 1, "the call is still paired by its RequestId, read before the cut");
        let request = &calls[0].request;
        assert!(request.len() <= DOCUMENTED_BYTES, "kept {} bytes, more than the 4 MiB bound", request.len());
        assert!(request.len() > DOCUMENTED_BYTES - line.len(), "cut at the bound, not before: {}", request.len());
        // Marked, and only its start kept: no line after the cut joins it.
        assert!(calls[0].cut, "a cut request is not replayed");
        assert!(!request.contains("Input {"), "the lines after the cut were kept");
        assert!(calls[0].answer.as_deref().unwrap().contains("OutputSpeech"), "the next entry is whole");
        assert!(!parse_log(LOG)[0].cut, "a call within the bound is replayed");
    }

    #[test]
    fn a_live_answer_is_redacted_as_the_log_is() {
        use megamind_core::proto::n_alice::n_scenarios::{
            TDirective, TLayout, TScenarioResponseBody, TScenarioRunResponse, TShowStreamDirective, t_directive,
            t_scenario_run_response,
        };
        let url = "http://h/llm/stream/r-1?exp=1&sig=S3CRET".to_owned();
        let show = TShowStreamDirective { name: "show_llm_stream".into(), url };
        let directive = TDirective { directive: Some(t_directive::Directive::ShowStreamDirective(show)) };
        let layout = TLayout { directives: vec![directive], ..Default::default() };
        let body = TScenarioResponseBody { layout: Some(layout), ..Default::default() };
        let response = t_scenario_run_response::Response::ResponseBody(body);
        let text = answer_text(&Response::Run(TScenarioRunResponse { response: Some(response), ..Default::default() }));
        assert!(text.contains("sig=<hidden>") && !text.contains("S3CRET"), "{text}");
    }

    #[test]
    fn a_request_the_server_s_log_cut_is_not_replayed() {
        // As the log writes a body past its 64 KiB: its start, then how much was left out.
        let log = LOG.replacen("    Utterance: \"кафе\"\n  }\n}\n", "    Utterance: \"кафе…(+6000 bytes)\n", 1);
        assert!(parse_log(&log)[0].cut, "{log}");
        // A string that says as much, quoted, is whole.
        let quoted = LOG.replacen("кафе", "кафе…(+6000 bytes)", 1);
        assert!(!parse_log(&quoted)[0].cut, "{quoted}");
    }

    #[test]
    fn calls_the_server_could_not_print_are_counted_and_not_replayed() {
        let answer = LOG.replacen(
            "answer\nVersion: \"1\"\nResponseBody {\n  Layout {\n    OutputSpeech: \"Вот.\"\n  }\n}\n",
            "answer request_id=r-1 not printable: NAlice.TScenarioRunResponse holds more than 16384 values\n",
            1,
        );
        let calls = parse_log(&answer);
        assert_eq!(calls.len(), 1, "{answer}");
        assert_eq!(calls[0].answer, None, "no answer logged, not an empty one");
        let request = LOG.replacen(
            "request\nBaseRequest {\n  RequestId: \"r-1\"\n}\nInput {\n  Text {\n    Utterance: \"кафе\"\n  }\n}\n",
            "request not printable: NAlice.TScenarioRunRequest holds more than 16384 values\n",
            1,
        );
        let calls = parse_log(&request);
        assert_eq!(calls.len(), 1, "the call is still counted: {request}");
        assert_eq!((calls[0].request.as_str(), calls[0].request_id.as_str()), ("", "r-1"));
    }

    #[test]
    fn summary_fields_read_quoted_values() {
        let fields = summary_fields("transport=http scenario=demo handler=run request_id=\"\" outcome=ok");
        assert_eq!(fields["request_id"], "");
        assert_eq!(fields["outcome"], "ok");
    }

    #[test]
    fn a_request_id_written_with_escapes_pairs_its_request_with_its_summary() {
        let id = "r \"1\" \\ x\u{2028}я";
        // As the server's printer and its log line write it.
        let printed = megamind_core::codec::redact::redacted_text(&TScenarioRunRequest {
            base_request: Some(TScenarioBaseRequest { request_id: id.into(), ..Default::default() }),
            ..Default::default()
        })
        .unwrap();
        let field = megamind_core::rules::logging::field("request_id", id);
        let summary = format!("transport=http scenario=demo handler=run{field} outcome=ok");
        assert_eq!(request_id_of(&printed).as_deref(), Some(id), "{printed}");
        let fields = summary_fields(&summary);
        assert_eq!((fields["request_id"].as_str(), fields["outcome"].as_str()), (id, "ok"), "{summary}");
    }
}
