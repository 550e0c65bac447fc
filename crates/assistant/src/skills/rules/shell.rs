//! Just enough shell syntax to check a command: a line cut into simple
//! commands at `&&`, `||`, `|`, `|&`, `;`, `&`, newlines, parentheses and
//! backticks (outside quotes); each simple command into words, quotes and
//! escapes removed, and redirections (`> file`, `2>&1`) set apart. The
//! tokens come from [`super::lexer`].
//!
//! The reading errs on the side of seeing too much: `#` starts no comment,
//! so words after it are checked as commands. It notes what makes the shell
//! run more than the words show: substitutions (`$(…)`, backticks, `<(…)`,
//! `>(…)`), quoted or not; and what it cannot read (an unclosed quote,
//! `$'…'`, a `${…}` with operators, brace expansion). Splitting at
//! parentheses and backticks turns the inside of an unquoted substitution
//! into commands of their own; the inside of a quoted one is kept apart
//! for the deny rules.

pub(super) use crate::skills::rules::lexer::Word;
use crate::skills::rules::lexer::{self, Token};

/// A redirection (`>`, `>>`, `2>`, `&>`, `<`, `<<<`, …) and its target.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct Redirect {
    pub(super) op: &'static str,
    /// The word after it; none at the end of a command.
    pub(super) target: Option<Word>,
}

/// Targets that are no file a redirection could harm.
const HARMLESS_TARGETS: [&str; 5] = ["/dev/null", "/dev/stdout", "/dev/stderr", "/dev/fd/1", "/dev/fd/2"];

impl Redirect {
    /// Whether it sends output somewhere (rather than reading input).
    fn writes(&self) -> bool {
        self.op.contains('>')
    }

    /// The file it writes, when it writes one: not `/dev/null`, a standard
    /// stream or another descriptor (`2>&1`, `>&-`). `Some("")` when the
    /// file is missing.
    pub(super) fn written(&self) -> Option<&str> {
        if !self.writes() {
            return None;
        }
        let Some(target) = &self.target else { return Some("") };
        let text = target.text.as_str();
        let descriptor = text == "-" || (!text.is_empty() && text.bytes().all(|b| b.is_ascii_digit()));
        if target.is_plain() && (HARMLESS_TARGETS.contains(&text) || (self.op == ">&" && descriptor)) {
            return None;
        }
        Some(text)
    }
}

/// One simple command: its words and its redirections.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(super) struct Simple {
    pub(super) words: Vec<Word>,
    pub(super) redirects: Vec<Redirect>,
}

/// A command line cut into simple commands.
#[derive(Debug, Default)]
pub(super) struct Line {
    /// Each simple command, in order; some may be empty (`(`, `)`).
    pub(super) commands: Vec<Simple>,
    /// The operators between them (`ops[i]` follows `commands[i]`).
    pub(super) ops: Vec<&'static str>,
    /// The forms of substitution found: `$(…)`, `` `…` ``, `<(…)`, `>(…)`.
    pub(super) substitutions: Vec<&'static str>,
    /// What the reader could not follow, in words for the user.
    pub(super) unreadable: Vec<&'static str>,
    /// The text inside substitutions in double quotes, which splitting
    /// does not open.
    pub(super) quoted_inner: Vec<String>,
}

/// Splits `line` into its simple commands.
pub(super) fn split(line: &str) -> Line {
    let (tokens, notes) = lexer::read(line);
    let mut line = Line {
        substitutions: notes.substitutions,
        unreadable: notes.unreadable,
        quoted_inner: notes.quoted_inner,
        ..Line::default()
    };
    line.commands.push(Simple::default());
    let mut tokens = tokens.into_iter().peekable();
    while let Some(token) = tokens.next() {
        let current = line.commands.last_mut().expect("one command at least");
        match token {
            Token::Word(word) => current.words.push(word),
            Token::Redirect(op) => {
                let target = match tokens.next_if(|t| matches!(t, Token::Word(_))) {
                    Some(Token::Word(word)) => Some(word),
                    _ => None,
                };
                current.redirects.push(Redirect { op, target });
            }
            Token::Op(op) => {
                line.ops.push(op);
                line.commands.push(Simple::default());
            }
        }
    }
    line
}

/// Words that open or close a compound command, not a command themselves.
/// (`time` is a wrapper: `time -p rm …` runs `rm`, not `-p`.)
const KEYWORDS: [&str; 12] = ["{", "}", "!", "if", "then", "else", "elif", "fi", "do", "done", "while", "until"];

/// `words` without the leading compound-command keywords.
pub(super) fn without_keywords(words: &[Word]) -> &[Word] {
    let start = words.iter().position(|w| w.quoted || !KEYWORDS.contains(&w.text.as_str())).unwrap_or(words.len());
    words.get(start..).unwrap_or(&[])
}

/// `words` without the variable assignments before the program.
pub(super) fn without_assignments(words: &[Word]) -> &[Word] {
    let start = words.iter().position(|w| !is_assignment(w)).unwrap_or(words.len());
    words.get(start..).unwrap_or(&[])
}

/// For each wrapper, its options that take an argument as the next word
/// (short, and long: `sudo --user root rm …` runs `rm`).
const WRAPPERS: [(&str, &[&str]); 13] = [
    ("time", &["-f", "-o", "--format", "--output"]),
    (
        "sudo",
        &[
            "-u",
            "-g",
            "-h",
            "-p",
            "-C",
            "-D",
            "-r",
            "-t",
            "-U",
            "-T",
            "--user",
            "--group",
            "--host",
            "--prompt",
            "--close-from",
            "--chdir",
            "--role",
            "--type",
            "--other-user",
            "--command-timeout",
        ],
    ),
    ("doas", &["-u", "-C"]),
    ("env", &["-u", "-C", "-S", "--unset", "--chdir", "--split-string"]),
    ("command", &[]),
    ("builtin", &[]),
    ("exec", &["-a"]),
    ("nohup", &[]),
    ("nice", &["-n", "--adjustment"]),
    ("timeout", &["-s", "-k", "--signal", "--kill-after"]),
    ("stdbuf", &["-i", "-o", "-e", "--input", "--output", "--error"]),
    (
        "xargs",
        &[
            "-I",
            "-n",
            "-P",
            "-L",
            "-s",
            "-d",
            "-E",
            "-a",
            "--max-args",
            "--max-procs",
            "--max-lines",
            "--max-chars",
            "--delimiter",
            "--arg-file",
        ],
    ),
    ("busybox", &[]),
];

/// The words of the command `words` really run: keywords, variable
/// assignments and wrappers (`sudo`, `env`, `nohup`, `xargs`, …) stripped.
pub(super) fn wrapped(words: &[Word]) -> &[Word] {
    let mut rest = without_keywords(words);
    // Each pass strips one wrapper; a bound keeps `sudo sudo …` finite.
    for _ in 0..8 {
        let Some(first) = rest.first() else { break };
        if is_assignment(first) {
            rest = rest.get(1..).unwrap_or(&[]);
            continue;
        }
        let program = base_name(&first.text);
        let Some((_, with_argument)) = WRAPPERS.iter().find(|(name, _)| *name == program) else { break };
        let mut i = 1;
        while let Some(word) = rest.get(i) {
            if with_argument.contains(&word.text.as_str()) {
                i += 2;
            } else if word.text.starts_with('-') || (program == "env" && is_assignment(word)) {
                i += 1;
            } else {
                break;
            }
        }
        // `timeout` takes a number first.
        if program == "timeout" && rest.get(i).is_some_and(|w| w.text.starts_with(|c: char| c.is_ascii_digit())) {
            i += 1;
        }
        rest = rest.get(i..).unwrap_or(&[]);
    }
    rest
}

/// [`wrapped`] as text, the program named by its base name (`/bin/rm` → `rm`).
pub(super) fn effective(words: &[Word]) -> Vec<String> {
    let mut words: Vec<String> = wrapped(words).iter().map(|w| w.text.clone()).collect();
    if let Some(first) = words.first_mut() {
        *first = base_name(first).to_string();
    }
    words
}

/// The commands a shell or `eval` may be told to run: `sh -c "…"`, `bash
/// -lc "…"`, `su root -c "…"`, `eval …`. After `-c`, every word: options
/// may stand between the flag and its command (`sh -c -- "…"`, `bash -c
/// -x "…"`, `bash -c -o errexit "…"`), and the words after the command
/// (`$0`, `$1`, …) are checked too rather than tell them apart.
pub(super) fn inner_commands(words: &[String]) -> Vec<String> {
    let Some(program) = words.first().map(String::as_str) else { return Vec::new() };
    if program == "eval" {
        return vec![words[1..].join(" ")];
    }
    if !matches!(program, "sh" | "bash" | "zsh" | "dash" | "ksh" | "ash" | "fish" | "su") {
        return Vec::new();
    }
    let flag = words.iter().position(|w| w.starts_with('-') && !w.starts_with("--") && w.contains('c'));
    flag.map_or_else(Vec::new, |flag| words[flag + 1..].to_vec())
}

/// `NAME=value`, unquoted before the `=`: a variable assignment.
pub(super) fn is_assignment(word: &Word) -> bool {
    word.text.split_once('=').is_some_and(|(name, _)| {
        !name.is_empty()
            && !name.starts_with(|c: char| c.is_ascii_digit())
            && name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_')
    })
}

/// The last part of a path: `/bin/rm` → `rm`.
pub(super) fn base_name(word: &str) -> &str {
    word.rsplit(['/', '\\']).next().unwrap_or(word)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn texts(line: &Line) -> Vec<Vec<String>> {
        line.commands.iter().map(|c| c.words.iter().map(|w| w.text.clone()).collect()).collect()
    }

    #[test]
    fn quotes_escapes_and_operators() {
        let line = split(
            r#"c'u'rl "a b"\ c && ls|wc -l; x\
y"#,
        );
        assert_eq!(texts(&line), [vec!["curl", "a b c"], vec!["ls"], vec!["wc", "-l"], vec!["xy"]]);
        assert_eq!(line.ops, ["&&", "|", ";"]);
        assert!(line.substitutions.is_empty() && line.unreadable.is_empty());
    }

    #[test]
    fn redirections_are_set_apart_with_their_targets() {
        let line = split("git log 2>&1 >/dev/null >>~/.bashrc x>f &>all <in");
        let simple = &line.commands[0];
        let words: Vec<&str> = simple.words.iter().map(|w| w.text.as_str()).collect();
        assert_eq!(words, ["git", "log", "x"]);
        let written: Vec<Option<&str>> = simple.redirects.iter().map(Redirect::written).collect();
        assert_eq!(written, [None, None, Some("~/.bashrc"), Some("f"), Some("all"), None]);
        assert_eq!(split("ls >&2 >&-").commands[0].redirects.iter().filter_map(Redirect::written).count(), 0);
        assert_eq!(split("ls >& out").commands[0].redirects[0].written(), Some("out"));
        assert_eq!(split("ls >").commands[0].redirects[0].written(), Some(""));
        assert_eq!(split("echo '>' \">\" \\>").commands[0].redirects, []);
    }

    #[test]
    fn substitutions_are_found_quoted_or_not_but_not_in_single_quotes() {
        assert_eq!(split("echo $(id)").substitutions, ["$(…)"]);
        assert_eq!(texts(&split("echo $(id)"))[1], ["id"]);
        assert_eq!(split("echo \"a $(id) b\"").quoted_inner, ["id"]);
        assert_eq!(split("echo \"`id`\"").substitutions, ["`…`"]);
        assert_eq!(split("bash <(curl x)").substitutions, ["<(…)"]);
        assert_eq!(split("tee >(sh)").substitutions, [">(…)"]);
        assert_eq!(split("echo ${x:-$(id)}").substitutions, ["$(…)"]);
        assert!(split("echo '$(id) `id`'").substitutions.is_empty());
        assert!(split("echo \\$HOME").commands[0].words[1].is_plain());
    }

    #[test]
    fn what_cannot_be_read_is_noted() {
        for line in ["echo 'open", "echo \"open", "echo $'\\x63url'", "echo ${x/a/b}", "echo $[1+1]", "echo \"$(x"] {
            assert!(!split(line).unreadable.is_empty(), "{line}");
        }
        assert!(split("echo $HOME ${HOME} $1 $@").unreadable.is_empty());
        assert!(split("{curl,x}").commands[0].words[0].braces);
        assert!(!split("git log HEAD@{1} '{a,b}'").commands[0].words.iter().any(|w| w.braces));
        let glob = &split("ls *.rs ./*").commands[0].words;
        assert!(glob[1].leading_glob && glob[2].glob && !glob[2].leading_glob);
    }

    #[test]
    fn wrappers_are_stripped_to_the_command_run() {
        let line = split("sudo -u root env A=1 nohup timeout 5 /bin/rm -rf x");
        assert_eq!(effective(&line.commands[0].words), ["rm", "-rf", "x"]);
        let words = |line: &str| line.split(' ').map(String::from).collect::<Vec<_>>();
        assert_eq!(inner_commands(&words("bash -lc id")), ["id"]);
        assert_eq!(inner_commands(&words("sh -c -- id")), ["--", "id"]);
        assert_eq!(inner_commands(&words("bash -c -o errexit id x")), ["-o", "errexit", "id", "x"]);
        assert_eq!(inner_commands(&words("eval rm x")), ["rm x"]);
        assert!(inner_commands(&words("bash script.sh")).is_empty() && inner_commands(&words("ls -c x")).is_empty());
    }
}
