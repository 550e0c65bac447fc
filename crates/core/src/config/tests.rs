//! Tests of the configuration: defaults, TOML, validation.

use super::*;

#[test]
fn defaults_are_valid_and_megamind_shaped() {
    let config = Config::default();
    config.validate().unwrap();
    assert_eq!(config.budgets().run, Duration::from_millis(300));
    assert_eq!(config.body_limit, 4 * 1024 * 1024);
}

#[test]
fn toml_overrides_defaults() {
    let config =
        Config::from_toml("addr = \"0.0.0.0:9000\"\n[budget]\ncommit_ms = 800\n[cache]\nttl_secs = 5\n").unwrap();
    assert_eq!(config.addr.port(), 9000);
    assert_eq!(config.budgets().commit, Duration::from_millis(800));
    assert_eq!(config.budgets().run, Duration::from_millis(300));
    assert_eq!(config.cache_limits().ttl, Duration::from_secs(5));
    assert_eq!(config.cache_limits().commit_max_entries, Limits::default().commit_max_entries);
    let config = Config::from_toml("[cache]\ncommit_max_entries = 7\ncommit_max_bytes = 4096\n").unwrap();
    let limits = config.cache_limits();
    assert_eq!((limits.commit_max_entries, limits.commit_max_bytes), (7, 4096));
    assert_eq!(limits.max_entries, Limits::default().max_entries);
    assert_eq!(config.grpc_addr, None);
}

#[test]
fn a_grpc_address_is_read_and_must_differ_from_the_main_one() {
    let config = Config::from_toml("grpc_addr = \"0.0.0.0:9090\"").unwrap();
    assert_eq!(config.grpc_addr.as_ref().map(|a| a.port()), Some(9090));
    config.validate().unwrap();
    let clash = Config { grpc_addr: Some(Config::default().addr), ..Config::default() };
    assert!(clash.validate().unwrap_err().to_string().contains("grpc_addr"), "same address refused");
    let clash = Config { grpc_addr: Some("127.0.0.1:8080".parse().unwrap()), ..Config::default() };
    assert!(clash.validate().unwrap_err().to_string().contains("grpc_addr"), "same address refused");
}

#[test]
fn unknown_keys_and_bad_types_fail_with_the_key_named() {
    let error = Config::from_toml("adr = \"x\"").unwrap_err().to_string();
    assert!(error.contains("adr"), "{error}");
    let error = Config::from_toml("[budget]\nrun_ms = \"fast\"").unwrap_err().to_string();
    assert!(error.contains("run_ms"), "{error}");
    // Text that is not TOML is placed, not quoted: its line may hold a secret.
    let error = Config::from_toml("[store]\nurl = \"redis://:s3cret@host\n").unwrap_err().to_string();
    assert!(error.contains("configuration:2:") && !error.contains("s3cret"), "{error}");
}

#[test]
fn every_problem_is_reported_together() {
    let mut config = Config::default();
    config.budget.run_ms = 0;
    config.max_in_flight = 0;
    config.log_level = "info,[".into();
    config.cache.commit_max_bytes = 0;
    let error = config.validate().unwrap_err();
    assert_eq!(error.0.len(), 4, "a budget out of bounds is not also below its reserve: {error}");
    assert!(error.to_string().contains("cache.commit_max_bytes must be above 0"), "{error}");
    assert!(error.to_string().contains("budget.run_ms = 0"));
}

#[test]
fn a_ticket_check_that_may_outlast_the_shortest_budget_is_refused() {
    let mut config = Config::from_toml("[auth]\ntvmtool_url = \"http://localhost:18080\"").unwrap();
    assert!(config.validate().is_ok(), "50 ms inside 300 ms less the 10 ms reserve");
    config.budget.commit_ms = 60;
    let error = config.validate().unwrap_err().to_string();
    assert!(error.contains("auth.check_timeout_ms = 50: must be below the shortest handler budget"), "{error}");
    assert!(error.contains("(50 ms)"), "the budget less its reserve: {error}");
    config.auth.tvmtool_url.clear();
    assert!(config.validate().is_ok(), "no tickets checked, no bound");
}

#[test]
fn connection_limits_have_safe_defaults_and_are_read() {
    let limits = Config::default().connection_limits();
    assert!(limits.header_timeout <= Duration::from_secs(10));
    assert!(limits.idle_timeout > Duration::from_secs(60), "outlives a balancer's idle timeout");
    assert!(Config::default().shutdown_delay_ms > 0, "a rolling restart gives balancers time");
    let config =
        Config::from_toml("max_connections = 5\nheader_timeout_ms = 200\nh2_max_concurrent_streams = 4").unwrap();
    assert_eq!(config.connection_limits().max_connections, 5);
    assert_eq!(config.connection_limits().header_timeout, Duration::from_millis(200));
    assert_eq!(config.connection_limits().h2_max_concurrent_streams, 4);
    let zero = Config { send_timeout_ms: 0, max_connections: 0, ..Config::default() };
    let error = zero.validate().unwrap_err().to_string();
    assert!(error.contains("send_timeout_ms") && error.contains("max_connections"), "{error}");
    let config = Config::from_toml("max_open_requests = 7\nhttp1_read_buffer_bytes = 16384").unwrap();
    assert_eq!(config.connection_limits().max_open_requests, 7);
    assert_eq!(config.connection_limits().http1_read_buffer, 16384);
    let small = Config { max_open_requests: 0, http1_read_buffer_bytes: 4096, ..Config::default() };
    let error = small.validate().unwrap_err().to_string();
    assert!(error.contains("max_open_requests") && error.contains("http1_read_buffer_bytes = 4096"), "{error}");
}

#[test]
fn a_host_name_is_a_valid_address() {
    let config = Config::from_toml("addr = \"localhost:9000\"").unwrap();
    assert_eq!((config.addr.to_string().as_str(), config.addr.port()), ("localhost:9000", 9000));
    config.validate().unwrap();
    let error = Config::from_toml("addr = \"localhost\"").unwrap_err().to_string();
    assert!(error.contains("host:port"), "{error}");
}

#[test]
fn a_log_level_that_is_not_one_is_refused() {
    let config = Config { log_level: "verbose".into(), ..Config::default() };
    let error = config.validate().unwrap_err().to_string();
    assert!(error.contains("log_level \"verbose\"") && error.contains("debug"), "{error}");
    for good in ["info", "DEBUG", "warn,megamind_scenario::access=debug", "hyper=trace,info"] {
        Config { log_level: good.into(), ..Config::default() }.validate().unwrap();
    }
}

#[test]
fn scenario_tables_are_kept_for_their_scenarios() {
    let config =
        Config::from_toml("addr = \"0.0.0.0:9000\"\n[assistant]\nmodel = \"qwen\"\n[budget]\nrun_ms = 200\n").unwrap();
    assert_eq!(config.scenarios["assistant"]["model"].as_str(), Some("qwen"));
    assert_eq!((config.addr.port(), config.budget.run_ms), (9000, 200), "core tables stay the core's");
    assert!(!config.scenarios.contains_key("budget"));
    let error = Config::from_toml("assistant = 1").unwrap_err().to_string();
    assert!(error.contains("assistant"), "a key that is not a table is the core's, and unknown: {error}");
}

#[test]
fn the_defaults_table_holds_every_core_key() {
    let table = Config::defaults_table();
    assert_eq!(table["addr"].as_str(), Some("127.0.0.1:8080"));
    assert_eq!(table["budget"]["run_ms"].as_integer(), Some(300));
    assert_eq!(Config::from_table(table).unwrap(), Config::default(), "it reads back as the defaults");
}

#[test]
fn the_stream_lane_is_on_by_default_and_its_nice_is_bounded() {
    assert_eq!(Config::default().connection_limits().stream_lane_nice, Some(10));
    let off = Config::from_toml("stream_lane = false").unwrap();
    assert_eq!(off.connection_limits().stream_lane_nice, None);
    let low = Config::from_toml("stream_lane_nice = 19").unwrap();
    assert_eq!(low.connection_limits().stream_lane_nice, Some(19));
    let error = Config { stream_lane_nice: 20, ..Config::default() }.validate().unwrap_err().to_string();
    assert!(error.contains("stream_lane_nice = 20: must be 0..=19"), "{error}");
}

#[test]
fn worker_threads_default_to_one_per_cpu_and_are_bounded() {
    assert_eq!(Config::default().worker_threads(), None);
    let three = Config::from_toml("worker_threads = 3").unwrap();
    assert_eq!(three.worker_threads(), std::num::NonZeroUsize::new(3));
    assert!(Config { worker_threads: MAX_WORKER_THREADS, ..Config::default() }.validate().is_ok());
    let error = Config { worker_threads: 1025, ..Config::default() }.validate().unwrap_err().to_string();
    assert!(error.contains("worker_threads = 1025: must be 0 (one per CPU) to 1024"), "{error}");
}

#[test]
fn times_a_clock_cannot_add_are_refused_before_the_server_starts() {
    let config = Config::from_toml(
        "detach_limit_ms = 9223372036854775807\nheader_timeout_ms = 9223372036854775807\n\
         [cache]\nttl_secs = 9223372036854775807\ncommit_ttl_secs = 2592001\n",
    )
    .unwrap();
    let problems = config.problems();
    for key in ["cache.ttl_secs = ", "cache.commit_ttl_secs = 2592001", "detach_limit_ms = ", "header_timeout_ms = "] {
        assert!(problems.iter().any(|p| p.starts_with(key) && p.contains("must be")), "{key}: {problems:?}");
    }
    let fits = Config::from_toml("send_timeout_ms = 86400000\n[cache]\nttl_secs = 2592000\n").unwrap();
    assert!(fits.problems().is_empty(), "{:?}", fits.problems());
}
