//! The Rust version the workspace declares (`rust-version`) is one its
//! locked dependencies build with: a dependency needing a newer compiler
//! makes the declared one a promise nobody could keep.

use std::process::Command;

/// `major.minor` of a `rust-version`, for comparing.
fn version(text: &str) -> (u32, u32) {
    let mut parts = text.split('.').map(|part| part.parse::<u32>().unwrap_or_else(|_| panic!("version {text:?}")));
    (parts.next().unwrap_or(0), parts.next().unwrap_or(0))
}

/// The triple of the machine the tests run on, as rustc names it.
fn host() -> String {
    let output = Command::new("rustc").arg("-vV").output().expect("rustc runs");
    let text = String::from_utf8(output.stdout).expect("UTF-8");
    let host = text.lines().find_map(|line| line.strip_prefix("host: ")).expect("rustc names its host");
    host.trim().to_owned()
}

#[test]
fn every_locked_dependency_builds_with_the_declared_rust_version() {
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
    // This machine's platform only: a build downloads no other platform's
    // crates, and offline their manifests cannot be read.
    let output = Command::new(cargo)
        .args(["metadata", "--format-version", "1", "--locked", "--offline", "--filter-platform", &host()])
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .output()
        .expect("cargo metadata runs");
    assert!(output.status.success(), "{}", String::from_utf8_lossy(&output.stderr));
    let metadata: serde_json::Value = serde_json::from_slice(&output.stdout).expect("metadata is JSON");
    let members: Vec<&str> =
        metadata["workspace_members"].as_array().expect("members").iter().filter_map(|m| m.as_str()).collect();
    let packages = metadata["packages"].as_array().expect("packages");
    let rust_version = |package: &serde_json::Value| package["rust_version"].as_str().map(version);
    let declared: Vec<(u32, u32)> = packages
        .iter()
        .filter(|p| p["id"].as_str().is_some_and(|id| members.contains(&id)))
        .map(|p| rust_version(p).unwrap_or_else(|| panic!("{} declares no rust-version", p["name"])))
        .collect();
    assert!(!declared.is_empty() && declared.iter().all(|v| *v == declared[0]), "{declared:?}");
    let ours = declared[0];
    // Only what the lock resolves for this workspace's build, not every
    // package the registry index lists.
    let resolved: Vec<&str> = metadata["resolve"]["nodes"]
        .as_array()
        .expect("resolve")
        .iter()
        .filter_map(|node| node["id"].as_str())
        .collect();
    let newer: Vec<String> = packages
        .iter()
        .filter(|p| p["id"].as_str().is_some_and(|id| resolved.contains(&id)))
        .filter(|p| rust_version(p).is_some_and(|needs| needs > ours))
        .map(|p| {
            let field = |key: &str| p[key].as_str().unwrap_or("?").to_owned();
            format!("{} {} needs Rust {}", field("name"), field("version"), field("rust_version"))
        })
        .collect();
    assert!(newer.is_empty(), "rust-version = {ours:?} in Cargo.toml, but: {newer:?}");
}
