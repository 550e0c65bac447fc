//! What `/llm/schema` says about answers in parts: the JSON Schema of the
//! part wrapper and the reassembly instructions, with an example cut by the
//! same [`split`] the server uses, so that the example cannot lie.

use serde_json::{Value, json};

use crate::parts::{PartsConfig, etag_of, split};

/// The JSON Schema (draft 2020-12) of one part as [`super::Parts::respond`]
/// serves it: a whole answer (`is_consequential: false`, `content` the JSON
/// itself) or one part of a larger one (`content` a string).
pub fn part_schema() -> Value {
    json!({
        "$schema": "https://json-schema.org/draft/2020-12/schema",
        "title": "Part",
        "description": "An answer served whole or in parts. Concatenate the `content` strings of parts 1..total_parts \
                        exactly and parse the result as JSON.",
        "type": "object",
        "required": ["is_consequential", "content", "part", "total_parts", "snapshot"],
        "additionalProperties": false,
        "properties": {
            "is_consequential": {
                "type": "boolean",
                "description": "true: the answer is cut into parts and `content` is a string fragment of its JSON; \
                                false: `content` is the whole answer."
            },
            "content": {
                "description": "The whole answer (any JSON) when is_consequential is false; else an exact substring \
                                of the answer's serialized JSON, not valid JSON on its own."
            },
            "part": { "type": "integer", "minimum": 1, "description": "This part's number, from 1." },
            "total_parts": { "type": "integer", "minimum": 1, "description": "How many parts the answer has." },
            "snapshot": {
                "type": "string",
                "description": "The strong ETag (quotes included) of the version every part comes from; equal to \
                                the ETag header. Pass it as ?snapshot= (or If-Match) when asking for later parts."
            }
        },
        "oneOf": [
            {
                "properties": {
                    "is_consequential": { "const": false },
                    "part": { "const": 1 },
                    "total_parts": { "const": 1 }
                }
            },
            {
                "properties": {
                    "is_consequential": { "const": true },
                    "content": { "type": "string" }
                }
            }
        ]
    })
}

/// How to reassemble answers served in parts under `config`: the limits,
/// the steps, the errors and what to do about each, and a worked example.
pub fn chunking_doc(config: &PartsConfig) -> Value {
    json!({
        "chunk_bytes": config.chunk_bytes,
        "snapshot_ttl_seconds": config.snapshot_ttl.as_secs(),
        "instructions": [
            "Ask for the answer (part 1 is implied). If is_consequential is false, content is the whole answer: done.",
            "If is_consequential is true, remember snapshot and total_parts, then ask for part=2, 3, ... up to \
             total_parts with the same URL plus part=N&snapshot=<snapshot> in its query (after & when the URL \
             has a query already, as a signed address does; else after ?), or the header If-Match: <snapshot>.",
            "Concatenate the content strings in part order exactly as received: add, remove or trim nothing, \
             not even whitespace.",
            "Parse the concatenation as JSON. A part alone is usually not valid JSON; parts never split a UTF-8 \
             character, and each is at most chunk_bytes bytes of the serialized JSON.",
            "On 410 (snapshot_expired) or 412 (snapshot_changed), discard the parts you have and start again \
             from part 1 without a snapshot."
        ],
        "errors": [
            { "status": 400, "code": "bad_part", "meaning": "part is not a positive integer" },
            { "status": 416, "code": "part_out_of_range", "meaning": "part is greater than total_parts" },
            { "status": 410, "code": "snapshot_expired", "meaning": "the named snapshot is no longer kept; start again from part 1" },
            { "status": 412, "code": "snapshot_changed", "meaning": "the answer changed since part 1; start again from part 1" }
        ],
        "error_shape": { "error": { "code": "snapshot_expired", "message": "..." } },
        "example": example(),
    })
}

/// A small answer cut into 16-byte parts, as the server would serve it.
fn example() -> Value {
    let answer = json!({ "text": "Привет 👋", "ok": true });
    let text = answer.to_string();
    let chunk_bytes = 16;
    let chunks = split(&text, chunk_bytes);
    let snapshot = etag_of(&text);
    let parts: Vec<Value> = chunks
        .iter()
        .enumerate()
        .map(|(i, content)| {
            json!({
                "is_consequential": true,
                "content": content,
                "part": i + 1,
                "total_parts": chunks.len(),
                "snapshot": snapshot,
            })
        })
        .collect();
    json!({
        "chunk_bytes": chunk_bytes,
        "answer": answer,
        "parts": parts,
        "concatenated": text,
    })
}
