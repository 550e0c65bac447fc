//! The assistant's metrics, registered into the registry the server renders
//! (never the process-global one: tests run many servers in one process).
//! Every name is here; labels are bounded (backend, outcome, handler, kind,
//! command), never request ids or user text.

use std::{
    fmt,
    sync::{Arc, RwLock, Weak},
    time::Duration,
};

use prometheus::{
    Histogram, HistogramOpts, HistogramVec, IntCounter, IntCounterVec, IntGauge, Opts, Registry,
    core::{Collector, Desc},
    proto::MetricFamily,
};

use crate::{
    backend::{BackendError, ModelBackend},
    calls::outcome::ModelOutcome,
    dialog::answer::Dropped,
};

/// Model calls by `backend` and `outcome` (`ok` or a [`super::backend::BackendError::kind`]).
pub const MODEL_CALLS: &str = "megamind_assistant_model_calls_total";
/// Seconds per model call, retries included, by `backend`.
pub const MODEL_SECONDS: &str = "megamind_assistant_model_call_seconds";
/// Seconds to the first streamed token, by `backend`.
pub const FIRST_TOKEN_SECONDS: &str = "megamind_assistant_model_first_token_seconds";
/// Model calls running now.
pub const IN_FLIGHT: &str = "megamind_assistant_model_calls_in_flight";
/// Outcomes of finished model calls evicted before their TTL to stay within
/// `max_retained` and `max_retained_bytes`.
pub const EVICTED: &str = "megamind_assistant_model_calls_evicted_total";
/// Model calls that ran, or may have run, on two replicas, by reason:
/// `store_down` (begun in this replica's memory while the shared store was
/// out of reach), `lease_lost` (still running here when its lease ran out,
/// to be taken over elsewhere).
pub const DUPLICATED: &str = "megamind_assistant_calls_duplicated_total";
/// [`DUPLICATED`]'s reasons.
pub(crate) const STORE_DOWN: &str = "store_down";
pub(crate) const LEASE_LOST: &str = "lease_lost";
/// Retried attempts.
pub const RETRIES: &str = "megamind_assistant_model_retries_total";
/// The breaker: 0 closed, 1 half-open, 2 open.
pub const BREAKER: &str = "megamind_assistant_breaker_state";
/// Answers by `handler` and `kind`: `model` (the model's answer), `handover`
/// (`/run` passed to `/continue`), `filler` and `partial` (held with a
/// callback: a filler, or the first sentences), `apology`
/// (the model failed), `refused` (the in-flight cap), `irrelevant` (nothing to
/// answer), `stale_callback` (a callback for no pending call); a skill's own
/// answers without the model: `skill_list`, `skill_unknown`, `skill_offline`,
/// `skill_cancelled`, `skill_confirm`, `skill_confirmed`, `skill_waiting`.
pub const ANSWERS: &str = "megamind_assistant_answers_total";
/// Commands of model answers by `command` and `outcome` (`accepted` or why dropped).
pub const COMMANDS: &str = "megamind_assistant_commands_total";
/// Warm-ups of the model server by `outcome` (`ok`, `failed`).
pub const WARMUPS: &str = "megamind_assistant_warmups_total";

/// JSONSeq streams open now (`GET /llm/stream/...`).
pub const STREAMS_OPEN: &str = "megamind_assistant_streams_open";
/// Requests of the `/llm` API by `route` (`stream`, `answers`, `skills`, `schema`) and
/// `outcome` (`ok`, `not_found`, `gone`, `unavailable`, `refused`,
/// `bad_request`, or a part's error code).
pub const LLM_API: &str = "megamind_assistant_llm_api_requests_total";

/// Skills in the catalog now.
pub const SKILLS_LOADED: &str = "megamind_assistant_skills_loaded";
/// `SKILL.md` files skipped as invalid at the last load.
pub const SKILLS_INVALID: &str = "megamind_assistant_skills_invalid";
/// Loads of the skills folder by `trigger` (`start`, `change`, `sighup`).
pub const SKILL_RELOADS: &str = "megamind_assistant_skill_reloads_total";
/// Skill steps the model answered, by `marker` (`cmd`, `ask`, `message`,
/// `done`, `cap`, `cut`).
pub const SKILL_STEPS: &str = "megamind_assistant_skill_steps_total";
/// Commands of skills by the policy's `verdict` (`allow`, `ask`, `deny`,
/// `confirmed`).
pub const SKILL_COMMANDS: &str = "megamind_assistant_skill_commands_total";

/// Seconds from a model event's arrival to the write of its JSONSeq events,
/// for subscribers that had caught up (not a late subscriber's backlog).
pub const STREAM_DELAY: &str = "megamind_assistant_stream_delay_seconds";
/// Buckets of [`STREAM_DELAY`]: 50 µs to 1 s.
const DELAY_BUCKETS: &[f64] = &[0.00005, 0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.1, 1.0];

/// Latency buckets from 50 ms (inside `/run`) to the 30 s call timeout.
const BUCKETS: &[f64] = &[0.05, 0.1, 0.15, 0.25, 0.5, 1.0, 2.0, 3.0, 5.0, 10.0, 20.0, 30.0];

/// The kinds of [`ANSWERS`] each handler gives.
const ANSWER_KINDS: &[(&str, &[&str])] = &[
    (
        "run",
        &[
            "model",
            "handover",
            "apology",
            "refused",
            "irrelevant",
            "stale_callback",
            "skill_list",
            "skill_unknown",
            "skill_offline",
            "skill_cancelled",
            "skill_confirm",
            "skill_confirmed",
            "skill_waiting",
        ],
    ),
    ("continue", &["model", "filler", "partial", "apology", "refused"]),
];

/// The outcomes of [`LLM_API`] by route; the numbers are the answers of a
/// bad request for a part (`?part=`, `?snapshot=`).
const LLM_API_OUTCOMES: &[(&str, &[&str])] = &[
    ("stream", &["ok", "ended", "forbidden", "bad_request", "not_found", "gone", "unavailable", "refused"]),
    ("answers", &["ok", "forbidden", "bad_request", "not_found", "gone", "unavailable", "400", "410", "412", "416"]),
    ("skills", &["ok", "forbidden", "400", "410", "412", "416"]),
    ("schema", &["ok", "400", "410", "412", "416"]),
];

/// The collectors, cheap to clone.
#[derive(Debug, Clone)]
pub struct AssistantMetrics {
    pub(crate) model_calls: IntCounterVec,
    pub(crate) model_seconds: HistogramVec,
    pub(crate) first_token_seconds: HistogramVec,
    pub(crate) in_flight: IntGauge,
    pub(crate) evicted: IntCounter,
    pub(crate) duplicated: IntCounterVec,
    pub(crate) retries: IntCounter,
    pub(crate) breaker: BreakerGauge,
    pub(crate) answers: IntCounterVec,
    pub(crate) commands: IntCounterVec,
    pub(crate) warmups: IntCounterVec,
    pub(crate) streams_open: IntGauge,
    pub(crate) llm_api: IntCounterVec,
    pub(crate) stream_delay: Histogram,
    pub(crate) skills_loaded: IntGauge,
    pub(crate) skills_invalid: IntGauge,
    pub(crate) skill_reloads: IntCounterVec,
    pub(crate) skill_steps: IntCounterVec,
    pub(crate) skill_commands: IntCounterVec,
}

impl AssistantMetrics {
    /// Creates the collectors and registers them into `registry`.
    pub fn new(registry: &Registry) -> Result<AssistantMetrics, prometheus::Error> {
        let histogram = |name: &str, help: &str| {
            HistogramVec::new(HistogramOpts::new(name, help).buckets(BUCKETS.to_vec()), &["backend"])
        };
        let metrics = AssistantMetrics {
            model_calls: IntCounterVec::new(
                Opts::new(MODEL_CALLS, "Model calls by outcome."),
                &["backend", "outcome"],
            )?,
            model_seconds: histogram(MODEL_SECONDS, "Seconds per model call, retries included.")?,
            first_token_seconds: histogram(
                FIRST_TOKEN_SECONDS,
                "Seconds from the request to the first streamed token.",
            )?,
            in_flight: IntGauge::new(IN_FLIGHT, "Model calls running now.")?,
            evicted: IntCounter::new(EVICTED, "Outcomes of finished model calls evicted before their TTL.")?,
            duplicated: IntCounterVec::new(
                Opts::new(DUPLICATED, "Model calls that ran, or may have run, on two replicas, by reason."),
                &["reason"],
            )?,
            retries: IntCounter::new(RETRIES, "Model call attempts that were retries.")?,
            breaker: BreakerGauge {
                gauge: IntGauge::new(BREAKER, "Circuit breaker of the model backend: 0 closed, 1 half-open, 2 open.")?,
                backend: Arc::default(),
            },
            answers: IntCounterVec::new(Opts::new(ANSWERS, "Answers by handler and kind."), &["handler", "kind"])?,
            commands: IntCounterVec::new(
                Opts::new(COMMANDS, "Commands of model answers, accepted or dropped."),
                &["command", "outcome"],
            )?,
            warmups: IntCounterVec::new(Opts::new(WARMUPS, "Warm-ups of the model server."), &["outcome"])?,
            streams_open: IntGauge::new(STREAMS_OPEN, "JSONSeq streams open now.")?,
            llm_api: IntCounterVec::new(
                Opts::new(LLM_API, "Requests of the /llm API by route and outcome."),
                &["route", "outcome"],
            )?,
            stream_delay: Histogram::with_opts(
                HistogramOpts::new(STREAM_DELAY, "Seconds from a model event's arrival to its stream events' write.")
                    .buckets(DELAY_BUCKETS.to_vec()),
            )?,
            skills_loaded: IntGauge::new(SKILLS_LOADED, "Skills in the catalog now.")?,
            skills_invalid: IntGauge::new(SKILLS_INVALID, "SKILL.md files skipped as invalid at the last load.")?,
            skill_reloads: IntCounterVec::new(
                Opts::new(SKILL_RELOADS, "Loads of the skills folder by trigger."),
                &["trigger"],
            )?,
            skill_steps: IntCounterVec::new(Opts::new(SKILL_STEPS, "Skill steps by marker."), &["marker"])?,
            skill_commands: IntCounterVec::new(
                Opts::new(SKILL_COMMANDS, "Skill commands by the policy's verdict."),
                &["verdict"],
            )?,
        };
        registry.register(Box::new(metrics.model_calls.clone()))?;
        registry.register(Box::new(metrics.model_seconds.clone()))?;
        registry.register(Box::new(metrics.first_token_seconds.clone()))?;
        registry.register(Box::new(metrics.in_flight.clone()))?;
        registry.register(Box::new(metrics.evicted.clone()))?;
        registry.register(Box::new(metrics.duplicated.clone()))?;
        registry.register(Box::new(metrics.retries.clone()))?;
        registry.register(Box::new(metrics.breaker.clone()))?;
        registry.register(Box::new(metrics.answers.clone()))?;
        registry.register(Box::new(metrics.commands.clone()))?;
        registry.register(Box::new(metrics.warmups.clone()))?;
        registry.register(Box::new(metrics.streams_open.clone()))?;
        registry.register(Box::new(metrics.llm_api.clone()))?;
        registry.register(Box::new(metrics.stream_delay.clone()))?;
        registry.register(Box::new(metrics.skills_loaded.clone()))?;
        registry.register(Box::new(metrics.skills_invalid.clone()))?;
        registry.register(Box::new(metrics.skill_reloads.clone()))?;
        registry.register(Box::new(metrics.skill_steps.clone()))?;
        registry.register(Box::new(metrics.skill_commands.clone()))?;
        Ok(metrics)
    }

    /// Every series whose labels are known before the first event, at 0,
    /// so that an alert on any of them reads 0, not "no data". `backend`
    /// is the configured backend's name.
    pub(crate) fn start_at_zero(&self, backend: &str) {
        let model_outcomes = std::iter::once("ok").chain(BackendError::KINDS);
        for outcome in model_outcomes {
            self.model_calls.with_label_values(&[backend, outcome]);
        }
        self.model_seconds.with_label_values(&[backend]);
        self.first_token_seconds.with_label_values(&[backend]);
        for reason in [STORE_DOWN, LEASE_LOST] {
            self.duplicated.with_label_values(&[reason]);
        }
        for (handler, kinds) in ANSWER_KINDS {
            for kind in *kinds {
                self.answers.with_label_values(&[handler, kind]);
            }
        }
        for command in ["open_app", "close_app"] {
            self.commands.with_label_values(&[command, "accepted"]);
        }
        for dropped in Dropped::ALL {
            self.commands.with_label_values(&["any", dropped.as_str()]);
        }
        for outcome in ["ok", "failed"] {
            self.warmups.with_label_values(&[outcome]);
        }
        for (route, outcomes) in LLM_API_OUTCOMES {
            for outcome in *outcomes {
                self.llm_api.with_label_values(&[route, outcome]);
            }
        }
        for trigger in ["start", "change", "sighup"] {
            self.skill_reloads.with_label_values(&[trigger]);
        }
        for marker in ["cmd", "ask", "message", "done", "cap", "cut"] {
            self.skill_steps.with_label_values(&[marker]);
        }
        for verdict in ["allow", "ask", "deny", "confirmed"] {
            self.skill_commands.with_label_values(&[verdict]);
        }
    }

    pub(crate) fn answer(&self, handler: &str, kind: &str) {
        self.answers.with_label_values(&[handler, kind]).inc();
    }

    /// A model call of `backend` ended with `outcome` after `elapsed`.
    pub(crate) fn model_call(&self, backend: &dyn ModelBackend, outcome: &ModelOutcome, elapsed: Duration) {
        let name = backend.name();
        let label = match outcome {
            Ok(_) => "ok",
            Err(error) => error.kind(),
        };
        self.model_calls.with_label_values(&[name, label]).inc();
        self.model_seconds.with_label_values(&[name]).observe(elapsed.as_secs_f64());
        if let Some(first) = outcome.as_ref().ok().and_then(|completion| completion.first_token) {
            self.first_token_seconds.with_label_values(&[name]).observe(first.as_secs_f64());
        }
        self.breaker.gauge.set(backend.breaker_state());
    }

    /// Reads the breaker's state from `backend` whenever the metrics are
    /// gathered, not only after a call.
    pub(crate) fn watch_breaker(&self, backend: &Arc<dyn ModelBackend>) {
        *self.breaker.backend.write().unwrap_or_else(|e| e.into_inner()) = Some(Arc::downgrade(backend));
    }
}

/// The breaker's gauge, set from its backend when gathered: a breaker whose
/// cooldown ran out with no call since is half-open, and an idle replica
/// must not read open (and keep an alert firing) until its next call.
#[derive(Clone)]
pub(crate) struct BreakerGauge {
    gauge: IntGauge,
    backend: Arc<RwLock<Option<Weak<dyn ModelBackend>>>>,
}

impl Collector for BreakerGauge {
    fn desc(&self) -> Vec<&Desc> {
        self.gauge.desc()
    }

    fn collect(&self) -> Vec<MetricFamily> {
        let backend = self.backend.read().unwrap_or_else(|e| e.into_inner()).as_ref().and_then(Weak::upgrade);
        if let Some(backend) = backend {
            self.gauge.set(backend.breaker_state());
        }
        self.gauge.collect()
    }
}

impl fmt::Debug for BreakerGauge {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("BreakerGauge").field("state", &self.gauge.get()).finish_non_exhaustive()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn registers_into_the_given_registry_once() {
        let registry = Registry::new();
        let metrics = AssistantMetrics::new(&registry).unwrap();
        metrics.answer("run", "handover");
        metrics.model_calls.with_label_values(&["openai", "ok"]).inc();
        let text = prometheus::TextEncoder::new().encode_to_string(&registry.gather()).unwrap();
        assert!(text.contains("megamind_assistant_answers_total{handler=\"run\",kind=\"handover\"} 1"), "{text}");
        assert!(text.contains("megamind_assistant_model_calls_total{backend=\"openai\",outcome=\"ok\"} 1"), "{text}");
        assert!(AssistantMetrics::new(&registry).is_err(), "a second set in the same registry is refused");
        assert!(AssistantMetrics::new(&Registry::new()).is_ok(), "another registry is independent");
    }
}
