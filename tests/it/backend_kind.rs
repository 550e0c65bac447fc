//! A model backend of its own, added the way a new one is: one file (this
//! backend, its factory) and one line that names its `kind`
//! (`AssistantModule::with_backend`, or `backend::BUILT_IN` inside the
//! crate). The server then answers through it when `[assistant.backend]
//! kind` says so, and refuses a kind nobody registered.

use std::sync::Arc;

use async_trait::async_trait;
use megamind_assistant::{
    AssistantError, AssistantModule,
    backend::{BackendError, Completion, EventSink, ModelBackend, ModelEvent, ModelRequest, config::BackendConfig},
};
use megamind_core::{config::Config, scenario::module};

use crate::{
    assistant_harness::{ask, client, speech},
    helpers::{Transport, spawn_modules},
};

/// Answers every question with its words the other way round.
#[derive(Debug)]
struct Mirror;

#[async_trait]
impl ModelBackend for Mirror {
    fn name(&self) -> &'static str {
        "mirror"
    }

    async fn complete(&self, request: &ModelRequest, events: &dyn EventSink) -> Result<Completion, BackendError> {
        let text: String = request.utterance().chars().rev().collect();
        events.event(ModelEvent::TextDelta(text.clone()));
        Ok(Completion { text, attempts: 1, ..Completion::default() })
    }
}

/// Its factory: nothing to read from its section.
fn mirror(_: &BackendConfig, _: &prometheus::IntCounter) -> Result<Arc<dyn ModelBackend>, AssistantError> {
    Ok(Arc::new(Mirror))
}

fn config(kind: &str) -> Config {
    Config::from_toml(&format!("[assistant.backend]\nkind = {kind:?}\n")).expect("valid")
}

#[tokio::test]
async fn a_backend_of_its_own_answers_when_its_kind_is_configured() {
    let modules: [Box<dyn module::ScenarioModule>; 1] =
        [Box::new(AssistantModule::default().with_backend("mirror", mirror))];
    let app = spawn_modules(config("mirror"), &modules).await;
    let body = ask(&mut client(&app, Transport::Http), "тевирп").await.into_body();
    assert_eq!(speech(&body), "привет");
}

#[test]
fn a_kind_nobody_registered_is_refused_with_the_known_ones() {
    let modules: [Box<dyn module::ScenarioModule>; 1] = [Box::new(AssistantModule::default())];
    let error = module::build_all(&modules, &config("mirror").scenarios, &prometheus::Registry::new()).unwrap_err();
    assert!(error.to_string().contains("backend.kind = \"mirror\": no such backend (openai, offline)"), "{error}");
}
