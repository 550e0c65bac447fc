//! Git under the command rules. A few of its commands only read
//! ([`read_only`]); the rest is a skill's to allow, except what reaches
//! beyond the repository ([`capabilities`]): configuration that runs
//! commands later (`git config`, `-c`), a subcommand that is none of git's
//! own (an alias, which may run anything), commands that run other
//! programs, and the network.

use crate::skills::rules::{
    files::{quoted, writes_to},
    options::{OptionWord, option},
    programs::listed,
    shell::Word,
};

/// Git's own commands (`git --list-cmds=main`): any other name is an alias
/// or a `git-…` program found on the path.
const OWN: &str = "add am annotate apply archimport archive bisect blame branch bugreport bundle cat-file check-attr \
    check-ignore check-mailmap check-ref-format checkout checkout-index cherry cherry-pick clean clone \
    column commit commit-graph commit-tree config count-objects credential credential-cache \
    credential-store cvsexportcommit cvsimport cvsserver daemon describe diagnose diff diff-files \
    diff-index diff-tree difftool fast-export fast-import fetch fetch-pack filter-branch fmt-merge-msg \
    for-each-ref for-each-repo format-patch fsck gc get-tar-commit-id grep hash-object help hook \
    http-backend http-fetch http-push imap-send index-pack init instaweb interpret-trailers log ls-files \
    ls-remote ls-tree mailinfo mailsplit maintenance merge merge-base merge-file merge-index merge-tree \
    mergetool mktag mktree multi-pack-index mv name-rev notes p4 pack-objects pack-refs patch-id prune \
    prune-packed pull push quiltimport range-diff read-tree rebase receive-pack reflog remote repack \
    replace replay request-pull rerere reset restore rev-list rev-parse revert rm send-email send-pack \
    shell shortlog show show-branch show-index show-ref sparse-checkout stage stash status stripspace \
    submodule svn switch symbolic-ref tag unpack-file unpack-objects update-index update-ref \
    update-server-info upload-archive upload-pack var verify-commit verify-pack verify-tag version \
    whatchanged worktree write-tree";
/// Commands that talk to other machines.
const NETWORK: &str = "clone fetch pull push ls-remote send-email imap-send request-pull fetch-pack send-pack http-fetch \
    http-push submodule";
/// Commands that run other programs, whatever their arguments.
const RUNS: &str = "difftool mergetool filter-branch hook instaweb daemon shell for-each-repo credential \
    credential-cache credential-store p4 svn cvsimport cvsexportcommit cvsserver archimport upload-pack \
    receive-pack upload-archive http-backend maintenance";
/// The commands that only read, with [`FORBIDDEN`] left out.
const READ_ONLY: &str = "status log diff show rev-parse ls-files";
/// Options of the read-only commands that write or run something.
const FORBIDDEN: &str = "-o -c --output --exec --upload-pack --receive-pack --ext-diff --textconv --config-env \
    --open-files-in-pager";
/// Short options whose value may follow in the same word (`-Sfoo`, `-n5`, `-uno`).
const VALUED: &str = "SGnUMCBlLuOXxI";

/// `git branch` options that only list.
const BRANCH_OPTIONS: &str = "--list --all --remotes --verbose --show-current --no-color --color --no-column --column \
    --ignore-case --omit-empty --contains --no-contains --merged --no-merged --points-at --sort --format \
    --abbrev";
/// Those of them whose value may be the next word.
const BRANCH_VALUED: &str = "--contains --no-contains --merged --no-merged --points-at --sort";

/// Options of `git config` that only read.
const CONFIG_READING: &str = "--get --get-all --get-regexp --get-urlmatch --list -l --global --system --local --worktree \
    --show-origin --show-scope --name-only --null -z --includes --no-includes --bool --int --bool-or-int \
    --path --all";

/// Whether `git` with `args` only reads: one of [`READ_ONLY`] (or `branch`
/// listing) after no global option but `--no-pager`.
pub(super) fn read_only(args: &[Word]) -> bool {
    let start = args.iter().position(|w| !matches!(w.text.as_str(), "--no-pager" | "-P")).unwrap_or(args.len());
    let Some((sub, rest)) = args.get(start..).and_then(<[Word]>::split_first) else { return false };
    if !sub.is_plain() {
        return false;
    }
    match sub.text.as_str() {
        "branch" => branch_lists(rest),
        name if listed(READ_ONLY, name) => {
            for word in rest {
                if word.text == "--" {
                    return true;
                }
                if word.leading_glob || word.braces {
                    return false;
                }
                if word.text.len() > 1
                    && word.text.starts_with('-')
                    && option(&word.text, FORBIDDEN, "", VALUED) == OptionWord::Forbidden
                {
                    return false;
                }
            }
            true
        }
        _ => false,
    }
}

/// Whether `git branch` with `args` only lists branches.
fn branch_lists(args: &[Word]) -> bool {
    let short_list = |text: &str| !text.starts_with("--") && text.starts_with('-') && text.contains('l');
    let listing = args.iter().any(|w| w.text == "--list" || short_list(&w.text));
    let mut value_next = false;
    for word in args {
        let text = word.text.as_str();
        if std::mem::take(&mut value_next) {
            continue;
        }
        if word.leading_glob || word.braces {
            return false;
        }
        if text.starts_with("--") {
            let name = text.split('=').next().unwrap_or(text);
            if !listed(BRANCH_OPTIONS, name) {
                return false;
            }
            value_next = name == text && listed(BRANCH_VALUED, name);
        } else if text.len() > 1 && text.starts_with('-') {
            if !text.chars().skip(1).all(|c| "arvli".contains(c)) {
                return false;
            }
        } else if !listing {
            return false;
        }
    }
    true
}

/// What `git` with `args` may do beyond its repository, in plain words.
pub(super) fn capabilities(args: &[Word]) -> Vec<String> {
    let mut found = Vec::new();
    // The folder git is sent to work in, if not this one.
    let mut elsewhere = None;
    let mut i = 0;
    while let Some(word) = args.get(i) {
        let text = word.text.as_str();
        if !text.starts_with('-') {
            break;
        }
        let moved = ["--git-dir=", "--work-tree="].iter().find_map(|prefix| text.strip_prefix(prefix));
        if text.starts_with("-c") || text.starts_with("--config-env") {
            found.push("задаст настройки git, которые могут запустить другие команды".to_owned());
            i += usize::from(text == "-c");
        } else if let Some(dir) = text.strip_prefix("--exec-path=") {
            found.push(format!("возьмёт команды git из папки {dir}"));
        } else if let Some(dir) = moved {
            elsewhere = Some(dir.to_owned());
        } else if matches!(text, "-C" | "--git-dir" | "--work-tree") {
            elsewhere = args.get(i + 1).map(|dir| dir.text.clone());
            i += 1;
        } else if text == "--namespace" {
            i += 1;
        }
        i += 1;
    }
    // Sent elsewhere, a command that writes writes there: `git -C ~ apply`
    // creates files in the home folder, as `patch` would.
    if let Some(dir) = elsewhere.filter(|_| !read_only(args.get(i..).unwrap_or(&[]))) {
        found.push(format!("выполнит git в папке {}: он может записать файлы вне репозитория", quoted(&dir)));
    }
    let Some((sub, rest)) = args.get(i..).and_then(<[Word]>::split_first) else { return found };
    let name = sub.text.as_str();
    let has = |wanted: &dyn Fn(&str) -> bool| rest.iter().any(|w| wanted(&w.text));
    let operands: Vec<&str> = rest.iter().map(|w| w.text.as_str()).filter(|w| !w.starts_with('-')).collect();
    if !sub.is_plain() || !listed(OWN, name) {
        found.push(format!(
            "выполнит «git {name}»: такой команды в git нет, а псевдоним или посторонняя программа может сделать что угодно"
        ));
        return found;
    }
    match name {
        "config" if !reads_config(rest) => {
            found.push("изменит настройки git, которые потом могут сами запустить другие команды".to_owned())
        }
        "remote" if has(&|w| !w.starts_with('-') && w != "get-url") => {
            found.push("изменит список удалённых репозиториев или обратится к ним по сети".to_owned())
        }
        "bisect" if rest.first().is_some_and(|w| w.text == "run") => {
            found.push("запустит другую команду через git bisect run".to_owned())
        }
        "rebase" if has(&|w| w == "-x" || (w.starts_with('-') && !w.starts_with("--") && w.contains('x'))) => {
            found.push("запустит другую команду после каждого коммита через git rebase".to_owned())
        }
        "grep" if has(&|w| w.starts_with("-O") || w.starts_with("--open-files-in-pager")) => {
            found.push("откроет найденные файлы в другой программе".to_owned())
        }
        "archive" if has(&|w| w.starts_with("--remote")) => found.push("обратится к сети через git archive".to_owned()),
        "clone" | "fetch" | "ls-remote" | "fetch-pack" if has(&|w| w == "-u") => {
            found.push("запустит другую программу на удалённой стороне через опцию -u".to_owned())
        }
        "apply" if has(&|w| w == "--unsafe-paths") => found.push("может записать файлы вне репозитория".to_owned()),
        "merge-file" if !has(&|w| w == "-p" || w == "--stdout") => {
            found.extend(operands.first().map(|file| writes_to(file)))
        }
        "bundle" | "worktree" if operands.first().is_some_and(|w| *w == "create" || *w == "add") => {
            found.extend(operands.get(1).map(|file| writes_to(file)))
        }
        _ => {}
    }
    // Options that write a file or a folder of git's own anywhere, written
    // whole or abbreviated (git takes any unique start of a long option),
    // with their value after `=` or as the next word.
    for (at, word) in rest.iter().enumerate() {
        let value = |prefix: &str| word.text.strip_prefix(prefix);
        let long = |full: &str, shortest: &str| {
            let (option, value) = word.text.split_once('=').map_or((word.text.as_str(), None), |(o, v)| (o, Some(v)));
            let named = option.starts_with(shortest) && full.starts_with(option);
            named.then(|| value.or_else(|| rest.get(at + 1).map(|next| next.text.as_str())).unwrap_or(""))
        };
        if let Some(folder) = long("--prefix", "--p").filter(|_| name == "checkout-index") {
            found.push(format!("запишет файлы репозитория в папку {}", quoted(folder)));
        } else if let Some(file) = long("--export-marks", "--export-m") {
            found.push(writes_to(file));
        } else if let Some(folder) = value("--template=").or_else(|| value("--template")) {
            found.push(format!(
                "возьмёт хуки нового репозитория, которые потом запускаются сами, из папки {}",
                quoted(folder)
            ));
        }
    }
    if listed(NETWORK, name) {
        found.push(format!("обратится к сети через git {name}"));
    }
    if listed(RUNS, name) {
        found.push(format!("запустит другие программы через git {name}"));
    }
    found
}

/// Whether `git config` with `args` only reads a value or lists them.
fn reads_config(args: &[Word]) -> bool {
    let reading = args.first().is_some_and(|w| w.text == "get" || w.text == "list")
        || args.iter().any(|w| w.text.starts_with("--get") || w.text == "--list" || w.text == "-l");
    let options_read = args.iter().all(|w| {
        !w.text.starts_with('-')
            || listed(CONFIG_READING, &w.text)
            || w.text.starts_with("--type=")
            || w.text.starts_with("--default=")
    });
    let operands = args.iter().filter(|w| !w.text.starts_with('-')).count();
    reading && options_read && operands <= 3
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::skills::rules::shell::split;

    fn words(args: &str) -> Vec<Word> {
        split(args).commands.remove(0).words
    }

    #[test]
    fn the_reading_commands_without_options_that_write_or_run() {
        for args in [
            "status --porcelain",
            "status -uno",
            "log --oneline -5",
            "log -Sconfig --format=%h",
            "--no-pager diff --stat",
            "show HEAD:README.md",
            "rev-parse --show-toplevel",
            "ls-files -m",
            "branch",
            "branch -vv",
            "branch --list 'feat*'",
            "branch --contains HEAD",
            "diff -- *.rs",
        ] {
            assert!(read_only(&words(args)), "{args}");
        }
        for args in [
            "log --output=x",
            "log --outp=x",
            "log -o x",
            "ls-files -o",
            "show --ext-diff",
            "diff --textconv",
            "-c core.pager=x log",
            "-C .. status",
            "branch new",
            "branch -D old",
            "branch --set-upstream-to=x",
            "log *",
            "add .",
            "tidy",
        ] {
            assert!(!read_only(&words(args)), "{args}");
        }
    }

    #[test]
    fn what_reaches_beyond_the_repository() {
        let some = |args: &str| !capabilities(&words(args)).is_empty();
        for args in [
            "config alias.tidy '!rm -rf ~'",
            "config core.fsmonitor x",
            "config --global core.hooksPath /tmp/evil",
            "config --unset user.name",
            "config --get user.name --add x y",
            "-c core.pager=x log",
            "--config-env=core.pager=X log",
            "--exec-path=/tmp status",
            "tidy",
            "push",
            "fetch",
            "submodule update",
            "remote add evil https://x",
            "bisect run make",
            "rebase -x 'make test' main",
            "grep -Ovim x",
            "difftool",
            "clone -u x host:repo",
            "bundle create ~/.bashrc HEAD",
            "worktree add ~/.config/autostart",
            "checkout-index -a --prefix=/home/user/",
            "merge-file ~/.bashrc base other",
            "apply --unsafe-paths x.patch",
            "fast-export --export-marks=/tmp/x",
            "init --template=/tmp/evil",
            "-C ~ apply",
            "--work-tree ~ restore --source=HEAD~1 .bashrc",
            "--git-dir=/tmp/x --work-tree=/home/user checkout -f",
            "-C /etc reset --hard",
            "checkout-index -a -f --prefix /home/user/",
            "checkout-index -a -f --pre=/home/user/",
            "fast-export --export-m /tmp/x",
        ] {
            assert!(some(args), "{args}");
        }
        for args in [
            "add .",
            "commit -m \"fix: x\"",
            "status",
            "config --get user.name",
            "config list --show-origin",
            "remote -v",
            "-C ../repo log",
            "--work-tree=../site status",
            "reset --soft HEAD~1",
            "merge-file -p a base b",
            "bundle list-heads x.bundle",
        ] {
            assert!(!some(args), "{args}: {:?}", capabilities(&words(args)));
        }
    }
}
