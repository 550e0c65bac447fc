//! Request bodies for benchmarks: the protocol's fixtures, and a way to give
//! each request a fresh RequestId without re-encoding the body.

#![allow(dead_code)]

use megamind_core::codec::{self, Format};

/// A RequestId placeholder of the usual UUID length.
const PLACEHOLDER: &str = "00000000-0000-0000-0000-000000000000";

/// The text of a fixture in `tests/fixtures/megamind/`.
pub fn fixture_text(name: &str) -> String {
    let path = format!("{}/tests/fixtures/megamind/{name}.pb.txt", env!("CARGO_MANIFEST_DIR"));
    std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{path}: {e}"))
}

/// A fixture of type `type_name` encoded in `format`.
pub fn fixture_body(name: &str, type_name: &str, format: Format) -> Vec<u8> {
    let desc = codec::message_descriptor(type_name).expect("known type");
    let message = codec::decode_dynamic(desc, fixture_text(name).as_bytes(), Format::Text).expect("fixture parses");
    codec::encode_dynamic(&message, format).expect("fixture encodes").to_vec()
}

/// A binary body whose RequestId bytes can be rewritten in place.
#[derive(Clone)]
pub struct Stamped {
    body: Vec<u8>,
    at: usize,
}

impl Stamped {
    /// The binary fixture `name` of `type_name` with its RequestId replaced by a placeholder.
    pub fn new(name: &str, type_name: &str) -> Stamped {
        Stamped::from_text(&fixture_text(name), type_name)
    }

    /// The message `text` (text format, with a RequestId) of `type_name`,
    /// binary, its RequestId replaced by a placeholder.
    pub fn from_text(text: &str, type_name: &str) -> Stamped {
        let start = text.find("RequestId: \"").expect("fixture has a RequestId") + "RequestId: \"".len();
        let end = start + text[start..].find('"').expect("closing quote");
        let text = format!("{}{PLACEHOLDER}{}", &text[..start], &text[end..]);
        let desc = codec::message_descriptor(type_name).expect("known type");
        let message = codec::decode_dynamic(desc, text.as_bytes(), Format::Text).expect("fixture parses");
        let body = codec::encode_dynamic(&message, Format::Binary).expect("encodes").to_vec();
        let at = body.windows(PLACEHOLDER.len()).position(|w| w == PLACEHOLDER.as_bytes()).expect("placeholder");
        Stamped { body, at }
    }

    /// The body with RequestId `{prefix:08x}-0000-0000-0000-{n:012x}`.
    pub fn with_id(&mut self, prefix: u32, n: u64) -> &[u8] {
        let id = format!("{prefix:08x}-0000-0000-0000-{:012x}", n & 0xffff_ffff_ffff);
        self.body[self.at..self.at + PLACEHOLDER.len()].copy_from_slice(id.as_bytes());
        &self.body
    }
}
