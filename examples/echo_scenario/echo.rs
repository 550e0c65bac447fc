//! `echo`: says back what the user said. A scenario written outside the
//! crate, against the library's public API, hosted next to the built-in ones
//! with a configuration table, a flag, a metric and a route of its own.

use std::sync::{Arc, Mutex};

use async_trait::async_trait;
use megamind_core::{
    config::{Problem, problem},
    proto::n_alice::n_scenarios::{
        TCard, TLayout, TScenarioFeatures, TScenarioResponseBody, TScenarioRunRequest, TScenarioRunResponse, t_card,
        t_input, t_scenario_run_response,
    },
    scenario::{CallContext, Flag, Scenario, ScenarioModule, ScenarioResult, Setup, SetupError, module::parse_table},
};
use serde::{Deserialize, Serialize};

/// The `[echo]` table.
#[derive(Debug, Clone, Default, Deserialize, Serialize)]
#[serde(default, deny_unknown_fields)]
pub struct EchoConfig {
    /// Said before the user's words.
    pub prefix: String,
}

/// The echo scenario: `/run` only.
#[derive(Debug)]
pub struct Echo {
    config: EchoConfig,
    repeats: prometheus::IntCounter,
    last: Mutex<String>,
}

#[async_trait]
impl Scenario for Echo {
    async fn run(&self, request: TScenarioRunRequest, _ctx: CallContext) -> ScenarioResult<TScenarioRunResponse> {
        let words = match request.input.and_then(|input| input.event) {
            Some(t_input::Event::Text(text)) => text.utterance,
            Some(t_input::Event::Voice(voice)) => voice.utterance,
            _ => String::new(),
        };
        // Declining with a spoken reason lets Megamind rank another scenario first.
        let (irrelevant, speech) = match words.trim() {
            "" => (true, "Мне нечего повторить.".to_owned()),
            words => {
                self.repeats.inc();
                *self.last.lock().unwrap_or_else(|p| p.into_inner()) = words.to_owned();
                (false, format!("{}{words}", self.config.prefix))
            }
        };
        Ok(TScenarioRunResponse {
            features: Some(TScenarioFeatures {
                is_irrelevant: irrelevant,
                intent: "echo".into(),
                ..Default::default()
            }),
            response: Some(t_scenario_run_response::Response::ResponseBody(TScenarioResponseBody {
                layout: Some(TLayout {
                    cards: vec![TCard { card: Some(t_card::Card::Text(speech.clone())) }],
                    output_speech: speech,
                    ..Default::default()
                }),
                ..Default::default()
            })),
            ..Default::default()
        }
        .into())
    }
}

/// `echo` as `serve` builds it.
#[derive(Debug, Clone, Copy)]
pub struct EchoModule;

impl ScenarioModule for EchoModule {
    fn name(&self) -> &'static str {
        "echo"
    }

    fn defaults(&self) -> toml::Table {
        toml::Table::try_from(EchoConfig::default()).unwrap_or_default()
    }

    fn flags(&self) -> Vec<Flag> {
        vec![Flag::new("echo-prefix", "prefix", "Said before the user's words").env("ECHO_PREFIX")]
    }

    fn check(&self, table: &toml::Table) -> Vec<Problem> {
        // Told before the server starts, each with its line or flag.
        problem::read::<EchoConfig>(table, &self.defaults(), "echo").err().unwrap_or_default()
    }

    fn build(&self, table: toml::Table, setup: &mut Setup<'_>) -> Result<Arc<dyn Scenario>, SetupError> {
        let config: EchoConfig = parse_table("echo", table)?;
        let repeats = prometheus::IntCounter::new("megamind_echo_repeats_total", "Utterances echoed.")
            .map_err(|e| SetupError::new("echo", e.to_string()))?;
        setup.metrics.register(Box::new(repeats.clone())).map_err(|e| SetupError::new("echo", e.to_string()))?;
        let echo = Arc::new(Echo { config, repeats, last: Mutex::default() });
        let (state, gate) = (echo.clone(), setup.gate());
        // GET /echo/last: the words echoed last, a user's words: only for
        // the callers the scenario's handlers admit (anyone, with no TVM).
        setup.route(
            "/echo/last",
            axum::routing::get(move |headers: axum::http::HeaderMap| {
                let (state, gate) = (state.clone(), gate.clone());
                async move {
                    if let Err(refusal) = gate.admit(&headers).await {
                        return (axum::http::StatusCode::FORBIDDEN, refusal.error_type().to_owned());
                    }
                    let last = state.last.lock().map(|last| last.clone()).unwrap_or_default();
                    (axum::http::StatusCode::OK, last)
                }
            }),
        );
        Ok(echo)
    }
}
