//! One `/run` of the demo scenario through the dispatcher (decode, cache
//! miss, scenario, encode, metrics, log line), with logging off, at `info`
//! (the summary line through the non-blocking writer) and at `debug`
//! (redacted request and answer bodies): what logging costs the hot path.

use std::sync::Arc;

use bytes::Bytes;
use criterion::{Criterion, criterion_group, criterion_main};
use megamind_core::{
    app::App,
    codec::Format,
    config::Config,
    dispatch::{Call, Transport},
    scenario::{Handler, module},
};
use megamind_scenario::scenarios;
use tokio::time::Instant;
use tracing_subscriber::{EnvFilter, fmt};

#[path = "support/bodies.rs"]
mod bodies;

fn dispatch(c: &mut Criterion) {
    let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
    let config = Config::default();
    let metrics = megamind_core::rules::metrics::ServerMetrics::new();
    let registry = module::build_all(&scenarios::modules(), &config.scenarios, metrics.registry()).unwrap().registry;
    let app = Arc::new(App::with_metrics(&config, registry, metrics).unwrap());
    let mut stamped = bodies::Stamped::new("poi_run_request", "TScenarioRunRequest");
    let mut n = 0u64;
    let mut group = c.benchmark_group("dispatch_demo_run");
    for level in ["off", "info", "debug"] {
        let (writer, _guard) = megamind_core::rules::logging::batch::BatchWriter::new(std::io::sink());
        let subscriber = fmt()
            .with_env_filter(EnvFilter::new(level))
            .event_format(megamind_core::rules::logging::line::LineFormat)
            .with_writer(writer)
            .finish();
        tracing::subscriber::with_default(subscriber, || {
            group.bench_function(format!("log_{level}"), |b| {
                b.iter(|| {
                    n += 1;
                    let body = Bytes::copy_from_slice(stamped.with_id(0, n));
                    let call = Call {
                        handler: Handler::Run,
                        body,
                        format: Format::Binary,
                        started: Instant::now(),
                        client_timeout: None,
                        meta: Default::default(),
                        transport: Transport::Http,
                        admitted: None,
                    };
                    let scenario = app.dispatcher.scenario(Some("demo")).unwrap();
                    runtime.block_on(app.dispatcher.dispatch(scenario, call))
                })
            });
        });
    }
    group.finish();
}

criterion_group!(benches, dispatch);
criterion_main!(benches);
