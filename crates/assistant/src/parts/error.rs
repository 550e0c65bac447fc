//! Why a part is refused, and the one mapping of that to the wire: a status
//! and `{"error": {"code": ..., "message": ...}}` with a stable code.

use axum::response::{IntoResponse, Response};
use http::{HeaderValue, StatusCode, header};

/// Why a part is refused; each maps to one status and one stable code.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PartError {
    /// `part` is not a positive integer.
    #[error("part must be a positive integer (1, 2, ...), got {0:?}")]
    BadPart(String),
    /// `part` is past the last part.
    #[error("part {part} does not exist: this answer has {total_parts} part(s)")]
    PartOutOfRange {
        /// The part asked for.
        part: u32,
        /// How many parts the answer has.
        total_parts: u32,
    },
    /// The named snapshot is no longer kept and the answer is not that version.
    #[error("the snapshot named is no longer kept; start again from part 1 without a snapshot")]
    SnapshotExpired,
    /// The answer changed since the snapshot the part belongs to.
    #[error("the answer changed since part 1 was served; start again from part 1 without a snapshot")]
    SnapshotChanged,
}

impl PartError {
    /// The stable code in the JSON error: `bad_part`, `part_out_of_range`,
    /// `snapshot_expired`, `snapshot_changed`.
    pub fn code(&self) -> &'static str {
        match self {
            PartError::BadPart(_) => "bad_part",
            PartError::PartOutOfRange { .. } => "part_out_of_range",
            PartError::SnapshotExpired => "snapshot_expired",
            PartError::SnapshotChanged => "snapshot_changed",
        }
    }

    /// The HTTP status: 400, 416, 410, 412.
    pub fn status(&self) -> StatusCode {
        match self {
            PartError::BadPart(_) => StatusCode::BAD_REQUEST,
            PartError::PartOutOfRange { .. } => StatusCode::RANGE_NOT_SATISFIABLE,
            PartError::SnapshotExpired => StatusCode::GONE,
            PartError::SnapshotChanged => StatusCode::PRECONDITION_FAILED,
        }
    }
}

impl IntoResponse for PartError {
    /// `{"error": {"code": ..., "message": ...}}` with the error's status.
    fn into_response(self) -> Response {
        json_error(self.status(), self.code(), &self.to_string())
    }
}

/// `{"error": {"code": ..., "message": ...}}` with `status`: the one shape
/// of every `/llm` error.
pub fn json_error(status: StatusCode, code: &str, message: &str) -> Response {
    let body = serde_json::json!({ "error": { "code": code, "message": message } });
    json_response(status, body.to_string(), None)
}

/// `body` as JSON with `status`, never cached, with `etag` if given.
pub(super) fn json_response(status: StatusCode, body: String, etag: Option<&str>) -> Response {
    let mut response = (status, body).into_response();
    let headers = response.headers_mut();
    headers.insert(header::CONTENT_TYPE, HeaderValue::from_static("application/json"));
    headers.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
    if let Some(etag) = etag.and_then(|etag| HeaderValue::from_str(etag).ok()) {
        headers.insert(header::ETAG, etag);
    }
    response
}
