//! The shared store's URL as a configuration gives it: parsing never
//! panics, a refusal never repeats the credentials, and a URL taken shows
//! its password nowhere but in the text handed to the client.

#![no_main]

use libfuzzer_sys::fuzz_target;
use megamind_core::{store::StoreUrl, text::redact_url};

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else { return };
    let password = url::Url::parse(text).ok().and_then(|url| url.password().map(str::to_owned));
    match StoreUrl::parse(text) {
        Ok(parsed) => {
            assert_eq!(parsed.as_str(), text);
            if let Some(password) = password.filter(|p| !p.is_empty()) {
                // Shown, the URL has the placeholder where its password was.
                for shown in [parsed.to_string(), format!("{parsed:?}")] {
                    assert!(shown.contains(":<hidden>@"), "{shown}");
                    assert!(!shown.contains(&format!(":{password}@")), "{shown}");
                }
            }
        }
        Err(reason) => {
            // Credentials show only before an `@`: a refusal that holds none
            // echoes no part of the text that may hold them.
            assert!(!reason.contains('@'), "the refusal may repeat the credentials: {reason}");
        }
    }
    let _ = redact_url(text);
});
