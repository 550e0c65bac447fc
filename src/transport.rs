//! Transports: thin adapters from the wire to the [`crate::dispatch::Dispatcher`].

pub mod grpc;
pub mod http;
