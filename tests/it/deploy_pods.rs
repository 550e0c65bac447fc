//! `deploy/k8s`: what the pods are given and allowed — memory that holds
//! what the defaults let the server keep, the model's URL and key, the
//! autoscaler, the disruption budget, the spread across nodes and the
//! network policy — consistent with the Deployment they apply to.

use megamind_assistant::config::AssistantConfig;
use megamind_core::config::Config;
use serde_json::Value;

use crate::{
    deploy::{documents, of_kind},
    python_tools,
};

/// Measured by the benchmarks (README.md, Benchmarks): the server's RSS
/// idle, with its caches empty (31.4-31.9 MiB).
const IDLE_RSS: u64 = 32 << 20;
/// Measured: one open JSONSeq stream, its call's record and journal included
/// (6.4-11.8 KiB; an older build 13.6-15.0): the limit keeps the larger.
const PER_STREAM: u64 = 15 << 10;
/// Measured: what 400 HTTP/2 connections that read nothing hold at their
/// peak, the worst the connection limits leave (51-71 MiB; 64 MB its target).
const CONNECTIONS: u64 = 64 << 20;

/// A Kubernetes memory quantity (`384Mi`, `1Gi`, `512M`, bytes) in bytes.
fn bytes(quantity: &str) -> u64 {
    let units =
        [("Ki", 1u64 << 10), ("Mi", 1 << 20), ("Gi", 1 << 30), ("K", 1000), ("M", 1_000_000), ("G", 1_000_000_000)];
    for (suffix, unit) in units {
        if let Some(number) = quantity.strip_suffix(suffix) {
            return number.parse::<u64>().unwrap_or_else(|_| panic!("a quantity: {quantity}")) * unit;
        }
    }
    quantity.parse().unwrap_or_else(|_| panic!("a quantity: {quantity}"))
}

/// The server's Deployment's pod template.
fn pod(documents: &[Value]) -> &Value {
    let deployment =
        of_kind(documents, "Deployment").into_iter().find(|d| d["metadata"]["name"] == "megamind-scenario");
    &deployment.expect("the megamind-scenario Deployment")["spec"]["template"]
}

/// The server's container's environment variable `name`.
fn env<'a>(pod: &'a Value, name: &str) -> Option<&'a Value> {
    pod["spec"]["containers"][0]["env"].as_array().expect("env").iter().find(|e| e["name"] == name)
}

/// The number variable `name` sets, or `default`.
fn env_number(pod: &Value, name: &str, default: u64) -> u64 {
    env(pod, name).map_or(default, |e| e["value"].as_str().and_then(|v| v.parse().ok()).expect("a number"))
}

#[test]
fn the_memory_limit_holds_what_the_defaults_let_the_server_keep() {
    let Some(tools) = python_tools::tools_blocking("the_memory_limit_holds_what_the_defaults_let_the_server_keep")
    else {
        return;
    };
    let documents = documents(tools);
    let pod = pod(&documents);
    let (core, assistant) = (Config::default(), AssistantConfig::default());
    let cache = env_number(pod, "MEGAMIND_CACHE_MAX_BYTES", core.cache.max_bytes as u64);
    let commits = env_number(pod, "MEGAMIND_CACHE_COMMIT_MAX_BYTES", core.cache.commit_max_bytes as u64);
    let records = env_number(pod, "MEGAMIND_LLM_MAX_RETAINED_BYTES", assistant.calls.max_retained_bytes as u64);
    let streams = env_number(pod, "MEGAMIND_LLM_MAX_STREAMS", assistant.llm.max_streams as u64);
    // Fixed: no setting changes it.
    let snapshots = megamind_assistant::parts::PartsConfig::default().max_snapshot_bytes as u64;
    let needed = IDLE_RSS + cache + commits + records + streams * PER_STREAM + snapshots + CONNECTIONS;

    let resources = &pod["spec"]["containers"][0]["resources"];
    let limit = bytes(resources["limits"]["memory"].as_str().expect("a memory limit"));
    let request = bytes(resources["requests"]["memory"].as_str().expect("a memory request"));
    assert!(limit >= needed, "memory limit {} MiB < {} MiB the bounds allow", limit >> 20, needed >> 20);
    assert!(limit < needed * 3 / 2, "memory limit {} MiB is far above the {} MiB needed", limit >> 20, needed >> 20);
    assert!(request <= limit, "request {request} <= limit {limit}");
    // The operator's pages give the same limit and derivation.
    let written = resources["limits"]["memory"].as_str().expect("a memory limit");
    for page in ["deploy/README.md", "docs/production.md"] {
        assert!(crate::docs::read(page).contains(written), "{page} names the limit {written}");
    }
    let production = crate::docs::read("docs/production.md");
    assert!(production.contains("deploy/README.md#memory-and-cpu"), "docs/production.md links the derivation");
    assert!(resources["requests"]["cpu"].is_string(), "a CPU request: the autoscaler's utilization is a share of it");
    assert!(resources["limits"]["cpu"].is_null(), "no CPU limit: throttling would stall calls within their budget");
}

#[test]
fn the_assistant_reads_its_model_url_and_its_key_from_a_secret() {
    let Some(tools) = python_tools::tools_blocking("the_assistant_reads_its_model_url_and_its_key_from_a_secret")
    else {
        return;
    };
    let documents = documents(tools);
    let pod = pod(&documents);
    let url = env(pod, "MEGAMIND_LLM_BASE_URL").expect("MEGAMIND_LLM_BASE_URL: without it the assistant runs offline");
    let url = url["value"].as_str().expect("the model's URL is written out");
    let config = AssistantConfig::with_base_url(url);
    assert!(config.validate().is_ok() && !config.is_offline(), "{url} configures a model backend");
    let key = env(pod, "MEGAMIND_LLM_API_KEY").expect("MEGAMIND_LLM_API_KEY");
    assert!(key["value"].is_null(), "the key is no literal");
    assert_eq!(key["valueFrom"]["secretKeyRef"]["name"], "megamind-model");
}

#[test]
fn callers_are_checked_by_the_tvmtool_beside_the_server_and_addresses_signed_with_a_shared_key() {
    let name = "callers_are_checked_by_the_tvmtool_beside_the_server_and_addresses_signed_with_a_shared_key";
    let Some(tools) = python_tools::tools_blocking(name) else { return };
    let documents = documents(tools);
    let pod = pod(&documents);
    let url = env(pod, "DEPLOY_TVM_TOOL_URL").expect("tvmtool's address: without it every caller is let in");
    assert!(url["value"].as_str().is_some_and(|url| url.starts_with("http://localhost:")), "{url}");
    assert!(env(pod, "MEGAMIND_TVM_DST").is_some_and(|dst| dst["value"].is_string()));
    for (variable, key) in [("TVMTOOL_LOCAL_AUTHTOKEN", "local-token"), ("MEGAMIND_LLM_SIGNING_KEY", "signing-key")] {
        let secret = &env(pod, variable).unwrap_or_else(|| panic!("{variable}"))["valueFrom"]["secretKeyRef"];
        assert_eq!((secret["name"].as_str(), secret["key"].as_str()), (Some("megamind-tvm"), Some(key)), "{variable}");
    }
}

#[test]
fn the_autoscaler_owns_the_replicas_and_one_at_a_time_may_go() {
    let Some(tools) = python_tools::tools_blocking("the_autoscaler_owns_the_replicas_and_one_at_a_time_may_go") else {
        return;
    };
    let documents = documents(tools);
    let deployment = &of_kind(&documents, "Deployment")[0];
    let labels = &deployment["spec"]["template"]["metadata"]["labels"];
    assert!(
        deployment["spec"]["replicas"].is_null(),
        "no replicas in the Deployment: `kubectl apply` would reset them"
    );

    let hpa = of_kind(&documents, "HorizontalPodAutoscaler");
    let hpa = &hpa.first().expect("a HorizontalPodAutoscaler")["spec"];
    assert_eq!(hpa["scaleTargetRef"]["kind"], "Deployment");
    assert_eq!(hpa["scaleTargetRef"]["name"], deployment["metadata"]["name"]);
    let cpu = hpa["metrics"].as_array().expect("metrics").iter().find(|m| m["resource"]["name"] == "cpu");
    let target = cpu.expect("scales on CPU")["resource"]["target"]["averageUtilization"].as_u64().expect("a share");
    let min = hpa["minReplicas"].as_u64().expect("minReplicas");
    // With one replica gone, the others carry its calls: still under 100 %.
    assert!(min >= 3 && target * min / (min - 1) < 100, "min {min} replicas at {target} %");
    assert!(hpa["maxReplicas"].as_u64() > Some(min));

    let pdb = of_kind(&documents, "PodDisruptionBudget");
    let pdb = &pdb.first().expect("a PodDisruptionBudget")["spec"];
    assert_eq!(&pdb["selector"]["matchLabels"], labels, "the budget covers the server's pods");
    assert_eq!(pdb["maxUnavailable"], 1, "one replica at a time");

    let spread = deployment["spec"]["template"]["spec"]["topologySpreadConstraints"].as_array().expect("spread");
    let by_node = spread.iter().find(|c| c["topologyKey"] == "kubernetes.io/hostname").expect("across nodes");
    assert_eq!(&by_node["labelSelector"]["matchLabels"], labels);
    assert_eq!(by_node["maxSkew"], 1);
}

#[test]
fn the_network_policy_lets_in_megamind_and_prometheus_and_out_what_the_server_calls() {
    let Some(tools) = python_tools::tools_blocking("the_network_policy_lets_in_megamind_and_prometheus") else {
        return;
    };
    let documents = documents(tools);
    let pod = pod(&documents);
    let policies = of_kind(&documents, "NetworkPolicy");
    let policy = policies.iter().find(|p| p["spec"]["podSelector"]["matchLabels"] == pod["metadata"]["labels"]);
    let policy = &policy.expect("a NetworkPolicy of the server's pods")["spec"];
    assert_eq!(policy["policyTypes"], serde_json::json!(["Ingress", "Egress"]));

    let port = &pod["spec"]["containers"][0]["ports"][0]["containerPort"];
    let ingress = policy["ingress"].as_array().expect("ingress");
    assert!(ingress.iter().all(|rule| rule["ports"].as_array().is_some_and(|p| p.iter().all(|p| &p["port"] == port))));
    let sources: Vec<&Value> = ingress.iter().flat_map(|r| r["from"].as_array().expect("from")).collect();
    let namespace = |name: &str| {
        sources.iter().any(|s| s["namespaceSelector"]["matchLabels"]["kubernetes.io/metadata.name"] == name)
    };
    assert!(namespace("megamind") && namespace("monitoring"), "Megamind's and Prometheus's namespaces: {sources:?}");
    assert!(sources.iter().all(|s| s["ipBlock"].is_null()), "no address ranges");

    let egress = policy["egress"].as_array().expect("egress");
    let allows = |port: u64, protocol: &str| {
        egress.iter().any(|rule| {
            rule["ports"].as_array().into_iter().flatten().any(|p| p["port"] == port && p["protocol"] == protocol)
        })
    };
    assert!(allows(53, "UDP") && allows(53, "TCP"), "DNS");
    let redis = of_kind(&documents, "StatefulSet").into_iter().find(|s| s["metadata"]["name"] == "megamind-redis");
    let redis_labels = &redis.expect("megamind-redis")["spec"]["template"]["metadata"]["labels"];
    let to_redis = egress.iter().find(|r| r["to"][0]["podSelector"]["matchLabels"] == *redis_labels);
    assert_eq!(to_redis.expect("egress to the shared store")["ports"][0]["port"], 6379);
    let model = env(pod, "MEGAMIND_LLM_BASE_URL").and_then(|e| e["value"].as_str()).expect("the model's URL");
    let model_port = reqwest::Url::parse(model).ok().and_then(|u| u.port_or_known_default()).expect("a port");
    assert!(allows(model_port.into(), "TCP"), "egress to the model server's port {model_port}");

    let tvmtool = env(pod, "DEPLOY_TVM_TOOL_URL").and_then(|e| e["value"].as_str()).expect("tvmtool's URL");
    let tvmtool_port = reqwest::Url::parse(tvmtool).ok().and_then(|u| u.port()).expect("tvmtool's port");
    let to_tvmtool = egress.iter().find(|r| r["to"][0]["podSelector"]["matchLabels"]["app"] == "tvmtool");
    let to_tvmtool = to_tvmtool.expect("egress to tvmtool run as a Service of its own");
    assert_eq!(to_tvmtool["ports"], serde_json::json!([{"protocol": "TCP", "port": tvmtool_port}]));
    // The policy governs the tvmtool sidecar too: it fetches its keys from
    // the TVM API over HTTPS, or refuses every ticket.
    let to_tvm_api = egress.iter().find(|rule| {
        rule["ports"] == serde_json::json!([{"protocol": "TCP", "port": 443}])
            && rule["to"].as_array().is_some_and(|to| to.iter().all(|peer| peer["ipBlock"]["cidr"].is_string()))
    });
    let cidrs: Vec<&str> = to_tvm_api.expect("egress to the TVM API on 443")["to"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|peer| peer["ipBlock"]["cidr"].as_str())
        .collect();
    assert!(!cidrs.is_empty() && cidrs.iter().all(|c| !c.ends_with("/0")), "the TVM API's ranges, not all: {cidrs:?}");
}
