//! A config of `deploy/ghz/` as the gRPC load bench drives it: the method's
//! path, the metadata, the `data` template encoded once with a placeholder
//! for each `{{newUUID}}`, and ghz's knobs, the environment's overriding the
//! file's.

use std::{
    path::Path,
    sync::atomic::{AtomicU64, Ordering},
    time::Duration,
};

use bytes::Bytes;
use megamind_core::{
    codec::{self, Format},
    proto::DESCRIPTOR_POOL,
};
use serde_json::Value;
use tonic::metadata::{AsciiMetadataKey, AsciiMetadataValue};

/// The knobs given in the environment; 0 or `None`: the config's own.
#[derive(Debug, Clone, Copy)]
pub struct Knobs {
    pub total: u64,
    pub concurrency: usize,
    pub connections: usize,
    pub rps: Option<u64>,
}

/// One config, ready to drive.
#[derive(Debug, Clone)]
pub struct GhzConfig {
    /// The file's name in `deploy/ghz/`.
    pub file: String,
    /// Its `name`.
    pub name: String,
    /// Its `call`, `package.Service.Method`.
    pub call: String,
    /// `/package.Service/Method`.
    pub path: http::uri::PathAndQuery,
    pub metadata: Vec<(AsciiMetadataKey, AsciiMetadataValue)>,
    pub body: Template,
    pub total: u64,
    pub concurrency: usize,
    pub connections: usize,
    /// Calls per second over all workers; 0: no limit.
    pub rps: u64,
    pub timeout: Duration,
}

impl GhzConfig {
    /// Every config of `deploy/ghz/` whose file name contains `only`, sorted by name.
    pub fn all(only: &str, knobs: &Knobs) -> Vec<GhzConfig> {
        let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("deploy/ghz");
        let mut files: Vec<_> = std::fs::read_dir(&dir)
            .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
            .map(|entry| entry.expect("a directory entry").path())
            .filter(|path| path.extension().is_some_and(|ext| ext == "json"))
            .filter(|path| path.file_name().is_some_and(|name| name.to_string_lossy().contains(only)))
            .collect();
        files.sort();
        files.iter().map(|path| GhzConfig::read(path, knobs)).collect()
    }

    fn read(path: &Path, knobs: &Knobs) -> GhzConfig {
        let file = path.file_name().expect("a file name").to_string_lossy().into_owned();
        let text = std::fs::read_to_string(path).unwrap_or_else(|e| panic!("{file}: {e}"));
        let json: Value = serde_json::from_str(&text).unwrap_or_else(|e| panic!("{file}: {e}"));
        let call = json["call"].as_str().unwrap_or_else(|| panic!("{file}: no call")).to_owned();
        let (service, method) = call.rsplit_once('.').unwrap_or_else(|| panic!("{file}: call {call}"));
        let input = DESCRIPTOR_POOL
            .get_service_by_name(service)
            .and_then(|s| s.methods().find(|m| m.name() == method))
            .unwrap_or_else(|| panic!("{file}: the server has no method {call}"))
            .input();
        let metadata = json["metadata"]
            .as_object()
            .into_iter()
            .flatten()
            .map(|(key, value)| {
                let value = value.as_str().unwrap_or_else(|| panic!("{file}: metadata {key} is no string"));
                (key.parse().expect("a metadata key"), value.parse().expect("a metadata value"))
            })
            .collect();
        let number = |key: &str| json[key].as_u64();
        let pick = |given: u64, key: &str, default: u64| if given > 0 { given } else { number(key).unwrap_or(default) };
        GhzConfig {
            name: json["name"].as_str().unwrap_or(&file).to_owned(),
            path: format!("/{service}/{method}").parse().expect("a gRPC path"),
            body: Template::new(&file, input, &json["data"]),
            total: pick(knobs.total, "total", 200),
            concurrency: pick(knobs.concurrency as u64, "concurrency", 50) as usize,
            connections: pick(knobs.connections as u64, "connections", 1) as usize,
            rps: knobs.rps.unwrap_or_else(|| number("rps").unwrap_or(0)),
            timeout: json["timeout"].as_str().map_or(Duration::from_secs(20), |t| duration(&file, t)),
            metadata,
            call,
            file,
        }
    }

    /// The knobs as ghz's flags would say them.
    pub fn knobs_line(&self) -> String {
        let rps = if self.rps > 0 { format!(" --rps {}", self.rps) } else { String::new() };
        format!(
            "--total {} --concurrency {} --connections {}{rps} --timeout {:?}",
            self.total, self.concurrency, self.connections, self.timeout
        )
    }
}

/// A ghz duration: `1s`, `500ms`, `2m`.
fn duration(file: &str, text: &str) -> Duration {
    let (number, unit) = text.split_at(text.find(|c: char| !c.is_ascii_digit()).unwrap_or(text.len()));
    let number: u64 = number.parse().unwrap_or_else(|_| panic!("{file}: timeout {text}"));
    match unit {
        "ms" => Duration::from_millis(number),
        "s" | "" => Duration::from_secs(number),
        "m" => Duration::from_secs(number * 60),
        _ => panic!("{file}: timeout {text}: only ms, s and m"),
    }
}

/// The body in binary, with where each `{{newUUID}}` of the template went.
#[derive(Debug, Clone)]
pub struct Template {
    binary: Vec<u8>,
    uuids: Vec<usize>,
}

/// The template function the configs use; ghz has more, this bench only it.
const NEW_UUID: &str = "{{newUUID}}";

impl Template {
    fn new(file: &str, input: prost_reflect::MessageDescriptor, data: &Value) -> Template {
        let mut text = serde_json::to_string(data).expect("JSON");
        let count = text.matches(NEW_UUID).count();
        for i in 0..count {
            text = text.replacen(NEW_UUID, &placeholder(i), 1);
        }
        assert!(!text.contains("{{"), "{file}: a template function other than {NEW_UUID}");
        let message = codec::decode_dynamic(input, text.as_bytes(), Format::Json)
            .unwrap_or_else(|e| panic!("{file}: data is no {}: {e}", text.len()));
        let binary = codec::encode_dynamic(&message, Format::Binary).expect("encodes").to_vec();
        let uuids = (0..count)
            .map(|i| {
                let mark = placeholder(i);
                let mut at = binary.windows(mark.len()).enumerate().filter(|(_, w)| *w == mark.as_bytes());
                match (at.next(), at.next()) {
                    (Some((at, _)), None) => at,
                    _ => panic!("{file}: {NEW_UUID} #{i} is not one string of the body"),
                }
            })
            .collect();
        Template { binary, uuids }
    }

    /// The body with a fresh UUID in each `{{newUUID}}`.
    pub fn fresh(&mut self) -> Bytes {
        for at in self.uuids.clone() {
            self.binary[at..at + 36].copy_from_slice(new_uuid().as_bytes());
        }
        Bytes::copy_from_slice(&self.binary)
    }
}

/// The `i`th placeholder: UUID-shaped, so that the encoded length holds.
fn placeholder(i: usize) -> String {
    format!("ffffffff-ffff-4fff-bfff-{i:012x}")
}

/// A version 4 UUID's shape, unique in this process and across runs.
fn new_uuid() -> String {
    static NEXT: AtomicU64 = AtomicU64::new(0);
    static RUN: std::sync::OnceLock<u64> = std::sync::OnceLock::new();
    let run = *RUN.get_or_init(|| {
        let now = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap_or_default();
        now.as_nanos() as u64 ^ u64::from(std::process::id()) << 32
    });
    let n = NEXT.fetch_add(1, Ordering::Relaxed);
    format!(
        "{:08x}-{:04x}-4{:03x}-8{:03x}-{:012x}",
        run >> 32,
        (run >> 16) & 0xffff,
        run & 0xfff,
        (n >> 48) & 0xfff,
        n & 0xffff_ffff_ffff
    )
}

#[cfg(test)]
mod tests {
    use std::panic::{AssertUnwindSafe, catch_unwind};

    use super::*;

    const NO_KNOBS: Knobs = Knobs { total: 0, concurrency: 0, connections: 0, rps: None };

    /// The UUIDs in `text`.
    fn uuids(text: &str) -> Vec<String> {
        let uuid =
            regex::Regex::new("[0-9a-f]{8}-[0-9a-f]{4}-4[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}").expect("regex");
        uuid.find_iter(text).map(|m| m.as_str().to_owned()).collect()
    }

    #[test]
    fn every_config_in_deploy_ghz_builds_calls_the_server_reads() {
        let configs = GhzConfig::all("", &NO_KNOBS);
        let calls: std::collections::BTreeSet<&str> = configs.iter().map(|c| c.call.as_str()).collect();
        assert_eq!(calls.len(), 4, "a config for each of Run, Continue, Apply and Commit: {calls:?}");
        for config in &configs {
            let file = &config.file;
            let (service, method) = config.call.rsplit_once('.').expect("package.Service.Method");
            let input = DESCRIPTOR_POOL
                .get_service_by_name(service)
                .and_then(|s| s.methods().find(|m| m.name() == method))
                .expect("the method")
                .input();
            let mut body = config.body.clone();
            let (first, second) = (body.fresh(), body.fresh());
            let decoded =
                codec::decode_dynamic(input, &first, Format::Binary).unwrap_or_else(|e| panic!("{file}: {e}"));
            let json = codec::encode_dynamic(&decoded, Format::Json).expect("JSON");
            let json = String::from_utf8_lossy(&json);
            assert!(!json.contains("ffffffff-ffff-4fff"), "{file}: a placeholder left in the body");
            let (mine, next) = (uuids(&json), uuids(&String::from_utf8_lossy(&second)));
            let fresh = mine.iter().filter(|uuid| !next.contains(uuid)).count();
            assert!(!body.uuids.is_empty(), "{file}: each call a fresh RequestId");
            assert_eq!(fresh, body.uuids.len(), "{file}: each {NEW_UUID} new in every call");
            assert!(config.total > 0 && config.concurrency > 0 && config.connections > 0, "{file}");
            assert!(config.metadata.iter().any(|(key, _)| key == "x-scenario"), "{file}: names its scenario");
        }
    }

    #[test]
    fn a_template_function_the_bench_cannot_run_fails_the_config() {
        let input = DESCRIPTOR_POOL.get_message_by_name("NAlice.NScenarios.TScenarioRunRequest").expect("Run's input");
        let data = serde_json::json!({"BaseRequest": {"RequestId": "{{randomString 8}}"}});
        let built = catch_unwind(AssertUnwindSafe(|| Template::new("random.json", input.clone(), &data)));
        assert!(built.is_err(), "only {NEW_UUID} is known");
        let data =
            serde_json::json!({"BaseRequest": {"RequestId": NEW_UUID}, "Input": {"Text": {"Utterance": NEW_UUID}}});
        let mut template = Template::new("two.json", input, &data);
        assert_eq!(template.uuids.len(), 2);
        let body = template.fresh();
        let found = uuids(&String::from_utf8_lossy(&body));
        assert!(found.len() == 2 && found[0] != found[1], "{found:?}");
    }
}
