//! Wire formats of the protocol: binary protobuf, proto3 JSON and Protobuf
//! text format, chosen per request by `Content-Type` and `Accept`.
//!
//! Binary goes straight through prost; JSON and text format go through
//! prost-reflect's `DynamicMessage` over the embedded descriptor pool. Every
//! path enforces the nesting limit of [`depth`]. Error messages quote a
//! body's content only as a short, redacted prefix ([`quote`]).

pub mod depth;
pub mod json;
pub mod quote;
pub mod redact;
pub mod structs;
pub mod text;

use bytes::Bytes;
use prost::Message;
use prost_reflect::{DynamicMessage, MessageDescriptor, ReflectMessage};

use crate::proto::DESCRIPTOR_POOL;

/// A wire format of protocol messages.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Format {
    /// Binary protobuf: what Megamind sends.
    Binary,
    /// Proto3 JSON mapping.
    Json,
    /// Protobuf text format, UTF-8 kept readable.
    Text,
}

impl Format {
    /// The format named by a media type (`Content-Type` or one `Accept` entry),
    /// parameters such as `; charset=utf-8` ignored.
    pub fn from_media_type(value: &str) -> Option<Format> {
        const NAMES: &[(&str, Format)] = &[
            ("application/protobuf", Format::Binary),
            ("application/x-protobuf", Format::Binary),
            ("application/octet-stream", Format::Binary),
            ("application/json", Format::Json),
            ("text/protobuf", Format::Text),
            ("text/x-protobuf", Format::Text),
            ("text/plain", Format::Text),
        ];
        let essence = value.split(';').next().unwrap_or("").trim();
        NAMES.iter().find(|(name, _)| name.eq_ignore_ascii_case(essence)).map(|&(_, format)| format)
    }

    /// The format an `Accept` header asks for: of the entries we know, the
    /// one of the highest quality (`q`, 1 when not given; the first of
    /// equals), leaving out `q=0`; `None` when it names none of ours
    /// (`*/*`, absent), and the answer then takes the request's format.
    pub fn from_accept(value: &str) -> Option<Format> {
        let mut best: Option<(f32, Format)> = None;
        for entry in value.split(',') {
            let Some(format) = Format::from_media_type(entry) else { continue };
            let quality = accept_quality(entry);
            if quality > 0.0 && best.is_none_or(|(top, _)| quality > top) {
                best = Some((quality, format));
            }
        }
        best.map(|(_, format)| format)
    }

    /// The `Content-Type` this format is answered with.
    pub fn media_type(self) -> &'static str {
        match self {
            Format::Binary => "application/protobuf",
            Format::Json => "application/json",
            Format::Text => "text/protobuf; charset=utf-8",
        }
    }

    /// Parses a format name as given on the command line.
    pub fn from_name(name: &str) -> Option<Format> {
        match name {
            "binary" | "bin" | "protobuf" | "pb" => Some(Format::Binary),
            "json" => Some(Format::Json),
            "text" | "txt" | "textproto" => Some(Format::Text),
            _ => None,
        }
    }
}

/// The quality an `Accept` entry gives itself (`;q=0.5`): 1 when it gives
/// none, or none that reads as a number from 0 to 1.
fn accept_quality(entry: &str) -> f32 {
    let q = entry.split(';').skip(1).find_map(|parameter| {
        let (name, value) = parameter.split_once('=')?;
        name.trim().eq_ignore_ascii_case("q").then(|| value.trim().parse::<f32>().ok()).flatten()
    });
    q.filter(|q| (0.0..=1.0).contains(q)).unwrap_or(1.0)
}

/// Why a body could not be decoded or a message not rendered.
#[derive(Debug, thiserror::Error)]
pub enum CodecError {
    /// The binary protobuf is malformed or truncated.
    #[error("invalid binary protobuf for {message}: {source}")]
    Binary {
        /// The expected message type.
        message: String,
        /// The decoder's reason.
        source: prost::DecodeError,
    },
    /// The JSON is malformed or does not match the message.
    #[error("invalid JSON for {message}: {}", quote::sanitize(&source.to_string()))]
    Json {
        /// The expected message type.
        message: String,
        /// The parser's reason.
        source: serde_json::Error,
    },
    /// The text format is malformed or does not match the message.
    #[error("invalid text format for {message}: {}", quote::sanitize(&source.to_string()))]
    Text {
        /// The expected message type.
        message: String,
        /// The parser's reason.
        source: prost_reflect::text_format::ParseError,
    },
    /// The body or message is nested deeper than [`depth::MAX_DEPTH`] levels.
    #[error("{message} is nested deeper than the limit of {} levels", depth::MAX_DEPTH)]
    TooDeep {
        /// The message type.
        message: String,
    },
    /// A body holding more values than its format's limit
    /// ([`depth::MAX_VALUES`] in binary, [`depth::MAX_TEXT_VALUES`] in JSON and text).
    #[error("{message} holds more than the limit of {limit} values")]
    TooManyValues {
        /// The message type.
        message: String,
        /// The format's limit.
        limit: usize,
    },
    /// A binary answer too long to be rendered in JSON or text.
    #[error("{message} of {size} bytes is longer than the {limit} bytes rendered in JSON or text")]
    TooLong {
        /// The message type.
        message: String,
        /// Its size in binary.
        size: usize,
        /// [`MAX_RENDERED`].
        limit: usize,
    },
    /// A JSON or text body, or a binary one to be rendered so, past
    /// [`depth::MAX_VALUE_LEVELS`].
    #[error(
        "{message} holds too many values too deep: counting each once per level of nesting it sits at, \
         more than the limit of {}",
        depth::MAX_VALUE_LEVELS
    )]
    TooNested {
        /// The message type.
        message: String,
    },
    /// A JSON or text body that is not UTF-8.
    #[error("body is not valid UTF-8: {0}")]
    Utf8(#[from] std::str::Utf8Error),
    /// The message holds something JSON cannot carry (an `Any` of an unknown type).
    #[error("cannot render {message} as JSON: {reason}")]
    Render {
        /// The message type.
        message: String,
        /// Why.
        reason: String,
    },
    /// No message of that name in the schema.
    #[error("unknown message type {:?}{}", .0, known_types(.0))]
    UnknownType(String),
}

/// What an unknown type name was likely meant to be, and the requests and
/// answers of the protocol a `convert` or a script names most.
fn known_types(name: &str) -> String {
    let short = |full: &str| full.rsplit('.').next().unwrap_or(full).to_owned();
    let messages: Vec<String> =
        DESCRIPTOR_POOL.all_messages().filter(|m| !m.is_map_entry()).map(|m| m.full_name().to_owned()).collect();
    let shorts: Vec<String> = messages.iter().map(|full| short(full)).collect();
    let near = crate::text::did_you_mean(name.rsplit('.').next().unwrap_or(name), shorts.iter().map(String::as_str));
    let mut calls: Vec<&str> = shorts
        .iter()
        .map(String::as_str)
        .filter(|short| short.starts_with("TScenario") && (short.ends_with("Request") || short.ends_with("Response")))
        .collect();
    calls.sort_unstable();
    calls.dedup();
    format!("{near} (the handlers' requests and answers: {}; any other message by name)", calls.join(", "))
}

/// Looks a message type up by full name (`NAlice.NScenarios.TScenarioRunRequest`)
/// or by its short name (`TScenarioRunRequest`) when that is unambiguous.
pub fn message_descriptor(name: &str) -> Result<MessageDescriptor, CodecError> {
    let name = name.trim_start_matches('.');
    if let Some(desc) = DESCRIPTOR_POOL.get_message_by_name(name) {
        return Ok(desc);
    }
    let mut matches = DESCRIPTOR_POOL.all_messages().filter(|m| m.name() == name && !m.is_map_entry());
    match (matches.next(), matches.next()) {
        (Some(desc), None) => Ok(desc),
        _ => Err(CodecError::UnknownType(name.to_owned())),
    }
}

/// Decodes a body of any format into a dynamic message of type `desc`,
/// `Any` payloads included within the nesting limit.
pub fn decode_dynamic(desc: MessageDescriptor, body: &[u8], format: Format) -> Result<DynamicMessage, CodecError> {
    let message = desc.full_name().to_owned();
    let too_deep = |_| CodecError::TooDeep { message: message.clone() };
    let refused = |shape| shape_error(shape, message.clone());
    let decoded = match format {
        Format::Binary => {
            count_binary(body, || desc.clone()).map_err(refused)?;
            DynamicMessage::decode(desc.clone(), body)
                .map_err(|source| body_error(message.clone(), source, body, &desc))
        }
        Format::Json => {
            // serde_json stops at 128 levels; prost-reflect would recurse again
            // over what it returns: both are kept under the one limit.
            depth::check_json(body).map_err(refused)?;
            json::from_slice(desc, body).map_err(|source| CodecError::Json { message: message.clone(), source })
        }
        Format::Text => {
            let text = std::str::from_utf8(body)?;
            depth::check_text(text).map_err(refused)?;
            DynamicMessage::parse_text_format(desc, text)
                .map_err(|source| CodecError::Text { message: message.clone(), source })
        }
    }?;
    depth::check_message(&decoded, 1).map_err(too_deep)?;
    Ok(decoded)
}

/// Decodes a body of any format into the typed message `T`. Binary `Any`
/// payloads stay bytes here: [`depth::check_any`] measures them.
pub fn decode<T: Message + ReflectMessage + Default>(body: &[u8], format: Format) -> Result<T, CodecError> {
    let name = || T::default().descriptor().full_name().to_owned();
    match format {
        Format::Binary => {
            count_binary(body, || T::default().descriptor()).map_err(|shape| shape_error(shape, name()))?;
            T::decode(body).map_err(|source| body_error(name(), source, body, &T::default().descriptor()))
        }
        Format::Json | Format::Text => decode_dynamic(T::default().descriptor(), body, format)?
            .transcode_to::<T>()
            .map_err(|source| binary_error(name(), source)),
    }
}

/// The values of a binary body long enough to hold too many, counted
/// ([`depth::check_binary`]); a shorter one cannot, and costs nothing.
fn count_binary(body: &[u8], desc: impl FnOnce() -> MessageDescriptor) -> Result<(), depth::Shape> {
    if body.len() > depth::SHORT_BINARY { depth::check_binary(body, &desc()) } else { Ok(()) }
}

/// A body refused before it is parsed, said as such.
fn shape_error(shape: depth::Shape, message: String) -> CodecError {
    match shape {
        depth::Shape::TooDeep => CodecError::TooDeep { message },
        depth::Shape::TooMany { limit } => CodecError::TooManyValues { message, limit },
        depth::Shape::TooNested => CodecError::TooNested { message },
    }
}

/// prost's recursion limit is the nesting limit: said as such.
fn binary_error(message: String, source: prost::DecodeError) -> CodecError {
    if depth::is_recursion_error(&source) {
        CodecError::TooDeep { message }
    } else {
        CodecError::Binary { message, source }
    }
}

/// As [`binary_error`], for a binary `body` of type `desc` as received:
/// prost's recursion limit may also come of a length past the end of the
/// message around it, which prost reads on into before it notices, so it
/// is said as depth only when the walk on the wire, which keeps each
/// message to its bytes, finds the body too deep.
fn body_error(message: String, source: prost::DecodeError, body: &[u8], desc: &MessageDescriptor) -> CodecError {
    if depth::is_recursion_error(&source) && depth::check_nesting(body, desc, 1).is_ok() {
        return CodecError::Binary { message, source };
    }
    binary_error(message, source)
}

/// Renders a dynamic message in `format`, within the nesting limit.
pub fn encode_dynamic(message: &DynamicMessage, format: Format) -> Result<Bytes, CodecError> {
    let too_deep = |_| CodecError::TooDeep { message: message.descriptor().full_name().to_owned() };
    match format {
        Format::Binary => Ok(message.encode_to_vec().into()),
        Format::Text => Ok(text::print(message).map_err(too_deep)?.into()),
        Format::Json => {
            // prost-reflect expands `Any` payloads as it serializes: measured first.
            depth::check_message(message, 1).map_err(too_deep)?;
            // Through serde_json::Value: its maps are sorted, so repeats of one
            // answer render byte for byte the same (prost-reflect maps are hashed).
            let render_error = |e: serde_json::Error| CodecError::Render {
                message: message.descriptor().full_name().to_owned(),
                reason: e.to_string(),
            };
            let value = json::to_value(message).map_err(render_error)?;
            let mut out = serde_json::to_vec_pretty(&value).map_err(render_error)?;
            out.push(b'\n');
            Ok(out.into())
        }
    }
}

/// Longest binary answer rendered in JSON or text. Those formats may write
/// a byte as six (`\u0001`): an answer of this size renders as 1.5 MiB at
/// most, where real answers take some kilobytes.
pub const MAX_RENDERED: usize = 256 * 1024;

/// Converts a binary body of type `desc` into `format`: how a cached
/// binary answer is served to a client that asked for JSON or text. A body
/// longer than [`MAX_RENDERED`], or holding more than a JSON or text body
/// may ([`depth::check_binary_as_text`]), is not rendered: those formats
/// cost as much to write as to read, and write more bytes than they read.
pub fn transcode(desc: MessageDescriptor, binary: &Bytes, format: Format) -> Result<Bytes, CodecError> {
    if format == Format::Binary {
        return Ok(binary.clone());
    }
    if binary.len() > MAX_RENDERED {
        let message = desc.full_name().to_owned();
        return Err(CodecError::TooLong { message, size: binary.len(), limit: MAX_RENDERED });
    }
    encode_dynamic(&decode_to_print(desc, binary)?, format)
}

/// Decodes a binary body of type `desc` to be printed (in JSON or text, or
/// to a log), unless it holds more than a JSON or text body may
/// ([`depth::check_binary_as_text`]).
pub fn decode_to_print(desc: MessageDescriptor, binary: &[u8]) -> Result<DynamicMessage, CodecError> {
    depth::check_binary_as_text(binary, &desc).map_err(|shape| shape_error(shape, desc.full_name().to_owned()))?;
    decode_dynamic(desc, binary, Format::Binary)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::proto::n_alice::n_scenarios::TScenarioRunRequest;

    #[test]
    fn media_types_map_to_formats() {
        assert_eq!(Format::from_media_type("application/protobuf"), Some(Format::Binary));
        assert_eq!(Format::from_media_type("application/x-protobuf"), Some(Format::Binary));
        assert_eq!(Format::from_media_type("Application/JSON; charset=utf-8"), Some(Format::Json));
        assert_eq!(Format::from_media_type("text/protobuf"), Some(Format::Text));
        assert_eq!(Format::from_media_type("text/plain"), Some(Format::Text));
        assert_eq!(Format::from_media_type("image/png"), None);
        assert_eq!(Format::from_accept("*/*, application/json;q=0.9"), Some(Format::Json));
        assert_eq!(Format::from_accept("*/*"), None);
    }

    #[test]
    fn accept_takes_the_known_entry_of_the_highest_quality() {
        let cases = [
            ("application/json;q=0.1, text/protobuf", Some(Format::Text)),
            ("text/protobuf;q=0.5, application/json;q=0.8, application/protobuf;q=0.2", Some(Format::Json)),
            ("application/json, text/protobuf", Some(Format::Json)),
            ("text/protobuf; Q=0.3, application/json ; q = 0.9", Some(Format::Json)),
            ("application/json;q=0, text/html", None),
            ("application/json;q=0, text/protobuf;q=0.01", Some(Format::Text)),
            // A quality that is not one counts as 1.
            ("text/protobuf;q=high, application/json;q=0.9", Some(Format::Text)),
            ("text/protobuf;q=7, application/json;q=0.9", Some(Format::Text)),
            ("text/html, image/png", None),
            ("", None),
        ];
        for (accept, want) in cases {
            assert_eq!(Format::from_accept(accept), want, "{accept}");
        }
    }

    #[test]
    fn short_and_full_names_resolve() {
        assert_eq!(
            message_descriptor("TScenarioRunRequest").unwrap().full_name(),
            "NAlice.NScenarios.TScenarioRunRequest"
        );
        assert!(message_descriptor("NAlice.NScenarios.TScenarioApplyRequest").is_ok());
        assert!(matches!(message_descriptor("TNoSuchThing"), Err(CodecError::UnknownType(_))));
    }

    #[test]
    fn an_unknown_type_names_the_nearest_and_the_known_ones() {
        let error = message_descriptor("TScenarioRunRequst").unwrap_err().to_string();
        assert!(error.starts_with("unknown message type \"TScenarioRunRequst\"; did you mean `TScenarioRunRequest`?"));
        assert!(error.contains("TScenarioApplyRequest, ") && error.contains("TScenarioRunResponse"), "{error}");
        let error = message_descriptor("Nothing.Like.It").unwrap_err().to_string();
        assert!(!error.contains("did you mean") && error.contains("TScenarioRunRequest"), "{error}");
    }

    #[test]
    fn json_with_trailing_garbage_is_rejected() {
        let body = br#"{"BaseRequest": {"RequestId": "r"}} trailing"#;
        assert!(matches!(decode::<TScenarioRunRequest>(body, Format::Json), Err(CodecError::Json { .. })));
    }

    #[test]
    fn text_that_is_not_utf8_is_rejected() {
        let body = b"BaseRequest { RequestId: \"\xff\" }";
        assert!(matches!(decode::<TScenarioRunRequest>(body, Format::Text), Err(CodecError::Utf8(_))));
    }

    #[test]
    fn string_field_with_bad_utf8_is_rejected_in_binary() {
        // BaseRequest (field 1, len 3) { RequestId (field 1, len 1) 0xff }
        let body = [0x0a, 0x03, 0x0a, 0x01, 0xff];
        assert!(matches!(decode::<TScenarioRunRequest>(&body, Format::Binary), Err(CodecError::Binary { .. })));
    }
}
