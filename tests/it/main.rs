//! Black-box tests: the real server on an ephemeral port, real sockets.

mod helpers;
mod mock_llm;
mod scenarios;
mod skills;
mod skills_consent;
mod stream_lane;

mod assistant;
mod assistant_backend;
mod assistant_callbacks;
mod assistant_events;
mod assistant_grpc;
mod assistant_harness;
mod assistant_thinking;
mod assistant_words;
mod backend_kind;
mod bad_input;
mod budget;
mod client;
mod closed_stdout;
mod config_errors;
mod connections;
#[cfg(unix)]
mod deploy;
#[cfg(unix)]
mod deploy_pods;
mod deploy_secrets;
mod dialog_cmd;
mod dialogs;
mod docs;
mod example_scenario;
mod first_run;
mod fixtures;
// The gRPC load bench's config reader and report, so that their tests run
// with the others: a config in deploy/ghz it cannot build fails here.
#[path = "../../benches/support/ghz_config.rs"]
#[allow(dead_code)]
mod ghz_config;
#[path = "../../benches/support/ghz_report.rs"]
#[allow(dead_code)]
mod ghz_report;
mod grpc;
mod hostile_bodies;
mod idempotency;
#[cfg(unix)]
mod interop;
mod lifecycle;
mod llm_api;
mod metrics;
mod modules;
#[cfg(unix)]
mod operating;
#[cfg(unix)]
mod python_tools;
#[path = "../support/redis_server.rs"]
#[allow(dead_code)]
mod redis_server;
mod refusals;
mod registration;
mod replicas;
mod replicas_assistant;
mod replicas_assistant_redis;
mod replicas_hold;
mod replicas_parts;
mod router;
mod toolchain;
mod tvm;
mod tvm_faults;
#[path = "../support/tvmtool.rs"]
mod tvmtool;
mod validate_jsonseq;
