//! A server hosting the built-in scenarios and `echo`, a scenario of its own:
//! `cargo run --example echo_scenario [-- ADDR]`, then `POST /echo/run`.

mod echo;

use std::sync::Arc;

use anyhow::Context;
use megamind_scenario::{
    config::Config,
    rules::{logging, metrics::ServerMetrics},
    server::{self, App},
};

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let config = Config::default();
    let addr = std::env::args().nth(1).unwrap_or_else(|| "127.0.0.1:8080".to_owned());
    let _log_guard = logging::init(&config.log_level, std::io::stdout()).map_err(anyhow::Error::msg)?;
    let metrics = ServerMetrics::new();
    let app = App::with_metrics(&config, echo::registry(&config, &metrics)?, metrics)?;
    let listener = tokio::net::TcpListener::bind(&addr).await.with_context(|| format!("cannot listen on {addr}"))?;
    tracing::info!(addr = %listener.local_addr()?, scenarios = %app.dispatcher.registry().listed(), "serving");
    server::serve(listener, Arc::new(app), server::shutdown_signal()).await?;
    Ok(())
}
