//! The nesting limit: no decoder, printer or redactor goes deeper than
//! [`MAX_DEPTH`] levels of messages, `Any` payloads included; and the size
//! limits of bodies in values ([`MAX_VALUES`], [`MAX_TEXT_VALUES`],
//! [`MAX_VALUE_LEVELS`]), counted before decoding.
//!
//! Parsers and printers recurse once per level, so a body nested a few
//! thousand levels deep would overflow a worker's stack. Text and JSON bodies
//! are scanned for their bracket depth before they are parsed (the scan keeps
//! no stack); binary bodies are bounded by prost's own recursion limit, which
//! is the same 100; `Any` payloads, which decoders leave as bytes, are
//! measured by [`check_message`] and [`check_any`] before anything expands them.

mod wire;

pub use wire::{SHORT_BINARY, check_binary, check_binary_as_text, check_nesting};

use bytes::Bytes;
use prost_reflect::{DescriptorPool, DynamicMessage, MessageDescriptor, ReflectMessage, Value};

/// Levels of nesting accepted: protobuf's default recursion limit.
pub const MAX_DEPTH: usize = 100;

/// Values a binary body may hold (fields, list items, objects), counted
/// before it is parsed. Parsed, each costs some hundreds of bytes and of
/// nanoseconds: a few megabytes of tiny values (empty messages) would take
/// seconds and a gigabyte or more. Real requests hold a few thousand.
pub const MAX_VALUES: usize = 65_536;

/// Values a JSON or text body may hold. Parsed, each costs a few
/// microseconds (prost-reflect builds it as a dynamic value, then encodes
/// it for the typed request), a hundred times what binary costs: these
/// bounds keep the dearest body these formats admit to some tens of
/// milliseconds of a CPU.
pub const MAX_TEXT_VALUES: usize = 16_384;

/// A JSON or text body's values counted once per level of nesting they
/// sit at, at most. Each value costs its parse once more per level above
/// it (each level's length is measured again as the message is encoded),
/// so without this bound a few thousand values forty levels down would
/// cost a second.
pub const MAX_VALUE_LEVELS: usize = 131_072;

/// A body or message nested deeper than [`MAX_DEPTH`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("nesting deeper than the limit of {MAX_DEPTH} levels")]
pub struct TooDeep;

/// Why a body is refused before it is parsed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum Shape {
    /// Nested deeper than [`MAX_DEPTH`].
    #[error("nesting deeper than the limit of {MAX_DEPTH} levels")]
    TooDeep,
    /// More values than the format's limit: [`MAX_VALUES`] in binary,
    /// [`MAX_TEXT_VALUES`] in JSON and text.
    #[error("more than the limit of {limit} values")]
    TooMany {
        /// The limit passed.
        limit: usize,
    },
    /// Values past [`MAX_VALUE_LEVELS`], each counted once per level it
    /// sits at: a JSON or text body, or a binary one to be rendered so.
    #[error("more than the limit of {MAX_VALUE_LEVELS} values counted once per level of nesting")]
    TooNested,
}

/// What a count of a body's values found.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Size {
    /// Its values.
    pub values: usize,
    /// Its values, each counted once per level it sits at.
    pub levels: usize,
}

/// The type name behind `google.protobuf.Any`.
pub(crate) const ANY: &str = "google.protobuf.Any";

/// Checks the brace depth of Protobuf text format (`{`/`<` outside strings
/// and comments) and its values (each `:`, `,`, `[` and opening brace)
/// without parsing it (nor checking that it is UTF-8).
pub fn check_text(text: impl AsRef<[u8]>) -> Result<Size, Shape> {
    // `[` opens a list or an `Any`'s type name: a value, not a level.
    let syntax = Syntax { open: b"{<", close: b"}>", more: b":,[", quotes: b"\"'", comment: Some(b'#') };
    check_brackets(text.as_ref(), syntax)
}

/// Checks the bracket depth of JSON (`{`/`[` outside strings) and its
/// values (each `,` and opening bracket) without parsing it.
pub fn check_json(json: impl AsRef<[u8]>) -> Result<Size, Shape> {
    check_brackets(json.as_ref(), Syntax { open: b"{[", close: b"}]", more: b",", quotes: b"\"", comment: None })
}

/// What a bracket scan of one format needs to know.
struct Syntax {
    open: &'static [u8],
    close: &'static [u8],
    /// What starts one more value, besides an opening bracket.
    more: &'static [u8],
    quotes: &'static [u8],
    /// The byte that starts a comment running to the end of the line.
    comment: Option<u8>,
}

/// One pass, no stack: the depth and the values are counters.
fn check_brackets(body: &[u8], syntax: Syntax) -> Result<Size, Shape> {
    let (mut depth, mut size) = (0usize, Size::default());
    let mut bytes = body.iter().copied();
    while let Some(byte) = bytes.next() {
        if syntax.open.contains(&byte) || syntax.more.contains(&byte) {
            size.values += 1;
            if size.values > MAX_TEXT_VALUES {
                return Err(Shape::TooMany { limit: MAX_TEXT_VALUES });
            }
            // The body's own braces open at depth 0: their values are at level 1.
            size.levels += depth.max(1);
            if size.levels > MAX_VALUE_LEVELS {
                return Err(Shape::TooNested);
            }
        }
        if syntax.open.contains(&byte) {
            depth += 1;
            if depth > MAX_DEPTH {
                return Err(Shape::TooDeep);
            }
        } else if syntax.close.contains(&byte) {
            depth = depth.saturating_sub(1);
        } else if syntax.quotes.contains(&byte) {
            skip_string(&mut bytes, byte);
        } else if syntax.comment == Some(byte) {
            bytes.by_ref().find(|&b| b == b'\n');
        }
    }
    Ok(size)
}

/// Moves past a quoted string whose opening `quote` was just read.
fn skip_string(bytes: &mut impl Iterator<Item = u8>, quote: u8) {
    while let Some(b) = bytes.next() {
        match b {
            b'\\' => {
                bytes.next();
            }
            // Neither format lets a string run past a line: ending it there
            // can only count more braces than the parser sees, never fewer.
            b'\n' => return,
            b if b == quote => return,
            _ => {}
        }
    }
}

/// Checks the depth of a decoded message, counting each message level and
/// each `Any` payload whose type the pool knows (a payload of an unknown type
/// stays bytes: nothing can expand it). `depth` is the level `message` sits at
/// (1 for a request or answer).
pub fn check_message(message: &DynamicMessage, depth: usize) -> Result<(), TooDeep> {
    if depth > MAX_DEPTH {
        return Err(TooDeep);
    }
    if message.descriptor().full_name() == ANY {
        return match expand_any(message, depth + 1)? {
            Some(inner) => check_message(&inner, depth + 1),
            None => Ok(()),
        };
    }
    for (_, value) in message.fields() {
        check_value(value, depth)?;
    }
    Ok(())
}

fn check_value(value: &Value, depth: usize) -> Result<(), TooDeep> {
    match value {
        Value::Message(inner) => check_message(inner, depth + 1),
        Value::List(items) => items.iter().try_for_each(|item| check_value(item, depth)),
        // A map entry is a message level of its own on the wire.
        Value::Map(entries) => entries.values().try_for_each(|item| check_value(item, depth + 1)),
        _ => Ok(()),
    }
}

/// Checks the payload of a typed `Any` field that sits at `depth`: how a
/// decoded request's `State` and `Arguments` are measured. Walked on the
/// wire, not decoded: a deep payload of some hundred kilobytes would take
/// tens of milliseconds to decode, and an ordinary one some microseconds
/// on every call.
pub fn check_any(any: &prost_types::Any, depth: usize) -> Result<(), TooDeep> {
    if any.value.is_empty() {
        return Ok(());
    }
    let Some(desc) = any_type(&crate::proto::DESCRIPTOR_POOL, &any.type_url) else {
        return Ok(());
    };
    check_nesting(&any.value, &desc, depth + 1).map_err(|_| TooDeep)
}

/// The payload of a dynamic `Any` when its type is known and it decodes;
/// `None` when it stays bytes. `level` is where the payload sits (1 for a
/// request): past the limit it is refused before it is decoded.
pub(crate) fn expand_any(any: &DynamicMessage, level: usize) -> Result<Option<DynamicMessage>, TooDeep> {
    let (Some(type_url), Some(bytes)) = (any.get_field_by_number(1), any.get_field_by_number(2)) else {
        return Ok(None);
    };
    let (Value::String(type_url), Value::Bytes(bytes)) = (&*type_url, &*bytes) else {
        return Ok(None);
    };
    let Some(desc) = any_type(any.descriptor().parent_pool(), type_url) else {
        return Ok(None);
    };
    decode_payload(desc, bytes.clone(), level)
}

/// Decodes an `Any`'s payload of type `desc` at `level`. From `Bytes`, so
/// that the payloads inside it stay slices of these bytes: decoded from a
/// slice, each level of `Any`s in `Any`s would copy all the levels below it,
/// and a few megabytes nested a hundred deep would take hundreds.
fn decode_payload(desc: MessageDescriptor, payload: Bytes, level: usize) -> Result<Option<DynamicMessage>, TooDeep> {
    if level > MAX_DEPTH {
        return Err(TooDeep);
    }
    match DynamicMessage::decode(desc.clone(), payload.clone()) {
        Ok(inner) => Ok(Some(inner)),
        // Bytes that do not decode stay bytes; only a failure of prost's own
        // recursion limit may say something about depth. It may also come of
        // a length past the end of the message around it, which prost reads
        // on into before it notices: only the walk on the wire, which keeps
        // each message to its bytes, tells the two apart.
        Err(error) if is_recursion_error(&error) && check_nesting(&payload, &desc, level).is_err() => Err(TooDeep),
        Err(_) => Ok(None),
    }
}

/// The message type an `Any`'s `type_url` names, when the pool has it.
pub(crate) fn any_type(pool: &DescriptorPool, type_url: &str) -> Option<MessageDescriptor> {
    let (_, name) = type_url.rsplit_once('/')?;
    pool.get_message_by_name(name)
}

/// Whether a decode failed on prost's recursion limit.
pub fn is_recursion_error(error: &prost::DecodeError) -> bool {
    error.to_string().contains("recursion limit")
}

#[cfg(test)]
pub(crate) mod tests {
    use prost::Message;

    use super::*;
    use crate::proto::n_alice::n_scenarios::{TScenarioBaseRequest, TScenarioRunRequest};

    fn nested_text(levels: usize) -> String {
        let mut text = String::from("BaseRequest{RequestId:\"x\" Experiments{fields{key:\"a\" value{");
        text.push_str(&"list_value{values{".repeat(levels));
        text
    }

    #[test]
    fn text_depth_counts_braces_outside_strings_and_comments() {
        assert!(check_text("a{".repeat(MAX_DEPTH)).is_ok());
        assert_eq!(check_text("a{".repeat(MAX_DEPTH + 1)), Err(Shape::TooDeep));
        assert_eq!(check_text("a<".repeat(MAX_DEPTH + 1)), Err(Shape::TooDeep));
        assert!(check_text(format!("s: \"{}\"", "{".repeat(500))).is_ok());
        assert!(check_text(format!("s: '{}\\'{}'", "{".repeat(5), "<".repeat(500))).is_ok());
        assert!(check_text(format!("# {}\nx: 1", "{".repeat(500))).is_ok());
        assert_eq!(check_text(nested_text(500)), Err(Shape::TooDeep));
    }

    #[test]
    fn json_depth_counts_brackets_outside_strings() {
        assert!(check_json("[".repeat(MAX_DEPTH)).is_ok());
        assert_eq!(check_json("[".repeat(MAX_DEPTH + 1)), Err(Shape::TooDeep));
        assert!(check_json(format!("{{\"a\\\"{}\": 1}}", "[".repeat(500))).is_ok());
        assert_eq!(check_json("{\"a\":".repeat(MAX_DEPTH + 1)), Err(Shape::TooDeep));
    }

    #[test]
    fn values_past_the_limit_are_refused_before_parsing() {
        let too_many = Err(Shape::TooMany { limit: MAX_TEXT_VALUES });
        let list = |n: usize| format!("{{\"k\":[{}]}}", vec!["0"; n].join(","));
        let size = check_json(list(MAX_TEXT_VALUES - 1)).expect("the object, the list and its commas");
        assert_eq!(size.values, MAX_TEXT_VALUES);
        assert_eq!(size.levels, 2 + 2 * (MAX_TEXT_VALUES - 2), "the commas sit at level 2");
        assert_eq!(check_json(list(MAX_TEXT_VALUES)), too_many);
        assert!(check_json(format!("{{\"s\":\"{}\"}}", ",".repeat(MAX_VALUES))).is_ok(), "in a string");
        assert_eq!(check_text("f: 1 ".repeat(MAX_TEXT_VALUES)).map(|size| size.levels), Ok(MAX_TEXT_VALUES));
        assert_eq!(check_text("f: 1 ".repeat(MAX_TEXT_VALUES + 1)), too_many);
        assert_eq!(check_text("f {} ".repeat(MAX_TEXT_VALUES + 1)), too_many);
    }

    #[test]
    fn values_deep_down_count_once_per_level() {
        // A list 40 levels down: 3,000 values there weigh 120,000 or so, 3,500 too much.
        let deep = |n: usize| format!("{}{}{}", "[".repeat(40), vec!["0"; n].join(","), "]".repeat(40));
        let size = check_json(deep(3_000)).expect("within the bound");
        assert_eq!(size.levels, (1..40).sum::<usize>() + 1 + 40 * 2_999);
        assert_eq!(check_json(deep(3_500)), Err(Shape::TooNested));
        let text = |n: usize| format!("{}{}{}", "a{".repeat(40), "f: 1 ".repeat(n), "}".repeat(40));
        assert!(check_text(text(3_000)).is_ok());
        assert_eq!(check_text(text(3_500)), Err(Shape::TooNested));
    }

    /// A request whose `State` holds `levels` `Any`s, each in the next.
    pub(crate) fn nested_any_state(levels: usize) -> TScenarioRunRequest {
        let base = |state| TScenarioBaseRequest { request_id: "x".into(), state, ..Default::default() };
        let mut any = prost_types::Any::default();
        for _ in 0..levels {
            let inner = base(Some(any));
            any = prost_types::Any {
                type_url: "type.googleapis.com/NAlice.NScenarios.TScenarioBaseRequest".into(),
                value: inner.encode_to_vec(),
            };
        }
        TScenarioRunRequest { base_request: Some(base(Some(any))), input: None }
    }

    #[test]
    fn any_payloads_count_as_levels() {
        let shallow = nested_any_state(10);
        assert_eq!(check_message(&shallow.transcode_to_dynamic(), 1), Ok(()));
        let deep = nested_any_state(3_000);
        assert_eq!(check_message(&deep.transcode_to_dynamic(), 1), Err(TooDeep));
        let state = deep.base_request.as_ref().and_then(|b| b.state.as_ref()).unwrap();
        assert_eq!(check_any(state, 2), Err(TooDeep));
        let state = shallow.base_request.as_ref().and_then(|b| b.state.as_ref()).unwrap();
        assert_eq!(check_any(state, 2), Ok(()));
    }

    #[test]
    fn any_fields_measured_on_the_wire_agree_with_the_decoded_measure() {
        let state =
            |request: &TScenarioRunRequest| request.base_request.as_ref().and_then(|b| b.state.clone()).unwrap();
        // `Any`s in `Any`s: each level is two (the payload, its `State`).
        let mut seen = Vec::new();
        for levels in 44..54 {
            let request = nested_any_state(levels);
            let decoded = check_message(&request.transcode_to_dynamic(), 1);
            assert_eq!(check_any(&state(&request), 3), decoded, "{levels} Anys");
            seen.push(decoded);
        }
        assert!(seen.contains(&Ok(())) && seen.contains(&Err(TooDeep)), "the range spans the limit");
        // Lists in a `Value`: each level is two (a `Value`, its `ListValue`), through a map.
        use prost_types::{ListValue, Struct, Value as Json, value::Kind as JsonKind};
        for lists in 44..52 {
            let mut value = Json { kind: Some(JsonKind::NumberValue(1.0)) };
            for _ in 0..lists {
                value = Json { kind: Some(JsonKind::ListValue(ListValue { values: vec![value] })) };
            }
            let payload = Struct { fields: [("k".to_owned(), value)].into() };
            let any = prost_types::Any {
                type_url: "type.googleapis.com/google.protobuf.Struct".into(),
                value: payload.encode_to_vec(),
            };
            let base = TScenarioBaseRequest { request_id: "x".into(), state: Some(any.clone()), ..Default::default() };
            let request = TScenarioRunRequest { base_request: Some(base), input: None };
            let decoded = check_message(&request.transcode_to_dynamic(), 1);
            assert_eq!(check_any(&any, 3), decoded, "{lists} lists");
            seen.push(decoded);
        }
        assert!(seen[10..].contains(&Ok(())) && seen[10..].contains(&Err(TooDeep)), "the range spans the limit");
    }

    #[test]
    fn groups_the_schema_lacks_count_as_levels_on_the_wire_as_decoders_count_them() {
        // `groups` groups of field 5, one in the next, around a field of their own.
        let groups = |groups: usize| {
            let mut bytes = vec![0x2b; groups];
            bytes.extend([0x08, 0x01]);
            bytes.extend(vec![0x2c; groups]);
            bytes
        };
        let mut refused = Vec::new();
        for n in 90..110 {
            for type_url in ["google.protobuf.Struct", "google.protobuf.Any"] {
                let any = prost_types::Any { type_url: format!("type.googleapis.com/{type_url}"), value: groups(n) };
                let base =
                    TScenarioBaseRequest { request_id: "x".into(), state: Some(any.clone()), ..Default::default() };
                let request = TScenarioRunRequest { base_request: Some(base), input: None };
                let decoded = check_message(&request.transcode_to_dynamic(), 1);
                let on_the_wire = check_any(&any, 3);
                // The walk may refuse a little earlier than a decoder; never later.
                assert!(on_the_wire.is_err() || decoded.is_ok(), "{n} groups in {type_url}: {decoded:?}");
                refused.push(on_the_wire.is_err());
            }
        }
        assert!(refused.contains(&true) && refused.contains(&false), "the range spans the limit");
    }

    /// A `google.protobuf.Struct` whose list 40 levels down claims the
    /// bytes after it, a list 60 levels deep: malformed, and read by prost
    /// as nesting past its limit.
    fn struct_with_a_length_past_its_message() -> Bytes {
        use prost::encoding::encode_varint;
        use prost_types::{ListValue, Value as Json, value::Kind as JsonKind};
        let delimited = |tag: u8, content: &[u8]| {
            let mut bytes = vec![tag];
            encode_varint(content.len() as u64, &mut bytes);
            bytes.extend_from_slice(content);
            bytes
        };
        // A list 60 levels deep, after the map entry's value: to the entry a
        // second key (field 1, a string), not walked into.
        let list = |value: Json| ListValue { values: vec![value] };
        let deep = (0..60).fold(list(Json { kind: Some(JsonKind::NumberValue(1.0)) }), |inner, _| {
            list(Json { kind: Some(JsonKind::ListValue(inner)) })
        });
        let deep = deep.encode_to_vec();
        // 40 lists down, an item whose own list claims the bytes after the item.
        let mut claim = vec![0x32];
        encode_varint(deep.len() as u64, &mut claim);
        let mut value = delimited(0x32, &delimited(0x0a, &claim));
        for _ in 0..40 {
            value = delimited(0x32, &delimited(0x0a, &value));
        }
        let mut entry = delimited(0x0a, b"k");
        entry.extend(delimited(0x12, &value));
        entry.extend(&deep);
        Bytes::from(delimited(0x0a, &entry))
    }

    #[test]
    fn a_length_past_the_end_of_its_message_is_malformed_not_deep() {
        let payload = struct_with_a_length_past_its_message();
        let desc = crate::proto::DESCRIPTOR_POOL.get_message_by_name("google.protobuf.Struct").unwrap();
        let error = DynamicMessage::decode(desc.clone(), payload.clone()).unwrap_err();
        assert!(is_recursion_error(&error), "prost reads on past the item's end: {error}");
        assert_eq!(decode_payload(desc.clone(), payload.clone(), 4), Ok(None), "malformed: stays bytes");
        let any =
            prost_types::Any { type_url: "type.googleapis.com/google.protobuf.Struct".into(), value: payload.into() };
        assert_eq!(check_any(&any, 3), Ok(()), "measured alike on the wire");
        // A body so malformed is refused as one that does not decode.
        let refused = crate::codec::decode_dynamic(desc, &any.value, crate::codec::Format::Binary).unwrap_err();
        assert!(matches!(refused, crate::codec::CodecError::Binary { .. }), "not too deep: {refused}");
    }

    #[test]
    fn payloads_inside_payloads_are_slices_not_copies() {
        let base = TScenarioBaseRequest { request_id: "x".into(), ..Default::default() };
        let inner = prost_types::Any {
            type_url: "type.googleapis.com/NAlice.NScenarios.TScenarioBaseRequest".into(),
            value: base.encode_to_vec(),
        };
        let outer = Bytes::from(inner.encode_to_vec());
        let any = crate::proto::DESCRIPTOR_POOL.get_message_by_name(ANY).unwrap();
        let decoded = decode_payload(any, outer.clone(), 2).unwrap().expect("an Any");
        let value = decoded.get_field_by_number(2).unwrap();
        let Value::Bytes(value) = &*value else { panic!("bytes: {value:?}") };
        let within = outer.as_ptr_range();
        assert!(within.contains(&value.as_ptr()), "the inner payload was copied");
    }

    #[test]
    fn payloads_past_the_limit_are_refused_before_they_are_decoded() {
        let any = crate::proto::DESCRIPTOR_POOL.get_message_by_name(ANY).unwrap();
        // Bytes that would not decode: refused for where they sit, not for what they hold.
        assert_eq!(decode_payload(any.clone(), Bytes::from_static(&[0xff]), MAX_DEPTH + 1), Err(TooDeep));
        assert_eq!(decode_payload(any, Bytes::from_static(&[0xff]), MAX_DEPTH), Ok(None));
    }

    #[test]
    fn unknown_any_types_stay_bytes() {
        let any = prost_types::Any { type_url: "type.googleapis.com/No.Such".into(), value: vec![1, 2, 3] };
        assert_eq!(check_any(&any, 1), Ok(()));
    }
}
