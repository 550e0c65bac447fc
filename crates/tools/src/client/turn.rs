//! What one turn of a dialog gave: every call made ([`Hop`]s) and the
//! answer the user finally hears, with readers for what tests look at.

use megamind_core::{
    proto::n_alice::n_scenarios::{TDirective, TScenarioResponseBody},
    scenario::Handler,
};
use prost_types::Any;

use super::hop::Hop;

/// One turn: the user's input, the handlers it took, the final answer.
#[derive(Debug, Clone, PartialEq)]
pub struct Turn {
    /// Every call of the turn in order: `/run`, what it handed over to, and
    /// the same again for each callback followed.
    pub hops: Vec<Hop>,
    body: TScenarioResponseBody,
    irrelevant: bool,
}

impl Turn {
    pub(super) fn new(hops: Vec<Hop>, body: TScenarioResponseBody, irrelevant: bool) -> Turn {
        Turn { hops, body, irrelevant }
    }

    /// The last answer for the user: the one that asked for no callback.
    pub fn body(&self) -> &TScenarioResponseBody {
        &self.body
    }

    /// The last answer for the user, owned.
    pub fn into_body(self) -> TScenarioResponseBody {
        self.body
    }

    /// The last answer's `Layout.OutputSpeech`; empty without a layout.
    pub fn speech(&self) -> &str {
        self.body.layout.as_ref().map_or("", |layout| &layout.output_speech)
    }

    /// Everything spoken during the turn in order: fillers that came with a
    /// callback, then the last answer.
    pub fn speeches(&self) -> Vec<&str> {
        let bodies = self.hops.iter().filter_map(|hop| hop.response.body());
        bodies.map(|body| body.layout.as_ref().map_or("", |layout| layout.output_speech.as_str())).collect()
    }

    /// The last answer's `Layout.Directives`.
    pub fn directives(&self) -> &[TDirective] {
        self.body.layout.as_ref().map_or(&[], |layout| &layout.directives)
    }

    /// Whether the last `/run` declined (`Features.IsIrrelevant`).
    pub fn is_irrelevant(&self) -> bool {
        self.irrelevant
    }

    /// The last answer's `State`, which the next turn sends back.
    pub fn state(&self) -> Option<&Any> {
        self.body.state.as_ref()
    }

    /// The first call of `handler` in the turn.
    pub fn hop(&self, handler: Handler) -> Option<&Hop> {
        self.hops.iter().find(|hop| hop.handler() == handler)
    }
}
