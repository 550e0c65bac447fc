//! A model call's journal and stored outcome as the shared store may hold
//! them (another replica's, another version's, damaged): read as a replica
//! reads them without a panic; the mirror keeps its bound, ends failed on
//! what it cannot read, is the same however its journal is read in
//! batches, and makes a JSONSeq stream that breaks no rule of the
//! validator. The input's layout is `calls::fuzzing::journal`'s.

#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    megamind_assistant::calls::fuzzing::journal(data);
});
