//! Who may call: the [`crate::dispatch::Authenticator`] the `[auth]` table
//! chooses (TVM service tickets checked through tvmtool, or everyone), and
//! the signed, expiring addresses that open a scenario's own routes to a
//! client that holds no ticket.

mod health;
pub mod metrics;
pub mod signed;
pub mod tvm;
pub mod tvmtool;
mod verdicts;

use std::sync::Arc;

pub use metrics::{AuthMetrics, AuthResult};
pub use signed::{AddressKey, SignatureError};
pub use tvm::TvmAuthenticator;

use crate::{
    config::AuthConfig,
    dispatch::{AcceptAll, Authenticator},
};

/// The authenticator `config` asks for, its metrics in `registry`: TVM when
/// a tvmtool address is set, else everyone let in.
pub fn authenticator(config: &AuthConfig, registry: &prometheus::Registry) -> Result<Arc<dyn Authenticator>, String> {
    let url = config.tvmtool_url.trim();
    let metrics = AuthMetrics::register(registry, !url.is_empty());
    if url.is_empty() {
        return Ok(Arc::new(AcceptAll));
    }
    Ok(Arc::new(TvmAuthenticator::new(url, config, metrics)?))
}
