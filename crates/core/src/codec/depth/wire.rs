//! The size limit of binary bodies in values, counted on the wire before
//! anything is decoded: a few megabytes of empty messages (two bytes each
//! on the wire, hundreds of bytes each decoded) would take hundreds of
//! milliseconds and of megabytes to decode. The same count, with the JSON
//! and text limits, says whether a binary answer may be rendered in those
//! formats.
//!
//! The scan follows the schema: a length-delimited field is walked into
//! when the schema says it holds a message (map entries included), and an
//! `Any` payload when the pool knows its type, since the request checks
//! expand those too. Anything malformed or too deep is left to the
//! decoder, whose error says more than a count could; except in
//! [`check_nesting`], the depth check of `Any` fields that decoders leave
//! as bytes.

use prost_reflect::{Kind, MessageDescriptor};

use super::{ANY, MAX_DEPTH, MAX_TEXT_VALUES, MAX_VALUE_LEVELS, MAX_VALUES, Shape, Size, any_type};

/// The longest binary body that cannot hold more than [`MAX_VALUES`]
/// values: every field takes at least two bytes on the wire (a key and the
/// smallest value), payloads included. Shorter ones need no count.
pub const SHORT_BINARY: usize = 2 * MAX_VALUES;

/// Checks that the binary `body` of type `desc` holds at most
/// [`MAX_VALUES`] fields, counting each field on the wire once (a packed
/// list is one).
pub fn check_binary(body: &[u8], desc: &MessageDescriptor) -> Result<(), Shape> {
    Count::new(MAX_VALUES, usize::MAX).message(body, desc, 1)
}

/// Checks that the binary `body` of type `desc` holds no more than a JSON
/// or text body may ([`MAX_TEXT_VALUES`], [`MAX_VALUE_LEVELS`]): whether it
/// may be rendered in those formats, which cost as much to write as to
/// parse, and whose indentation grows with the depth.
pub fn check_binary_as_text(body: &[u8], desc: &MessageDescriptor) -> Result<(), Shape> {
    Count::new(MAX_TEXT_VALUES, MAX_VALUE_LEVELS).message(body, desc, 1)
}

/// Checks that the binary message `body` of type `desc`, sitting at
/// `depth`, nests no deeper than [`MAX_DEPTH`], its known `Any` payloads
/// included, as a decoder or printer would expand it: how a request's
/// `Any` fields are measured without decoding them. Bytes that do not
/// parse as the schema says end the walk of their message (a decoder
/// would leave them as bytes).
pub fn check_nesting(body: &[u8], desc: &MessageDescriptor, depth: usize) -> Result<(), Shape> {
    let mut count = Count::new(usize::MAX, usize::MAX);
    count.deep_is_error = true;
    count.nested(body, desc, depth)
}

/// Wire types of the protobuf encoding.
const VARINT: u64 = 0;
const FIXED64: u64 = 1;
const DELIMITED: u64 = 2;
const GROUP_START: u64 = 3;
const GROUP_END: u64 = 4;
const FIXED32: u64 = 5;

/// A count of a body's fields, each once and once per level it sits at, against limits.
struct Count {
    size: Size,
    max_values: usize,
    max_levels: usize,
    /// Whether a message past [`MAX_DEPTH`] is refused, not left to the decoder.
    deep_is_error: bool,
}

impl Count {
    fn new(max_values: usize, max_levels: usize) -> Count {
        Count { size: Size::default(), max_values, max_levels, deep_is_error: false }
    }

    /// Counts the fields of `body`, a message of type `desc` at `depth`.
    fn message(&mut self, body: &[u8], desc: &MessageDescriptor, depth: usize) -> Result<(), Shape> {
        if desc.full_name() == ANY {
            self.add(2, depth)?;
            let (payload, groups) = any_payload(body);
            if self.deep_is_error && depth + groups > MAX_DEPTH {
                return Err(Shape::TooDeep);
            }
            return match payload {
                Some((type_url, payload)) => match any_type(desc.parent_pool(), type_url) {
                    Some(inner) => self.nested(payload, &inner, depth + 1),
                    None => Ok(()),
                },
                None => Ok(()),
            };
        }
        let mut groups = Groups::default();
        for field in Fields(body) {
            self.add(1, depth)?;
            let own = groups.own(&field);
            if self.deep_is_error && depth + groups.open > MAX_DEPTH {
                return Err(Shape::TooDeep);
            }
            let Field::Delimited { number, payload } = field else { continue };
            let inner = u32::try_from(number).ok().and_then(|number| desc.get_field(number));
            if let (true, Some(Kind::Message(inner))) = (own, inner.map(|field| field.kind())) {
                self.nested(payload, &inner, depth + 1)?;
            }
        }
        Ok(())
    }

    /// Counts `n` more values at `depth`.
    fn add(&mut self, n: usize, depth: usize) -> Result<(), Shape> {
        self.size.values += n;
        if self.size.values > self.max_values {
            return Err(Shape::TooMany { limit: self.max_values });
        }
        self.size.levels = self.size.levels.saturating_add(n * depth);
        if self.size.levels > self.max_levels { Err(Shape::TooNested) } else { Ok(()) }
    }

    /// Counts a nested message within the nesting limit. Deeper ones are left
    /// to the decoder and the request's checks, which refuse them and say
    /// where (`BaseRequest.State`), unless this is that check.
    fn nested(&mut self, body: &[u8], desc: &MessageDescriptor, depth: usize) -> Result<(), Shape> {
        if depth > MAX_DEPTH {
            return if self.deep_is_error { Err(Shape::TooDeep) } else { Ok(()) };
        }
        self.message(body, desc, depth)
    }
}

/// An `Any`'s `type_url` (field 1) and `value` (field 2), in either order,
/// and how deep the groups in it nest.
fn any_payload(body: &[u8]) -> (Option<(&str, &[u8])>, usize) {
    let (mut type_url, mut value, mut groups) = (None, None, Groups::default());
    for field in Fields(body) {
        match field {
            _ if !groups.own(&field) => {}
            Field::Delimited { number: 1, payload } => type_url = std::str::from_utf8(payload).ok(),
            Field::Delimited { number: 2, payload } => value = Some(payload),
            _ => {}
        }
    }
    (type_url.zip(value), groups.deepest)
}

/// The groups open as a message's fields are read. A field the schema
/// lacks may be a group, whose fields are its own, not the message's; a
/// decoder skips each group one level deeper than the one around it.
#[derive(Default)]
struct Groups {
    open: usize,
    deepest: usize,
}

impl Groups {
    /// Counts `field` in; whether it is the message's own.
    fn own(&mut self, field: &Field<'_>) -> bool {
        match field {
            Field::GroupStart => {
                self.open += 1;
                self.deepest = self.deepest.max(self.open);
                false
            }
            Field::GroupEnd => {
                self.open = self.open.saturating_sub(1);
                false
            }
            Field::Delimited { .. } | Field::Other => self.open == 0,
        }
    }
}

/// One field read off the wire.
enum Field<'a> {
    /// A length-delimited field: a message, string, bytes or packed list.
    Delimited { number: u64, payload: &'a [u8] },
    /// A group's start: the fields up to its end are the group's.
    GroupStart,
    /// A group's end.
    GroupEnd,
    /// Any other field, its value skipped.
    Other,
}

/// The fields of a message's bytes, in wire order; ends early at anything malformed.
struct Fields<'a>(&'a [u8]);

impl<'a> Iterator for Fields<'a> {
    type Item = Field<'a>;

    fn next(&mut self) -> Option<Field<'a>> {
        let key = varint(&mut self.0)?;
        let take = |bytes: &mut &'a [u8], n: usize| {
            let (taken, rest) = bytes.split_at_checked(n)?;
            *bytes = rest;
            Some(taken)
        };
        let field = match key & 7 {
            VARINT => varint(&mut self.0).map(|_| Field::Other),
            FIXED64 => take(&mut self.0, 8).map(|_| Field::Other),
            FIXED32 => take(&mut self.0, 4).map(|_| Field::Other),
            DELIMITED => {
                let len = usize::try_from(varint(&mut self.0)?).ok()?;
                take(&mut self.0, len).map(|payload| Field::Delimited { number: key >> 3, payload })
            }
            GROUP_START => Some(Field::GroupStart),
            GROUP_END => Some(Field::GroupEnd),
            _ => None,
        };
        if field.is_none() {
            self.0 = &[];
        }
        field
    }
}

/// Reads a varint off the front of `bytes`; `None` if it runs past them or past ten bytes.
fn varint(bytes: &mut &[u8]) -> Option<u64> {
    let mut value = 0u64;
    for (i, &byte) in bytes.iter().enumerate().take(10) {
        value |= u64::from(byte & 0x7f) << (7 * i);
        if byte & 0x80 == 0 {
            *bytes = &bytes[i + 1..];
            return Some(value);
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use prost::Message;
    use prost_reflect::ReflectMessage;

    use super::*;
    use crate::proto::n_alice::n_scenarios::{TInput, TScenarioBaseRequest, TScenarioRunRequest, TSemanticFrame};

    fn frames(n: usize) -> TScenarioRunRequest {
        let input = TInput { semantic_frames: vec![TSemanticFrame::default(); n], ..Default::default() };
        TScenarioRunRequest { base_request: None, input: Some(input) }
    }

    fn check(request: &TScenarioRunRequest) -> Result<(), Shape> {
        check_binary(&request.encode_to_vec(), &request.descriptor())
    }

    #[test]
    fn empty_messages_past_the_limit_are_refused() {
        assert_eq!(check(&frames(MAX_VALUES + 10)), Err(Shape::TooMany { limit: MAX_VALUES }));
        assert_eq!(check(&frames(2_000_000)), Err(Shape::TooMany { limit: MAX_VALUES }));
        let mut fine = frames(MAX_VALUES - 10);
        fine.base_request = Some(TScenarioBaseRequest { request_id: "x".repeat(1_000), ..Default::default() });
        assert!(fine.encoded_len() > SHORT_BINARY, "long enough to be counted");
        assert_eq!(check(&fine), Ok(()), "the base request, its id, Input and its frames");
    }

    /// `values` numbers in a list `lists` lists down in the request's experiments.
    fn deep_experiments(values: usize, lists: usize) -> TScenarioRunRequest {
        use prost_types::{ListValue, Struct, Value, value::Kind as ValueKind};
        let number = Value { kind: Some(ValueKind::NumberValue(0.0)) };
        let mut value = Value { kind: Some(ValueKind::ListValue(ListValue { values: vec![number; values] })) };
        for _ in 1..lists {
            value = Value { kind: Some(ValueKind::ListValue(ListValue { values: vec![value] })) };
        }
        let experiments = Struct { fields: [("k".to_owned(), value)].into() };
        let base = TScenarioBaseRequest { experiments: Some(experiments), ..Default::default() };
        TScenarioRunRequest { base_request: Some(base), input: None }
    }

    #[test]
    fn what_may_be_rendered_as_text_is_bounded_as_text_bodies_are() {
        let as_text =
            |request: &TScenarioRunRequest| check_binary_as_text(&request.encode_to_vec(), &request.descriptor());
        assert_eq!(as_text(&frames(MAX_TEXT_VALUES + 10)), Err(Shape::TooMany { limit: MAX_TEXT_VALUES }));
        assert_eq!(check(&frames(MAX_TEXT_VALUES + 10)), Ok(()), "a binary body may hold more");
        assert_eq!(as_text(&frames(MAX_TEXT_VALUES - 10)), Ok(()));
        // Each list level is two message levels (a `Value`, its `ListValue`), each number two fields.
        assert_eq!(as_text(&deep_experiments(1_000, 10)), Ok(()));
        assert_eq!(as_text(&deep_experiments(1_000, 40)), Err(Shape::TooNested));
        assert_eq!(check(&deep_experiments(1_000, 40)), Ok(()));
    }

    #[test]
    fn large_strings_and_packed_lists_count_once() {
        let base = TScenarioBaseRequest { request_id: "x".repeat(4 << 20), ..Default::default() };
        assert_eq!(check(&TScenarioRunRequest { base_request: Some(base), input: None }), Ok(()));
    }

    #[test]
    fn any_payloads_of_known_types_are_counted() {
        let inner = frames(MAX_VALUES + 10);
        let state = prost_types::Any {
            type_url: "type.googleapis.com/NAlice.NScenarios.TScenarioRunRequest".into(),
            value: inner.encode_to_vec(),
        };
        let base = TScenarioBaseRequest { state: Some(state.clone()), ..Default::default() };
        assert_eq!(
            check(&TScenarioRunRequest { base_request: Some(base), input: None }),
            Err(Shape::TooMany { limit: MAX_VALUES })
        );
        let unknown = prost_types::Any { type_url: "type.googleapis.com/No.Such".into(), ..state };
        let base = TScenarioBaseRequest { state: Some(unknown), ..Default::default() };
        assert_eq!(check(&TScenarioRunRequest { base_request: Some(base), input: None }), Ok(()), "stays bytes");
    }

    #[test]
    fn depth_is_left_to_the_decoder() {
        let deep = crate::codec::depth::tests::nested_any_state(3_000);
        assert!(deep.encoded_len() > SHORT_BINARY, "long enough to be counted");
        assert_eq!(check(&deep), Ok(()));
    }

    #[test]
    fn malformed_bodies_are_left_to_the_decoder() {
        let mut body = frames(MAX_VALUES + 10).encode_to_vec();
        body.truncate(body.len() - 1);
        let desc = &TScenarioRunRequest::default().descriptor();
        assert_eq!(check_binary(&body, desc), Ok(()), "Input's length runs past the end");
        assert_eq!(check_binary(&vec![0xff; 200_000], desc), Ok(()));
        assert_eq!(check_binary(&vec![0x0b; 200_000], desc), Err(Shape::TooMany { limit: MAX_VALUES }), "group starts");
    }
}
