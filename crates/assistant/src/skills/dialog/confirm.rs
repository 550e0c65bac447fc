//! What the user hears and sees about a skill's command: the command
//! shortened for the voice, the question before one that asks (the card
//! shows it whole), the refusal of one that is denied. Every word but the
//! command's own is in Russian, the language the assistant speaks.

use megamind_core::text::clip;

/// The longest command spoken whole; a longer one is cut between words.
const MAX_SPOKEN_CHARS: usize = 48;

/// The question before running a command: what is said, what is shown.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Question {
    pub(crate) speech: String,
    pub(crate) card: String,
}

/// The question before running `command`, which would do `reason` (a
/// phrase completing «Команда «…» …»).
pub(crate) fn question(command: &str, reason: &str) -> Question {
    Question {
        speech: format!("Команда «{}» {reason}. Выполнить? Скажите «да» или «нет».", spoken(command)),
        card: format!("Выполнить команду?\n\n{}\n\nОна {reason}. Скажите «да» или «нет».", command.trim()),
    }
}

/// Why `command` will not run: it would do `reason`.
pub(crate) fn refusal(command: &str, reason: &str) -> String {
    format!("Команду «{}» я не выполню: она {reason}.", spoken(command))
}

/// Said as `command` goes out.
pub(crate) fn running(command: &str) -> String {
    format!("Выполняю: {}", spoken(command))
}

/// Said to words while `command` runs.
pub(crate) fn waiting(command: &str) -> String {
    format!("Жду результата команды «{}». Скажите «отмена», чтобы остановить навык.", spoken(command))
}

/// `command` for the voice: whole when short; else its first words, up to
/// the first quoted one or the bound, then "…".
pub(crate) fn spoken(command: &str) -> String {
    let command = command.trim();
    if command.chars().count() <= MAX_SPOKEN_CHARS {
        return command.to_owned();
    }
    let mut spoken = String::new();
    for word in command.split_whitespace() {
        let quoted = word.starts_with(['"', '\'', '`', '$']);
        let too_long = spoken.chars().count() + 1 + word.chars().count() > MAX_SPOKEN_CHARS;
        if !spoken.is_empty() && (quoted || too_long) {
            break;
        }
        if !spoken.is_empty() {
            spoken.push(' ');
        }
        spoken.push_str(word);
    }
    if spoken.chars().count() > MAX_SPOKEN_CHARS {
        // One long word: cut it, at most 4 bytes a character.
        spoken = clip(&spoken, MAX_SPOKEN_CHARS * 4).chars().take(MAX_SPOKEN_CHARS).collect();
    }
    format!("{spoken} …")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_long_command_is_cut_for_the_voice_before_its_quoted_words() {
        assert_eq!(spoken("git status --porcelain"), "git status --porcelain");
        assert_eq!(spoken("git add . && git commit -m \"fix: update skills API\""), "git add . && git commit -m …");
        assert_eq!(spoken(r#"python3 -c "import shutil,os; shutil.rmtree(os.path.expanduser('~'))""#), "python3 -c …");
        assert_eq!(spoken(&"x".repeat(100)), format!("{} …", "x".repeat(MAX_SPOKEN_CHARS)));
        assert_eq!(spoken(&"ж".repeat(100)).chars().count(), MAX_SPOKEN_CHARS + 2);
    }

    #[test]
    fn the_question_is_said_short_and_shown_whole() {
        let command = "git config --global core.hooksPath /tmp/evil-hooks-folder";
        let asked = question(command, "изменит настройки git");
        assert_eq!(
            asked.speech,
            "Команда «git config --global core.hooksPath …» изменит настройки git. Выполнить? Скажите «да» или «нет»."
        );
        assert!(asked.card.contains(command), "{}", asked.card);
        assert!(asked.card.contains("Она изменит настройки git."), "{}", asked.card);
    }
}
