//! Proto3 JSON over prost-reflect, plus the one case it refuses: an empty
//! `google.protobuf.Any`. Megamind sends `State {}` in every request, and
//! protobuf's own JSON mapping writes it as `{}` and reads `{}` back as an
//! empty `Any`; prost-reflect wants an `@type` both ways. So empty `Any`
//! fields are taken out before prost-reflect sees the message and put back
//! after, on both paths.

use prost_reflect::{DynamicMessage, FieldDescriptor, Kind, MessageDescriptor, Value};
use serde::de::Error as _;
use serde_json::{Map, Value as Json};

const ANY: &str = "google.protobuf.Any";

/// Renders `message` as a JSON value (maps and objects sorted by key).
pub fn to_value(message: &DynamicMessage) -> Result<Json, serde_json::Error> {
    let mut message = message.clone();
    let mut empty = Vec::new();
    take_empty_anys(&mut message, &mut Vec::new(), &mut empty);
    let mut value = serde_json::to_value(&message)?;
    for path in empty {
        insert_at(&mut value, &path);
    }
    Ok(value)
}

/// Parses JSON text into a message of type `desc`.
pub fn from_slice(desc: MessageDescriptor, body: &[u8]) -> Result<DynamicMessage, serde_json::Error> {
    let mut value: Json = serde_json::from_slice(body)?;
    let mut empty = Vec::new();
    if let Json::Object(object) = &mut value {
        take_empty_objects(&desc, object, &mut Vec::new(), &mut empty);
    }
    let mut message = DynamicMessage::deserialize(desc, value)?;
    for path in empty {
        set_empty_any(&mut message, &path).map_err(serde_json::Error::custom)?;
    }
    Ok(message)
}

fn is_any(field: &FieldDescriptor) -> bool {
    matches!(field.kind(), Kind::Message(m) if m.full_name() == ANY)
}

fn is_empty_any(value: &Value) -> bool {
    matches!(value, Value::Message(m) if m.fields().next().is_none())
}

/// Clears singular empty `Any` fields, recording their JSON paths.
fn take_empty_anys(message: &mut DynamicMessage, path: &mut Vec<String>, found: &mut Vec<Vec<String>>) {
    let fields: Vec<FieldDescriptor> = message.fields().map(|(field, _)| field).collect();
    for field in fields {
        path.push(field.json_name().to_owned());
        if is_any(&field) && !field.is_list() && is_empty_any(&message.get_field(&field)) {
            message.clear_field(&field);
            found.push(path.clone());
        } else if let (Kind::Message(kind), false) = (field.kind(), field.is_list() || field.is_map())
            && !kind.full_name().starts_with("google.protobuf.")
            && let Value::Message(inner) = message.get_field_mut(&field)
        {
            take_empty_anys(inner, path, found);
        }
        path.pop();
    }
}

fn insert_at(value: &mut Json, path: &[String]) {
    let Some((last, parents)) = path.split_last() else { return };
    let mut node = value;
    for key in parents {
        let Json::Object(object) = node else { return };
        node = object.entry(key.clone()).or_insert_with(|| Json::Object(Map::new()));
    }
    if let Json::Object(object) = node {
        object.insert(last.clone(), Json::Object(Map::new()));
    }
}

/// Removes `{}` values of singular `Any` fields, recording their field paths.
fn take_empty_objects(
    desc: &MessageDescriptor,
    object: &mut Map<String, Json>,
    path: &mut Vec<FieldDescriptor>,
    found: &mut Vec<Vec<FieldDescriptor>>,
) {
    let keys: Vec<String> = object.keys().cloned().collect();
    for key in keys {
        let Some(field) = desc.get_field_by_json_name(&key).or_else(|| desc.get_field_by_name(&key)) else {
            continue;
        };
        let Kind::Message(kind) = field.kind() else { continue };
        if field.is_list() || field.is_map() {
            continue;
        }
        path.push(field.clone());
        match object.get_mut(&key) {
            Some(Json::Object(inner)) if kind.full_name() == ANY && inner.is_empty() => {
                object.remove(&key);
                found.push(path.clone());
            }
            Some(Json::Object(inner)) if !kind.full_name().starts_with("google.protobuf.") => {
                take_empty_objects(&kind, inner, path, found);
            }
            _ => {}
        }
        path.pop();
    }
}

fn set_empty_any(message: &mut DynamicMessage, path: &[FieldDescriptor]) -> Result<(), String> {
    let Some((last, parents)) = path.split_last() else { return Ok(()) };
    let mut node = message;
    for field in parents {
        match node.get_field_mut(field) {
            Value::Message(inner) => node = inner,
            _ => return Err(format!("field {} is not a message", field.name())),
        }
    }
    let Kind::Message(any) = last.kind() else { return Err(format!("field {} is not an Any", last.name())) };
    node.set_field(last, Value::Message(DynamicMessage::new(any)));
    Ok(())
}

#[cfg(test)]
mod tests {
    use prost_reflect::ReflectMessage;

    use super::*;
    use crate::proto::n_alice::n_scenarios::{TScenarioBaseRequest, TScenarioRunRequest};

    #[test]
    fn empty_any_is_an_empty_object_both_ways() {
        let request = TScenarioRunRequest {
            base_request: Some(TScenarioBaseRequest {
                request_id: "r".into(),
                state: Some(prost_types::Any::default()),
                ..Default::default()
            }),
            input: None,
        };
        let value = to_value(&request.transcode_to_dynamic()).unwrap();
        assert_eq!(value["BaseRequest"]["State"], serde_json::json!({}));
        let back = from_slice(request.descriptor(), value.to_string().as_bytes()).unwrap();
        assert_eq!(back.transcode_to::<TScenarioRunRequest>().unwrap(), request);
    }

    #[test]
    fn absent_any_stays_absent() {
        let request = TScenarioRunRequest::default();
        let value = to_value(&request.transcode_to_dynamic()).unwrap();
        assert_eq!(value, serde_json::json!({}));
    }
}
