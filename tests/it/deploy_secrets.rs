//! The Secrets the texts tell an operator to create or to reference are the
//! ones `deploy/k8s` reads, key by key: a Secret of another name leaves the
//! pod without the value (the model's key is optional there, so nothing
//! would fail loudly), and every Secret the manifests read is shown created.

use std::collections::{BTreeMap, BTreeSet};

use crate::docs::{repository, texts};

/// A Secret's name and the keys of it a text or a manifest names.
type Secrets = BTreeMap<String, BTreeSet<String>>;

/// The `name` and `key` of each `secretKeyRef: {name: ..., key: ...}` on `line`.
fn key_refs(line: &str) -> Vec<(String, String)> {
    line.split("secretKeyRef:")
        .skip(1)
        .map(|rest| {
            let mapping = rest.trim_start().strip_prefix('{').and_then(|inner| inner.split('}').next());
            let mapping = mapping.unwrap_or_else(|| panic!("write `secretKeyRef: {{name: ..., key: ...}}`: {line}"));
            let field = |wanted: &str| {
                mapping
                    .split(',')
                    .filter_map(|pair| pair.split_once(':'))
                    .find(|(name, _)| name.trim() == wanted)
                    .map(|(_, value)| value.trim().trim_matches('"').to_owned())
                    .unwrap_or_else(|| panic!("a secretKeyRef without `{wanted}`: {line}"))
            };
            (field("name"), field("key"))
        })
        .collect()
}

/// The Secrets of each `create secret generic NAME --from-literal=KEY=...`
/// command in `text`, its `\` continuation lines read with it (a YAML
/// comment's `#` taken off).
fn created(text: &str) -> Secrets {
    let mut secrets = Secrets::new();
    let mut lines = text.lines().map(|line| line.trim_start().trim_start_matches('#').trim());
    while let Some(line) = lines.next() {
        let Some(rest) = line.split("create secret generic ").nth(1) else { continue };
        let name = rest.split_whitespace().next().unwrap_or_default().to_owned();
        let mut command = line.to_owned();
        let mut continued = line.ends_with('\\');
        while continued {
            let Some(next) = lines.next() else { break };
            command.push(' ');
            command.push_str(next);
            continued = next.ends_with('\\');
        }
        let keys = command.split("--from-literal=").skip(1).filter_map(|literal| literal.split_once('='));
        secrets.entry(name).or_default().extend(keys.map(|(key, _)| key.to_owned()));
    }
    secrets
}

/// Each Secret key of `wanted` that `have` lacks, as `NAME key KEY`.
fn missing_from(wanted: &Secrets, have: &Secrets) -> Vec<String> {
    wanted
        .iter()
        .flat_map(|(name, keys)| keys.iter().map(move |key| (name, key)))
        .filter(|(name, key)| !have.get(*name).is_some_and(|keys| keys.contains(*key)))
        .map(|(name, key)| format!("{name} key {key}"))
        .collect()
}

#[test]
fn the_readers_find_names_and_keys() {
    let refs = key_refs("valueFrom: {secretKeyRef: {name: megamind-model, key: api-key, optional: true}}");
    assert_eq!(refs, [("megamind-model".to_owned(), "api-key".to_owned())]);
    let text = "#   kubectl create secret generic megamind-tvm \\\n#     --from-literal=local-token=\"$T\" \\\n\
                #     --from-literal=signing-key=\"$(head -c 32 /dev/urandom)\"\nkubectl create secret generic x\n";
    let secrets = created(text);
    assert_eq!(secrets["megamind-tvm"], BTreeSet::from(["local-token".to_owned(), "signing-key".to_owned()]));
    assert!(secrets["x"].is_empty());
}

#[test]
fn every_secret_the_texts_name_is_one_the_manifests_read() {
    let mut read = Secrets::new();
    let mut referenced: Vec<(String, String, String)> = Vec::new();
    let mut shown = Secrets::new();
    for (relative, path) in texts() {
        if relative.ends_with(".rs") {
            continue;
        }
        let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{relative}: {e}"));
        let manifest = relative.starts_with("deploy/k8s/");
        for line in text.lines() {
            for (name, key) in key_refs(line) {
                if manifest && !line.trim_start().starts_with('#') {
                    read.entry(name).or_default().insert(key);
                } else {
                    referenced.push((relative.clone(), name, key));
                }
            }
        }
        for (name, keys) in created(&text) {
            referenced.extend(keys.iter().map(|key| (relative.clone(), name.clone(), key.clone())));
            shown.entry(name).or_default().extend(keys);
        }
    }
    assert!(read.contains_key("megamind-model"), "the manifests read the model's key: {read:?}");
    let unknown: Vec<String> = referenced
        .iter()
        .filter(|(_, name, key)| !read.get(name).is_some_and(|keys| keys.contains(key)))
        .map(|(file, name, key)| format!("{file}: Secret {name} key {key}"))
        .collect();
    assert!(unknown.is_empty(), "not read by deploy/k8s (it reads {read:?}): {unknown:#?}");
    let never_shown = missing_from(&read, &shown);
    assert!(never_shown.is_empty(), "no text shows how to create {never_shown:?}");
}

/// Following `deploy/README.md`'s steps creates every Secret a pod cannot
/// start without (those the manifests read without `optional: true`).
#[test]
fn the_deploy_steps_create_every_secret_a_pod_needs() {
    let steps = created(&std::fs::read_to_string(repository().join("deploy/README.md")).unwrap());
    let mut needed = Secrets::new();
    for (relative, path) in texts() {
        if !relative.starts_with("deploy/k8s/") {
            continue;
        }
        let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{relative}: {e}"));
        let required =
            text.lines().filter(|line| !line.trim_start().starts_with('#') && !line.contains("optional: true"));
        for (name, key) in required.flat_map(key_refs) {
            needed.entry(name).or_default().insert(key);
        }
    }
    assert!(needed.contains_key("megamind-store"), "the manifests need the store's Secret: {needed:?}");
    let missing = missing_from(&needed, &steps);
    assert!(missing.is_empty(), "deploy/README.md's steps do not create {missing:?}");
}
