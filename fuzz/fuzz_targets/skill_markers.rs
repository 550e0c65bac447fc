//! A model's answer at a skill step, whatever its bytes: parsed into a step
//! without panicking, its text bounded and no longer than the answer, its
//! history form starting with a marker; a command goes through the default
//! command policy (with and without `allowed-tools`) without panicking.

#![no_main]

use std::sync::LazyLock;

use libfuzzer_sys::fuzz_target;
use megamind_assistant::skills::markers::{MAX_CONTENT_BYTES, Step, parse};
use megamind_assistant::skills::rules::{CommandRules, Verdict};

static POLICY: LazyLock<CommandRules> = LazyLock::new(CommandRules::default);

fuzz_target!(|data: &[u8]| {
    let answer = String::from_utf8_lossy(data);
    let step = parse(&answer);
    let text = match &step {
        Step::Command(text) | Step::Message(text) | Step::Done(text) => text,
        Step::Ask { question, .. } => question,
    };
    assert!(text.len() <= MAX_CONTENT_BYTES);
    assert!(text.len() <= answer.len());
    assert!(step.content().starts_with('['));
    if let Step::Command(command) = &step {
        let tools = ["Bash(git:*)".to_string(), "Bash(ls)".to_string()];
        for allowed in [None, Some(&tools[..])] {
            if let Verdict::Ask(reason) | Verdict::Deny(reason) = POLICY.check(command, allowed) {
                assert!(!reason.is_empty());
            }
        }
    }
});
