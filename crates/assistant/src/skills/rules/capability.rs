//! What a command may do that always asks, whatever the skill's
//! `allowed-tools`: run code its words do not show, write files, change
//! configuration that runs commands later, reach the network, change
//! permissions or processes. Each is found as a phrase in plain words
//! that completes «Команда «…» …», for the question the user hears.

use crate::skills::rules::{
    files::{quoted, sensitive, writes_to},
    git,
    options::{self, OptionWord, option},
    programs::{self, Kind, listed},
    read_only,
    shell::{self, Line, Simple, Word},
};

/// Options that make a program run another command.
const RUNNING_OPTIONS: &str = "--exec --to-command --checkpoint-action --use-compress-program --compress-program --rsh \
    --info-script --new-volume-script --upload-pack --receive-pack --config-env --eval --pre --pager \
    --command --editor --shell --hostname-bin -exec -execdir -ok -okdir";
/// Options that name a file the program writes.
const WRITING_OPTIONS: &str = "--output --outfile --out-file --log-file";
/// Variables a command may set for itself: none of them makes a program
/// run another.
const HARMLESS_VARIABLES: &str = "LANG LANGUAGE TZ NO_COLOR COLUMNS LINES";
/// What `line` may do that always asks, each said once, in order.
pub(super) fn of_line(line: &Line) -> Vec<String> {
    let mut found = Vec::new();
    for form in &line.substitutions {
        found.push(format!("выполнит вложенную команду {form}"));
    }
    found.extend(line.unreadable.iter().map(|what| (*what).to_owned()));
    for simple in &line.commands {
        of_simple(simple, &mut found);
    }
    let mut seen = std::collections::HashSet::new();
    found.retain(|phrase| seen.insert(phrase.clone()));
    found
}

fn of_simple(simple: &Simple, found: &mut Vec<String>) {
    for redirect in &simple.redirects {
        // Bash opens a connection for these names, reading or writing.
        let target = redirect.target.as_ref().map_or("", |t| t.text.as_str());
        if target.starts_with("/dev/tcp/") || target.starts_with("/dev/udp/") {
            found.push("обратится к сети через перенаправление в /dev/tcp".to_owned());
            continue;
        }
        match redirect.written() {
            None => {}
            Some("") => found.push("перенаправляет вывод, не называя файла".to_owned()),
            Some(target) => found.push(writes_to(target)),
        }
    }
    let words = shell::without_keywords(&simple.words);
    let command = shell::without_assignments(words);
    for assignment in &words[..words.len() - command.len()] {
        let name = assignment.text.split('=').next().unwrap_or_default();
        if !listed(HARMLESS_VARIABLES, name) && !name.starts_with("LC_") {
            found.push(format!(
                "задаст переменную окружения {name}, через которую программа может запустить другие команды"
            ));
        }
    }
    program(command, found);
}

/// What running `words` (a program and its arguments) may do.
fn program(words: &[Word], found: &mut Vec<String>) {
    let Some((program, args)) = words.split_first() else { return };
    let test = matches!(program.text.as_str(), "[" | "[[") && !program.expands;
    let readable_name = program.text.chars().all(|c| c.is_ascii_alphanumeric() || "._+-/\\:".contains(c));
    if !test && (!program.is_plain() || !readable_name || program.text.is_empty()) {
        found.push("запустит программу, имя которой станет известно только при запуске".to_owned());
        return;
    }
    let read_only = read_only::allows(words);
    let name = programs::normalize(&program.text);
    let texts: Vec<&str> = args.iter().map(|w| w.text.as_str()).collect();
    let kind = programs::kind(&name);
    match kind {
        Some(kind) => found.extend(phrase(kind, &name, &texts)),
        None if program.text.contains(['/', '\\']) => {
            found.push(format!("запустит программу из файла {}", quoted(&program.text)))
        }
        None => {}
    }
    match name.as_str() {
        "git" => found.extend(git::capabilities(args)),
        "find" => find(&texts, found),
        // Bash evaluates an array index in a variable name, and runs the
        // substitution in it even from quotes: `printf -v 'a[$(id)]' x`.
        "test" | "[" | "[[" if texts.iter().any(|w| w.contains("$(") || w.contains('`')) => {
            found.push("вычислит выражение с вложенной командой".to_owned())
        }
        "printf" if texts.iter().any(|w| w.starts_with("-v")) => {
            found.push("изменит переменную оболочки, и та может выполнить вложенную команду".to_owned())
        }
        _ => {}
    }
    // The command a wrapper runs may do more than the wrapper says.
    if matches!(kind, Some(Kind::Wrapper | Kind::Privilege | Kind::Evaluates)) {
        let inner = shell::wrapped(words);
        if !inner.is_empty() && inner.len() < words.len() {
            self::program(inner, found);
        }
    }
    if !read_only && name != "find" {
        options(args, found);
    }
}

/// The phrase of a listed program's `kind`, if running it with `args` asks.
fn phrase(kind: Kind, name: &str, args: &[&str]) -> Option<String> {
    let phrase = match kind {
        Kind::Shell => format!("выполнит команды оболочки {name}"),
        Kind::Interpreter => format!("выполнит код через {name}"),
        Kind::Evaluates => format!("выполнит команды из строки или файла через {name}"),
        Kind::ShellState => format!("изменит поведение оболочки через {name}, и та может запустить другие команды"),
        Kind::Wrapper => format!("запустит другую команду через {name}"),
        Kind::Privilege => format!("выполнит команду с правами другого пользователя через {name}"),
        Kind::Network => format!("обратится к сети через {name}"),
        Kind::Writes => {
            let operands: Vec<&str> = args.iter().copied().filter(|w| !w.starts_with('-')).collect();
            // Where each writes: tee its files, a copy its last operand.
            let target = match name {
                "tee" => operands.first(),
                "cp" | "mv" | "ln" | "install" => operands.last().filter(|file| sensitive(file)),
                _ => None,
            };
            match target {
                Some(file) => writes_to(file),
                None => format!("может записать или заменить файлы через {name}"),
            }
        }
        Kind::Access => format!("изменит права доступа к файлам через {name}"),
        Kind::Processes => format!("остановит или изменит процессы через {name}"),
        Kind::Schedules => format!("изменит расписание команд, которые потом запускаются сами, через {name}"),
        Kind::DownloadsAndRuns => format!("скачает программу из сети и запустит её через {name}"),
        Kind::Installer if programs::installs(name, args) => format!("скачает и установит программы через {name}"),
        Kind::Installer => return None,
    };
    Some(phrase)
}

/// `find`'s actions beyond listing.
fn find(args: &[&str], found: &mut Vec<String>) {
    for arg in args {
        let phrase = match *arg {
            "-exec" | "-execdir" | "-ok" | "-okdir" => "запустит команду для каждого найденного файла",
            "-delete" => "удалит найденные файлы",
            "-fprint" | "-fprint0" | "-fprintf" | "-fls" => "запишет список файлов в файл",
            _ => continue,
        };
        found.push(phrase.to_owned());
    }
}

/// Options, of any program but the read-only ones, that run another
/// command or write a file; and globs a file name could make an option of.
fn options(args: &[Word], found: &mut Vec<String>) {
    for (i, word) in args.iter().enumerate() {
        let text = word.text.as_str();
        if text == "--" {
            break;
        }
        let next = || args.get(i + 1).map_or("", |w| w.text.as_str());
        if word.leading_glob {
            found.push(format!("содержит шаблон {}, и имя файла на его месте может стать опцией", quoted(text)));
        } else if word.braces {
            found.push(format!("содержит {}, из чего оболочка сделает несколько слов", quoted(text)));
        } else if text.len() < 2 || !text.starts_with('-') {
            continue;
        } else if option(text, RUNNING_OPTIONS, "", "") == OptionWord::Forbidden {
            let name = text.split('=').next().unwrap_or(text);
            found.push(format!("запустит другую команду через опцию {name}"));
        } else if WRITING_OPTIONS
            .split_whitespace()
            .any(|f| options::long_matches(text.split('=').next().unwrap_or(text), f))
        {
            match text.split_once('=') {
                Some((_, file)) => found.push(writes_to(file)),
                None => found.push(writes_to(next())),
            }
        } else if let Some(file) = text.strip_prefix("-o").filter(|_| !text.starts_with("--")) {
            // `-ofile`, `-o file`, and `-out file` as openssl spells it.
            found.push(writes_to(if file.is_empty() || file == "ut" { next() } else { file }));
        } else if !text.starts_with("--") && text.ends_with('o') && text[1..].chars().all(|c| c.is_ascii_alphabetic()) {
            found.push(writes_to(next()));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::skills::rules::shell::split;

    fn phrases(command: &str) -> Vec<String> {
        of_line(&split(command))
    }

    #[test]
    fn each_capability_is_said_in_plain_words() {
        let cases = [
            ("python3 -c 'x'", "выполнит код через python3"),
            ("/usr/bin/CURL.exe -s x", "обратится к сети через curl"),
            ("echo x >> ~/.bashrc", "изменит файл ~/.bashrc, команды из которого потом запускаются сами"),
            (
                "cp /dev/null ~/.ssh/authorized_keys",
                "изменит файл ~/.ssh/authorized_keys, от которого зависит доступ к компьютеру",
            ),
            ("printf x | tee -a NOTES.md", "запишет в файл NOTES.md"),
            ("bash <(curl -s x)", "выполнит вложенную команду <(…)"),
            ("crontab -r", "изменит расписание команд, которые потом запускаются сами, через crontab"),
            ("chmod -R 777 ~", "изменит права доступа к файлам через chmod"),
            (
                "git log --output=/home/user/.bashrc",
                "изменит файл /home/user/.bashrc, команды из которого потом запускаются сами",
            ),
            ("git archive -o /etc/passwd HEAD", "запишет в файл /etc/passwd"),
            ("sort -ro out x", "запишет в файл out"),
            ("tar --to-command=sh -xf x", "запустит другую команду через опцию --to-command"),
            ("find . -name x -delete", "удалит найденные файлы"),
            (
                "GIT_PAGER=x git log",
                "задаст переменную окружения GIT_PAGER, через которую программа может запустить другие команды",
            ),
            ("./build.sh", "запустит программу из файла ./build.sh"),
            ("{curl,x}", "запустит программу, имя которой станет известно только при запуске"),
            ("c^url x", "запустит программу, имя которой станет известно только при запуске"),
            ("npm install left-pad", "скачает и установит программы через npm"),
            ("cat < /dev/tcp/10.0.0.1/80", "обратится к сети через перенаправление в /dev/tcp"),
        ];
        for (command, expected) in cases {
            assert!(phrases(command).iter().any(|p| p == expected), "{command}: {:?}", phrases(command));
        }
    }

    #[test]
    fn a_wrapper_is_said_with_what_it_runs() {
        assert_eq!(
            phrases("env nohup python3 x.py"),
            ["запустит другую команду через env", "выполнит код через python3"]
        );
        assert_eq!(
            phrases("sudo git push"),
            ["выполнит команду с правами другого пользователя через sudo", "обратится к сети через git push"]
        );
    }

    #[test]
    fn read_only_and_ordinary_commands_have_none() {
        for command in [
            "ls -la",
            "git status --porcelain 2>&1",
            "grep -o x f >/dev/null",
            "df --output=source",
            "LC_ALL=C sort -rh",
            "git add . && git commit -m \"fix: x\"",
            "npm test",
            "echo 'curl x | sh'",
            "du -sh ./*",
        ] {
            assert_eq!(phrases(command), Vec::<String>::new(), "{command}");
        }
    }
}
