//! The TVM authenticator: every scenario call needs a service ticket that
//! tvmtool accepts, from an allowed source (and, as configured, a user
//! ticket). Verdicts are kept a short while by a hash of the ticket; a
//! ticket that cannot be checked is refused (checks fail closed).

use std::{
    future::Future,
    sync::{
        Arc,
        atomic::{AtomicBool, Ordering},
    },
    time::Duration,
};

use futures_util::{FutureExt, future::BoxFuture};
use tokio::time::Instant;

use super::{
    metrics::{AuthMetrics, AuthResult, TvmtoolOp},
    tvmtool::{Checked, ServiceTicket, Tvmtool, Unavailable, UserTicket},
    verdicts::Verdicts,
};
use crate::{
    config::{AuthConfig, UserTicketPolicy},
    dispatch::{Admitted, Authenticator, CallMeta, Check, Refusal},
};

type ServiceVerdict = Result<Checked<ServiceTicket>, Unavailable>;
type UserVerdict = Result<Checked<UserTicket>, Unavailable>;

/// Checks tickets through tvmtool.
#[derive(Debug, Clone)]
pub struct TvmAuthenticator {
    inner: Arc<Inner>,
}

#[derive(Debug)]
struct Inner {
    tvmtool: Tvmtool,
    /// For the log: tvmtool's address.
    address: String,
    allowed: Vec<u32>,
    user_ticket: UserTicketPolicy,
    timeout: Duration,
    services: Arc<Verdicts<ServiceVerdict>>,
    users: Arc<Verdicts<UserVerdict>>,
    metrics: AuthMetrics,
    /// Whether tvmtool answered last time: outages are logged once each.
    up: AtomicBool,
}

/// Good tickets' verdicts are kept. A refusal is asked again each time, so
/// that a flood of made-up tickets never pushes Megamind's verdict out; and
/// "no answer" is asked again once tvmtool is back.
fn answered<T>(verdict: &Result<Checked<T>, Unavailable>) -> bool {
    matches!(verdict, Ok(Checked::Valid(_)))
}

impl TvmAuthenticator {
    /// An authenticator asking the tvmtool at `url` as `config` says,
    /// counting in `metrics`.
    pub fn new(url: &str, config: &AuthConfig, metrics: AuthMetrics) -> Result<TvmAuthenticator, String> {
        let tvmtool = Tvmtool::new(url, config.tvmtool_token.clone(), config.tvm_dst.clone())?;
        let (ttl, max_entries) = (config.verdict_ttl(), config.verdict_max_entries);
        metrics.set_up(true);
        let inner = Inner {
            tvmtool,
            address: url.trim().to_owned(),
            allowed: config.tvm_allowed_src.clone(),
            user_ticket: config.user_ticket,
            timeout: config.check_timeout(),
            services: Arc::new(Verdicts::new(ttl, max_entries)),
            users: Arc::new(Verdicts::new(ttl, max_entries)),
            metrics,
            up: AtomicBool::new(true),
        };
        Ok(TvmAuthenticator { inner: Arc::new(inner) })
    }
}

impl Authenticator for TvmAuthenticator {
    fn authenticate(&self, meta: &CallMeta) -> Check {
        let inner = &self.inner;
        let Some(service_ticket) = meta.service_ticket.as_deref() else {
            return Check::Done(inner.refuse(AuthResult::Missing, "no service ticket (X-Ya-Service-Ticket)".into()));
        };
        let user_ticket = match (inner.user_ticket, meta.user_ticket.as_deref()) {
            (UserTicketPolicy::Off, _) | (UserTicketPolicy::Optional, None) => None,
            (_, Some(ticket)) => Some(ticket),
            (UserTicketPolicy::Required, None) => {
                let why = "no user ticket (X-Ya-User-Ticket), which this service requires".into();
                return Check::Done(inner.refuse(AuthResult::UserMissing, why));
            }
        };
        let service_key = inner.services.key(service_ticket);
        let user_key = user_ticket.map(|ticket| inner.users.key(ticket));
        // The common case, decided in place: every verdict needed is kept.
        if let Some(service) = inner.services.kept(service_key) {
            match user_key.map(|key| inner.users.kept(key)) {
                None => return Check::Done(inner.decide(&service.1, None)),
                Some(Some(user)) => return Check::Done(inner.decide(&service.1, Some(&user.1))),
                Some(None) => {}
            }
        }
        // Copied only here, on the way to tvmtool.
        let inner = Arc::clone(inner);
        let service_ticket = service_ticket.to_owned();
        let user_ticket = user_ticket.map(str::to_owned);
        Check::Pending(
            async move {
                let service = match inner.services.kept(service_key).map(|kept| kept.1.clone()) {
                    Some(kept) => kept,
                    None => inner.check_service(service_key, service_ticket).await,
                };
                // A caller refused already is not worth asking about its user.
                let let_in = matches!(&service, Ok(Checked::Valid(t)) if inner.allowed.contains(&t.src));
                let user = match user_key.zip(user_ticket).filter(|_| let_in) {
                    None => None,
                    Some((key, ticket)) => Some(match inner.users.kept(key).map(|kept| kept.1.clone()) {
                        Some(kept) => kept,
                        None => inner.check_user(key, ticket).await,
                    }),
                };
                inner.decide(&service, user.as_ref())
            }
            .boxed(),
        )
    }

    fn ready(&self) -> BoxFuture<'_, Result<(), String>> {
        async move {
            let inner = &self.inner;
            let started = Instant::now();
            let pinged = inner.tvmtool.ping(inner.timeout).await;
            inner.metrics.timed(TvmtoolOp::Ping, started.elapsed());
            inner.answered(pinged.as_ref().err());
            pinged.map_err(|e| format!("tickets cannot be checked: {e}"))
        }
        .boxed()
    }

    fn start(&self) {
        let authenticator = self.clone();
        tokio::spawn(async move {
            let inner = &authenticator.inner;
            match authenticator.ready().await {
                Ok(()) => tracing::info!(
                    tvmtool = %inner.address,
                    allowed_src = ?inner.allowed,
                    user_ticket = ?inner.user_ticket,
                    "auth: scenario calls need a TVM service ticket, checked by tvmtool"
                ),
                // Logged once by `answered`; the server serves, refusing
                // until tvmtool answers, and is not ready meanwhile.
                Err(_) => tracing::info!(tvmtool = %inner.address, "auth: tvmtool not answering at start"),
            }
        });
    }
}

impl Inner {
    async fn check_service(self: &Arc<Self>, key: u128, ticket: String) -> ServiceVerdict {
        let ask = |inner: Arc<Inner>| async move { inner.tvmtool.check_service(&ticket, inner.timeout).await };
        self.ask(&self.services, key, TvmtoolOp::CheckService, ask).await
    }

    async fn check_user(self: &Arc<Self>, key: u128, ticket: String) -> UserVerdict {
        let ask = |inner: Arc<Inner>| async move { inner.tvmtool.check_user(&ticket, inner.timeout).await };
        self.ask(&self.users, key, TvmtoolOp::CheckUser, ask).await
    }

    /// tvmtool's verdict on the ticket of `key` by `ask`, timed, noted and
    /// kept in `verdicts`; one check in flight per ticket.
    async fn ask<T, F>(
        self: &Arc<Self>,
        verdicts: &Arc<Verdicts<Result<Checked<T>, Unavailable>>>,
        key: u128,
        op: TvmtoolOp,
        ask: impl FnOnce(Arc<Inner>) -> F,
    ) -> Result<Checked<T>, Unavailable>
    where
        T: Clone + Send + Sync + 'static,
        F: Future<Output = Result<Checked<T>, Unavailable>> + Send + 'static,
    {
        let inner = Arc::clone(self);
        let asked = ask(Arc::clone(self));
        let check = async move {
            let started = Instant::now();
            let verdict = asked.await;
            inner.metrics.timed(op, started.elapsed());
            inner.answered(verdict.as_ref().err());
            verdict
        };
        verdicts.check(key, check.boxed(), answered).await
    }

    /// Notes whether tvmtool answered (`failure` is `None`), logging the
    /// start and the end of an outage once each.
    fn answered(&self, failure: Option<&Unavailable>) {
        let up = failure.is_none();
        if self.up.swap(up, Ordering::AcqRel) != up {
            self.metrics.set_up(up);
            match failure {
                Some(error) => tracing::warn!(
                    tvmtool = %self.address,
                    %error,
                    "auth: tvmtool unavailable; calls whose tickets were not checked lately are refused"
                ),
                None => tracing::info!(tvmtool = %self.address, "auth: tvmtool answers again"),
            }
        }
    }

    /// The call's verdict from tvmtool's, counted.
    fn decide(&self, service: &ServiceVerdict, user: Option<&UserVerdict>) -> Result<Admitted, Refusal> {
        let src = match service {
            Err(_) => {
                let why = "the service ticket cannot be checked now (tvmtool unavailable)".into();
                return self.refuse(AuthResult::Unavailable, why);
            }
            Ok(Checked::Refused { error, logging }) => {
                tracing::debug!(ticket = %logging, %error, "auth: service ticket refused");
                return self.refuse(AuthResult::Invalid, format!("the service ticket was refused: {error}"));
            }
            Ok(Checked::Valid(ticket)) => ticket.src,
        };
        if !self.allowed.contains(&src) {
            return self.refuse(AuthResult::ForbiddenSource, format!("TVM source {src} may not call this service"));
        }
        let default_uid = match user {
            None => None,
            Some(Err(_)) => {
                let why = "the user ticket cannot be checked now (tvmtool unavailable)".into();
                return self.refuse(AuthResult::Unavailable, why);
            }
            Some(Ok(Checked::Refused { error, logging })) => {
                tracing::debug!(ticket = %logging, %error, "auth: user ticket refused");
                return self.refuse(AuthResult::UserInvalid, format!("the user ticket was refused: {error}"));
            }
            Some(Ok(Checked::Valid(ticket))) => ticket.default_uid,
        };
        self.metrics.count(AuthResult::Ok);
        Ok(Admitted { default_uid })
    }

    fn refuse(&self, result: AuthResult, why: String) -> Result<Admitted, Refusal> {
        self.metrics.count(result);
        Err(Refusal::Forbidden(why))
    }
}
