//! Redaction of personal data before a message reaches the logs.
//!
//! Fields are matched by name anywhere in the message tree, so new messages
//! that reuse these names are covered without a list of paths to maintain.

use prost_reflect::{DynamicMessage, ReflectMessage, Value};

/// String fields whose value is replaced by [`REDACTED`].
const SECRET_STRINGS: &[&str] = &["ClientIP", "RawPersonalData"];
/// Message fields (biometry) dropped whole.
const SECRET_MESSAGES: &[&str] = &["BiometryScoring", "BiometryClassification"];
/// What a redacted string reads as.
pub const REDACTED: &str = "<redacted>";

/// Redacts personal data in place.
pub fn redact(message: &mut DynamicMessage) {
    let desc = message.descriptor();
    for field in desc.fields() {
        if !message.has_field(&field) {
            continue;
        }
        let name = field.name();
        if SECRET_STRINGS.contains(&name) {
            message.set_field(&field, Value::String(REDACTED.to_owned()));
        } else if SECRET_MESSAGES.contains(&name) {
            message.clear_field(&field);
        } else {
            match message.get_field_mut(&field) {
                Value::Message(inner) => redact(inner),
                Value::List(items) => items.iter_mut().for_each(redact_value),
                Value::Map(entries) => entries.values_mut().for_each(redact_value),
                _ => {}
            }
        }
    }
}

fn redact_value(value: &mut Value) {
    if let Value::Message(inner) = value {
        redact(inner);
    }
}

/// The text format of `message` with personal data redacted: what debug logs print.
pub fn redacted_text<T: ReflectMessage>(message: &T) -> String {
    let mut dynamic = message.transcode_to_dynamic();
    redact(&mut dynamic);
    super::text::print(&dynamic)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::proto::n_alice::n_scenarios::{
        TBiometryScoring, TInput, TOptions, TScenarioBaseRequest, TScenarioRunRequest, TVoiceInput, t_input,
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
        let text = redacted_text(&request);
        assert!(!text.contains("109.252"), "{text}");
        assert!(!text.contains("phone"), "{text}");
        assert!(!text.contains("1454ee36"), "{text}");
        assert!(text.contains("ClientIP: \"<redacted>\""), "{text}");
        assert!(text.contains("купи") && text.contains("r-1") && text.contains("UA"), "{text}");
    }
}
