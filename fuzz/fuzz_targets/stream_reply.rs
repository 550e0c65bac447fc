//! Redis's answer to a journal's `XREAD`, as bytes (RESP2 or RESP3, any
//! shape): read without a panic; entries taken only numbered past the
//! entry read after, one by one, as the journal's writer numbers them.
//!
//! Input: a byte for the entry read after (0 to 255), then the reply.

#![no_main]

use libfuzzer_sys::fuzz_target;
use megamind_core::store::redis::fuzz_stream_reply;

fuzz_target!(|data: &[u8]| {
    let Some((&after, reply)) = data.split_first() else { return };
    let after = u64::from(after);
    let Some(Ok(read)) = fuzz_stream_reply(reply, after) else { return };
    assert!(read.first > after, "entries from {} after {after}", read.first);
    let last = read.last(after);
    let count = read.entries.len() as u64;
    assert!(last >= after && (count == 0 || last - (count - 1) == read.first), "entries {}..={last}", read.first);
});
