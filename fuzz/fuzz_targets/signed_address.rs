//! A `/llm` address's query as a client sends it: checking it never
//! panics, and a query that opens a call carries exactly the signature this
//! server would have written for that call and expiry.

#![no_main]

use libfuzzer_sys::fuzz_target;
use megamind_core::rules::auth::AddressKey;

const NOW: u64 = 1_800_000_000;

fuzz_target!(|data: &[u8]| {
    let key = AddressKey::from_secret("the fuzzing key, thirty-two bytes long");
    let text = String::from_utf8_lossy(data);
    let (resource, query) = text.split_once('?').unwrap_or(("call", &text));
    if key.verify(resource, Some(query), NOW).is_ok() {
        // The query's values as the server reads them: form-decoded.
        let value = |wanted: &str| {
            url::form_urlencoded::parse(query.as_bytes()).find(|(name, _)| name == wanted).map(|(_, value)| value)
        };
        let expires =
            value("exp").and_then(|value| value.parse::<u64>().ok()).expect("an accepted query has its expiry");
        assert!(expires >= NOW);
        let signed = key.sign(resource, expires);
        let sig = signed.split("sig=").nth(1).expect("a signature");
        assert_eq!(value("sig").as_deref(), Some(sig), "{query} opened {resource} without its signature");
    }
    // What the server signs, it accepts until it expires, and never after.
    let expires = NOW + u64::from(data.first().copied().unwrap_or(0));
    let signed = key.sign(resource, expires);
    assert!(key.verify(resource, Some(&signed), expires).is_ok());
    assert!(key.verify(resource, Some(&signed), expires + 1).is_err());
});
