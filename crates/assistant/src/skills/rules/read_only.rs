//! The read-only list: the few commands that run without asking, because
//! with the arguments allowed here they only read and print. A command is
//! on it only by its bare name (`ls`, not `./ls` or `/bin/ls`, which may be
//! any file), with none of its options that write or run something, and,
//! for commands that have such options, no unquoted glob that a file name
//! could turn into one.

use crate::skills::rules::{
    git,
    options::{OptionWord, option},
    shell::Word,
};

/// What a command's operands (its words that are no options) may be.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Operands {
    Any,
    /// At most this many: `uniq in out` writes `out`.
    AtMost(usize),
    /// Each a `+FORMAT`: `date 0101…` sets the clock.
    Formats,
}

#[derive(Debug)]
struct Entry {
    name: &'static str,
    /// Options that write, run or change something (`--output -o -exec`).
    forbidden: &'static str,
    /// Short options whose value is the next word when none is attached.
    valued: &'static str,
    /// Short options that may carry a value in the same word only.
    attached: &'static str,
    /// Whether a word may start with a glob: only when no option writes or runs.
    globs: bool,
    operands: Operands,
}

const fn plain(name: &'static str) -> Entry {
    Entry { name, forbidden: "", valued: "", attached: "", globs: true, operands: Operands::Any }
}

const LIST: [Entry; 23] = [
    plain("ls"),
    plain("pwd"),
    plain("cat"),
    plain("head"),
    plain("tail"),
    plain("wc"),
    plain("du"),
    plain("df"),
    plain("whoami"),
    plain("id"),
    plain("uname"),
    plain("uptime"),
    plain("echo"),
    plain("cut"),
    plain("tr"),
    plain("grep"),
    plain("egrep"),
    plain("fgrep"),
    Entry { forbidden: "-v", ..plain("printf") },
    Entry {
        forbidden: "-s --set",
        valued: "dfr",
        attached: "I",
        globs: false,
        operands: Operands::Formats,
        ..plain("date")
    },
    Entry { forbidden: "--pre --hostname-bin", globs: false, ..plain("rg") },
    Entry { forbidden: "-o --output --compress-program", valued: "kStT", globs: false, ..plain("sort") },
    Entry { valued: "fsw", globs: false, operands: Operands::AtMost(1), ..plain("uniq") },
];

/// `find` is read-only without its actions that run, delete or write.
const FIND: Entry = Entry {
    forbidden: "-exec -execdir -ok -okdir -delete -fprint -fprint0 -fprintf -fls",
    globs: false,
    ..plain("find")
};

/// Whether `words`, a simple command without its leading keywords, is on
/// the read-only list with read-only arguments.
pub(super) fn allows(words: &[Word]) -> bool {
    let Some((program, args)) = words.split_first() else { return false };
    if !program.is_plain() || program.text.contains(['/', '\\']) {
        return false;
    }
    if program.text == "git" {
        return git::read_only(args);
    }
    let entry = if program.text == "find" { Some(&FIND) } else { LIST.iter().find(|s| s.name == program.text) };
    entry.is_some_and(|entry| entry.allows(args))
}

impl Entry {
    fn allows(&self, args: &[Word]) -> bool {
        let mut operands = 0;
        let mut options_end = false;
        let mut value_next = false;
        for word in args {
            let text = word.text.as_str();
            if std::mem::take(&mut value_next) {
                continue;
            }
            if !options_end && !self.globs && (word.leading_glob || word.braces) {
                return false;
            }
            if !options_end && text == "--" {
                options_end = true;
                continue;
            }
            if !options_end && text.len() > 1 && text.starts_with('-') {
                match option(text, self.forbidden, self.valued, self.attached) {
                    OptionWord::Forbidden => return false,
                    OptionWord::ValueNext => value_next = true,
                    OptionWord::Fine => {}
                }
                continue;
            }
            operands += 1;
            if self.operands == Operands::Formats && !text.starts_with('+') {
                return false;
            }
        }
        match self.operands {
            Operands::AtMost(most) => operands <= most,
            Operands::Any | Operands::Formats => true,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::skills::rules::shell::split;

    fn read_only(command: &str) -> bool {
        let line = split(command);
        allows(crate::skills::rules::shell::without_keywords(&line.commands[0].words))
    }

    #[test]
    fn the_list_and_its_arguments() {
        for command in [
            "ls -la",
            "ls *",
            "du -sh .",
            "du -sh ./*",
            "df -h",
            "cat README.md",
            "echo \"$HOME\"",
            "printf '%s\\n' x",
            "date +%F",
            "date -d yesterday +%F",
            "date -Iseconds",
            "grep -rno TODO src",
            "rg -n foo",
            "sort -rh",
            "sort -k2 -t, -n",
            "uniq -c",
            "find . -name '*.rs' -type f",
            "wc -l -- *.rs",
        ] {
            assert!(read_only(command), "{command}");
        }
        for command in [
            "./ls",
            "/bin/ls",
            "LS",
            "$X -la",
            "printf -v x y",
            "date -s 2020-01-01",
            "date 0101",
            "date --set=x",
            "rg --pre=sh x",
            "rg --pre sh x",
            "rg x *",
            "sort -o out",
            "sort -ro out",
            "sort --out=x",
            "sort --compress-program=sh",
            "uniq in out",
            "find . -delete",
            "find . -exec rm {} ;",
            "find * -name x",
            "tar czf x",
            "tee x",
        ] {
            assert!(!read_only(command), "{command}");
        }
    }
}
