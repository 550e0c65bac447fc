//! JUnit XML of a script run, the report CI servers read: a test suite per
//! script file, a test case per dialog, a failure per dialog that failed
//! with every expectation it missed, an error for the dialog a run stopped
//! in (the server down, or answering garbage).

use std::fmt::Write;

use super::DialogResult;

/// The report of `scripts` (file, its dialogs' results).
pub fn report(scripts: &[(String, Vec<DialogResult>)]) -> String {
    let count = |f: fn(&DialogResult) -> bool| scripts.iter().flat_map(|(_, r)| r).filter(|r| f(r)).count();
    // A dialog that could not be played counts as an error, not a failure,
    // as JUnit tells a test that broke from one that failed its assertion.
    let failed = |r: &DialogResult| r.error.is_none() && !r.failures.is_empty();
    let broke = |r: &DialogResult| r.error.is_some();
    let (tests, failures, errors) = (count(|_| true), count(failed), count(broke));
    let mut xml = String::from("<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n");
    let _ =
        writeln!(xml, "<testsuites name=\"dialogs\" tests=\"{tests}\" failures=\"{failures}\" errors=\"{errors}\">");
    for (file, results) in scripts {
        let (failures, errors) =
            (results.iter().filter(|r| failed(r)).count(), results.iter().filter(|r| broke(r)).count());
        let time: f64 = results.iter().map(|r| r.took.as_secs_f64()).sum();
        let _ = writeln!(
            xml,
            "  <testsuite name=\"{}\" tests=\"{}\" failures=\"{failures}\" errors=\"{errors}\" time=\"{time:.3}\">",
            escape(file),
            results.len()
        );
        for result in results {
            let _ = write!(
                xml,
                "    <testcase classname=\"{}\" name=\"{}\" time=\"{:.3}\"",
                escape(file),
                escape(&result.name),
                result.took.as_secs_f64()
            );
            // The expectations missed before the run stopped stay in the
            // error's text.
            let (element, message) = match (&result.error, result.failures.first()) {
                (Some((turn, why)), _) => ("error", format!("{turn}: could not be played: {why}")),
                (None, Some((turn, first))) => {
                    ("failure", format!("{turn}: {}: expected {}, got {:?}", first.path, first.expected, first.got))
                }
                (None, None) => {
                    xml.push_str("/>\n");
                    continue;
                }
            };
            let _ = writeln!(xml, ">\n      <{element} message=\"{}\">", escape(&message));
            for (turn, failure) in &result.failures {
                let line = format!(
                    "{turn}: {}\n- expected {}\n+ got      {:?}\n",
                    failure.path, failure.expected, failure.got
                );
                xml.push_str(&escape(&line));
            }
            let _ = writeln!(xml, "      </{element}>\n    </testcase>");
        }
        xml.push_str("  </testsuite>\n");
    }
    xml.push_str("</testsuites>\n");
    xml
}

/// Text as XML character data or an attribute value; characters XML 1.0
/// cannot hold at all become U+FFFD.
fn escape(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\n' | '\t' | '\r' => out.push(c),
            c if (c as u32) < 0x20 || matches!(c, '\u{fffe}' | '\u{ffff}') => out.push('\u{fffd}'),
            c => out.push(c),
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;
    use crate::dialog::expect::Failure;

    #[test]
    fn failures_are_escaped_and_counted() {
        let failure = Failure { path: "speech".into(), expected: "\"a<b\"".into(), got: "x & \u{1}y".into() };
        let results = vec![
            DialogResult { name: "ok".into(), took: Duration::from_millis(5), failures: vec![], error: None },
            DialogResult {
                name: "bad \"one\"".into(),
                took: Duration::ZERO,
                failures: vec![("turn 1".into(), failure)],
                error: None,
            },
        ];
        let xml = report(&[("a.yaml".into(), results)]);
        assert!(xml.contains(r#"<testsuites name="dialogs" tests="2" failures="1" errors="0">"#), "{xml}");
        assert!(xml.contains(r#"name="bad &quot;one&quot;""#), "{xml}");
        assert!(xml.contains("a&lt;b") && xml.contains("x &amp; "), "{xml}");
        assert!(!xml.contains('\u{1}'), "no character XML cannot hold: {xml}");
        assert_eq!(escape("a\u{1}b"), "a\u{fffd}b");
        assert_eq!(xml.matches("<testcase").count(), 2);
        assert_eq!(xml.matches("<failure").count(), 1);
    }

    #[test]
    fn a_dialog_that_could_not_be_played_is_an_error_not_a_failure() {
        let failure = Failure { path: "speech".into(), expected: "\"a\"".into(), got: "\"b\"".into() };
        let results = vec![DialogResult {
            name: "stopped".into(),
            took: Duration::ZERO,
            failures: vec![("turn 1".into(), failure)],
            error: Some(("turn 2".into(), "/run: no answer within 30s".into())),
        }];
        let xml = report(&[("a.yaml".into(), results)]);
        assert!(xml.contains(r#"tests="1" failures="0" errors="1">"#), "{xml}");
        assert!(xml.contains(r#"<error message="turn 2: could not be played: /run: no answer within 30s">"#), "{xml}");
        let kept = xml.split("<error ").nth(1).and_then(|rest| rest.split("</error>").next()).unwrap_or_default();
        assert!(kept.contains("turn 1: speech\n- expected"), "the missed expectation is kept: {xml}");
        assert_eq!(xml.matches("<failure").count(), 0, "{xml}");
    }

    #[test]
    fn the_noncharacters_xml_cannot_hold_become_the_replacement_character() {
        // XML 1.0's Char stops at U+FFFD: a parser refuses the whole report
        // over one U+FFFE or U+FFFF in a speech.
        assert_eq!(escape("a\u{fffe}b\u{ffff}c"), "a\u{fffd}b\u{fffd}c");
        // The planes above are Chars again, and U+FFFD itself stays.
        assert_eq!(escape("\u{10000}\u{fffd}\u{fdd0}"), "\u{10000}\u{fffd}\u{fdd0}");
    }
}
