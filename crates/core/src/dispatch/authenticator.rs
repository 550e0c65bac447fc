//! The authenticate step of the pipeline: a hook deciding whether the
//! caller may make a call, before anything else is done for it (a cached
//! answer included).

use std::fmt;

use super::call::{CallMeta, Refusal};
use crate::scenario::Handler;

/// Decides whether a caller may call a handler of a scenario. Called once
/// per call, on the transport's task: it must not block.
pub trait Authenticator: fmt::Debug + Send + Sync + 'static {
    /// `Ok` lets the call go on; a refusal (usually
    /// [`Refusal::Unauthenticated`]) is the transport's answer.
    fn authenticate(&self, scenario: &str, handler: Handler, meta: &CallMeta) -> Result<(), Refusal>;
}

/// Lets every call through: the default until tickets are checked.
#[derive(Debug, Clone, Copy, Default)]
pub struct AcceptAll;

impl Authenticator for AcceptAll {
    fn authenticate(&self, _scenario: &str, _handler: Handler, _meta: &CallMeta) -> Result<(), Refusal> {
        Ok(())
    }
}
