//! `megamind-scenario validate-jsonseq` on transcripts from a file, standard
//! input and a URL: a reference stream is valid, a broken one is reported
//! with the event's index and the rule, an unreadable source exits 2.

use std::{
    io::{Read, Write},
    process::Output,
};

/// A reference stream: one answer event of each kind, in the contract's
/// order (docs/jsonseq.md#order), with the ids every event carries.
fn example_transcript() -> String {
    let events = [
        ("serp_summary", r#""text":"用户要一份三分化训练计划，包含频率与动作选择。""#),
        ("thinking_start", ""),
        ("phase_start", r#""id":1,"title":"需求拆解""#),
        ("phase_delta", r#""id":1,"text":"目标=增肌；器械=健身房；每周3-4练。""#),
        ("thinking_end", ""),
        ("final_delta", r##""text":"# 三分化训练方案\n- Day1 推...\n""##),
        ("serp_queries", r#""queries":["三分化训练怎么安排","三分化训练动作选择","三分化训练频率与恢复"]"#),
        ("final_end", ""),
    ];
    events
        .iter()
        .enumerate()
        .map(|(i, (name, fields))| {
            let comma = if fields.is_empty() { "" } else { "," };
            format!(
                "id: {i}\nevent: {name}\ndata: {{\"message_id\":\"m-1\",\"request_id\":\"r-1\"{comma}{fields}}}\n\n"
            )
        })
        .collect()
}

fn validate(args: &[&str], stdin: &str) -> Output {
    let args: Vec<&str> = std::iter::once("validate-jsonseq").chain(args.iter().copied()).collect();
    crate::helpers::run_binary(&args, stdin.as_bytes())
}

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

#[test]
fn the_contract_example_is_valid_from_a_file_and_from_standard_input() {
    let path = std::env::temp_dir().join(format!("jsonseq-{}.sse", std::process::id()));
    std::fs::write(&path, example_transcript()).unwrap();
    let out = validate(&[path.to_str().unwrap()], "");
    assert_eq!(out.status.code(), Some(0), "{}{}", text(&out.stdout), text(&out.stderr));
    assert!(text(&out.stdout).contains("valid: 8 events"));
    let out = validate(&[], &example_transcript());
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stdout));
}

#[test]
fn violations_name_the_events_index_and_the_rule() {
    let broken = example_transcript().replacen("event: thinking_end", "event: final_delta", 1);
    let out = validate(&["-"], &broken);
    let stdout = text(&out.stdout);
    assert_eq!(out.status.code(), Some(1), "{stdout}");
    assert!(stdout.contains("#4 final_delta: order:"), "{stdout}");
    assert!(stdout.contains("violations in 8 events"), "{stdout}");
}

/// Read as a browser reads it: lone CRs end lines and a byte order mark is
/// skipped; an event the transcript ends inside of is dropped, and said so.
#[test]
fn a_transcript_is_read_as_a_browser_reads_it() {
    let carriage_returns = format!("\u{feff}{}", example_transcript().replace('\n', "\r"));
    let out = validate(&["-"], &carriage_returns);
    assert_eq!(out.status.code(), Some(0), "{}{}", text(&out.stdout), text(&out.stderr));
    assert!(text(&out.stdout).contains("valid: 8 events"), "{}", text(&out.stdout));

    let example = example_transcript();
    let cut = example.strip_suffix("\n").unwrap();
    let out = validate(&["-"], cut);
    let stdout = text(&out.stdout);
    assert_eq!(out.status.code(), Some(1), "{stdout}");
    assert!(stdout.contains("#7 <end>: unterminated:"), "{stdout}");
    assert!(stdout.contains("#7 <end>: incomplete:"), "final_end is not read: {stdout}");
}

#[test]
fn a_stream_is_read_from_a_url_and_an_unreadable_source_exits_2() {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let url = format!("http://{}/llm/stream/r-1", listener.local_addr().unwrap());
    let body = example_transcript();
    let server = std::thread::spawn(move || {
        let (mut stream, _) = listener.accept().unwrap();
        let mut request = [0u8; 4096];
        let _ = stream.read(&mut request);
        let head = "HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\nconnection: close\r\n\r\n";
        let _ = stream.write_all(head.as_bytes());
        // Event by event, as a live stream arrives.
        for event in body.split_inclusive("\n\n") {
            let _ = stream.write_all(event.as_bytes());
            let _ = stream.flush();
        }
    });
    let out = validate(&[&url], "");
    server.join().unwrap();
    assert_eq!(out.status.code(), Some(0), "{}{}", text(&out.stdout), text(&out.stderr));
    assert!(text(&out.stdout).contains("valid: 8 events"));

    let out = validate(&["/nonexistent/transcript.sse"], "");
    assert_eq!(out.status.code(), Some(2));
    assert!(text(&out.stderr).contains("/nonexistent/transcript.sse"), "{}", text(&out.stderr));
}

#[test]
fn a_url_s_password_and_signature_are_in_no_message() {
    let gone = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap();
    let unreachable = format!("http://user:pw-S3CRET@{gone}/llm/stream/r-1");
    // A signed stream address, as ShowStreamDirective gives it.
    let signed = format!("http://{gone}/llm/stream/r-1?exp=1&sig=S3CRET");
    for source in [unreachable.as_str(), "https://user:pw-S3CRET@bad host/llm/stream/r-1", signed.as_str()] {
        let out = validate(&[source], "");
        let stderr = text(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{source}: {stderr}");
        assert!(!stderr.contains("S3CRET") && stderr.contains("<hidden>"), "{stderr}");
    }
}
