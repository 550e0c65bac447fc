//! What the user's words mean to a skill session: starting a skill by name,
//! listing skills, cancelling, skipping an optional question, confirming a
//! command. Russian and English; compared as [`normalize`]d words, so case,
//! punctuation and `ё` do not matter.
//!
//! Cancel, skip and the confirmations match the whole utterance only: a
//! commit message that merely holds "stop" is an answer, not a cancel.

use crate::dialog::turn::normalize;

/// Words before a skill's name that start it.
const START: &[&str] = &[
    "запусти навык",
    "запустить навык",
    "запусти скилл",
    "запусти скил",
    "выполни навык",
    "включи навык",
    "run skill",
    "run the skill",
    "start skill",
    "start the skill",
];
/// A question about the skills starts with one of these and names them
/// (`LIST_NOUNS`), or is the noun alone.
const LIST_STARTS: &[&str] = &["какие", "список", "покажи", "перечисли", "назови", "list", "what", "which", "show"];
const LIST_NOUNS: &[&str] = &["навыки", "навыков", "skills"];
const CANCEL: &[&str] = &[
    "стоп",
    "отмена",
    "отмени",
    "отменить",
    "хватит",
    "останови навык",
    "отмени навык",
    "стоп навык",
    "cancel",
    "stop",
    "cancel skill",
    "stop skill",
    "stop the skill",
];
const SKIP: &[&str] = &["пропусти", "пропустить", "пропускаю", "дальше", "далее", "skip", "next", "skip it"];
const YES: &[&str] = &[
    "да",
    "да выполни",
    "да выполняй",
    "выполни",
    "выполняй",
    "давай",
    "подтверждаю",
    "конечно",
    "ок",
    "yes",
    "yes run it",
    "run it",
    "go ahead",
    "confirm",
    "ok",
];
const NO: &[&str] = &["нет", "не надо", "не выполняй", "не нужно", "no", "don t", "do not", "dont"];

fn any_of(list: &[&str], words: &str) -> bool {
    let words = normalize(words);
    list.iter().any(|phrase| *phrase == words)
}

/// The skill name a start phrase names: `запусти навык git quick commit` →
/// `git-quick-commit` (names are `a-z0-9` words joined by hyphens).
pub(crate) fn start_request(words: &str) -> Option<String> {
    let words = normalize(words);
    START.iter().find_map(|start| {
        let rest = words.strip_prefix(start)?.strip_prefix(' ')?;
        let name = rest.split(' ').collect::<Vec<_>>().join("-");
        (!name.is_empty()).then_some(name)
    })
}

/// Asks which skills there are.
pub(crate) fn is_list(words: &str) -> bool {
    let words = normalize(words);
    let mut each = words.split(' ');
    let first = each.next().unwrap_or_default();
    let names = |word: &str| LIST_NOUNS.contains(&word);
    (names(first) && each.clone().next().is_none()) || (LIST_STARTS.contains(&first) && each.any(names))
}

/// Ends the skill session.
pub(crate) fn is_cancel(words: &str) -> bool {
    any_of(CANCEL, words)
}

/// Skips an optional question.
pub(crate) fn is_skip(words: &str) -> bool {
    words.trim().is_empty() || any_of(SKIP, words)
}

/// The user's answer to "run this command?": `Some(true)` yes, `Some(false)`
/// no (a skip too), `None` neither.
pub(crate) fn confirmation(words: &str) -> Option<bool> {
    if any_of(YES, words) {
        Some(true)
    } else if any_of(NO, words) || any_of(SKIP, words) {
        Some(false)
    } else {
        None
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_start_phrase_names_the_skill() {
        assert_eq!(start_request("Запусти навык git-quick-commit").as_deref(), Some("git-quick-commit"));
        assert_eq!(start_request("запусти навык git quick commit!").as_deref(), Some("git-quick-commit"));
        assert_eq!(start_request("run skill disk-usage").as_deref(), Some("disk-usage"));
        assert_eq!(start_request("Run the skill Disk Usage").as_deref(), Some("disk-usage"));
        assert_eq!(start_request("запусти навык"), None, "no name");
        assert_eq!(start_request("запусти навыкgit"), None);
        assert_eq!(start_request("открой Safari"), None);
    }

    #[test]
    fn cancel_skip_and_confirmations_match_whole_utterances() {
        assert!(is_cancel("Стоп!") && is_cancel("cancel") && is_cancel("отмена"));
        assert!(!is_cancel("fix: stop the leak"), "an answer that holds a cancel word");
        assert!(is_skip("") && is_skip("  ") && is_skip("Пропусти.") && is_skip("skip") && is_skip("дальше"));
        assert!(!is_skip("fix typo"));
        assert_eq!(confirmation("Да"), Some(true));
        assert_eq!(confirmation("yes, run it"), Some(true));
        assert_eq!(confirmation("нет"), Some(false));
        assert_eq!(confirmation("пропусти"), Some(false));
        assert_eq!(confirmation("а что она делает?"), None);
        assert!(is_list("Какие есть навыки?") && is_list("какие навыки есть") && is_list("list skills"));
        assert!(is_list("Навыки") && is_list("what skills do you have"));
        assert!(!is_list("навыки общения") && !is_list("какие новости"));
    }
}
