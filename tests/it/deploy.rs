//! `deploy/`: the Kubernetes manifests pass the schema validator and Pod
//! Security "restricted", their numbers fit the server's shutdown, screens
//! reach the `/llm` routes and nothing else, and the image build keeps
//! `target/` out and its dependencies in a layer of their own.

use std::{
    fs,
    path::{Path, PathBuf},
    process::Command,
};

use megamind_core::config::Config;
use serde_json::Value;

use crate::python_tools::{self, Tools, run};

fn deploy() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("deploy")
}

/// Every manifest under `deploy/k8s`.
fn manifests() -> Vec<PathBuf> {
    let mut files: Vec<PathBuf> = fs::read_dir(deploy().join("k8s"))
        .expect("deploy/k8s")
        .map(|entry| entry.expect("dir entry").path())
        .filter(|path| path.extension().is_some_and(|ext| ext == "yaml" || ext == "yml"))
        .collect();
    files.sort();
    assert!(!files.is_empty(), "manifests in deploy/k8s");
    files
}

/// `kubernetes-validate --strict`: unknown fields are errors too.
fn validate(tools: &Tools, file: &Path) -> Result<(), String> {
    run(Command::new(&tools.python).args(["-m", "kubernetes_validate", "--strict", "--quiet"]).arg(file)).map(drop)
}

/// Every document of every manifest, read by PyYAML.
pub fn documents(tools: &Tools) -> Vec<Value> {
    let script = "import json, sys, yaml\n\
                  docs = [d for f in sys.argv[1:] for d in yaml.safe_load_all(open(f, encoding='utf-8')) if d]\n\
                  json.dump(docs, sys.stdout)";
    let output = run(Command::new(&tools.python).args(["-c", script]).args(manifests()))
        .unwrap_or_else(|e| panic!("the manifests are YAML: {e}"));
    serde_json::from_slice::<Vec<Value>>(&output.stdout).expect("JSON from PyYAML")
}

pub fn of_kind<'a>(documents: &'a [Value], kind: &str) -> Vec<&'a Value> {
    documents.iter().filter(|d| d["kind"] == kind).collect()
}

#[test]
fn the_manifests_pass_the_kubernetes_schema_validator() {
    let Some(tools) = python_tools::tools_blocking("the_manifests_pass_the_kubernetes_schema_validator") else {
        return;
    };
    for file in manifests() {
        validate(tools, &file).unwrap_or_else(|e| panic!("{}: {e}", file.display()));
    }
    // The validator is strict: a field Kubernetes does not know fails it.
    let bad = Path::new(env!("CARGO_TARGET_TMPDIR")).join(format!("bad-manifest-{}.yaml", std::process::id()));
    let text = fs::read_to_string(deploy().join("k8s/deployment.yaml")).expect("deployment.yaml");
    fs::write(&bad, text.replace("readOnlyRootFilesystem: true", "readOnlyRootFileSystem: true")).expect("write");
    let refused = validate(tools, &bad);
    let _ = fs::remove_file(&bad);
    assert!(refused.is_err_and(|e| e.contains("readOnlyRootFileSystem")), "a misspelt field is refused");
}

#[test]
fn the_pod_is_admissible_under_pod_security_restricted() {
    let Some(tools) = python_tools::tools_blocking("the_pod_is_admissible_under_pod_security_restricted") else {
        return;
    };
    let documents = documents(tools);
    let namespaces = of_kind(&documents, "Namespace");
    assert_eq!(namespaces.len(), 1, "one namespace");
    let labels = &namespaces[0]["metadata"]["labels"];
    assert_eq!(labels["pod-security.kubernetes.io/enforce"], "restricted", "the namespace enforces the profile");
    let namespace = &namespaces[0]["metadata"]["name"];

    let deployments = of_kind(&documents, "Deployment");
    assert!(!deployments.is_empty(), "a Deployment");
    let stateful_sets = of_kind(&documents, "StatefulSet");
    assert!(!stateful_sets.is_empty(), "the shared store's StatefulSet");
    for workload in deployments.into_iter().chain(stateful_sets) {
        let kind = &workload["kind"];
        assert_eq!(&workload["metadata"]["namespace"], namespace, "the {kind} lives in that namespace");
        let pod = &workload["spec"]["template"]["spec"];
        restricted(pod);
    }
}

/// The checks of Pod Security "restricted" (which includes "baseline") that
/// apply to a pod without volumes of its own kind.
fn restricted(pod: &Value) {
    for host in ["hostNetwork", "hostPID", "hostIPC"] {
        assert_ne!(pod[host], true, "{host}");
    }
    let allowed_volumes =
        ["configMap", "csi", "downwardAPI", "emptyDir", "ephemeral", "persistentVolumeClaim", "projected", "secret"];
    for volume in pod["volumes"].as_array().into_iter().flatten() {
        let kinds: Vec<&String> = volume.as_object().expect("volume").keys().filter(|k| *k != "name").collect();
        assert!(kinds.iter().all(|k| allowed_volumes.contains(&k.as_str())), "volume types {kinds:?}");
    }
    let pod_context = &pod["securityContext"];
    assert_ne!(pod_context["runAsUser"], 0, "the pod does not run as root");
    let containers: Vec<&Value> = ["initContainers", "containers", "ephemeralContainers"]
        .iter()
        .flat_map(|list| pod[*list].as_array().into_iter().flatten())
        .collect();
    assert!(!containers.is_empty(), "containers");
    for container in containers {
        let name = &container["name"];
        let context = &container["securityContext"];
        // Set on the container or inherited from the pod.
        let effective = |key: &str| if context[key].is_null() { &pod_context[key] } else { &context[key] };
        assert_eq!(effective("runAsNonRoot"), &Value::Bool(true), "{name}: runAsNonRoot");
        assert_ne!(effective("runAsUser"), &Value::from(0), "{name}: runAsUser is not root");
        let seccomp = &effective("seccompProfile")["type"];
        assert!(seccomp == "RuntimeDefault" || seccomp == "Localhost", "{name}: seccompProfile {seccomp}");
        assert_eq!(context["allowPrivilegeEscalation"], false, "{name}: allowPrivilegeEscalation: false");
        assert_ne!(context["privileged"], true, "{name}: not privileged");
        let capabilities = &context["capabilities"];
        assert!(capabilities["drop"].as_array().is_some_and(|d| d.contains(&"ALL".into())), "{name}: drop ALL");
        for added in capabilities["add"].as_array().into_iter().flatten() {
            assert_eq!(added, "NET_BIND_SERVICE", "{name}: the only capability that may be added");
        }
        for port in container["ports"].as_array().into_iter().flatten() {
            assert!(port["hostPort"].is_null(), "{name}: no hostPort");
        }
    }
}

#[test]
fn the_image_is_versioned_and_the_drain_fits_the_grace_period() {
    let Some(tools) = python_tools::tools_blocking("the_image_is_versioned_and_the_drain_fits_the_grace_period") else {
        return;
    };
    let documents = documents(tools);
    let defaults = Config::default();
    for deployment in of_kind(&documents, "Deployment") {
        let pod = &deployment["spec"]["template"]["spec"];
        let container = &pod["containers"][0];
        let image = container["image"].as_str().expect("image");
        assert_eq!(image, format!("REGISTRY/megamind-scenario:{}", env!("CARGO_PKG_VERSION")), "tag = Cargo version");

        let env = |name: &str| {
            container["env"].as_array().into_iter().flatten().find(|e| e["name"] == name).map(|e| {
                e["value"].as_str().and_then(|v| v.parse::<u64>().ok()).unwrap_or_else(|| panic!("{name} is a number"))
            })
        };
        let delay_ms = env("MEGAMIND_SHUTDOWN_DELAY_MS").unwrap_or(defaults.shutdown_delay_ms);
        let drain_ms = env("MEGAMIND_DRAIN_TIMEOUT_MS").unwrap_or(defaults.drain_timeout_ms);
        let grace_ms = pod["terminationGracePeriodSeconds"].as_u64().expect("terminationGracePeriodSeconds") * 1000;
        assert!(grace_ms > delay_ms + drain_ms, "grace {grace_ms} ms > delay {delay_ms} + drain {drain_ms} ms");
        // Endpoints must drop the pod (a failed readiness probe) before it stops accepting.
        let probe = &container["readinessProbe"];
        assert_eq!(probe["httpGet"]["path"], "/readyz");
        let notice_ms =
            probe["periodSeconds"].as_u64().unwrap_or(10) * probe["failureThreshold"].as_u64().unwrap_or(3) * 1000;
        assert!(delay_ms > notice_ms, "shutdown delay {delay_ms} ms > readiness notice {notice_ms} ms");
        assert!(container["lifecycle"]["preStop"].is_null(), "the server's own delay does a preStop's job");

        let dockerfile = fs::read_to_string(deploy().join("Dockerfile")).expect("Dockerfile");
        let user = dockerfile.lines().rev().find_map(|l| l.strip_prefix("USER ")).expect("a USER line");
        let uid = pod["securityContext"]["runAsUser"].as_u64().expect("runAsUser");
        assert_eq!(user.split(':').next(), Some(uid.to_string().as_str()), "the image's user is the pod's");
    }
}

#[test]
fn without_a_cpu_limit_the_worker_threads_are_set_to_a_few() {
    let Some(tools) = python_tools::tools_blocking("without_a_cpu_limit_the_worker_threads_are_set_to_a_few") else {
        return;
    };
    let mut checked = 0;
    for deployment in of_kind(&documents(tools), "Deployment") {
        let container = &deployment["spec"]["template"]["spec"]["containers"][0];
        let cpu_request = container["resources"]["requests"]["cpu"].as_str().expect("a CPU request");
        if !container["resources"]["limits"]["cpu"].is_null() {
            continue;
        }
        checked += 1;
        let env = container["env"].as_array().expect("env");
        let threads = env.iter().find(|e| e["name"] == "MEGAMIND_WORKER_THREADS");
        let threads = threads.and_then(|e| e["value"].as_str()?.parse::<usize>().ok());
        let threads =
            threads.expect("MEGAMIND_WORKER_THREADS set: the node's cores are no measure of a pod without a CPU limit");
        assert!((1..=4).contains(&threads), "{threads} worker threads per lane for a {cpu_request} CPU request");
    }
    assert!(checked >= 1, "the server's Deployment has no CPU limit (a limit throttles the budget away)");
}

#[test]
fn the_image_build_keeps_target_out_and_caches_dependencies() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let ignore = fs::read_to_string(root.join(".dockerignore")).expect(".dockerignore at the build context's root");
    for excluded in ["target/", ".git/"] {
        assert!(ignore.lines().any(|l| l.trim() == excluded), ".dockerignore excludes {excluded}");
    }
    let dockerfile = fs::read_to_string(deploy().join("Dockerfile")).expect("Dockerfile");
    let lines: Vec<&str> = dockerfile.lines().map(str::trim).filter(|l| !l.starts_with('#')).collect();
    assert!(!lines.iter().any(|l| l.starts_with("COPY . ")), "no COPY of the whole context");
    let position = |what: &str| lines.iter().position(|l| l.contains(what)).unwrap_or_else(|| panic!("{what}"));
    let (manifest, first_build, sources) =
        (position("COPY Cargo.toml Cargo.lock"), position("cargo build --release --locked"), position("COPY src src"));
    assert!(manifest < first_build && first_build < sources, "dependencies are built before the sources arrive");
    // Every crate of the workspace has its manifest (and build script) in the dependency layer.
    for member in [
        "crates/core/Cargo.toml",
        "crates/core/build.rs",
        "crates/assistant/Cargo.toml",
        "crates/assistant/build.rs",
        "crates/tools/Cargo.toml",
    ] {
        assert!(root.join(member).is_file(), "{member}");
        assert!(
            lines[..first_build].iter().any(|l| l.starts_with("COPY ") && l.contains(member)),
            "{member} before the first build"
        );
    }
    for from in lines.iter().filter(|l| l.starts_with("FROM ")) {
        let image = from.split_whitespace().nth(1).expect("an image");
        assert!(image.contains(':') && !image.ends_with(":latest"), "{from}: a pinned base image");
    }
}

#[test]
fn the_replicas_share_a_redis_that_never_evicts_nor_forgets_and_read_its_url_from_a_secret() {
    let Some(tools) = python_tools::tools_blocking("the_replicas_share_a_redis") else {
        return;
    };
    let documents = documents(tools);
    let redis = of_kind(&documents, "StatefulSet").into_iter().find(|s| s["metadata"]["name"] == "megamind-redis");
    let redis = redis.expect("the megamind-redis StatefulSet");
    let args: Vec<&str> = redis["spec"]["template"]["spec"]["containers"][0]["args"]
        .as_array()
        .expect("redis-server's args")
        .iter()
        .filter_map(Value::as_str)
        .collect();
    let after = |flag: &str| args.iter().position(|a| *a == flag).and_then(|at| args.get(at + 1)).copied();
    assert_eq!(after("--maxmemory-policy"), Some("noeviction"), "{args:?}");
    assert!(after("--maxmemory").is_some(), "memory is bounded: {args:?}");
    // A claim forgotten in a crash lets a retried /commit run again.
    assert_eq!(after("--appendonly"), Some("yes"), "{args:?}");
    assert_eq!(after("--appendfsync"), Some("always"), "{args:?}");
    let mounts = &redis["spec"]["template"]["spec"]["containers"][0]["volumeMounts"];
    let data = mounts.as_array().expect("volume mounts").iter().find(|m| m["mountPath"] == "/data");
    let data = data.expect("Redis's directory is a volume")["name"].clone();
    let claims = redis["spec"]["volumeClaimTemplates"].as_array().expect("a volume claim template");
    assert!(claims.iter().any(|c| c["metadata"]["name"] == data), "the append-only file outlives the pod");
    let services = of_kind(&documents, "Service");
    assert!(services.iter().any(|s| s["metadata"]["name"] == "megamind-redis"), "a Service in front of it");

    let server = &of_kind(&documents, "Deployment")[0]["spec"]["template"]["spec"]["containers"][0];
    let store_url = server["env"].as_array().expect("env").iter().find(|e| e["name"] == "MEGAMIND_STORE_URL");
    let store_url = store_url.expect("MEGAMIND_STORE_URL is set");
    assert!(store_url["value"].is_null(), "the URL (with its password) is no literal");
    assert_eq!(store_url["valueFrom"]["secretKeyRef"]["name"], "megamind-store");
}

#[test]
fn screens_reach_only_the_llm_routes_at_the_address_the_server_hands_out() {
    let Some(tools) = python_tools::tools_blocking("screens_reach_only_the_llm_routes") else {
        return;
    };
    let documents = documents(tools);
    let ingress = of_kind(&documents, "Ingress");
    let [ingress] = ingress.as_slice() else { panic!("one Ingress: {ingress:?}") };
    let rules = ingress["spec"]["rules"].as_array().expect("rules");
    let [rule] = rules.as_slice() else { panic!("one host: {rules:?}") };
    let host = rule["host"].as_str().expect("a host");
    let tls_hosts = &ingress["spec"]["tls"][0]["hosts"];
    assert!(tls_hosts.as_array().is_some_and(|hosts| hosts.iter().any(|h| h == host)), "{host} over TLS");
    // A signed address's query is its signature: the controller does not log it.
    let annotations = &ingress["metadata"]["annotations"];
    assert_eq!(annotations["nginx.ingress.kubernetes.io/enable-access-log"], "false", "{annotations}");

    // The routes signed addresses open, and /llm/schema: nothing else of the server.
    let service = of_kind(&documents, "Service").into_iter().find(|s| s["metadata"]["name"] == "megamind-scenario");
    let port_names: Vec<&Value> = service.expect("the server's Service")["spec"]["ports"]
        .as_array()
        .expect("ports")
        .iter()
        .map(|port| &port["name"])
        .collect();
    let paths = rule["http"]["paths"].as_array().expect("paths");
    let exposed: Vec<&str> = paths.iter().filter_map(|path| path["path"].as_str()).collect();
    assert_eq!(exposed, ["/llm/stream", "/llm/answers", "/llm/schema"]);
    for path in paths {
        let backend = &path["backend"]["service"];
        assert_eq!(backend["name"], "megamind-scenario", "{path}");
        assert!(port_names.contains(&&backend["port"]["name"]), "{path}: a port of the Service");
    }

    // The addresses the server writes lead to that host.
    let server = &of_kind(&documents, "Deployment")[0]["spec"]["template"]["spec"]["containers"][0];
    let env = server["env"].as_array().expect("env");
    let public = env.iter().find(|e| e["name"] == "MEGAMIND_LLM_PUBLIC_URL").expect("MEGAMIND_LLM_PUBLIC_URL");
    assert_eq!(public["value"], format!("https://{host}"));

    // And the network policy lets the ingress controller in.
    let policy = &of_kind(&documents, "NetworkPolicy")[0];
    let from = policy["spec"]["ingress"][0]["from"].as_array().expect("ingress sources");
    let controller = from
        .iter()
        .any(|source| source["namespaceSelector"]["matchLabels"]["kubernetes.io/metadata.name"] == "ingress-nginx");
    assert!(controller, "{from:?}");
}

#[test]
fn the_deployment_lets_in_production_megamind_alone() {
    let Some(tools) = python_tools::tools_blocking("the_deployment_lets_in_production_megamind_alone") else {
        return;
    };
    let documents = documents(tools);
    let server = &of_kind(&documents, "Deployment")[0]["spec"]["template"]["spec"]["containers"][0];
    let env = server["env"].as_array().expect("env");
    let allowed = env.iter().find(|e| e["name"] == "MEGAMIND_TVM_ALLOWED_SRC").expect("MEGAMIND_TVM_ALLOWED_SRC");
    // Read as the server reads it: testing Megamind's tickets are refused.
    let args = ["serve", "--tvm-allowed-src", allowed["value"].as_str().expect("a value"), "--print-config"];
    let printed = crate::helpers::run_binary(&args, b"");
    let config = String::from_utf8_lossy(&printed.stdout);
    assert!(printed.status.success(), "{}", String::from_utf8_lossy(&printed.stderr));
    assert!(config.lines().any(|line| line.trim() == "tvm_allowed_src = [2000464]"), "{config}");
}
