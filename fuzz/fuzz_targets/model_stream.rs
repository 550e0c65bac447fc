//! A model server's streamed answer, cut anywhere, under a bound: read as
//! the backend reads it (`backend::openai::fuzz_stream`), never a panic;
//! the same answer (or error) and events however it is cut; the text
//! handed over is the answer's and within the bound; an answer taken is
//! not blank and ended with a `finish_reason` or `[DONE]`.

#![no_main]

use libfuzzer_sys::fuzz_target;
use megamind_assistant::backend::openai::fuzz_stream;
use megamind_scenario_fuzz::cut;

fuzz_target!(|data: &[u8]| {
    // Two bytes pick the cuts and the bound; the rest is the stream.
    let [cut_seed, bound, stream @ ..] = data else { return };
    let max_bytes = if *bound == u8::MAX { usize::MAX } else { usize::from(*bound) * 8 };
    fuzz_stream(&cut(stream, *cut_seed), max_bytes);
});
