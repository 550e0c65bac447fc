//! JUnit XML of a script run, the report CI servers read: a test suite per
//! script file, a test case per dialog, a failure per dialog that failed
//! with every expectation it missed.

use std::fmt::Write;

use super::DialogResult;

/// The report of `scripts` (file, its dialogs' results).
pub fn report(scripts: &[(String, Vec<DialogResult>)]) -> String {
    let count = |f: fn(&DialogResult) -> bool| scripts.iter().flat_map(|(_, r)| r).filter(|r| f(r)).count();
    let (tests, failures) = (count(|_| true), count(|r| !r.failures.is_empty()));
    let mut xml = String::from("<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n");
    let _ = writeln!(xml, "<testsuites name=\"dialogs\" tests=\"{tests}\" failures=\"{failures}\">");
    for (file, results) in scripts {
        let failed = results.iter().filter(|r| !r.failures.is_empty()).count();
        let time: f64 = results.iter().map(|r| r.took.as_secs_f64()).sum();
        let _ = writeln!(
            xml,
            "  <testsuite name=\"{}\" tests=\"{}\" failures=\"{failed}\" time=\"{time:.3}\">",
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
            if result.failures.is_empty() {
                xml.push_str("/>\n");
                continue;
            }
            let (turn, first) = &result.failures[0];
            let message = format!("{turn}: {}: expected {}, got {:?}", first.path, first.expected, first.got);
            let _ = writeln!(xml, ">\n      <failure message=\"{}\">", escape(&message));
            for (turn, failure) in &result.failures {
                let line = format!(
                    "{turn}: {}\n- expected {}\n+ got      {:?}\n",
                    failure.path, failure.expected, failure.got
                );
                xml.push_str(&escape(&line));
            }
            xml.push_str("      </failure>\n    </testcase>\n");
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
            DialogResult { name: "ok".into(), took: Duration::from_millis(5), failures: vec![] },
            DialogResult {
                name: "bad \"one\"".into(),
                took: Duration::ZERO,
                failures: vec![("turn 1".into(), failure)],
            },
        ];
        let xml = report(&[("a.yaml".into(), results)]);
        assert!(xml.contains(r#"<testsuites name="dialogs" tests="2" failures="1">"#), "{xml}");
        assert!(xml.contains(r#"name="bad &quot;one&quot;""#), "{xml}");
        assert!(xml.contains("a&lt;b") && xml.contains("x &amp; "), "{xml}");
        assert!(!xml.contains('\u{1}'), "no character XML cannot hold: {xml}");
        assert_eq!(escape("a\u{1}b"), "a\u{fffd}b");
        assert_eq!(xml.matches("<testcase").count(), 2);
        assert_eq!(xml.matches("<failure").count(), 1);
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
