//! The size limit of binary bodies in values, counted on the wire before
//! anything is decoded: a few megabytes of empty messages (two bytes each
//! on the wire, hundreds of bytes each decoded) would take hundreds of
//! milliseconds and of megabytes to decode.
//!
//! The scan follows the schema: a length-delimited field is walked into
//! when the schema says it holds a message (map entries included), and an
//! `Any` payload when the pool knows its type, since the request checks
//! expand those too. Anything malformed or too deep is left to the
//! decoder, whose error says more than a count could.

use prost_reflect::{Kind, MessageDescriptor};

use super::{ANY, MAX_DEPTH, MAX_VALUES, Shape, any_type};

/// The longest binary body that cannot hold more than [`MAX_VALUES`]
/// values: every field takes at least two bytes on the wire (a key and the
/// smallest value), payloads included. Shorter ones need no count.
pub const SHORT_BINARY: usize = 2 * MAX_VALUES;

/// Checks that the binary `body` of type `desc` holds at most
/// [`MAX_VALUES`] fields, counting each field on the wire once (a packed
/// list is one).
pub fn check_binary(body: &[u8], desc: &MessageDescriptor) -> Result<(), Shape> {
    let mut values = 0;
    count(body, desc, 1, &mut values)
}

/// Wire types of the protobuf encoding.
const VARINT: u64 = 0;
const FIXED64: u64 = 1;
const DELIMITED: u64 = 2;
const GROUP_START: u64 = 3;
const GROUP_END: u64 = 4;
const FIXED32: u64 = 5;

/// Counts the fields of `body`, a message of type `desc` at `depth`, into `values`.
fn count(body: &[u8], desc: &MessageDescriptor, depth: usize, values: &mut usize) -> Result<(), Shape> {
    if desc.full_name() == ANY {
        add(values, 2)?;
        return match any_payload(body) {
            Some((type_url, payload)) => match any_type(desc.parent_pool(), type_url) {
                Some(inner) => nested(payload, &inner, depth + 1, values),
                None => Ok(()),
            },
            None => Ok(()),
        };
    }
    for field in Fields(body) {
        add(values, 1)?;
        let Field::Delimited { number, payload } = field else { continue };
        let inner = u32::try_from(number).ok().and_then(|number| desc.get_field(number));
        if let Some(Kind::Message(inner)) = inner.map(|field| field.kind()) {
            nested(payload, &inner, depth + 1, values)?;
        }
    }
    Ok(())
}

/// Counts `n` more values.
fn add(values: &mut usize, n: usize) -> Result<(), Shape> {
    *values += n;
    if *values > MAX_VALUES { Err(Shape::TooMany { limit: MAX_VALUES }) } else { Ok(()) }
}

/// Counts a nested message within the nesting limit. Deeper ones are left
/// to the decoder and the request's checks, which refuse them and say
/// where (`BaseRequest.State`).
fn nested(body: &[u8], desc: &MessageDescriptor, depth: usize, values: &mut usize) -> Result<(), Shape> {
    if depth > MAX_DEPTH {
        return Ok(());
    }
    count(body, desc, depth, values)
}

/// An `Any`'s `type_url` (field 1) and `value` (field 2), in either order.
fn any_payload(body: &[u8]) -> Option<(&str, &[u8])> {
    let (mut type_url, mut value) = (None, None);
    for field in Fields(body) {
        match field {
            Field::Delimited { number: 1, payload } => type_url = std::str::from_utf8(payload).ok(),
            Field::Delimited { number: 2, payload } => value = Some(payload),
            _ => {}
        }
    }
    Some((type_url?, value?))
}

/// One field read off the wire.
enum Field<'a> {
    /// A length-delimited field: a message, string, bytes or packed list.
    Delimited { number: u64, payload: &'a [u8] },
    /// Any other field (its value skipped), or a group's start or end.
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
            GROUP_START | GROUP_END => Some(Field::Other),
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
