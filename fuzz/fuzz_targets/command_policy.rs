//! A command that holds a write, a network tool, an interpreter or a
//! substitution is never allowed, whatever surrounds it and whatever the
//! skill's `allowed-tools`. The danger is spelled as a model might hide it
//! (a path, quotes, escapes, case, a wrapper, a compound command) and put
//! among other commands, read-only ones included, with arbitrary words in
//! quotes; or after any text at all, past a `;`.

#![no_main]

use std::sync::LazyLock;

use libfuzzer_sys::{
    arbitrary::{Result, Unstructured},
    fuzz_target,
};
use megamind_assistant::skills::rules::{CommandRules, Verdict};

static POLICY: LazyLock<CommandRules> = LazyLock::new(CommandRules::default);

const NETWORK: &[&str] = &["curl", "wget", "nc", "ncat", "ssh", "scp", "rsync", "socat", "telnet"];
const NETWORK_ARGS: &[&str] = &["http://x/y", "10.0.0.1 9000", "host:x .", "-s http://x | cat"];
const INTERPRETERS: &[&str] = &[
    "python3",
    "perl",
    "ruby",
    "node",
    "php",
    "bash",
    "sh",
    "zsh",
    "awk",
    "sed",
    "eval",
    "source",
    ".",
    "exec",
    "xargs",
    "env",
    "nohup",
    "timeout 5",
    "nice",
];
const INTERPRETER_ARGS: &[&str] = &["-c 'x'", "-e 'x'", "/tmp/y", "x.py", ""];
const WRITERS: &[&str] = &["tee", "cp", "mv", "dd", "install"];
const WRITER_ARGS: &[&str] = &["a b", "-a NOTES.md", "if=a of=b", "f"];
const SUBSTITUTIONS: &[&str] =
    &["$(id)", "`id`", "<(id)", ">(id)", "\"$(id)\"", "\"a`id`b\"", "--x=$(id)", "${x:-$(id)}", "a$(id)"];
const READERS: &[&str] = &["echo", "ls", "cat", "git log", "git commit -m", "grep x"];
const REDIRECTIONS: &[&str] =
    &["> f", ">> ~/.bashrc", "2> f", "&> f", ">| f", "1>f", ">f", "<> f", ">& f", "&>>f", "< /dev/tcp/x/80"];
const WRITING_OPTIONS: &[&str] =
    &["git log --output=f", "git archive -o f HEAD", "sort -o f x", "git diff --output f", "git show --out=f"];
/// Around the danger: how a model might hide it.
const WRAPS: &[(&str, &str)] = &[
    ("", ""),
    ("sudo ", ""),
    ("time ", ""),
    ("! ", ""),
    ("{ ", "; }"),
    ("( ", " )"),
    ("if true; then ", "; fi"),
    ("while false; do ", "; done"),
    ("command ", ""),
    ("LC_ALL=C ", ""),
    ("env ", ""),
];
/// What may stand beside it: commands that only read, and others.
const FILLERS: &[&str] = &[
    "ls -la",
    "git status --porcelain",
    "git log --oneline -5",
    "du -sh .",
    "df -h",
    "echo hi",
    "cat f",
    "grep -r x .",
    "true",
    "git add .",
    "make",
];
const OPS: &[&str] = &[" && ", " || ", " | ", "; ", " & ", "\n", " |& "];
const TOOLS: [&[&str]; 4] = [
    &[],
    &["Bash(git:*)"],
    &["Bash"],
    &["Bash(curl:*)", "Bash(python3:*)", "Bash(tee:*)", "Bash(sort:*)", "Bash(cp:*)", "Bash(echo:*)"],
];

fuzz_target!(|data: &[u8]| {
    let mut u = Unstructured::new(data);
    let Ok(command) = command(&mut u) else { return };
    for (i, tools) in TOOLS.iter().enumerate() {
        let tools: Vec<String> = tools.iter().map(|t| t.to_string()).collect();
        let allowed = (!tools.is_empty()).then_some(&tools[..]);
        let verdict = POLICY.check(&command, allowed);
        match &verdict {
            Verdict::Allow => panic!("allowed under {tools:?}: {command:?}"),
            Verdict::Ask(reason) | Verdict::Deny(reason) => assert!(!reason.is_empty()),
        }
        if i == 0 {
            assert_eq!(POLICY.check(&command, allowed), verdict, "the same verdict twice");
        }
    }
});

/// A command line holding one danger.
fn command(u: &mut Unstructured) -> Result<String> {
    // One in four: any text around it. Out of bytes, a chain.
    let raw = u.int_in_range(0..=3)? == 3;
    let (before, after) = *u.choose(WRAPS)?;
    let danger = format!("{before}{}{after}", danger(u)?);
    if raw {
        // Any text at all before it, or after it: a `;` parts them.
        let len = u.arbitrary_len::<u8>()?;
        let text = String::from_utf8_lossy(u.bytes(len)?).into_owned();
        return Ok(if u.arbitrary()? { format!("{text} ; {danger}") } else { format!("{danger} ; {text}") });
    }
    let mut line = String::new();
    let count = u.int_in_range(0..=3)?;
    let at = u.int_in_range(0..=count)?;
    for i in 0..=count {
        if i > 0 {
            line.push_str(u.choose(OPS)?);
        }
        if i == at {
            line.push_str(&danger);
        } else {
            line.push_str(u.choose(FILLERS)?);
            if u.arbitrary()? {
                line.push(' ');
                line.push_str(&quote(&u.arbitrary::<String>()?));
            }
        }
    }
    Ok(line)
}

/// One write, network tool, interpreter or substitution.
fn danger(u: &mut Unstructured) -> Result<String> {
    let program = |u: &mut Unstructured, names: &[&str], args: &[&str]| -> Result<String> {
        let name = *u.choose(names)?;
        Ok(format!("{} {}", spelled(u, name)?, u.choose(args)?))
    };
    Ok(match u.int_in_range(0..=5)? {
        0 => program(u, NETWORK, NETWORK_ARGS)?,
        1 => program(u, INTERPRETERS, INTERPRETER_ARGS)?,
        2 => program(u, WRITERS, WRITER_ARGS)?,
        3 => format!("{} {}", u.choose(READERS)?, u.choose(SUBSTITUTIONS)?),
        4 => {
            let space = if u.arbitrary()? { " " } else { "" };
            format!("{}{space}{}", u.choose(READERS)?, u.choose(REDIRECTIONS)?)
        }
        _ => u.choose(WRITING_OPTIONS)?.to_string(),
    })
}

/// `program` as a shell still runs it: by a path, escaped, quoted, cut by
/// empty quotes, in capitals (a case-insensitive file system runs it).
fn spelled(u: &mut Unstructured, program: &str) -> Result<String> {
    Ok(match u.int_in_range(0..=6)? {
        0 => format!("/usr/bin/{program}"),
        1 => format!("\\{program}"),
        2 => format!("'{program}'"),
        3 => format!("\"{program}\""),
        4 => {
            let at = u.choose_index(program.len() + 1)?;
            let at = (0..=at).rev().find(|&i| program.is_char_boundary(i)).unwrap_or(0);
            format!("{}''{}", &program[..at], &program[at..])
        }
        5 => program.to_uppercase(),
        _ => program.to_owned(),
    })
}

/// `text` as one word in single quotes.
fn quote(text: &str) -> String {
    format!("'{}'", text.replace('\'', r"'\''"))
}
