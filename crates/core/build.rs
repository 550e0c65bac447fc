//! Compiles the repository's `proto/` with protox (no system `protoc`): prost types with
//! prost-reflect derives, tonic stubs, and the encoded descriptor set that
//! prost-reflect (text format, JSON) and gRPC reflection read at run time.

use std::{env, fs, path::PathBuf};

/// Proto files compiled into the crate, relative to `proto/`.
const PROTOS: &[&str] = &[
    "alice/megamind/common.proto",
    "alice/megamind/request.proto",
    "alice/megamind/response.proto",
    "alice/hollywood/music.proto",
    "megamind_scenario/service.proto",
    "megamind_scenario/assistant.proto",
];

fn main() -> Result<(), Box<dyn std::error::Error>> {
    // The protos sit at the workspace's root, where users find them.
    let protos = PathBuf::from(env::var("CARGO_MANIFEST_DIR")?).join("../../proto");
    println!("cargo:rerun-if-changed={}", protos.display());
    let out_dir = PathBuf::from(env::var("OUT_DIR")?);

    let mut compiler = protox::Compiler::new([protos])?;
    compiler.include_imports(true).include_source_info(true);
    // The pool holds exactly these files and their imports: the printer expands
    // only `Any` types found there, so its output parses given `proto/` alone.
    compiler.open_files(PROTOS)?;
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

    tonic_prost_build::configure()
        .build_client(true)
        .build_server(true)
        .compile_fds_with_config(compiler.file_descriptor_set(), config)?;
    Ok(())
}
