//! What writing a file means to the user: most files are just files, but
//! a shell start-up file, a git hook or an autostart entry runs commands
//! later, and `~/.ssh` decides who gets in. Said in plain words, the path
//! cut for the voice.

use crate::skills::rules::{programs::listed, shell};

/// Files that run commands, or let someone in, later: shell start-up
/// files, editors', git's, direnv's.
const START_UP_FILES: &str = ".bashrc .bash_profile .bash_login .bash_logout .profile .zshrc .zshenv .zprofile .zlogin .zlogout \
    .kshrc .cshrc .tcshrc .login .inputrc .gitconfig .vimrc .exrc .envrc .npmrc config.fish crontab";
/// Parts of a path that hold such files.
const START_UP_FOLDERS: &str = ".git/hooks .git/config autostart /etc/profile /etc/cron LaunchAgents systemd/user";
/// The longest path or name quoted in a phrase: the card shows it whole.
const MAX_QUOTED_BYTES: usize = 40;

/// The phrase of writing `file`: a start-up file said as such.
pub(super) fn writes_to(file: &str) -> String {
    if access_file(file) {
        format!("изменит файл {}, от которого зависит доступ к компьютеру", quoted(file))
    } else if start_up_file(file) {
        format!("изменит файл {}, команды из которого потом запускаются сами", quoted(file))
    } else if file.is_empty() {
        "запишет в файл".to_owned()
    } else {
        format!("запишет в файл {}", quoted(file))
    }
}

/// A file whose change matters later: a start-up file or one of access.
pub(super) fn sensitive(path: &str) -> bool {
    start_up_file(path) || access_file(path)
}

fn access_file(path: &str) -> bool {
    path.contains(".ssh/") || path.ends_with(".ssh")
}

fn start_up_file(path: &str) -> bool {
    listed(START_UP_FILES, shell::base_name(path))
        || START_UP_FOLDERS.split_whitespace().any(|folder| path.contains(folder))
}

/// `text` cut for the voice: the card shows the command whole.
pub(super) fn quoted(text: &str) -> String {
    if text.len() <= MAX_QUOTED_BYTES {
        text.to_owned()
    } else {
        format!("{}…", megamind_core::text::clip(text, MAX_QUOTED_BYTES))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::skills::rules::{CommandRules, Verdict};

    #[test]
    fn a_very_long_path_is_quoted_in_the_reason_cut_to_its_bound() {
        let policy = CommandRules::default();
        // An odd byte first: the bound falls inside a two-byte `я`.
        for path in [format!("/tmp/{}", "a".repeat(3000)), format!("/{}", "я".repeat(1500))] {
            let verdict = policy.check(&format!("echo x > {path}"), None);
            let Verdict::Ask(reason) = verdict else { panic!("writing a file asks: {verdict:?}") };
            let quoted = reason.strip_prefix("запишет в файл ").expect("the phrase of writing a file");
            let cut = quoted.strip_suffix('…').unwrap_or_else(|| panic!("marked as cut: {} bytes", quoted.len()));
            assert!((MAX_QUOTED_BYTES - 1..=MAX_QUOTED_BYTES).contains(&cut.len()), "{} bytes", cut.len());
            assert!(path.starts_with(cut), "a prefix on a character boundary: {cut}");
        }
        let start_up = format!("/home/{}/.bashrc", "u".repeat(3000));
        let quoted = writes_to(&start_up);
        assert!(
            quoted.len() <= "изменит файл …, команды из которого потом запускаются сами".len() + MAX_QUOTED_BYTES,
            "{quoted}"
        );
    }
}
