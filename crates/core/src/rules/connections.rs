//! Limits on connections: how many the server holds open, and how long
//! each may keep it waiting. The server's connection loop enforces them.

use std::time::Duration;

/// Limits on connections: how many, and how long each may keep the server waiting.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ConnectionLimits {
    /// Connections open at once; past it new ones wait in the listen backlog.
    pub max_connections: usize,
    /// From the first byte of a request (or the connection's opening) to the end of its head.
    pub header_timeout: Duration,
    /// A connection with no request in flight is closed after this.
    pub idle_timeout: Duration,
    /// A connection whose answers wait for the client, with no byte written
    /// for this long, is closed (and the memory its answers held freed).
    pub send_timeout: Duration,
    /// HTTP/2 streams open at once on one connection.
    pub h2_max_concurrent_streams: u32,
    /// Requests open at once server-wide, from their head until their answer
    /// is all handed over; past it a new HTTP/2 stream on a connection with a
    /// request open is refused (REFUSED_STREAM).
    pub max_open_requests: usize,
    /// The HTTP/1.1 read buffer, in bytes: the longest request head accepted.
    pub http1_read_buffer: usize,
    /// How much lower the stream lane's threads run (`nice`), when
    /// connections opening with a `GET` of a lane route have a lane of their own.
    pub stream_lane_nice: Option<u8>,
}
