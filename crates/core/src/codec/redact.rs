//! Redaction of personal data before a message reaches the logs.
//!
//! Fields are matched by name anywhere in the message tree, `Any` payloads
//! included (a `State` may hold a whole request), so new messages that reuse
//! these names are covered without a list of paths to maintain. The names:
//!
//! - replaced by [`REDACTED`]: `ClientIP`, `RawPersonalData`, `DeviceId`,
//!   `Uuid`, `ServiceTicket`, `UserTicket`;
//! - dropped whole: `BiometryScoring`, `BiometryClassification`, and
//!   `Location` (where the device is, to a few metres).
//!
//! In every other string, a signed address's signature (`?…&sig=…`) reads
//! `<hidden>` ([`hide_signatures`]): a `ShowStreamDirective`'s URL lets
//! whoever holds it follow the answer until it expires.
//!
//! An `Any` payload that cannot be read field by field (a type `proto/`
//! does not declare, or bytes that do not decode) is not shown, only its
//! size. Redaction stops at the nesting limit: a message nested deeper is not
//! printed at all.

use prost::Message;
use prost_reflect::{DynamicMessage, ReflectMessage, Value};

use super::depth::{self, MAX_DEPTH, TooDeep};
use crate::text::hide_signatures;

/// String fields whose value is replaced by [`REDACTED`].
pub const SECRET_STRINGS: &[&str] = &["ClientIP", "RawPersonalData", "DeviceId", "Uuid", "ServiceTicket", "UserTicket"];
/// Message fields (biometry, the device's location) dropped whole.
pub const SECRET_MESSAGES: &[&str] = &["BiometryScoring", "BiometryClassification", "Location"];
/// What a redacted string reads as.
pub const REDACTED: &str = "<redacted>";

/// Redacts personal data in place, or refuses a message nested deeper than the limit.
pub fn redact(message: &mut DynamicMessage) -> Result<(), TooDeep> {
    redact_at(message, 1)
}

fn redact_at(message: &mut DynamicMessage, level: usize) -> Result<(), TooDeep> {
    if level > MAX_DEPTH {
        return Err(TooDeep);
    }
    if message.descriptor().full_name() == depth::ANY {
        return redact_any(message, level);
    }
    let desc = message.descriptor();
    for field in desc.fields() {
        if !message.has_field(&field) {
            continue;
        }
        let name = field.name();
        if SECRET_STRINGS.contains(&name) && matches!(message.get_field(&field).as_ref(), Value::String(_)) {
            message.set_field(&field, Value::String(REDACTED.to_owned()));
        } else if SECRET_MESSAGES.contains(&name) {
            message.clear_field(&field);
        } else {
            match message.get_field_mut(&field) {
                Value::List(items) => items.iter_mut().try_for_each(|item| redact_value(item, level + 1))?,
                // A map entry is a level of its own.
                Value::Map(entries) => entries.values_mut().try_for_each(|item| redact_value(item, level + 2))?,
                value => redact_value(value, level + 1)?,
            }
        }
    }
    Ok(())
}

fn redact_value(value: &mut Value, level: usize) -> Result<(), TooDeep> {
    match value {
        Value::Message(inner) => redact_at(inner, level),
        Value::String(text) => {
            if let Some(hidden) = hide_signatures(text) {
                *text = hidden;
            }
            Ok(())
        }
        _ => Ok(()),
    }
}

/// Redacts inside an `Any` whose type is known: its payload is decoded,
/// redacted and encoded back. A payload that cannot be read field by field
/// (a type `proto/` does not declare, or bytes that do not decode as it)
/// cannot be redacted field by field: it is not shown, only its size.
fn redact_any(any: &mut DynamicMessage, level: usize) -> Result<(), TooDeep> {
    let Some(mut inner) = depth::expand_any(any, level + 1)? else {
        let size = any.get_field_by_number(2).and_then(|value| value.as_bytes().map(|bytes| bytes.len()));
        if let Some(size @ 1..) = size {
            let shown = format!("<{size} bytes not shown: not a type proto/ declares, or not one that decodes>");
            any.set_field_by_number(2, Value::Bytes(shown.into_bytes().into()));
        }
        return Ok(());
    };
    redact_at(&mut inner, level + 1)?;
    any.set_field_by_number(2, Value::Bytes(inner.encode_to_vec().into()));
    Ok(())
}

/// The text format of `message` with personal data redacted: what debug logs
/// print; a message nested deeper than the limit is refused.
pub fn redacted_text<T: ReflectMessage>(message: &T) -> Result<String, TooDeep> {
    let mut dynamic = message.transcode_to_dynamic();
    redact(&mut dynamic)?;
    super::text::print(&dynamic)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::proto::n_alice::n_scenarios::{
        TBiometryScoring, TClientInfo, TInput, TLocation, TOptions, TScenarioBaseRequest, TScenarioRunRequest,
        TVoiceInput, t_input,
    };

    #[test]
    fn personal_data_never_reaches_the_text() {
        let request = TScenarioRunRequest {
            base_request: Some(TScenarioBaseRequest {
                request_id: "r-1".into(),
                options: Some(TOptions {
                    client_ip: "109.252.86.235".into(),
                    raw_personal_data: "{\"phone\":\"+7\"}".into(),
                    user_agent: "UA".into(),
                    ..Default::default()
                }),
                location: Some(TLocation { lat: 55.733_842, lon: 37.588_144, ..Default::default() }),
                ..Default::default()
            }),
            input: Some(TInput {
                event: Some(t_input::Event::Voice(TVoiceInput {
                    utterance: "купи".into(),
                    biometry_scoring: Some(TBiometryScoring { group_id: "1454ee36".into(), ..Default::default() }),
                    ..Default::default()
                })),
                ..Default::default()
            }),
        };
        let text = redacted_text(&request).unwrap();
        assert!(!text.contains("109.252"), "{text}");
        assert!(!text.contains("phone"), "{text}");
        assert!(!text.contains("1454ee36"), "{text}");
        assert!(!text.contains("55.73") && !text.contains("37.58") && !text.contains("Location"), "{text}");
        assert!(text.contains("ClientIP: \"<redacted>\""), "{text}");
        assert!(text.contains("купи") && text.contains("r-1") && text.contains("UA"), "{text}");
    }

    #[test]
    fn personal_data_inside_any_is_redacted_at_every_depth() {
        use prost::Message;
        let secret = TScenarioBaseRequest {
            request_id: "inner".into(),
            client_info: Some(TClientInfo { uuid: "u-123".into(), device_id: "d-456".into(), ..Default::default() }),
            options: Some(TOptions { client_ip: "10.1.2.3".into(), ..Default::default() }),
            ..Default::default()
        };
        let pack = |message: &TScenarioBaseRequest| prost_types::Any {
            type_url: "type.googleapis.com/NAlice.NScenarios.TScenarioBaseRequest".into(),
            value: message.encode_to_vec(),
        };
        let middle =
            TScenarioBaseRequest { request_id: "middle".into(), state: Some(pack(&secret)), ..Default::default() };
        let request = TScenarioRunRequest {
            base_request: Some(TScenarioBaseRequest {
                request_id: "outer".into(),
                state: Some(pack(&middle)),
                ..Default::default()
            }),
            input: None,
        };
        let text = redacted_text(&request).unwrap();
        assert!(text.contains("RequestId: \"inner\""), "{text}");
        for secret in ["u-123", "d-456", "10.1.2.3"] {
            assert!(!text.contains(secret), "{secret} in {text}");
        }
        assert_eq!(text.matches(REDACTED).count(), 3, "{text}");

        // The same payload under a type `proto/` does not declare, or its
        // bytes made undecodable (a string that is not UTF-8): not shown.
        let mut payload = secret.encode_to_vec();
        let unknown = prost_types::Any { type_url: "type.googleapis.com/team.Private".into(), value: payload.clone() };
        payload.extend_from_slice(&[0x0a, 0x01, 0xff]);
        let broken = prost_types::Any { value: payload, ..pack(&secret) };
        for any in [unknown, broken] {
            let size = any.value.len();
            let base = TScenarioBaseRequest { state: Some(any), ..Default::default() };
            let request = TScenarioRunRequest { base_request: Some(base), input: None };
            let text = redacted_text(&request).unwrap();
            for secret in ["u-123", "d-456", "10.1.2.3"] {
                assert!(!text.contains(secret), "{secret} in {text}");
            }
            assert!(text.contains(&format!("<{size} bytes not shown")), "{text}");
        }
    }

    #[test]
    fn a_signed_address_in_an_answer_is_logged_without_its_signature() {
        use crate::proto::n_alice::n_scenarios::{
            TDirective, TLayout, TScenarioResponseBody, TScenarioRunResponse, TShowStreamDirective, t_directive,
            t_scenario_run_response,
        };
        let signature = "8e7044".repeat(10);
        let url = format!("https://a.example/llm/stream/r1?exp=1795924485&sig={signature}");
        let show = TShowStreamDirective { name: "show_llm_stream".into(), url };
        let directive = TDirective { directive: Some(t_directive::Directive::ShowStreamDirective(show)) };
        let layout =
            TLayout { directives: vec![directive], output_speech: "sig=plain words".into(), ..Default::default() };
        let body = TScenarioResponseBody { layout: Some(layout), ..Default::default() };
        let answer = TScenarioRunResponse {
            response: Some(t_scenario_run_response::Response::ResponseBody(body)),
            ..Default::default()
        };
        let text = redacted_text(&answer).unwrap();
        assert!(!text.contains(&signature), "{text}");
        assert!(text.contains("r1?exp=1795924485&sig=<hidden>"), "{text}");
        assert!(text.contains("\"sig=<hidden> words\""), "a string that starts so is hidden alike: {text}");
    }

    #[test]
    fn redaction_refuses_nesting_past_the_limit() {
        let deep = crate::codec::depth::tests::nested_any_state(500);
        assert_eq!(redacted_text(&deep), Err(TooDeep));
    }
}
