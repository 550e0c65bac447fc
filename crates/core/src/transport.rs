//! Transports: thin adapters from the wire to the [`crate::dispatch::Dispatcher`].
//! The HTTP fast path takes scenario calls, the router everything else over
//! HTTP, gRPC its own requests; the server's connection loop picks one.

pub mod grpc;
pub mod http;
pub mod pieces;
pub mod router;
