//! Generates the Rust types of the assistant's own messages
//! (`proto/megamind_scenario/assistant.proto`) with protox (no system
//! `protoc`). Their descriptors are those of the core's pool, which holds
//! every file of `proto/`: text format, JSON and the `Any` fields of the
//! protocol read them there.

use std::{env, path::PathBuf};

/// The assistant's files, relative to `proto/`.
const PROTOS: &[&str] = &["megamind_scenario/assistant.proto"];

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let protos = PathBuf::from(env::var("CARGO_MANIFEST_DIR")?).join("../../proto");
    for file in PROTOS {
        println!("cargo:rerun-if-changed={}", protos.join(file).display());
    }
    let mut compiler = protox::Compiler::new([&protos])?;
    compiler.include_imports(true).include_source_info(true);
    compiler.open_files(PROTOS)?;

    let mut config = prost_build::Config::new();
    config
        .enable_type_names()
        .type_name_domain(["."], "type.googleapis.com")
        // Deterministic encoding: the idempotency cache replays bytes.
        .btree_map(["."])
        // The protocol's messages are the core's.
        .extern_path(".NAlice", "::megamind_core::proto::n_alice")
        .include_file("_includes.rs");
    let mut files = compiler.file_descriptor_set();
    files.file.retain(|file| PROTOS.contains(&file.name()));
    for file in &files.file {
        let package = file.package();
        for message in &file.message_type {
            let name = format!("{package}.{}", message.name());
            config.type_attribute(
                &name,
                format!(
                    "#[derive(::prost_reflect::ReflectMessage)] \
                     #[prost_reflect(descriptor_pool = \"::megamind_core::proto::DESCRIPTOR_POOL\", \
                     message_name = \"{name}\")]"
                ),
            );
        }
    }
    config.compile_fds(files)?;
    Ok(())
}
