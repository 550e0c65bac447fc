//! megamind-scenario
pub mod cli;
pub mod codec;
pub mod config;
pub mod dispatch;
pub mod proto;
pub mod rules;
pub mod scenario;
pub mod scenarios;
pub mod server;
pub mod transport;
pub mod upstream;
