//! A dialog script, whatever its bytes: it loads or is refused with a
//! message naming the file, never a panic; what loads has 1 to the bounded
//! number of dialogs and turns.

#![no_main]

use libfuzzer_sys::fuzz_target;
use megamind_tools::dialog::script::{self, MAX_DIALOGS, MAX_TURNS};

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else { return };
    match script::parse("fuzz.yaml", text) {
        Ok(loaded) => {
            assert!((1..=MAX_DIALOGS).contains(&loaded.dialogs.len()));
            for (dialog, expectations) in &loaded.dialogs {
                assert!((1..=MAX_TURNS).contains(&dialog.turns.len()));
                assert_eq!(dialog.turns.len(), expectations.len());
            }
        }
        Err(error) => assert!(error.to_string().starts_with("fuzz.yaml"), "{error}"),
    }
});
