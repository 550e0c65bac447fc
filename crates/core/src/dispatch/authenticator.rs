//! The authenticate step of the pipeline: a hook deciding whether the
//! caller may make a call, before anything else is done for it (a cached
//! answer included), and the [`Gate`] that puts a scenario's own routes
//! behind the same hook.

use std::{
    fmt,
    sync::{Arc, RwLock},
};

use futures_util::{FutureExt, future::BoxFuture};
use http::HeaderMap;

use super::call::{CallMeta, Refusal};

/// What a caller was let in as.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Admitted {
    /// The user a checked user ticket names, when one was checked.
    pub default_uid: Option<u64>,
}

/// A verdict: at once (a rule, or one kept from before), or a check to
/// await (bounded by the caller's deadline).
pub enum Check {
    /// Decided.
    Done(Result<Admitted, Refusal>),
    /// Being decided.
    Pending(BoxFuture<'static, Result<Admitted, Refusal>>),
}

impl Check {
    /// The verdict, awaited when pending.
    pub async fn verdict(self) -> Result<Admitted, Refusal> {
        match self {
            Check::Done(verdict) => verdict,
            Check::Pending(check) => check.await,
        }
    }
}

impl fmt::Debug for Check {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Check::Done(verdict) => f.debug_tuple("Done").field(verdict).finish(),
            Check::Pending(_) => f.write_str("Pending"),
        }
    }
}

/// Decides whether a caller may make a call. Called once per call, on the
/// transport's task: a verdict that needs waiting is returned as
/// [`Check::Pending`], never waited for here.
pub trait Authenticator: fmt::Debug + Send + Sync + 'static {
    /// The verdict on `meta`'s credentials; a refusal (usually
    /// [`Refusal::Forbidden`]) is the transport's answer.
    fn authenticate(&self, meta: &CallMeta) -> Check;

    /// Whether calls can be checked now (`/readyz`), and why not.
    fn ready(&self) -> BoxFuture<'_, Result<(), String>> {
        futures_util::future::ready(Ok(())).boxed()
    }

    /// Told when a [`Check::Pending`] was cut short by the call's own
    /// deadline: the call is refused, and the authenticator counts it.
    fn cut_short(&self) {}

    /// Starts background work once the server runs, and says in the log
    /// how callers are checked.
    fn start(&self) {}
}

/// Lets every call through: the default when no tickets are checked.
#[derive(Debug, Clone, Copy, Default)]
pub struct AcceptAll;

impl Authenticator for AcceptAll {
    fn authenticate(&self, _meta: &CallMeta) -> Check {
        Check::Done(Ok(Admitted::default()))
    }

    fn start(&self) {
        tracing::warn!("auth: no tvmtool configured; every caller is accepted without a ticket");
    }
}

/// The server's authenticator for a scenario's own routes: handed out while
/// scenarios are set up, before the authenticator exists, and bound to it
/// once the server is built ([`crate::app::App::from_built`]), and again
/// whenever the server's authenticator is replaced. Until then it lets
/// nobody in: a server built another way (`App::with_routes` over
/// `Setup::into_routes`) whose gate was never bound would otherwise serve
/// a scenario's routes to callers its handlers refuse.
#[derive(Clone, Default)]
pub struct Gate(Arc<RwLock<Option<Arc<dyn Authenticator>>>>);

impl fmt::Debug for Gate {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_tuple("Gate").field(&self.authenticator()).finish()
    }
}

/// Why an unbound gate refuses.
const UNBOUND: &str = "this route's gate was never bound to the server's caller checks \
                       (App::from_built binds it; gate.bind(app.dispatcher.authenticator().clone()) otherwise)";

impl Gate {
    /// Binds the gate to `authenticator`, in place of any it had.
    pub fn bind(&self, authenticator: Arc<dyn Authenticator>) {
        *self.0.write().unwrap_or_else(|p| p.into_inner()) = Some(authenticator);
    }

    fn authenticator(&self) -> Option<Arc<dyn Authenticator>> {
        self.0.read().unwrap_or_else(|p| p.into_inner()).clone()
    }

    /// The verdict on the caller whose request has `headers`.
    pub async fn admit(&self, headers: &HeaderMap) -> Result<Admitted, Refusal> {
        match self.authenticator() {
            Some(authenticator) => authenticator.authenticate(&CallMeta::from_headers(headers)).verdict().await,
            None => Err(Refusal::Forbidden(UNBOUND.into())),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Debug)]
    struct ServiceTicketRequired;

    impl Authenticator for ServiceTicketRequired {
        fn authenticate(&self, meta: &CallMeta) -> Check {
            match &meta.service_ticket {
                Some(_) => Check::Pending(async { Ok(Admitted { default_uid: Some(7) }) }.boxed()),
                None => Check::Done(Err(Refusal::Forbidden("no ticket".into()))),
            }
        }
    }

    #[tokio::test]
    async fn a_gate_lets_nobody_in_until_bound_then_asks_its_latest_authenticator() {
        let gate = Gate::default();
        let headers = HeaderMap::new();
        assert_eq!(gate.admit(&headers).await, Err(Refusal::Forbidden(UNBOUND.into())));
        gate.clone().bind(Arc::new(ServiceTicketRequired));
        assert_eq!(gate.admit(&headers).await, Err(Refusal::Forbidden("no ticket".into())));
        let ticketed = {
            let mut ticketed = headers.clone();
            ticketed.insert(crate::scenario::meta::SERVICE_TICKET, "3:serv:x".parse().unwrap());
            ticketed
        };
        assert_eq!(gate.admit(&ticketed).await, Ok(Admitted { default_uid: Some(7) }));
        // Bound again, it asks the new authenticator.
        gate.bind(Arc::new(AcceptAll));
        assert_eq!(gate.admit(&headers).await, Ok(Admitted::default()));
    }
}
