//! What the caller says about itself besides the request message: the TVM
//! tickets Megamind sends in headers (gRPC metadata are HTTP/2 headers, so
//! both transports read them from one [`http::HeaderMap`] with
//! [`CallMeta::from_headers`]).

use std::fmt;

use http::HeaderMap;

use crate::config::HIDDEN;

/// The header Megamind puts its own TVM service ticket in.
pub const SERVICE_TICKET: &str = "x-ya-service-ticket";

/// The header Megamind puts the user's TVM ticket in.
pub const USER_TICKET: &str = "x-ya-user-ticket";

/// The gRPC metadata key naming the scenario to call (the default one when absent).
pub const SCENARIO_KEY: &str = "x-scenario";

/// The caller's credentials as it sent them, and what checking them said.
/// A debug print shows whether each ticket came, never the ticket: every
/// call's context carries them, and a scenario may print its context.
#[derive(Clone, Default, PartialEq, Eq)]
pub struct CallMeta {
    /// `X-Ya-Service-Ticket`: who calls (Megamind), when present.
    pub service_ticket: Option<String>,
    /// `X-Ya-User-Ticket`: on whose behalf, when the user is logged in.
    pub user_ticket: Option<String>,
    /// The user the checked user ticket names (`[auth] user_ticket` on);
    /// `None` when no user ticket was checked.
    pub default_uid: Option<u64>,
}

impl fmt::Debug for CallMeta {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let shown = |ticket: &Option<String>| ticket.as_ref().map(|_| HIDDEN);
        f.debug_struct("CallMeta")
            .field("service_ticket", &shown(&self.service_ticket))
            .field("user_ticket", &shown(&self.user_ticket))
            .field("default_uid", &self.default_uid)
            .finish()
    }
}

impl CallMeta {
    /// Reads the tickets from HTTP headers or gRPC metadata. A value that is
    /// not visible ASCII was sent all the same: it is kept, its bytes past
    /// ASCII as `\u{FFFD}`, for the check to refuse (a ticket taken for
    /// absent would let a call in where a user ticket is optional).
    pub fn from_headers(headers: &HeaderMap) -> CallMeta {
        let ticket = |name| {
            headers.get(name).map(|value| match value.to_str() {
                Ok(text) => text.to_owned(),
                Err(_) => String::from_utf8_lossy(value.as_bytes()).into_owned(),
            })
        };
        CallMeta { service_ticket: ticket(SERVICE_TICKET), user_ticket: ticket(USER_TICKET), default_uid: None }
    }
}

/// Whether `ticket` could be a ticket: visible ASCII only, as tvmtool's are
/// (and as a header sent on to tvmtool must be).
pub fn readable(ticket: &str) -> bool {
    ticket.bytes().all(|byte| byte.is_ascii_graphic())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tickets_are_read_by_their_header_names() {
        let mut headers = HeaderMap::new();
        assert_eq!(CallMeta::from_headers(&headers), CallMeta::default());
        headers.insert("X-Ya-Service-Ticket", "3:serv:s".parse().unwrap());
        headers.insert(USER_TICKET, "3:user:u".parse().unwrap());
        let meta = CallMeta::from_headers(&headers);
        assert_eq!(meta.service_ticket.as_deref(), Some("3:serv:s"));
        assert_eq!(meta.user_ticket.as_deref(), Some("3:user:u"));
        headers.insert(USER_TICKET, http::HeaderValue::from_bytes(b"3:user:\xff").unwrap());
        let unreadable = CallMeta::from_headers(&headers).user_ticket.expect("sent, so present");
        assert_eq!(unreadable, "3:user:\u{FFFD}");
        assert!(!readable(&unreadable) && readable("3:user:u") && !readable("3:user: u"));
    }

    #[test]
    fn a_debug_print_of_a_call_s_context_shows_no_ticket() {
        let meta = CallMeta {
            service_ticket: Some("3:serv:s3cret".into()),
            user_ticket: Some("3:user:s3cret".into()),
            default_uid: Some(42),
        };
        let ctx = crate::scenario::CallContext { request_id: "r".into(), deadline: tokio::time::Instant::now(), meta };
        let shown = format!("{ctx:?}");
        assert!(!shown.contains("s3cret") && shown.contains("<hidden>") && shown.contains("42"), "{shown}");
    }
}
