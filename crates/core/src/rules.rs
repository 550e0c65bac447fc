//! The rules the server enforces for every scenario, whatever the transport:
//! the time budget, idempotency by `RequestId`, overload admission, limits
//! on connections, who may call, and the request log.

pub mod auth;
pub mod budget;
pub mod connections;
pub mod idempotency;
pub mod logging;
pub mod metrics;
pub mod overload;
