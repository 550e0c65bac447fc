//! What the fuzz targets check, shared: decoding requests in every format,
//! comparing two messages the way text format can preserve them, cutting a
//! stream into pieces, and the configuration `serve` reads over.

use megamind_core::{
    codec::{self, Format},
    proto::n_alice::n_scenarios::{TScenarioApplyRequest, TScenarioRunRequest},
};
use prost::Message;
use prost_reflect::{DynamicMessage, MapKey, ReflectMessage, Value};

/// Decodes `data` in `format` as both request types, as `/run` and the
/// other handlers do, through the codec and the dispatcher's decode step.
/// Whatever decodes must be printed (redacted, as the debug log does) and
/// rendered in every format without a panic.
pub fn decode_requests(data: &[u8], format: Format) {
    decode_as::<TScenarioRunRequest>(data, format);
    decode_as::<TScenarioApplyRequest>(data, format);
    // The dispatcher's own decode step: its RequestId and nesting checks.
    megamind_core::dispatch::fuzz_decode(data, format);
    if format == Format::Binary {
        state_measure(data);
    }
}

/// A `State` the dispatcher lets in, measured on the wire, is within the
/// nesting limit when decoded too (the wire walk may refuse more: bytes
/// that do not decode, which a decoder leaves as bytes).
fn state_measure(data: &[u8]) {
    use codec::depth::{check_any, check_message};
    let Ok(request) = TScenarioRunRequest::decode(data) else { return };
    let Some(state) = request.base_request.as_ref().and_then(|base| base.state.as_ref()) else { return };
    if check_any(state, 3).is_err() {
        return;
    }
    let any = megamind_core::proto::DESCRIPTOR_POOL.get_message_by_name("google.protobuf.Any").expect("Any");
    let decoded = DynamicMessage::decode(any, state.encode_to_vec().as_slice()).expect("an Any decodes");
    if let Err(error) = check_message(&decoded, 3) {
        panic!("a State measured on the wire within the limit decodes past it: {error}");
    }
}

fn decode_as<T: Message + ReflectMessage + Default>(data: &[u8], format: Format) {
    // The values count of long binary bodies, on bytes of any length, and
    // the answers' count before JSON or text, through the server's path.
    if format == Format::Binary {
        let _ = codec::depth::check_binary(data, &T::default().descriptor());
        let _ = codec::transcode(T::default().descriptor(), &bytes::Bytes::copy_from_slice(data), Format::Text);
    }
    if let Ok(typed) = codec::decode::<T>(data, format) {
        // May refuse an `Any` nested too deep: the dispatcher measures those
        // before it logs.
        let _ = codec::redact::redacted_text(&typed);
    }
    // The path of `convert`: what decodes within the nesting limit prints
    // within it too. JSON may refuse an `Any` of a type the schema lacks.
    let desc = T::default().descriptor();
    if let Ok(message) = codec::decode_dynamic(desc, data, format) {
        if let Err(error) = codec::encode_dynamic(&message, Format::Text) {
            panic!("decoded but not printed: {error}");
        }
        let _ = codec::encode_dynamic(&message, Format::Json);
        let _ = codec::encode_dynamic(&message, Format::Binary);
    }
}

/// Where `a` and `b` differ in what text format carries, or `None`.
///
/// Not compared, because text format cannot carry them: unknown fields
/// (the printer leaves them out), the payload and sign of a NaN (printed
/// `nan`), and the exact bytes of an `Any` whose type the schema knows (the
/// printer expands it, the parser encodes it afresh: its decoded content is
/// compared instead).
pub fn difference(a: &DynamicMessage, b: &DynamicMessage) -> Option<String> {
    if a.descriptor() != b.descriptor() {
        return Some(format!("type {} vs {}", a.descriptor().full_name(), b.descriptor().full_name()));
    }
    if let Some(inner) = any_contents(a).zip(any_contents(b)) {
        return match inner {
            (Some((url_a, a)), Some((url_b, b))) if url_a == url_b => {
                difference(&a, &b).map(|d| format!("[{url_a}] {d}"))
            }
            // Both undecodable: the plain fields below are compared.
            (None, None) => fields_difference(a, b),
            _ => Some("Any expanded on one side only".to_owned()),
        };
    }
    fields_difference(a, b)
}

fn fields_difference(a: &DynamicMessage, b: &DynamicMessage) -> Option<String> {
    let mut fields_a: Vec<_> = a.fields().collect();
    let mut fields_b: Vec<_> = b.fields().collect();
    fields_a.sort_by_key(|(field, _)| field.number());
    fields_b.sort_by_key(|(field, _)| field.number());
    let numbers = |fields: &[(prost_reflect::FieldDescriptor, &Value)]| -> Vec<u32> {
        fields.iter().map(|(field, _)| field.number()).collect()
    };
    if numbers(&fields_a) != numbers(&fields_b) {
        return Some(format!("fields {:?} vs {:?}", numbers(&fields_a), numbers(&fields_b)));
    }
    fields_a.iter().zip(&fields_b).find_map(|((field, x), (_, y))| {
        value_difference(x, y).map(|d| format!("{}.{}: {d}", a.descriptor().name(), field.name()))
    })
}

fn value_difference(a: &Value, b: &Value) -> Option<String> {
    let same = match (a, b) {
        (Value::F32(x), Value::F32(y)) => x == y || (x.is_nan() && y.is_nan()),
        (Value::F64(x), Value::F64(y)) => x == y || (x.is_nan() && y.is_nan()),
        (Value::Message(x), Value::Message(y)) => return difference(x, y),
        (Value::List(x), Value::List(y)) => {
            if x.len() != y.len() {
                return Some(format!("{} vs {} items", x.len(), y.len()));
            }
            return x
                .iter()
                .zip(y)
                .enumerate()
                .find_map(|(i, (x, y))| value_difference(x, y).map(|d| format!("[{i}] {d}")));
        }
        (Value::Map(x), Value::Map(y)) => {
            let mut keys: Vec<&MapKey> = x.keys().collect();
            keys.sort();
            if x.len() != y.len() {
                return Some(format!("{} vs {} entries", x.len(), y.len()));
            }
            return keys.into_iter().find_map(|key| match y.get(key) {
                None => Some(format!("key {key:?} missing")),
                Some(other) => value_difference(&x[key], other).map(|d| format!("[{key:?}] {d}")),
            });
        }
        (x, y) => x == y,
    };
    (!same).then(|| format!("{a:?} vs {b:?}"))
}

/// For a `google.protobuf.Any`: `Some(Some((type_url, content)))` when the
/// printer would expand it, `Some(None)` when it prints it plain.
#[allow(clippy::option_option)]
fn any_contents(any: &DynamicMessage) -> Option<Option<(String, DynamicMessage)>> {
    if any.descriptor().full_name() != "google.protobuf.Any" {
        return None;
    }
    let (Some(Value::String(url)), Some(Value::Bytes(bytes))) =
        (any.get_field_by_number(1).as_deref().cloned(), any.get_field_by_number(2).as_deref().cloned())
    else {
        return Some(None);
    };
    let desc = url.rsplit_once('/').and_then(|(_, name)| any.descriptor().parent_pool().get_message_by_name(name));
    Some(desc.and_then(|desc| DynamicMessage::decode(desc, bytes).ok()).map(|inner| (url, inner)))
}

/// `stream` in pieces of 0 to 16 bytes, their sizes drawn from `seed`.
pub fn cut(stream: &[u8], seed: u8) -> Vec<&[u8]> {
    let mut state = u32::from(seed).wrapping_mul(2_654_435_761) | 1;
    let mut rest = stream;
    let mut chunks = Vec::new();
    while !rest.is_empty() {
        state ^= state << 13;
        state ^= state >> 17;
        state ^= state << 5;
        let (chunk, tail) = rest.split_at(((state % 17) as usize).min(rest.len()));
        chunks.push(chunk);
        rest = tail;
    }
    chunks
}

/// What `serve` reads a configuration over: the scenarios whose tables it
/// checks, their defaults and the core's, and the scenarios' moved keys.
pub mod config {
    use std::sync::LazyLock;

    use megamind_assistant::AssistantModule;
    use megamind_core::{
        config::Config,
        scenario::{ScenarioModule, module},
    };

    /// The scenarios `serve` would check the tables against.
    pub static MODULES: LazyLock<Vec<Box<dyn ScenarioModule>>> =
        LazyLock::new(|| vec![Box::new(AssistantModule::default()) as Box<dyn ScenarioModule>]);

    /// The core's defaults and the scenarios', as `serve` reads over them.
    pub static DEFAULTS: LazyLock<toml::Table> = LazyLock::new(|| {
        let mut defaults = Config::defaults_table();
        defaults.extend(module::defaults_of(&MODULES));
        defaults
    });

    /// The scenarios' moved keys, as whole dotted paths.
    pub static ALIASES: LazyLock<Vec<(String, String)>> = LazyLock::new(|| {
        MODULES
            .iter()
            .flat_map(|module| {
                let name = module.name();
                module.aliases().iter().map(move |(old, new)| (format!("{name}.{old}"), format!("{name}.{new}")))
            })
            .collect()
    });
}
