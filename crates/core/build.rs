//! Compiles the repository's `proto/` with protox (no system `protoc`): the
//! encoded descriptor set of every file there, which prost-reflect (text
//! format, JSON, `Any` payloads of any scenario) and gRPC reflection read at
//! run time, and the Rust types of the protocol's own files, with
//! prost-reflect derives and tonic stubs. A scenario crate generates the
//! types of its own files against this pool.

use std::{
    env, fs,
    path::{Path, PathBuf},
};

/// The protocol's files, whose Rust types this crate holds (relative to `proto/`).
const PROTOS: &[&str] = &[
    "alice/megamind/common.proto",
    "alice/megamind/request.proto",
    "alice/megamind/response.proto",
    "alice/hollywood/music.proto",
    "megamind_scenario/service.proto",
];

fn main() -> Result<(), Box<dyn std::error::Error>> {
    // The protos sit at the workspace's root, where users find them.
    let protos = PathBuf::from(env::var("CARGO_MANIFEST_DIR")?).join("../../proto");
    println!("cargo:rerun-if-changed={}", protos.display());
    let out_dir = PathBuf::from(env::var("OUT_DIR")?);

    let mut every = Vec::new();
    proto_files(&protos, &protos, &mut every)?;
    every.sort();
    let mut compiler = protox::Compiler::new([&protos])?;
    compiler.include_imports(true).include_source_info(true);
    // The pool holds exactly the files of `proto/` and their imports: the
    // printer expands only `Any` types found there, so its output parses
    // given `proto/` alone.
    compiler.open_files(&every)?;
    fs::write(out_dir.join("descriptor_set.bin"), compiler.encode_file_descriptor_set())?;

    let pool = compiler.descriptor_pool();
    let mut config = prost_build::Config::new();
    config
        .enable_type_names()
        .type_name_domain(["."], "type.googleapis.com")
        // Deterministic encoding: the idempotency cache replays bytes.
        .btree_map(["."])
        .include_file("_includes.rs");
    for message in pool.all_messages() {
        if message.is_map_entry() || message.package_name() == "google.protobuf" {
            continue;
        }
        let name = message.full_name();
        config.type_attribute(
            name,
            format!(
                "#[derive(::prost_reflect::ReflectMessage)] \
                 #[prost_reflect(descriptor_pool = \"crate::proto::DESCRIPTOR_POOL\", \
                 message_name = \"{name}\")]"
            ),
        );
    }
    // Rust types for the protocol's files (and the well-known types they
    // import) only; a scenario's files are its own crate's.
    let mut files = compiler.file_descriptor_set();
    files.file.retain(|file| PROTOS.contains(&file.name()) || file.name().starts_with("google/"));

    tonic_prost_build::configure().build_client(true).build_server(true).compile_fds_with_config(files, config)?;
    Ok(())
}

/// Every `.proto` file under `dir`, relative to `root`.
fn proto_files(root: &Path, dir: &Path, found: &mut Vec<String>) -> std::io::Result<()> {
    for entry in fs::read_dir(dir)? {
        let path = entry?.path();
        if path.is_dir() {
            proto_files(root, &path, found)?;
        } else if path.extension().is_some_and(|ext| ext == "proto") {
            let relative = path.strip_prefix(root).expect("under the root");
            found.push(relative.to_string_lossy().replace('\\', "/"));
        }
    }
    Ok(())
}
