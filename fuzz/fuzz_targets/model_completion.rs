//! A model server's whole (not streamed) answer, any bytes: an answer
//! taken has text that is not blank, reasoning that is not empty and a
//! `finish_reason` within its bound, and reads back the same from a
//! completion saying only what was taken; a refusal quotes the body only
//! shortened.

#![no_main]

use libfuzzer_sys::fuzz_target;
use megamind_assistant::backend::openai::fuzz_completion;

fuzz_target!(|data: &[u8]| fuzz_completion(data));
