//! The model server's event stream, cut anywhere: the same events (or the
//! same error) as when it arrives whole, no event past the size bound, and
//! an error told in at most 400 bytes.

#![no_main]

use libfuzzer_sys::fuzz_target;
use megamind_assistant::backend::openai::sse::{SseDecoder, SseError, StreamEvent};
use megamind_scenario_fuzz::cut;

fuzz_target!(|data: &[u8]| {
    // Two bytes pick the cuts and the bound; the rest is the stream.
    let [cut_seed, bound, stream @ ..] = data else { return };
    let chunks = cut(stream, *cut_seed);

    // A bound no line reaches: the cuts alone must not change anything.
    let roomy = stream.len() + 1;
    let whole = decode(roomy, &[stream]);
    let pieces = decode(roomy, &chunks);
    match (&whole, &pieces) {
        ((events, None), (pieces_events, None)) => assert_eq!(events, pieces_events, "events depend on the cuts"),
        ((_, Some(error)), (_, Some(pieces_error))) => assert_eq!(error, pieces_error, "errors depend on the cuts"),
        _ => panic!("one side failed: whole {whole:?}, in pieces {pieces:?}"),
    }
    // What the server got wrong is told short, however much it sent.
    if let (_, Some(error)) = &whole {
        assert!(error.to_string().len() <= 400, "an error of {} bytes", error.to_string().len());
    }

    // A tight bound: data past it is refused, never handed out.
    let max = usize::from(*bound) * 4;
    let (events, _) = decode(max, &chunks);
    for event in events {
        if let StreamEvent::Delta(text) = event {
            assert!(text.len() <= max, "a delta of {} bytes under a bound of {max}", text.len());
        }
    }
});

/// The events up to the first error, and that error.
fn decode(max_bytes: usize, chunks: &[&[u8]]) -> (Vec<StreamEvent>, Option<SseError>) {
    let mut decoder = SseDecoder::new(max_bytes);
    let mut events = Vec::new();
    for chunk in chunks {
        match decoder.push(chunk) {
            Ok(more) => events.extend(more),
            Err(error) => return (events, Some(error)),
        }
    }
    match decoder.finish() {
        Ok(more) => events.extend(more),
        Err(error) => return (events, Some(error)),
    }
    (events, None)
}
