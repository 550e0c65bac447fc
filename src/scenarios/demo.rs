//! `demo`: plays the protocol's four example dialogs, one per way a scenario
//! can answer. Copy it to start a scenario of your own.
//!
//! - POI, `/run` only: "кафе пушкин" answers a card with frame actions whose
//!   callbacks come back as `Input.Callback` ("phone" answers the number).
//! - Music, `/run` + `/continue`: `/run` ranks with features and hands over
//!   `ContinueArguments`; `/continue` starts the playlist.
//! - Video, `/run` + `/commit`: the answer is ready at ranking time; `/commit`
//!   sends the payment push (the side effect, counted by [`Demo::payment_pushes`]).
//! - Video, `/run` + `/apply`: the answer needs the side effect first.
//!
//! Anything else is declined with `IsIrrelevant` and a spoken reason.

use std::sync::Arc;

use async_trait::async_trait;
use megamind_core::{
    config::Problem,
    proto::n_alice::n_scenarios::{
        TCard, TLayout, TScenarioApplyRequest, TScenarioApplyResponse, TScenarioCommitResponse,
        TScenarioContinueResponse, TScenarioFeatures, TScenarioResponseBody, TScenarioRunRequest, TScenarioRunResponse,
        t_card, t_input, t_scenario_run_response,
    },
    scenario::{Answer, CallContext, Scenario, ScenarioError, ScenarioModule, ScenarioResult, Setup, SetupError},
};
use prost_reflect::{DynamicMessage, ReflectMessage};

const MUSIC_PLAY: &str = "personal_assistant.scenarios.music_play";
const PAYMENT_CONFIRMED: &str = "personal_assistant.scenarios.quasar.payment_confirmed";
const OPEN_CURRENT_VIDEO: &str = "personal_assistant.scenarios.quasar.open_current_video";
const MUSIC_ARGUMENTS: &str = "type.googleapis.com/NAlice.NHollywood.TMusicArguments";
const VIDEO_ARGUMENTS: &str = "type.googleapis.com/google.protobuf.StringValue";

/// The canned answers, parsed once from the text format beside this file.
#[derive(Debug)]
struct Answers {
    poi: Arc<TScenarioRunResponse>,
    poi_phone: Arc<TScenarioRunResponse>,
    music_run: Arc<TScenarioRunResponse>,
    music_continue: Arc<TScenarioContinueResponse>,
    video_commit_run: Arc<TScenarioRunResponse>,
    video_commit: Arc<TScenarioCommitResponse>,
    video_apply_run: Arc<TScenarioRunResponse>,
    video_apply: Arc<TScenarioApplyResponse>,
}

fn parse<T: ReflectMessage + Default>(name: &str, text: &str) -> Arc<T> {
    let message = DynamicMessage::parse_text_format(T::default().descriptor(), text)
        .unwrap_or_else(|e| panic!("embedded answer {name} is not valid text format: {e}"));
    Arc::new(message.transcode_to::<T>().unwrap_or_else(|e| panic!("embedded answer {name}: {e}")))
}

macro_rules! answer {
    ($file:literal) => {
        parse($file, include_str!(concat!("demo/answers/", $file)))
    };
}

/// The demo scenario.
#[derive(Debug)]
pub struct Demo {
    answers: Answers,
    /// `megamind_demo_payment_pushes_total` once the module registers it:
    /// the side effect a repeat must never run again, visible per replica.
    payment_pushes: prometheus::IntCounter,
}

impl Default for Demo {
    fn default() -> Demo {
        Demo::new()
    }
}

impl Demo {
    /// The demo with its answers loaded.
    pub fn new() -> Demo {
        Demo {
            answers: Answers {
                poi: answer!("poi_run_response.pb.txt"),
                poi_phone: answer!("poi_callback_run_response.pb.txt"),
                music_run: answer!("music_run_response.pb.txt"),
                music_continue: answer!("music_continue_response.pb.txt"),
                video_commit_run: answer!("video_commit_run_response.pb.txt"),
                video_commit: answer!("video_commit_response.pb.txt"),
                video_apply_run: answer!("video_apply_run_response.pb.txt"),
                video_apply: answer!("video_apply_response.pb.txt"),
            },
            payment_pushes: prometheus::IntCounter::new(
                "megamind_demo_payment_pushes_total",
                "Payment pushes the demo's /commit and /apply have sent.",
            )
            .expect("a valid metric"),
        }
    }

    /// How many payment pushes `/commit` and `/apply` have sent.
    pub fn payment_pushes(&self) -> u64 {
        self.payment_pushes.get()
    }

    fn send_payment_push(&self, ctx: &CallContext) {
        // A real scenario calls its push service here.
        self.payment_pushes.inc();
        tracing::info!(request_id = %ctx.request_id, "demo: payment push sent");
    }
}

fn expect_arguments(request: &TScenarioApplyRequest, type_url: &str) -> Result<(), ScenarioError> {
    match &request.arguments {
        Some(any) if any.type_url == type_url => Ok(()),
        Some(any) => Err(ScenarioError::BadRequest(format!("expected Arguments of {type_url}, got {}", any.type_url))),
        None => Err(ScenarioError::BadRequest(format!("expected Arguments of {type_url}, got none"))),
    }
}

fn irrelevant(reason: &str) -> Answer<TScenarioRunResponse> {
    TScenarioRunResponse {
        features: Some(TScenarioFeatures { is_irrelevant: true, ..Default::default() }),
        response: Some(t_scenario_run_response::Response::ResponseBody(TScenarioResponseBody {
            layout: Some(TLayout {
                cards: vec![TCard { card: Some(t_card::Card::Text(reason.to_owned())) }],
                output_speech: reason.to_owned(),
                ..Default::default()
            }),
            ..Default::default()
        })),
        ..Default::default()
    }
    .into()
}

#[async_trait]
impl Scenario for Demo {
    async fn run(&self, request: TScenarioRunRequest, _ctx: CallContext) -> ScenarioResult<TScenarioRunResponse> {
        let input = request.input.unwrap_or_default();
        let has_frame = |name: &str| input.semantic_frames.iter().any(|f| f.name == name);
        if has_frame(MUSIC_PLAY) {
            return Ok(self.answers.music_run.clone().into());
        }
        if has_frame(PAYMENT_CONFIRMED) {
            return Ok(self.answers.video_apply_run.clone().into());
        }
        if has_frame(OPEN_CURRENT_VIDEO) {
            return Ok(self.answers.video_commit_run.clone().into());
        }
        Ok(match input.event {
            // `Utterance` is Megamind's normalized (lower-case) form of `RawUtterance`.
            Some(t_input::Event::Text(text)) if text.utterance.trim() == "кафе пушкин" => {
                self.answers.poi.clone().into()
            }
            Some(t_input::Event::Callback(callback)) if callback.name == "request_url" => {
                let url = callback.payload.as_ref().and_then(|p| p.fields.get("url"));
                let phone = url.is_some_and(
                    |v| matches!(&v.kind, Some(prost_types::value::Kind::StringValue(s)) if s.contains("action=phone")),
                );
                if phone {
                    self.answers.poi_phone.clone().into()
                } else {
                    irrelevant("В демо я знаю только телефон этого кафе.")
                }
            }
            _ => irrelevant("Это демо-сценарий: спросите про кафе «Пушкинъ», включите музыку или купите фильм."),
        })
    }

    async fn r#continue(
        &self,
        request: TScenarioApplyRequest,
        _ctx: CallContext,
    ) -> ScenarioResult<TScenarioContinueResponse> {
        expect_arguments(&request, MUSIC_ARGUMENTS)?;
        Ok(self.answers.music_continue.clone().into())
    }

    async fn commit(
        &self,
        request: TScenarioApplyRequest,
        ctx: CallContext,
    ) -> ScenarioResult<TScenarioCommitResponse> {
        expect_arguments(&request, VIDEO_ARGUMENTS)?;
        self.send_payment_push(&ctx);
        Ok(self.answers.video_commit.clone().into())
    }

    async fn apply(&self, request: TScenarioApplyRequest, ctx: CallContext) -> ScenarioResult<TScenarioApplyResponse> {
        expect_arguments(&request, VIDEO_ARGUMENTS)?;
        self.send_payment_push(&ctx);
        Ok(self.answers.video_apply.clone().into())
    }
}

/// `demo` as `serve` builds it: no table, flags or routes of its own.
#[derive(Debug, Clone, Copy, Default)]
pub struct DemoModule;

impl ScenarioModule for DemoModule {
    fn name(&self) -> &'static str {
        "demo"
    }

    fn check(&self, table: &toml::Table) -> Vec<Problem> {
        let unknown =
            |key| Problem::new(format!("demo.{key}"), format!("demo.{key}: unknown key ([demo] has no settings)"));
        table.keys().map(unknown).collect()
    }

    fn build(&self, table: toml::Table, setup: &mut Setup<'_>) -> Result<Arc<dyn Scenario>, SetupError> {
        if let Some(problem) = self.check(&table).into_iter().next() {
            return Err(SetupError::new("demo", problem.message));
        }
        let demo = Demo::new();
        setup
            .metrics
            .register(Box::new(demo.payment_pushes.clone()))
            .map_err(|e| SetupError::new("demo", format!("its metric: {e}")))?;
        Ok(Arc::new(demo))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_answer_loads() {
        let demo = Demo::new();
        assert_eq!(demo.answers.poi.version, "0");
        assert!(matches!(
            demo.answers.music_run.response,
            Some(t_scenario_run_response::Response::ContinueArguments(_))
        ));
        assert!(demo.answers.video_commit.response.is_some());
    }

    #[tokio::test]
    async fn unknown_requests_are_declined_with_a_reason() {
        let ctx =
            CallContext { request_id: "r".into(), deadline: tokio::time::Instant::now(), meta: Default::default() };
        let answer = Demo::new().run(TScenarioRunRequest::default(), ctx).await.unwrap().into_owned();
        assert!(answer.features.unwrap().is_irrelevant);
        let Some(t_scenario_run_response::Response::ResponseBody(body)) = answer.response else { panic!("no body") };
        assert!(!body.layout.unwrap().output_speech.is_empty());
    }
}
