//! JSON objects as `google.protobuf.Struct`: a model's command payload, a
//! script's callback payload. Numbers become doubles, as in protobuf's own
//! JSON mapping. The depth is the JSON parser's to bound (serde_json stops
//! at 128 levels).

use prost_types::{ListValue, Struct, Value as ProtoValue, value::Kind};
use serde_json::{Map, Value};

/// `object` as a `Struct`.
pub fn struct_from_json(object: Map<String, Value>) -> Struct {
    Struct { fields: object.into_iter().map(|(k, v)| (k, value_from_json(v))).collect() }
}

fn value_from_json(value: Value) -> ProtoValue {
    let kind = match value {
        Value::Null => Kind::NullValue(0),
        Value::Bool(b) => Kind::BoolValue(b),
        Value::Number(n) => Kind::NumberValue(n.as_f64().unwrap_or_default()),
        Value::String(s) => Kind::StringValue(s),
        Value::Array(items) => Kind::ListValue(ListValue { values: items.into_iter().map(value_from_json).collect() }),
        Value::Object(object) => Kind::StructValue(struct_from_json(object)),
    };
    ProtoValue { kind: Some(kind) }
}
