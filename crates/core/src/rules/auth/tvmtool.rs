//! A client of tvmtool's HTTP API, the daemon beside the service that
//! checks TVM tickets: `/tvm/ping`, `/tvm/checksrv` and `/tvm/checkusr`,
//! each with the local token in `Authorization`.

use std::{fmt, time::Duration};

use serde::Deserialize;

use crate::scenario::meta::{SERVICE_TICKET, USER_TICKET};

/// The environment variables the local token is read from, in order:
/// tvmtool's own convention, then the older one it also reads.
pub const TOKEN_VARIABLES: [&str; 2] = ["TVMTOOL_LOCAL_AUTHTOKEN", "QLOUD_TVM_TOKEN"];

/// Longest error text of tvmtool's quoted in a refusal.
const MAX_ERROR_CHARS: usize = 160;

/// tvmtool at one address.
#[derive(Clone)]
pub struct Tvmtool {
    client: reqwest::Client,
    base: String,
    token: String,
    dst: String,
}

/// The token never shows, nor a password in the address.
impl fmt::Debug for Tvmtool {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let base = crate::text::redact_url(&self.base);
        f.debug_struct("Tvmtool").field("base", &base).field("dst", &self.dst).finish_non_exhaustive()
    }
}

/// tvmtool's verdict on a ticket.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Checked<T> {
    /// The ticket is good: what it says.
    Valid(T),
    /// tvmtool refused the ticket.
    Refused {
        /// Why, in tvmtool's words (they quote no ticket).
        error: String,
        /// tvmtool's `logging_string`: the ticket without its signature,
        /// safe to log.
        logging: String,
    },
}

/// What a good service ticket says.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ServiceTicket {
    /// The TVM id of the calling service.
    pub src: u32,
    /// tvmtool's `logging_string`.
    pub logging: String,
}

/// What a good user ticket says.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UserTicket {
    /// The user the call is for.
    pub default_uid: Option<u64>,
    /// tvmtool's `logging_string`.
    pub logging: String,
}

/// The service ticket the readiness check sends: not a ticket at all. tvmtool
/// checks the local token, then the `dst`, then the ticket, so its refusal
/// of this one (403) says that the first two are right.
pub const PROBE_TICKET: &str = "readiness-probe";

/// Why there is no verdict. The texts name no ticket and no token.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Unavailable {
    /// No answer within the time given.
    #[error("tvmtool did not answer within {0:?}")]
    Timeout(Duration),
    /// The connection failed.
    #[error("tvmtool cannot be reached: {0}")]
    Unreachable(String),
    /// tvmtool refused this server's local token (401): a configuration
    /// fault, no ticket can be checked until it is mended.
    #[error("tvmtool refuses this server's local token (401; auth.tvmtool_token, TVMTOOL_LOCAL_AUTHTOKEN)")]
    TokenRefused,
    /// tvmtool does not know the `dst` this server checks tickets for
    /// (`/tvm/checksrv` answered 400): a configuration fault.
    #[error("tvmtool does not know this service's dst (400; auth.tvm_dst): {0}")]
    DstUnknown(String),
    /// Too many checks in flight here: tvmtool was not asked.
    #[error("too many tickets are being checked at once: no turn within {0:?}")]
    Busy(Duration),
    /// tvmtool failed (5xx) or answered what it never should.
    #[error("tvmtool answered {status}: {error}")]
    Status {
        /// The HTTP status.
        status: u16,
        /// tvmtool's error text.
        error: String,
    },
    /// An answer that is not tvmtool's JSON.
    #[error("tvmtool's answer is unreadable: {0}")]
    Unreadable(String),
}

#[derive(Debug, Deserialize)]
struct ServiceBody {
    src: u32,
    #[serde(default)]
    logging_string: String,
}

#[derive(Debug, Deserialize)]
struct UserBody {
    default_uid: Option<u64>,
    #[serde(default)]
    logging_string: String,
}

#[derive(Debug, Default, Deserialize)]
struct ErrorBody {
    #[serde(default)]
    error: String,
    #[serde(default)]
    logging_string: String,
}

impl Tvmtool {
    /// tvmtool at `base` (`http://localhost:18080`), with the local `token`,
    /// checking tickets addressed to `dst` (empty: tvmtool's only client).
    pub fn new(base: &str, token: String, dst: String) -> Result<Tvmtool, String> {
        let client = crate::http_client::client_builder()
            // tvmtool is next door: a connection is cheap to keep.
            .pool_idle_timeout(Duration::from_secs(90))
            // Tickets and the local token go to tvmtool itself: never to a
            // proxy the environment names (`HTTP_PROXY` and the like), nor
            // on to wherever a redirect points.
            .no_proxy()
            .redirect(reqwest::redirect::Policy::none())
            .build()
            .map_err(|e| format!("tvmtool client: {e}"))?;
        Ok(Tvmtool { client, base: base.trim().trim_end_matches('/').to_owned(), token, dst })
    }

    /// The `dst` asked about, for the log.
    pub fn dst(&self) -> &str {
        &self.dst
    }

    /// The local token from `env` ([`TOKEN_VARIABLES`]), empty when unset.
    pub fn token_from(env: &dyn Fn(&str) -> Option<String>) -> String {
        TOKEN_VARIABLES.iter().find_map(|name| env(name).filter(|token| !token.is_empty())).unwrap_or_default()
    }

    /// `GET /tvm/ping`: whether tvmtool is up and has its keys.
    pub async fn ping(&self, timeout: Duration) -> Result<(), Unavailable> {
        let (status, text) = exchange(self.client.get(format!("{}/tvm/ping", self.base)), timeout).await?;
        // 206: up, with a warning (keys about to be stale) that still checks.
        if (200..300).contains(&status) {
            return Ok(());
        }
        Err(Unavailable::Status { status, error: shorten(text.trim()) })
    }

    /// `GET /tvm/checksrv`: tvmtool's verdict on a service ticket.
    pub async fn check_service(&self, ticket: &str, timeout: Duration) -> Result<Checked<ServiceTicket>, Unavailable> {
        let mut url = format!("{}/tvm/checksrv", self.base);
        if !self.dst.is_empty() {
            url.push_str("?dst=");
            url.extend(url::form_urlencoded::byte_serialize(self.dst.as_bytes()));
        }
        let (status, text) = self.check(self.client.get(url).header(SERVICE_TICKET, ticket), timeout).await?;
        read_service_answer(status, &text)
    }

    /// `GET /tvm/checkusr`: tvmtool's verdict on a user ticket.
    pub async fn check_user(&self, ticket: &str, timeout: Duration) -> Result<Checked<UserTicket>, Unavailable> {
        let request = self.client.get(format!("{}/tvm/checkusr", self.base)).header(USER_TICKET, ticket);
        let (status, text) = self.check(request, timeout).await?;
        read_user_answer(status, &text)
    }

    /// One check's status and body, with the local token sent.
    async fn check(&self, request: reqwest::RequestBuilder, timeout: Duration) -> Result<(u16, String), Unavailable> {
        exchange(request.header(reqwest::header::AUTHORIZATION, &self.token), timeout).await
    }
}

/// tvmtool's answer to `/tvm/checksrv` with `status` and `body`: its
/// verdict, or why there is none.
pub fn read_service_answer(status: u16, body: &str) -> Result<Checked<ServiceTicket>, Unavailable> {
    let answer = read_answer(status, body, |body: ServiceBody| ServiceTicket {
        src: body.src,
        logging: shorten(&body.logging_string),
    });
    // Only `/tvm/checksrv` takes a `dst`: its 400 is about that.
    match answer {
        Err(Unavailable::Status { status: 400, error }) => Err(Unavailable::DstUnknown(error)),
        answer => answer,
    }
}

/// tvmtool's answer to `/tvm/checkusr` with `status` and `body`.
pub fn read_user_answer(status: u16, body: &str) -> Result<Checked<UserTicket>, Unavailable> {
    read_answer(status, body, |body: UserBody| UserTicket {
        default_uid: body.default_uid,
        logging: shorten(&body.logging_string),
    })
}

/// 200: the good ticket's JSON, read by `valid`; 403: tvmtool's refusal;
/// anything else: no verdict.
fn read_answer<B: serde::de::DeserializeOwned, T>(
    status: u16,
    body: &str,
    valid: impl FnOnce(B) -> T,
) -> Result<Checked<T>, Unavailable> {
    let error_body = || serde_json::from_str::<ErrorBody>(body).unwrap_or_default();
    match status {
        200 => serde_json::from_str(body)
            .map(|b| Checked::Valid(valid(b)))
            .map_err(|e| Unavailable::Unreadable(shorten(&e.to_string()))),
        403 => {
            let body = error_body();
            let error = if body.error.is_empty() { "refused".to_owned() } else { shorten(&body.error) };
            Ok(Checked::Refused { error, logging: shorten(&body.logging_string) })
        }
        // tvmtool's text is not quoted: the token is a secret.
        401 => Err(Unavailable::TokenRefused),
        status => {
            let parsed = error_body();
            let error = if parsed.error.is_empty() { shorten(body.trim()) } else { shorten(&parsed.error) };
            Err(Unavailable::Status { status, error })
        }
    }
}

/// The longest answer read from tvmtool, whose answers are a few hundred
/// bytes: a longer one is no answer, and is not held whole.
const MAX_ANSWER: usize = 64 * 1024;

/// One request's status and body, the whole exchange within `timeout`.
async fn exchange(request: reqwest::RequestBuilder, timeout: Duration) -> Result<(u16, String), Unavailable> {
    let exchange = async {
        let mut response = request.send().await?;
        let status = response.status().as_u16();
        let mut body = Vec::new();
        while let Some(chunk) = response.chunk().await? {
            if body.len() + chunk.len() > MAX_ANSWER {
                return Ok(Err(Unavailable::Unreadable(format!("an answer longer than {MAX_ANSWER} bytes"))));
            }
            body.extend_from_slice(&chunk);
        }
        Ok(Ok((status, String::from_utf8_lossy(&body).into_owned())))
    };
    match tokio::time::timeout(timeout, exchange).await {
        Err(_) => Err(Unavailable::Timeout(timeout)),
        Ok(Err(error)) => Err(Unavailable::Unreachable(causes(error))),
        Ok(Ok(answer)) => answer,
    }
}

/// A transport error and its causes on one line. reqwest's texts name the
/// URL (dropped here too), never a header: no ticket, no token.
fn causes(error: reqwest::Error) -> String {
    let error = error.without_url();
    let mut line = error.to_string();
    let mut source = std::error::Error::source(&error);
    while let Some(cause) = source {
        line.push_str(": ");
        line.push_str(&cause.to_string());
        source = cause.source();
    }
    shorten(&line)
}

/// `text` cut to a length fit for a log line or a refusal, control
/// characters dropped.
fn shorten(text: &str) -> String {
    text.chars().filter(|c| !c.is_control()).take(MAX_ERROR_CHARS).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_token_is_read_from_tvmtools_variable_first() {
        let both = |name: &str| Some(format!("from-{name}"));
        assert_eq!(Tvmtool::token_from(&both), "from-TVMTOOL_LOCAL_AUTHTOKEN");
        let qloud = |name: &str| (name == "QLOUD_TVM_TOKEN").then(|| "q".to_owned());
        assert_eq!(Tvmtool::token_from(&qloud), "q");
        assert_eq!(Tvmtool::token_from(&|_| None), "");
    }

    #[test]
    fn the_token_never_shows_in_a_debug_print() {
        let tvmtool = Tvmtool::new("http://localhost:1/", "s3cr3t-token".into(), "me".into()).unwrap();
        let shown = format!("{tvmtool:?}");
        assert!(!shown.contains("s3cr3t"), "{shown}");
        assert!(shown.contains("http://localhost:1"), "{shown}");
    }

    #[test]
    fn tvmtools_answers_are_read_as_verdicts() {
        let good = r#"{"src":2000860,"dst":42,"scopes":null,"debug_string":"d","logging_string":"3:serv:CBAQ:","issuer_uid":null}"#;
        assert_eq!(
            read_service_answer(200, good),
            Ok(Checked::Valid(ServiceTicket { src: 2_000_860, logging: "3:serv:CBAQ:".into() }))
        );
        let refused = read_service_answer(403, r#"{"error":"Expired ticket","logging_string":"3:serv:X:"}"#);
        assert_eq!(refused, Ok(Checked::Refused { error: "Expired ticket".into(), logging: "3:serv:X:".into() }));
        assert_eq!(read_service_answer(401, r#"{"error":"bad token"}"#), Err(Unavailable::TokenRefused));
        assert_eq!(read_user_answer(401, r#"{"error":"bad token"}"#), Err(Unavailable::TokenRefused));
        let unknown = read_service_answer(400, r#"{"error":"dst is not configured"}"#);
        assert_eq!(unknown, Err(Unavailable::DstUnknown("dst is not configured".into())));
        assert!(matches!(read_user_answer(400, "{}"), Err(Unavailable::Status { status: 400, .. })));
        assert!(matches!(read_service_answer(500, "oops"), Err(Unavailable::Status { status: 500, .. })));
        assert!(matches!(read_service_answer(200, "OK"), Err(Unavailable::Unreadable(_))));
        let user = read_user_answer(200, r#"{"default_uid":456,"uids":[456]}"#);
        assert_eq!(user, Ok(Checked::Valid(UserTicket { default_uid: Some(456), logging: String::new() })));
    }

    #[test]
    fn long_or_odd_error_texts_are_shortened() {
        let shortened = shorten(&format!("bad\n{}", "x".repeat(500)));
        assert_eq!(shortened.chars().count(), MAX_ERROR_CHARS);
        assert!(shortened.starts_with("badx"));
    }

    /// A peer that answers every connection 200 with a body of `len` bytes.
    async fn answering(len: usize) -> String {
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let url = format!("http://{}/tvm/ping", listener.local_addr().unwrap());
        tokio::spawn(async move {
            while let Ok((mut stream, _)) = listener.accept().await {
                let mut head = [0; 1024];
                let _ = stream.read(&mut head).await;
                let answer = format!("HTTP/1.1 200 OK\r\ncontent-length: {len}\r\n\r\n{}", "a".repeat(len));
                let _ = stream.write_all(answer.as_bytes()).await;
            }
        });
        url
    }

    #[tokio::test]
    async fn answers_longer_than_the_cap_are_not_read_whole() {
        let client = crate::http_client::client_builder().build().unwrap();
        let short = exchange(client.get(answering(100).await), Duration::from_secs(5)).await;
        assert_eq!(short, Ok((200, "a".repeat(100))));
        let long = exchange(client.get(answering(4 << 20).await), Duration::from_secs(5)).await;
        assert_eq!(long, Err(Unavailable::Unreadable(format!("an answer longer than {MAX_ANSWER} bytes"))));
    }
}
