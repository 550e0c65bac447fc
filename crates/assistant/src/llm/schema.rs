//! What `GET /llm/schema` answers: the `/llm` endpoints, the JSON Schema of
//! each answer, the JSONSeq events of the stream and the rules for
//! reassembling an answer served in parts. A client reads it before any
//! other `/llm` call, so it says everything a client needs.

use serde_json::{Value, json};

use crate::parts;

/// The schema document, for answers split as `parts` says.
pub(crate) fn schema(parts: &parts::PartsConfig) -> Value {
    let error = json!({
        "type": "object",
        "required": ["error"],
        "properties": {"error": {
            "type": "object",
            "required": ["code", "message"],
            "properties": {"code": {"type": "string"}, "message": {"type": "string"}},
        }},
    });
    json!({
        "version": 1,
        "endpoints": [
            {
                "method": "GET",
                "path": "/llm/stream/{request_id}",
                "summary": "The answer of the model call the request's /run started, as Server-Sent Events (JSONSeq v1), live; late subscribers get every event from the first.",
                "content_type": "text/event-stream",
                "parameters": {
                    "request_id": "the RequestId of the /run that started the call (also the Url of ShowStreamDirective)",
                    "Last-Event-ID": "header: resume after this event id (also ?after=N); after the last event of an ended call, 204 with no body; past it, 400 (read from the start)",
                },
                "errors": {"400": "a bad Last-Event-ID (not a number, or past an ended call's last event) or request id", "403": "an address not signed, or expired", "404": "no such call", "410": "the call expired", "503": "too many open streams, or the shared store out of reach; retry"},
            },
            {
                "method": "GET",
                "path": "/llm/answers/{request_id}",
                "summary": "The call's whole answer so far, as JSON; possibly in parts.",
                "content_type": "application/json",
                "parameters": {"part": "the part to fetch, from 1", "snapshot": "the snapshot the parts come from (also If-Match)"},
                "errors": {"400": "a bad part", "403": "an address not signed, or expired", "404": "no such call", "410": "the call or the snapshot expired", "412": "the answer changed since part 1", "416": "no such part", "503": "the shared store out of reach; retry"},
            },
            {
                "method": "GET",
                "path": "/llm/skills",
                "summary": "The skills catalog (SKILL.md files): what a user can start with \"run skill <name>\"; possibly in parts.",
                "content_type": "application/json",
                "parameters": {"part": "the part to fetch, from 1", "snapshot": "the snapshot the parts come from (also If-Match)"},
                "errors": {"400": "a bad part", "403": "no good TVM service ticket, when the server checks them", "410": "the snapshot expired", "412": "the catalog changed since part 1", "416": "no such part"},
            },
            {
                "method": "GET",
                "path": "/llm/schema",
                "summary": "This document; possibly in parts.",
                "content_type": "application/json",
            },
        ],
        "schemas": {
            "part": parts::part_schema(),
            "answer": answer_schema(),
            "skills": skills_schema(),
            "error": error,
        },
        "events": events(),
        "chunking": parts::chunking_doc(parts),
    })
}

fn answer_schema() -> Value {
    let nullable = |kind: &str| json!({"type": [kind, "null"]});
    json!({
        "type": "object",
        "required": ["request_id", "message_id", "model", "status", "text", "events", "timings"],
        "properties": {
            "request_id": {"type": "string"},
            "message_id": {"type": "string", "description": "the message_id of every stream event"},
            "model": {"type": "string"},
            "status": {"enum": ["running", "completed", "failed"]},
            "text": {"type": "string", "description": "what the answer says: its final words, without the model's thought (its command object read)"},
            "raw_text": {"type": "string", "description": "the model's output as it came"},
            "reasoning": {"type": "string", "description": "the model's thought: reasoning sent apart, then the thought written in its text"},
            "truncated": {"type": "boolean", "description": "the answer was cut at the server's bound"},
            "finish_reason": nullable("string"),
            "error": nullable("string"),
            "command": {"type": ["object", "null"], "properties": {
                "command": {"enum": ["open_app", "close_app"]},
                "app_name": {"type": "string"},
                "app_path": {"type": "string"},
                "session_id": {"type": "string"},
            }},
            "directive": {"type": ["object", "null"], "description": "the client directive of the command: TDirective in protobuf JSON"},
            "events": {"type": "array", "items": {
                "type": "object",
                "required": ["id", "event", "data"],
                "properties": {"id": {"type": "integer"}, "event": {"type": "string"}, "data": {"type": "object"}},
            }},
            "timings": {"type": "object", "properties": {
                "first_token_ms": nullable("number"),
                "total_ms": {"type": "number"},
            }},
            "usage": {"type": ["object", "null"], "properties": {
                "prompt_tokens": {"type": "integer"},
                "completion_tokens": {"type": "integer"},
            }},
        },
    })
}

fn skills_schema() -> Value {
    let strings = json!({"type": "array", "items": {"type": "string"}});
    json!({
        "type": "object",
        "required": ["skills"],
        "properties": {"skills": {"type": "array", "items": {
            "type": "object",
            "required": ["name", "description", "triggers", "parameters"],
            "properties": {
                "name": {"type": "string"},
                "description": {"type": "string"},
                "triggers": strings,
                "parameters": {"type": "array", "items": {"type": "object", "properties": {
                    "name": {"type": "string"}, "description": {"type": "string"},
                }}},
                "allowed_tools": {"type": ["array", "null"], "items": {"type": "string"}},
                "compatibility": {"type": ["string", "null"]},
                "license": {"type": ["string", "null"]},
            },
        }}},
    })
}

fn events() -> Value {
    json!({
        "contract": "JSONSeq v1: every data carries message_id and request_id; every event an id (a heartbeat repeats the id before it)",
        "order": ["status", "serp_summary?", "thinking_start", "phase_start", "phase_delta*", "thinking_end", "final_delta+", "serp_queries?", "final_end", "completed"],
        "names": {
            "status": "data.state: started",
            "serp_summary": "data.text",
            "thinking_start": "",
            "phase_start": "data.id (1, 2, ...), data.title",
            "phase_delta": "data.id, data.text",
            "thinking_end": "",
            "final_delta": "data.text (Markdown)",
            "serp_queries": "data.queries (at most 5)",
            "final_end": "",
            "heartbeat": "while the model is silent",
            "error": "data.code (model_failed, shutdown), data.message, data.retry",
            "completed": "data.status (ok, failed), data.finish_reason, data.usage",
        },
    })
}
