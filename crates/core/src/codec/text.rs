//! Our Protobuf text-format printer: readable and deterministic.
//!
//! prost-reflect's printer escapes every non-ASCII byte and writes maps in
//! hash order; logs of Russian utterances need neither. This one keeps UTF-8,
//! writes fields in field-number order and map entries sorted by key, with the
//! layout of protobuf's `Utf8DebugString`, and expands an `Any` whose type is
//! in the pool, which holds exactly `proto/` and its imports, so that the
//! output parses back with protobuf's own parser given only `proto/`. Unknown
//! fields are not printed: they cannot be parsed back.
//!
//! Printing stops at the nesting limit ([`depth::MAX_DEPTH`] levels, `Any`
//! payloads included): each level costs a stack frame, and the output of a
//! bounded depth stays linear in the input.

use std::fmt::Write;

use prost_reflect::{DynamicMessage, FieldDescriptor, Kind, MapKey, ReflectMessage, Value};

use super::depth::{self, MAX_DEPTH, TooDeep};

const INDENT: &str = "  ";

/// Prints a message as multi-line text format, or refuses one nested deeper
/// than the limit.
pub fn print(message: &DynamicMessage) -> Result<String, TooDeep> {
    let mut out = String::with_capacity(256);
    print_fields(&mut out, message, 0)?;
    Ok(out)
}

fn print_fields(out: &mut String, message: &DynamicMessage, depth: usize) -> Result<(), TooDeep> {
    if depth >= MAX_DEPTH {
        return Err(TooDeep);
    }
    if message.descriptor().full_name() == depth::ANY && has_readable_type_url(message) {
        // Printed a level below `message`, which sits at `depth + 1` counted from 1.
        if let Some(inner) = depth::expand_any(message, depth + 2)? {
            return print_expanded_any(out, message, &inner, depth);
        }
    }
    let mut fields: Vec<(FieldDescriptor, &Value)> = message.fields().collect();
    fields.sort_by_key(|(field, _)| field.number());
    for (field, value) in fields {
        let name = field_name(&field);
        match value {
            Value::List(items) => {
                let kind = field.kind();
                for item in items {
                    print_field(out, &name, item, &kind, depth)?;
                }
            }
            Value::Map(entries) => {
                let mut entries: Vec<(&MapKey, &Value)> = entries.iter().collect();
                entries.sort_by(|a, b| a.0.cmp(b.0));
                for (key, value) in entries {
                    indent(out, depth);
                    out.push_str(&name);
                    out.push_str(" {\n");
                    indent(out, depth + 1);
                    out.push_str("key: ");
                    write_scalar(out, &Value::from(key.clone()));
                    out.push('\n');
                    let value_kind = match field.kind() {
                        Kind::Message(entry) => entry.map_entry_value_field().kind(),
                        kind => kind,
                    };
                    print_field(out, "value", value, &value_kind, depth + 1)?;
                    indent(out, depth);
                    out.push_str("}\n");
                }
            }
            value => print_field(out, &name, value, &field.kind(), depth)?,
        }
    }
    Ok(())
}

/// `[type.googleapis.com/T] { ... }` for an `Any` whose payload decoded.
fn print_expanded_any(
    out: &mut String,
    any: &DynamicMessage,
    inner: &DynamicMessage,
    depth: usize,
) -> Result<(), TooDeep> {
    let type_url = any.get_field_by_number(1);
    let type_url = match type_url.as_deref() {
        Some(Value::String(url)) => url.as_str(),
        _ => "",
    };
    indent(out, depth);
    out.push('[');
    out.push_str(type_url);
    out.push_str("] {\n");
    print_fields(out, inner, depth + 1)?;
    indent(out, depth);
    out.push_str("}\n");
    Ok(())
}

/// Whether `[type_url]` parses back to the same URL: text format reads
/// only `domain/full.Name`, each side dotted identifiers. Any other URL (a
/// space, a second `/`) is printed as the plain `type_url` field instead.
fn has_readable_type_url(any: &DynamicMessage) -> bool {
    let dotted = |part: &str| {
        part.split('.').all(|ident| {
            let mut chars = ident.chars();
            chars.next().is_some_and(|c| c.is_ascii_alphabetic() || c == '_')
                && chars.all(|c| c.is_ascii_alphanumeric() || c == '_')
        })
    };
    match any.get_field_by_number(1).as_deref() {
        Some(Value::String(url)) => url.split_once('/').is_some_and(|(domain, name)| dotted(domain) && dotted(name)),
        _ => false,
    }
}

fn print_field(out: &mut String, name: &str, value: &Value, kind: &Kind, depth: usize) -> Result<(), TooDeep> {
    indent(out, depth);
    out.push_str(name);
    if let Value::Message(message) = value {
        out.push_str(" {\n");
        print_fields(out, message, depth + 1)?;
        indent(out, depth);
        out.push_str("}\n");
        return Ok(());
    }
    out.push_str(": ");
    match (value, kind) {
        // Enum values print by name when the schema knows the number.
        (Value::EnumNumber(n), Kind::Enum(enumeration)) => match enumeration.get_value(*n) {
            Some(known) => out.push_str(known.name()),
            None => write_scalar(out, value),
        },
        _ => write_scalar(out, value),
    }
    out.push('\n');
    Ok(())
}

fn field_name(field: &FieldDescriptor) -> String {
    // Groups print under their type name, as protobuf's own printer does.
    if field.is_group()
        && let Kind::Message(message) = field.kind()
    {
        return message.name().to_owned();
    }
    field.name().to_owned()
}

fn write_scalar(out: &mut String, value: &Value) {
    match value {
        Value::Bool(v) => out.push_str(if *v { "true" } else { "false" }),
        Value::I32(v) => write!(out, "{v}").unwrap_or(()),
        Value::I64(v) => write!(out, "{v}").unwrap_or(()),
        Value::U32(v) => write!(out, "{v}").unwrap_or(()),
        Value::U64(v) => write!(out, "{v}").unwrap_or(()),
        Value::F32(v) => write_float(out, f64::from(*v), v.to_string(), format!("{v:e}")),
        Value::F64(v) => write_float(out, *v, v.to_string(), format!("{v:e}")),
        Value::String(s) => write_quoted(out, s.as_bytes(), true),
        Value::Bytes(b) => write_quoted(out, b, false),
        Value::EnumNumber(n) => write!(out, "{n}").unwrap_or(()),
        // Lists, maps and messages are handled by the callers.
        Value::List(_) | Value::Map(_) | Value::Message(_) => {}
    }
}

/// Shortest round-trip digits; exponent form only for very large or small
/// magnitudes, where plain digits would be unreadable.
fn write_float(out: &mut String, v: f64, plain: String, exponent: String) {
    if v.is_nan() {
        out.push_str("nan");
    } else if v.is_infinite() {
        out.push_str(if v > 0.0 { "inf" } else { "-inf" });
    } else if v == 0.0 || (1e-5..1e16).contains(&v.abs()) {
        out.push_str(&plain);
    } else {
        out.push_str(&exponent);
    }
}

/// A quoted literal. Strings keep their UTF-8 as is; bytes escape everything
/// outside printable ASCII as octal. Control characters are always escaped,
/// and so are the characters a log viewer or a terminal takes for the end
/// of a line (U+0085, U+2028, U+2029) or that reorder the text around them
/// (bidirectional marks), as their UTF-8 bytes in octal: a client's string
/// in a debug log could otherwise forge a line of its own.
fn write_quoted(out: &mut String, bytes: &[u8], utf8: bool) {
    out.push('"');
    if utf8 && let Ok(s) = std::str::from_utf8(bytes) {
        for c in s.chars() {
            match c {
                '"' => out.push_str("\\\""),
                '\\' => out.push_str("\\\\"),
                '\'' => out.push_str("\\'"),
                '\n' => out.push_str("\\n"),
                '\r' => out.push_str("\\r"),
                '\t' => out.push_str("\\t"),
                c if (c as u32) < 0x20 || c as u32 == 0x7f => write!(out, "\\{:03o}", c as u32).unwrap_or(()),
                c if crate::text::misleads_a_line(c) => {
                    for byte in c.encode_utf8(&mut [0; 4]).bytes() {
                        write!(out, "\\{byte:03o}").unwrap_or(());
                    }
                }
                c => out.push(c),
            }
        }
        out.push('"');
        return;
    }
    for &b in bytes {
        match b {
            b'"' => out.push_str("\\\""),
            b'\\' => out.push_str("\\\\"),
            b'\'' => out.push_str("\\'"),
            b'\n' => out.push_str("\\n"),
            b'\r' => out.push_str("\\r"),
            b'\t' => out.push_str("\\t"),
            0x20..=0x7e => out.push(b as char),
            b => write!(out, "\\{b:03o}").unwrap_or(()),
        }
    }
    out.push('"');
}

fn indent(out: &mut String, depth: usize) {
    for _ in 0..depth {
        out.push_str(INDENT);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::proto::n_alice::n_scenarios::{TCard, TLayout, TScenarioResponseBody, t_card};

    fn dynamic<T: ReflectMessage>(message: &T) -> DynamicMessage {
        message.transcode_to_dynamic()
    }

    #[test]
    fn keeps_cyrillic_readable_and_escapes_controls() {
        let layout = TLayout {
            cards: vec![TCard { card: Some(t_card::Card::Text("Привет, \"мир\"\n\u{1}".into())) }],
            output_speech: "Привет".into(),
            ..Default::default()
        };
        let text = print(&dynamic(&layout)).unwrap();
        assert_eq!(text, "Cards {\n  Text: \"Привет, \\\"мир\\\"\\n\\001\"\n}\nOutputSpeech: \"Привет\"\n");
        let back = DynamicMessage::parse_text_format(layout.descriptor(), &text).unwrap();
        assert_eq!(back.transcode_to::<TLayout>().unwrap(), layout);
    }

    #[test]
    fn characters_that_end_or_reorder_a_line_are_escaped_and_read_back() {
        let forged = "x\u{2028} 2026-11-23T11:45:57Z  INFO access: outcome=ok\u{85}\u{2029}\u{202e}txt\u{200f}";
        let layout = TLayout { output_speech: format!("Привет {forged}"), ..Default::default() };
        let text = print(&dynamic(&layout)).unwrap();
        assert!(!text.contains(['\u{2028}', '\u{85}', '\u{2029}', '\u{202e}', '\u{200f}']), "{text:?}");
        assert!(text.starts_with("OutputSpeech: \"Привет x\\342\\200\\250 2026"), "{text}");
        let back = DynamicMessage::parse_text_format(layout.descriptor(), &text).unwrap();
        assert_eq!(back.transcode_to::<TLayout>().unwrap(), layout);
    }

    #[test]
    fn maps_print_sorted_by_key() {
        let mut body = TScenarioResponseBody::default();
        for key in ["zeta", "alpha", "mid"] {
            body.frame_actions.insert(key.into(), Default::default());
        }
        let text = print(&dynamic(&body)).unwrap();
        let keys: Vec<&str> = text.lines().filter(|l| l.trim_start().starts_with("key:")).collect();
        assert_eq!(keys, ["  key: \"alpha\"", "  key: \"mid\"", "  key: \"zeta\""]);
    }

    #[test]
    fn floats_round_trip() {
        let mut out = String::new();
        for v in [0.0, 1.0, 55.78805541992188, 1e300, -2.5e-9, f64::INFINITY] {
            out.clear();
            write_float(&mut out, v, v.to_string(), format!("{v:e}"));
            let parsed: f64 = if out == "inf" { f64::INFINITY } else { out.parse().unwrap() };
            assert_eq!(parsed, v, "{out}");
        }
    }

    #[test]
    fn printing_stops_at_the_nesting_limit() {
        use crate::codec::depth::tests::nested_any_state;
        let shallow = print(&dynamic(&nested_any_state(30))).unwrap();
        assert_eq!(shallow.matches("[type.googleapis.com/NAlice.NScenarios.TScenarioBaseRequest]").count(), 30);
        assert_eq!(print(&dynamic(&nested_any_state(3_000))), Err(TooDeep));
    }

    #[test]
    fn any_of_a_type_outside_proto_prints_as_bytes() {
        // google.protobuf.Duration is not declared by proto/: the official
        // parser given proto/ alone could not read it expanded.
        let any =
            prost_types::Any { type_url: "type.googleapis.com/google.protobuf.Duration".into(), value: vec![8, 5] };
        let body = TScenarioResponseBody { state: Some(any), ..Default::default() };
        let text = print(&dynamic(&body)).unwrap();
        assert!(text.contains("type_url: \"type.googleapis.com/google.protobuf.Duration\""), "{text}");
        assert!(text.contains("value: \"\\010\\005\""), "{text}");
        let wrapped = prost_types::Any {
            type_url: "type.googleapis.com/google.protobuf.StringValue".into(),
            value: vec![10, 1, b'x'],
        };
        let body = TScenarioResponseBody { state: Some(wrapped), ..Default::default() };
        let text = print(&dynamic(&body)).unwrap();
        assert!(text.contains("[type.googleapis.com/google.protobuf.StringValue] {"), "declared by proto/: {text}");
    }

    #[test]
    fn any_whose_type_url_text_format_cannot_spell_prints_as_bytes() {
        use crate::proto::n_alice::n_scenarios::TScenarioApplyRequest;
        for type_url in [
            "type.googlea s.com/NAlice.NHollywood.TMusicArguments",
            "type.googleapis.com/x/NAlice.NHollywood.TMusicArguments",
            "type.googleapis.com/NAlice.NHollywood.TMusicArguments ",
            "/NAlice.NHollywood.TMusicArguments",
        ] {
            let any = prost_types::Any { type_url: type_url.into(), value: Vec::new() };
            let request = TScenarioApplyRequest { arguments: Some(any), ..Default::default() };
            let text = print(&dynamic(&request)).unwrap();
            assert!(text.contains("type_url: "), "{text}");
            let back = DynamicMessage::parse_text_format(request.descriptor(), &text).unwrap();
            assert_eq!(back.transcode_to::<TScenarioApplyRequest>().unwrap(), request, "{text}");
        }
    }

    #[test]
    fn bytes_escape_non_ascii_as_octal() {
        let mut out = String::new();
        write_quoted(&mut out, &[b'a', 0xff, b'"'], false);
        assert_eq!(out, "\"a\\377\\\"\"");
    }
}
