//! Any bytes decoded as binary protobuf, as both request types: no panic, and what
//! decodes prints and renders without one.

#![no_main]

use libfuzzer_sys::fuzz_target;
use megamind_core::codec::Format;

fuzz_target!(|data: &[u8]| megamind_scenario_fuzz::decode_requests(data, Format::Binary));
