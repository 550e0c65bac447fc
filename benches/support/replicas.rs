//! The load benchmark's replica rows: the assistant on [`REPLICAS`] server
//! processes sharing one local `redis-server`, as behind a round-robin
//! balancer, each row printed beside its one-server row of the same run.
//!
//! - Dialogs: the dialog row's 200 dialogs, every hop of a dialog
//!   on the next replica (`support/dialogs.rs`).
//! - Streams: the stream rows' latency row, each model call started by
//!   `/assistant/run` on replica 0 and its subscribers on replicas 1 and 2,
//!   which follow the call's journal in Redis (`support/streams.rs`).

use std::{net::SocketAddr, time::Instant};

use crate::{
    dialogs::{DialogLoad, HopLatency, REPLICAS, STORE_TIMEOUT_MS},
    ours,
    redis_server::RedisServer,
    streams::{self, LATENCY_STREAMS, Lateness},
};

/// What the one-server rows of the run measured, when they ran.
pub struct Single {
    pub dialogs: Option<HopLatency>,
    pub streams: Option<Lateness>,
}

/// Plays both rows, or says why not (no `redis-server`); Redis keeps an
/// append-only file synced as `appendfsync` says, or none.
pub async fn run(single: Single, appendfsync: Option<&'static str>) {
    let Some(redis) = RedisServer::start_with("the load bench's replica rows", appendfsync) else {
        return println!("\nreplica rows: skipped, redis-server is not installed");
    };
    if let Some(sync) = appendfsync {
        println!("\nreplica rows: Redis with appendfsync {sync}");
    }
    DialogLoad::over_replicas(&redis.url()).await.run(single.dialogs).await;
    stream_row(&redis, single.streams).await;
}

async fn stream_row(redis: &RedisServer, single: Option<Lateness>) {
    let epoch = Instant::now();
    let model = streams::mock_model(epoch).await;
    let mut args = streams::server_args(model, 10 * LATENCY_STREAMS);
    args.extend(["--store-url".into(), redis.url(), "--store-timeout-ms".into(), STORE_TIMEOUT_MS.into()]);
    let replicas: Vec<_> = (0..REPLICAS).map(|_| ours(&args)).collect();
    let addrs: Vec<SocketAddr> = replicas.iter().map(|replica| replica.addr).collect();
    println!(
        "\nJSONSeq streams over {REPLICAS} replicas sharing one Redis: each call started on replica 0, its subscribers \
         on replicas 1-{}",
        REPLICAS - 1
    );
    let seen = streams::play(addrs[0], &addrs[1..], LATENCY_STREAMS, "replicas", epoch).await;
    streams::report(&format!("{LATENCY_STREAMS} streams"), &seen);
    if let Some(single) = single {
        println!(
            "  one server in this run: p50 {:.2} ms, p99 {:.2} ms, p99.9 {:.2} ms",
            single.p50_ms, single.p99_ms, single.p999_ms
        );
    }
}
