//! The TVM authenticator: every scenario call needs a service ticket that
//! tvmtool accepts, from an allowed source (and, as configured, a user
//! ticket). Verdicts are kept a short while by a hash of the ticket
//! (refusals a few seconds); a ticket that cannot be checked is refused
//! (checks fail closed); at most so many checks are in flight at once.

use std::{future::Future, sync::Arc, time::Duration};

use futures_util::{FutureExt, future::BoxFuture};
use tokio::{sync::Semaphore, time::Instant};

use super::{
    health::{Health, HealthCell},
    metrics::{AuthMetrics, AuthResult, TvmtoolOp},
    tvmtool::{Checked, PROBE_TICKET, ServiceTicket, Tvmtool, Unavailable, UserTicket},
    verdicts::{Keep, Verdicts},
};
use crate::{
    config::{AuthConfig, UserTicketPolicy},
    dispatch::{Admitted, Authenticator, CallMeta, Check, Refusal},
    scenario::meta::readable,
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
    /// Turns to ask tvmtool: a flood of tickets never seen costs it a
    /// bounded number of requests at once.
    turns: Semaphore,
    /// Whether tickets can be checked, as tvmtool answered last: each
    /// change is logged once.
    health: HealthCell,
    /// The readiness probe in flight: `/readyz` and gRPC health checks are
    /// public, and however many come at once, tvmtool is asked one probe
    /// at a time, whose answer they all get.
    probes: Arc<Verdicts<Result<(), Unavailable>>>,
}

/// The one key of [`Inner::probes`].
const PROBE: u128 = 0;

/// Good tickets' verdicts are kept their TTL, refusals a few seconds apart
/// from them (a flood of made-up tickets never pushes Megamind's verdict
/// out); "no answer" is asked again at once.
fn keep<T>(verdict: &Result<Checked<T>, Unavailable>) -> Keep {
    match verdict {
        Ok(Checked::Valid(_)) => Keep::Good,
        Ok(Checked::Refused { .. }) => Keep::Refused,
        Err(_) => Keep::No,
    }
}

/// [`keep`] for a service ticket: a valid one from a source not let in is
/// kept with the refusals, so that a service with real tickets of its own
/// cannot push Megamind's verdict out either.
fn keep_service(allowed: Vec<u32>) -> impl FnOnce(&ServiceVerdict) -> Keep + Send + 'static {
    move |verdict| match verdict {
        Ok(Checked::Valid(ticket)) if !allowed.contains(&ticket.src) => Keep::Refused,
        verdict => keep(verdict),
    }
}

impl TvmAuthenticator {
    /// An authenticator asking the tvmtool at `url` as `config` says,
    /// counting in `metrics`.
    pub fn new(url: &str, config: &AuthConfig, metrics: AuthMetrics) -> Result<TvmAuthenticator, String> {
        let tvmtool = Tvmtool::new(url, config.tvmtool_token.clone(), config.tvm_dst.clone())?;
        let (ttl, refusal_ttl, max_entries) = (config.verdict_ttl(), config.refusal_ttl(), config.verdict_max_entries);
        // Not known to check tickets until tvmtool has said so.
        metrics.set_up(false);
        let inner = Inner {
            tvmtool,
            // A password in the URL stays out of the log.
            address: crate::text::redact_url(url.trim()),
            allowed: config.tvm_allowed_src.clone(),
            user_ticket: config.user_ticket,
            timeout: config.check_timeout(),
            services: Arc::new(Verdicts::new(ttl, refusal_ttl, max_entries)),
            users: Arc::new(Verdicts::new(ttl, refusal_ttl, max_entries)),
            metrics,
            turns: Semaphore::new(config.max_checks_in_flight.max(1)),
            health: HealthCell::default(),
            // Nothing is kept: each probe after the last one ended asks anew.
            probes: Arc::new(Verdicts::new(Duration::ZERO, Duration::ZERO, 1)),
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
        // Refused here: tvmtool is not asked about what no ticket can be.
        if !readable(service_ticket) {
            let why = "the service ticket (X-Ya-Service-Ticket) is not visible ASCII".into();
            return Check::Done(inner.refuse(AuthResult::Invalid, why));
        }
        let user_ticket = match (inner.user_ticket, meta.user_ticket.as_deref()) {
            (UserTicketPolicy::Off, _) | (UserTicketPolicy::Optional, None) => None,
            (_, Some(ticket)) if !readable(ticket) => {
                let why = "the user ticket (X-Ya-User-Ticket) is not visible ASCII".into();
                return Check::Done(inner.refuse(AuthResult::UserInvalid, why));
            }
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
        let inner = Arc::clone(&self.inner);
        let probe = async move { inner.probe().await }.boxed();
        let probed = self.inner.probes.check(PROBE, probe, |_| Keep::No);
        async move { probed.await.map_err(|e| format!("tickets cannot be checked: {e}")) }.boxed()
    }

    /// A check the call's own deadline cut short ended without a verdict.
    fn cut_short(&self) {
        self.inner.metrics.count(AuthResult::Unavailable);
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
                // Why, logged once by `noted`; the server serves, refusing
                // until tickets can be checked, and is not ready meanwhile.
                Err(_) => tracing::info!(tvmtool = %inner.address, "auth: tickets cannot be checked at start"),
            }
        });
    }
}

impl Inner {
    /// Whether tickets can be checked: tvmtool pinged, and, unless its
    /// last check said so already, asked a check as well, since a ping
    /// sends neither the local token nor the `dst` and cannot tell that
    /// tvmtool refuses them.
    async fn probe(&self) -> Result<(), Unavailable> {
        let started = Instant::now();
        let pinged = self.tvmtool.ping(self.timeout).await;
        self.metrics.timed(TvmtoolOp::Ping, started.elapsed());
        if let Err(error) = pinged {
            self.noted(Some(&error));
            return Err(error);
        }
        if self.health.get() == Health::Up {
            return Ok(());
        }
        let started = Instant::now();
        // Any verdict on the probe (a refusal) says tickets can be checked.
        let checked = self.tvmtool.check_service(PROBE_TICKET, self.timeout).await.map(drop);
        self.metrics.timed(TvmtoolOp::CheckService, started.elapsed());
        self.noted(checked.as_ref().err());
        checked
    }

    async fn check_service(self: &Arc<Self>, key: u128, ticket: String) -> ServiceVerdict {
        let ask = |inner: Arc<Inner>| async move { inner.tvmtool.check_service(&ticket, inner.timeout).await };
        self.ask(&self.services, key, TvmtoolOp::CheckService, ask, keep_service(self.allowed.clone())).await
    }

    async fn check_user(self: &Arc<Self>, key: u128, ticket: String) -> UserVerdict {
        let ask = |inner: Arc<Inner>| async move { inner.tvmtool.check_user(&ticket, inner.timeout).await };
        self.ask(&self.users, key, TvmtoolOp::CheckUser, ask, keep).await
    }

    /// tvmtool's verdict on the ticket of `key` by `ask`, timed, noted and
    /// kept in `verdicts` where `keep` says; one check in flight per ticket,
    /// and no more than there are turns: a check waits at most its timeout
    /// for one.
    async fn ask<T, F>(
        self: &Arc<Self>,
        verdicts: &Arc<Verdicts<Result<Checked<T>, Unavailable>>>,
        key: u128,
        op: TvmtoolOp,
        ask: impl FnOnce(Arc<Inner>) -> F,
        keep: impl FnOnce(&Result<Checked<T>, Unavailable>) -> Keep + Send + 'static,
    ) -> Result<Checked<T>, Unavailable>
    where
        T: Clone + Send + Sync + 'static,
        F: Future<Output = Result<Checked<T>, Unavailable>> + Send + 'static,
    {
        let inner = Arc::clone(self);
        let asked = ask(Arc::clone(self));
        let check = async move {
            let Ok(Ok(_turn)) = tokio::time::timeout(inner.timeout, inner.turns.acquire()).await else {
                return Err(Unavailable::Busy(inner.timeout));
            };
            let started = Instant::now();
            let verdict = asked.await;
            inner.metrics.timed(op, started.elapsed());
            inner.noted(verdict.as_ref().err());
            verdict
        };
        verdicts.check(key, check.boxed(), keep).await
    }

    /// Notes what tvmtool's answer (`failure`: why there was no verdict, or
    /// `None`) tells of whether tickets can be checked, logging each change
    /// once, however many calls and probes see it.
    fn noted(&self, failure: Option<&Unavailable>) {
        let Some(now) = Health::after(failure) else { return };
        let Some(before) = self.health.set(now) else { return };
        self.metrics.set_up(now == Health::Up);
        let tvmtool = &self.address;
        let error = failure.map(ToString::to_string).unwrap_or_default();
        match now {
            Health::Up if before == Health::Unknown => {}
            Health::Up => tracing::info!(%tvmtool, "auth: tvmtool checks tickets again"),
            Health::Down => tracing::warn!(
                %tvmtool,
                %error,
                "auth: tvmtool unavailable; calls whose tickets were not checked lately are refused"
            ),
            Health::TokenRefused => tracing::warn!(
                %tvmtool,
                "auth: tvmtool refuses this server's local token (auth.tvmtool_token, TVMTOOL_LOCAL_AUTHTOKEN); \
                 no ticket can be checked: calls are refused and the server is not ready until it is mended"
            ),
            Health::DstUnknown => tracing::warn!(
                %tvmtool,
                dst = %self.tvmtool.dst(),
                %error,
                "auth: tvmtool does not know this service's dst (auth.tvm_dst); no ticket can be checked: calls are \
                 refused and the server is not ready until it is mended"
            ),
            Health::Unknown => {}
        }
    }

    /// The call's verdict from tvmtool's, counted.
    fn decide(&self, service: &ServiceVerdict, user: Option<&UserVerdict>) -> Result<Admitted, Refusal> {
        let src = match service {
            Err(error) => return self.unchecked("service", error),
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
            Some(Err(error)) => return self.unchecked("user", error),
            Some(Ok(Checked::Refused { error, logging })) => {
                tracing::debug!(ticket = %logging, %error, "auth: user ticket refused");
                return self.refuse(AuthResult::UserInvalid, format!("the user ticket was refused: {error}"));
            }
            Some(Ok(Checked::Valid(ticket))) => ticket.default_uid,
        };
        self.metrics.count(AuthResult::Ok);
        Ok(Admitted { default_uid })
    }

    /// The refusal of a call whose `which` ticket got no verdict.
    fn unchecked(&self, which: &str, error: &Unavailable) -> Result<Admitted, Refusal> {
        let (result, cause) = match error {
            Unavailable::Busy(_) => (AuthResult::Busy, "too many checks at once"),
            _ => (AuthResult::Unavailable, "tvmtool unavailable"),
        };
        self.refuse(result, format!("the {which} ticket cannot be checked now ({cause})"))
    }

    fn refuse(&self, result: AuthResult, why: String) -> Result<Admitted, Refusal> {
        self.metrics.count(result);
        Err(Refusal::Forbidden(why))
    }
}
