//! Codec and idempotency-cache hot paths: binary decode/encode, our text
//! printer, proto3 JSON, the redacted debug text, cache hits and misses.

use std::{hint::black_box, time::Duration};

use bytes::Bytes;
use criterion::{Criterion, criterion_group, criterion_main};
use futures_util::FutureExt;
use megamind_core::{
    codec::{self, Format, redact, text},
    proto::n_alice::n_scenarios::{TScenarioRunRequest, TScenarioRunResponse},
    rules::idempotency::{IdempotencyCache, Limits},
    scenario::Handler,
    store::{Begin, Key},
};
use prost::Message;
use prost_reflect::ReflectMessage;

#[path = "support/bodies.rs"]
mod bodies;

fn codecs(c: &mut Criterion) {
    let request_bin = bodies::fixture_body("poi_run_request", "TScenarioRunRequest", Format::Binary);
    let request_text = bodies::fixture_text("poi_run_request");
    let request_json = bodies::fixture_body("poi_run_request", "TScenarioRunRequest", Format::Json);
    let request = TScenarioRunRequest::decode(&request_bin[..]).unwrap();
    let response_bin = bodies::fixture_body("poi_run_response", "TScenarioRunResponse", Format::Binary);
    let response = TScenarioRunResponse::decode(&response_bin[..]).unwrap();
    let response_dynamic = response.transcode_to_dynamic();
    let response_desc = response.descriptor();

    let mut group = c.benchmark_group("codec");
    group.bench_function("decode_binary_run_request", |b| {
        b.iter(|| TScenarioRunRequest::decode(black_box(&request_bin[..])).unwrap())
    });
    group.bench_function("encode_binary_run_response", |b| b.iter(|| black_box(&response).encode_to_vec()));
    group.bench_function("clone_run_response", |b| b.iter(|| black_box(&response).clone()));
    group.bench_function("parse_text_run_request", |b| {
        b.iter(|| codec::decode::<TScenarioRunRequest>(black_box(request_text.as_bytes()), Format::Text).unwrap())
    });
    group.bench_function("parse_json_run_request", |b| {
        b.iter(|| codec::decode::<TScenarioRunRequest>(black_box(&request_json), Format::Json).unwrap())
    });
    group.bench_function("print_text_run_response", |b| b.iter(|| text::print(black_box(&response_dynamic))));
    group.bench_function("render_json_run_response", |b| {
        b.iter(|| codec::encode_dynamic(black_box(&response_dynamic), Format::Json).unwrap())
    });
    group.bench_function("transcode_binary_to_text_run_response", |b| {
        let binary = Bytes::from(response_bin.clone());
        b.iter(|| codec::transcode(response_desc.clone(), black_box(&binary), Format::Text).unwrap())
    });
    group.bench_function("redacted_text_run_request", |b| b.iter(|| redact::redacted_text(black_box(&request))));
    group.finish();
}

fn cache(c: &mut Criterion) {
    let answer = Bytes::from(bodies::fixture_body("poi_run_response", "TScenarioRunResponse", Format::Binary));
    let lease_ttl = Duration::from_secs(30);
    // The memory store's futures are ready at once: polled once, as the dispatcher does.
    let begin = |cache: &IdempotencyCache, id: &str| {
        cache
            .begin(Key::new("demo", Handler::Run, id), lease_ttl, tokio::time::Instant::now() + lease_ttl, &mut || true)
            .now_or_never()
            .unwrap()
            .unwrap()
    };
    let mut group = c.benchmark_group("idempotency");

    let cache = IdempotencyCache::new(Limits::default());
    match begin(&cache, "hit") {
        Begin::Lead(lease) => cache.end(lease, Some(answer.clone())).now_or_never().unwrap().unwrap(),
        _ => unreachable!("a fresh cache leads"),
    }
    group.bench_function("hit", |b| {
        b.iter(|| match begin(&cache, black_box("hit")) {
            Begin::Hit(body) => body,
            _ => unreachable!("completed above"),
        })
    });

    // Misses at the steady state of a full cache: every completion evicts the oldest.
    let bounded = IdempotencyCache::new(Limits { max_entries: 10_000, ..Limits::default() });
    let mut n = 0u64;
    group.bench_function("miss_and_complete", |b| {
        b.iter(|| {
            n += 1;
            let id = format!("{n:036}");
            if let Begin::Lead(lease) = begin(&bounded, &id) {
                bounded.end(lease, Some(answer.clone())).now_or_never().unwrap().unwrap();
            }
        })
    });
    group.finish();
}

criterion_group!(benches, codecs, cache);
criterion_main!(benches);
