//! Generated protocol types (prost + tonic), fenced off with relaxed lints,
//! and the descriptor pool that text format, JSON and reflection read.

#![allow(missing_docs, unreachable_pub, clippy::all, clippy::pedantic)]

use std::sync::LazyLock;

use prost_reflect::DescriptorPool;

/// The encoded `FileDescriptorSet` of `proto/` with all its imports.
pub const FILE_DESCRIPTOR_SET: &[u8] = include_bytes!(concat!(env!("OUT_DIR"), "/descriptor_set.bin"));

/// Every message of the protocol, for prost-reflect.
pub static DESCRIPTOR_POOL: LazyLock<DescriptorPool> = LazyLock::new(|| {
    DescriptorPool::decode(FILE_DESCRIPTOR_SET).expect("descriptor set embedded by build.rs is valid")
});

include!(concat!(env!("OUT_DIR"), "/_includes.rs"));
