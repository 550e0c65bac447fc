//! `echo`: says back what the user said. A scenario written outside the
//! crate, against the library's public API, hosted next to the built-in ones.

use std::sync::Arc;

use async_trait::async_trait;
use megamind_scenario::{
    config::Config,
    proto::n_alice::n_scenarios::{
        TCard, TLayout, TScenarioFeatures, TScenarioResponseBody, TScenarioRunRequest, TScenarioRunResponse, t_card,
        t_input, t_scenario_run_response,
    },
    rules::metrics::ServerMetrics,
    scenario::{CallContext, Registry, Scenario, ScenarioResult},
    scenarios::{self, BuiltinError},
};

/// The echo scenario: `/run` only.
#[derive(Debug, Default)]
pub struct Echo;

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
            words => (false, words.to_owned()),
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

/// The built-in scenarios plus `echo`, as `serve` would host them.
pub fn registry(config: &Config, metrics: &ServerMetrics) -> Result<Registry, BuiltinError> {
    let mut registry = scenarios::builtin(config, metrics.registry())?;
    registry.register("echo", Arc::new(Echo))?;
    Ok(registry)
}
