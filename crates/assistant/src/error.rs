//! Why the assistant could not be set up: the one error its wings report
//! while it is built.

/// Why the assistant could not be set up.
#[derive(Debug, thiserror::Error)]
pub enum AssistantError {
    /// A configuration value that passed validation but cannot be used.
    #[error("assistant: {0}")]
    Setup(String),
    /// Metrics could not be registered.
    #[error("assistant metrics: {0}")]
    Metrics(#[from] prometheus::Error),
}
