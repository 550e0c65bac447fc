//! The shared store's URL as a configuration gives it: parsing never
//! panics, a refusal never repeats the text (it may hold a password), and a
//! URL taken shows its password nowhere but in the text handed to the client.

#![no_main]

use libfuzzer_sys::fuzz_target;
use megamind_core::store::{StoreUrl, redis::redact_url};

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else { return };
    let password = url::Url::parse(text).ok().and_then(|url| url.password().map(str::to_owned));
    match StoreUrl::parse(text) {
        Ok(parsed) => {
            assert_eq!(parsed.as_str(), text);
            if let Some(password) = password.filter(|p| p.len() >= 4 && !"<hidden>".contains(p.as_str())) {
                assert!(!parsed.to_string().contains(&password), "{parsed}");
                assert!(!format!("{parsed:?}").contains(&password));
            }
        }
        Err(reason) => {
            if text.len() >= 8 {
                assert!(!reason.contains(text), "the refusal repeats the text: {reason}");
            }
        }
    }
    let _ = redact_url(text);
});
