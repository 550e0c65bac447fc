//! Building the protocol answers: the model's answer as speech, a text card
//! and client directives; the spoken fallback and apology; the decline.

/// Spoken when declining a turn that brings nothing to answer.
pub(crate) const NO_WORDS: &str = "Я отвечаю только на сказанное или написанное.";

use megamind_core::proto::n_alice::n_scenarios::{
    TAnalyticsInfo, TCard, TCloseAppDirective, TDirective, TLayout, TOpenAppDirective, TScenarioFeatures,
    TScenarioResponseBody, TScenarioRunResponse, TShowStreamDirective, t_card, t_directive, t_scenario_run_response,
};

use crate::{
    dialog::{
        answer::{Command, ModelAnswer},
        state,
    },
    proto::megamind_scenario::v1::TAssistantState,
};

/// `ProductScenarioName` of the analytics.
const PRODUCT: &str = "assistant";

/// The ranking features of an answer this scenario wants to give.
pub(crate) fn features() -> TScenarioFeatures {
    TScenarioFeatures { intent: "assistant".into(), ..Default::default() }
}

/// The model's answer: `speech` spoken (the voice-length part of its text
/// not spoken yet), its whole `text` on the card, a directive per command.
pub fn answer(answer: &ModelAnswer, speech: &str, state: &TAssistantState) -> TScenarioResponseBody {
    let directives = answer.command.iter().map(directive).collect();
    let intent = answer.command.as_ref().map_or("assistant.chat", |c| match c {
        Command::OpenApp { .. } => "assistant.open_app",
        Command::CloseApp { .. } => "assistant.close_app",
    });
    said(&answer.text, speech, directives, false, state, intent)
}

/// A phrase of the scenario's own (fallback, apology); `listen` keeps the
/// microphone open for the user's repeat.
pub(crate) fn spoken(text: &str, listen: bool, state: &TAssistantState, intent: &str) -> TScenarioResponseBody {
    body(text, Vec::new(), listen, state, intent)
}

/// An answer of the scenario's own: `card` shown, `speech` spoken, with
/// `directives`; `listen` keeps the microphone open.
pub(crate) fn said(
    card: &str,
    speech: &str,
    directives: Vec<TDirective>,
    listen: bool,
    state: &TAssistantState,
    intent: &str,
) -> TScenarioResponseBody {
    let mut body = body(card, directives, listen, state, intent);
    if let Some(layout) = body.layout.as_mut() {
        layout.output_speech = speech.into();
    }
    body
}

/// `/run` declines, saying why (Megamind picks another scenario), with
/// the request's `state` as it came: a declined answer Megamind gives all
/// the same (nothing else would answer) must not wipe the dialog's state,
/// a skill in progress among it.
pub(crate) fn irrelevant(reason: &str, state: Option<&prost_types::Any>) -> TScenarioRunResponse {
    let layout = layout(reason, Vec::new(), false);
    TScenarioRunResponse {
        features: Some(TScenarioFeatures { is_irrelevant: true, ..features() }),
        response: Some(t_scenario_run_response::Response::ResponseBody(TScenarioResponseBody {
            layout: Some(layout),
            state: state.cloned(),
            ..Default::default()
        })),
        ..Default::default()
    }
}

fn body(
    text: &str,
    directives: Vec<TDirective>,
    listen: bool,
    state: &TAssistantState,
    intent: &str,
) -> TScenarioResponseBody {
    TScenarioResponseBody {
        layout: Some(layout(text, directives, listen)),
        state: Some(state::encode(state)),
        analytics_info: Some(TAnalyticsInfo {
            intent: intent.into(),
            product_scenario_name: PRODUCT.into(),
            ..Default::default()
        }),
        expects_request: listen,
        ..Default::default()
    }
}

fn layout(text: &str, directives: Vec<TDirective>, listen: bool) -> TLayout {
    let cards = if text.is_empty() { Vec::new() } else { vec![TCard { card: Some(t_card::Card::Text(text.into())) }] };
    TLayout { cards, output_speech: text.into(), directives, should_listen: listen }
}

/// The directive that shows the answer's JSONSeq stream at `url`.
pub(crate) fn show_stream(url: &str) -> TDirective {
    let show = TShowStreamDirective { name: "show_llm_stream".into(), url: url.into() };
    TDirective { directive: Some(t_directive::Directive::ShowStreamDirective(show)) }
}

pub(crate) fn directive(command: &Command) -> TDirective {
    let directive = match command.clone() {
        Command::OpenApp { app_name, app_path, payload } => {
            t_directive::Directive::OpenAppDirective(TOpenAppDirective {
                name: "open_app".into(),
                app_name,
                app_path,
                payload: Some(payload),
            })
        }
        Command::CloseApp { app_name, payload } => t_directive::Directive::CloseAppDirective(TCloseAppDirective {
            name: "close_app".into(),
            app_name,
            payload: Some(payload),
        }),
    };
    TDirective { directive: Some(directive) }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::dialog::answer::parse;

    #[test]
    fn a_command_becomes_a_directive_with_its_payload_and_speech() {
        let raw = r#"{"session_id":"s","command":"close_app","args":{"app_name":"Safari"},"text":"Закрываю Safari."}"#;
        let body = answer(&parse(raw), "Закрываю Safari.", &TAssistantState::default());
        let layout = body.layout.unwrap();
        assert_eq!(layout.output_speech, "Закрываю Safari.");
        assert_eq!(layout.cards, [TCard { card: Some(t_card::Card::Text("Закрываю Safari.".into())) }]);
        let Some(t_directive::Directive::CloseAppDirective(close)) = &layout.directives[0].directive else {
            panic!("{:?}", layout.directives)
        };
        assert_eq!((close.name.as_str(), close.app_name.as_str()), ("close_app", "Safari"));
        assert_eq!(close.payload.as_ref().unwrap().fields.len(), 4);
        assert_eq!(body.analytics_info.unwrap().intent, "assistant.close_app");
        assert!(body.state.is_some());
    }

    #[test]
    fn empty_text_gives_no_card() {
        let raw = r#"{"session_id":"s","command":"open_app","args":{"app_name":"Safari"},"text":""}"#;
        let layout = answer(&parse(raw), "", &TAssistantState::default()).layout.unwrap();
        assert!(layout.cards.is_empty() && layout.output_speech.is_empty());
        assert_eq!(layout.directives.len(), 1);
    }
}
