//! Just enough shell syntax to check a command: a chain split into simple
//! commands at `&&`, `||`, `|`, `|&`, `;`, `&`, newlines, parentheses and
//! backticks (outside quotes), each split into words by `shell-words`, and
//! each stripped of the wrappers that run another command (`sudo`, `env`,
//! `nohup`, `xargs`, …) so the command really run is the one checked.
//!
//! Splitting at parentheses and backticks turns `$( … )`, `( … )` and
//! `` ` … ` `` outside quotes into commands of their own. What cannot be
//! checked this way — a substitution inside double quotes, an unclosed
//! quote — marks the chain `opaque`.

/// A command line cut into simple commands.
#[derive(Debug, Default)]
pub(super) struct Chain {
    /// Each simple command's words, as written (quotes removed).
    pub(super) commands: Vec<Vec<String>>,
    /// The operators between them (`ops[i]` follows `commands[i]`).
    pub(super) ops: Vec<&'static str>,
    /// True when part of the line hides from this parser.
    pub(super) opaque: bool,
}

/// Splits `line` into its simple commands.
pub(super) fn split(line: &str) -> Chain {
    let mut chain = Chain::default();
    let mut pieces = Vec::new();
    let mut current = String::new();
    let mut chars = line.chars().peekable();
    while let Some(c) = chars.next() {
        let op = match c {
            '\\' => {
                current.push(c);
                if let Some(next) = chars.next() {
                    current.push(next);
                }
                continue;
            }
            '\'' => {
                current.push(c);
                let mut closed = false;
                for q in chars.by_ref() {
                    current.push(q);
                    if q == '\'' {
                        closed = true;
                        break;
                    }
                }
                chain.opaque |= !closed;
                continue;
            }
            '"' => {
                current.push(c);
                let mut closed = false;
                while let Some(q) = chars.next() {
                    current.push(q);
                    match q {
                        '\\' => current.extend(chars.next()),
                        '"' => {
                            closed = true;
                            break;
                        }
                        '`' => chain.opaque = true,
                        '$' if chars.peek() == Some(&'(') => chain.opaque = true,
                        _ => {}
                    }
                }
                chain.opaque |= !closed;
                continue;
            }
            '&' if chars.peek() == Some(&'&') => {
                chars.next();
                "&&"
            }
            // `2>&1`, `<&3` and `&>file` are redirections, not operators.
            '&' if current.ends_with(['>', '<']) || chars.peek() == Some(&'>') => {
                current.push(c);
                continue;
            }
            '&' => "&",
            '|' if chars.peek() == Some(&'|') => {
                chars.next();
                "||"
            }
            '|' if chars.peek() == Some(&'&') => {
                chars.next();
                "|&"
            }
            '|' => "|",
            ';' | '\n' => ";",
            '(' => "(",
            ')' => ")",
            '`' => "`",
            c => {
                current.push(c);
                continue;
            }
        };
        pieces.push(std::mem::take(&mut current));
        chain.ops.push(op);
    }
    pieces.push(current);
    for piece in pieces {
        let words = shell_words::split(&piece).unwrap_or_else(|_| {
            chain.opaque = true;
            piece.split_whitespace().map(String::from).collect()
        });
        chain.commands.push(words);
    }
    chain
}

/// Words that open or close a compound command, not a command themselves.
const KEYWORDS: [&str; 13] =
    ["{", "}", "!", "if", "then", "else", "elif", "fi", "do", "done", "while", "until", "time"];

/// `words` without the leading compound-command keywords.
pub(super) fn without_keywords(words: &[String]) -> &[String] {
    let start = words.iter().position(|w| !KEYWORDS.contains(&w.as_str())).unwrap_or(words.len());
    words.get(start..).unwrap_or(&[])
}

/// For each wrapper, its options that take an argument.
const WRAPPERS: [(&str, &[&str]); 12] = [
    ("sudo", &["-u", "-g", "-h", "-p", "-C", "-D", "-r", "-t", "-U", "-T"]),
    ("doas", &["-u", "-C"]),
    ("env", &["-u", "-C", "-S"]),
    ("command", &[]),
    ("builtin", &[]),
    ("exec", &["-a"]),
    ("nohup", &[]),
    ("nice", &["-n"]),
    ("timeout", &["-s", "-k"]),
    ("stdbuf", &["-i", "-o", "-e"]),
    ("xargs", &["-I", "-n", "-P", "-L", "-s", "-d", "-E", "-a"]),
    ("busybox", &[]),
];

/// The command `words` really run: keywords, variable assignments and
/// wrappers stripped, the program named by its base name (`/bin/rm` →
/// `rm`).
pub(super) fn effective(words: &[String]) -> Vec<String> {
    let mut rest = without_keywords(words);
    // Each pass strips one wrapper; a bound keeps `sudo sudo …` finite.
    for _ in 0..8 {
        let Some(first) = rest.first() else { break };
        if is_assignment(first) {
            rest = rest.get(1..).unwrap_or(&[]);
            continue;
        }
        let program = base_name(first);
        let Some((_, with_argument)) = WRAPPERS.iter().find(|(name, _)| *name == program) else { break };
        let mut i = 1;
        while let Some(word) = rest.get(i) {
            if with_argument.contains(&word.as_str()) {
                i += 2;
            } else if word.starts_with('-') || (program == "env" && is_assignment(word)) {
                i += 1;
            } else {
                break;
            }
        }
        // `timeout` and `nice` without `-n` take a number first.
        if program == "timeout" && rest.get(i).is_some_and(|w| w.starts_with(|c: char| c.is_ascii_digit())) {
            i += 1;
        }
        rest = rest.get(i..).unwrap_or(&[]);
    }
    let mut words: Vec<String> = rest.to_vec();
    if let Some(first) = words.first_mut() {
        *first = base_name(first).to_string();
    }
    words
}

/// The command a shell or `eval` is told to run: `sh -c "…"`, `bash -lc
/// "…"`, `su root -c "…"`, `eval …`.
pub(super) fn inner_command(words: &[String]) -> Option<String> {
    let program = words.first()?.as_str();
    if program == "eval" {
        return Some(words.get(1..)?.join(" "));
    }
    if !matches!(program, "sh" | "bash" | "zsh" | "dash" | "ksh" | "ash" | "fish" | "su") {
        return None;
    }
    let flag = words.iter().position(|w| w.starts_with('-') && !w.starts_with("--") && w.contains('c'))?;
    words.get(flag + 1).cloned()
}

fn is_assignment(word: &str) -> bool {
    word.split_once('=')
        .is_some_and(|(name, _)| !name.is_empty() && name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_'))
}

fn base_name(word: &str) -> &str {
    word.rsplit('/').next().unwrap_or(word)
}
