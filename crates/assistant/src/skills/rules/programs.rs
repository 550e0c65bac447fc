//! Programs that always ask, by what running them may do whatever their
//! arguments: run other code, write files, reach the network, change
//! permissions, processes or schedules. Names are compared lower-cased and
//! without `.exe`, as a case-insensitive file system or Windows would run
//! them.

/// What running a program may do.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Kind {
    /// A shell: runs the commands it is given.
    Shell,
    /// A language interpreter or an editor that runs scripts.
    Interpreter,
    /// Runs a string or a file as commands (`eval`, `source`).
    Evaluates,
    /// Changes how the shell runs later commands (`alias`, `export`).
    ShellState,
    /// Runs the command that follows it (`env`, `nohup`, `xargs`).
    Wrapper,
    /// Runs a command as another user (`sudo`).
    Privilege,
    /// Talks to other machines.
    Network,
    /// Writes or replaces files.
    Writes,
    /// Changes permissions or ownership.
    Access,
    /// Stops or changes processes and services.
    Processes,
    /// Changes what runs by itself later (`crontab`).
    Schedules,
    /// Downloads a program and runs it (`npx`).
    DownloadsAndRuns,
    /// Installs software when told to (`npm install`, `pip install`).
    Installer,
}

const SHELLS: &str = "sh bash zsh dash ksh mksh ash fish csh tcsh yash nu elvish xonsh cmd powershell pwsh";
const INTERPRETERS: &str = "irb node nodejs deno bun tclsh wish r rscript julia osascript awk gawk mawk nawk sed gsed jshell \
    groovy java expect gdb lldb vi vim nvim view ex ed emacs sqlite3 wscript cscript mshta rundll32 \
    regsvr32";
/// Interpreters named with a version after them (`python3.12`, `perl5.36`).
const INTERPRETER_FAMILIES: &str = "python pypy perl php lua ruby";
const EVALUATES: &str = "eval source . exec trap fc coproc bind complete compgen enable command builtin invoke-expression iex \
    invoke-command icm start-process";
const SHELL_STATE: &str = "alias shopt set declare typeset local export readonly let read mapfile readarray unset function hash \
    getopts";
const WRAPPERS: &str = "env nohup timeout nice ionice stdbuf xargs parallel watch flock strace ltrace time setsid taskset \
    chrt unshare nsenter chroot script systemd-run fakeroot firejail xvfb-run caffeinate open xdg-open \
    start entr busybox toybox";
const PRIVILEGE: &str = "sudo doas su runuser pkexec gosu sg newgrp";
const NETWORK: &str = "curl wget nc ncat netcat socat ssh scp sftp rsync ftp tftp telnet mosh http https xh aria2c lftp \
    smbclient invoke-webrequest iwr invoke-restmethod irm certutil bitsadmin start-bitstransfer";
const WRITES: &str = "tee cp mv dd install ln tar unzip zip gzip gunzip bzip2 bunzip2 xz unxz zstd unzstd 7z 7za rar unrar \
    cpio patch split csplit sponge set-content add-content out-file copy-item move-item new-item";
const ACCESS: &str = "chmod chown chgrp chattr setfacl chflags setcap icacls takeown usermod useradd passwd chpasswd \
    visudo";
const PROCESSES: &str = "kill killall pkill xkill renice taskkill stop-process systemctl service launchctl";
const SCHEDULES: &str = "crontab at batch";
const DOWNLOADS_AND_RUNS: &str = "npx bunx pnpx uvx";
const INSTALLERS: &str = "npm pnpm yarn pip pip3 pipx uv cargo gem go brew apt apt-get dnf yum pacman apk snap flatpak port \
    choco winget conda mamba composer poetry";
/// An installer's subcommands that download software.
const INSTALLING: &str = "install i add ci update upgrade exec dlx x get sync";

/// Whether `name` is one of the words of `list`: the tables here are
/// words separated by spaces, to stay readable.
pub(super) fn listed(list: &str, name: &str) -> bool {
    list.split_whitespace().any(|listed| listed == name)
}

/// A program's name as the checks compare it: its base name, lower-cased,
/// without `.exe`.
pub(super) fn normalize(program: &str) -> String {
    let name = crate::skills::rules::shell::base_name(program).to_lowercase();
    match name.strip_suffix(".exe") {
        Some(stem) if !stem.is_empty() => stem.to_owned(),
        _ => name,
    }
}

/// What running `name` (as [`normalize`] gives it) may do, if it is listed.
pub(super) fn kind(name: &str) -> Option<Kind> {
    let tables: [(&str, Kind); 13] = [
        (SHELLS, Kind::Shell),
        (INTERPRETERS, Kind::Interpreter),
        (EVALUATES, Kind::Evaluates),
        (SHELL_STATE, Kind::ShellState),
        (WRAPPERS, Kind::Wrapper),
        (PRIVILEGE, Kind::Privilege),
        (NETWORK, Kind::Network),
        (WRITES, Kind::Writes),
        (ACCESS, Kind::Access),
        (PROCESSES, Kind::Processes),
        (SCHEDULES, Kind::Schedules),
        (DOWNLOADS_AND_RUNS, Kind::DownloadsAndRuns),
        (INSTALLERS, Kind::Installer),
    ];
    if let Some((_, kind)) = tables.iter().find(|(names, _)| listed(names, name)) {
        return Some(*kind);
    }
    let versioned = |family: &str| {
        name.strip_prefix(family).is_some_and(|rest| rest.chars().all(|c| c.is_ascii_digit() || c == '.' || c == 'w'))
    };
    INTERPRETER_FAMILIES.split_whitespace().any(versioned).then_some(Kind::Interpreter)
}

/// Whether `args`, the words after an installer's name, make it download
/// software: an installing subcommand, `pacman -S…`, or `yarn` alone.
pub(super) fn installs(name: &str, args: &[&str]) -> bool {
    let sub = args.iter().find(|word| !word.starts_with('-'));
    match name {
        "pacman" => args.iter().any(|word| word.starts_with("-S") || word.starts_with("-U")),
        "yarn" | "pnpm" if sub.is_none() => true,
        _ => sub.is_some_and(|sub| listed(INSTALLING, sub)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_are_compared_as_a_system_would_run_them() {
        assert_eq!(normalize("/usr/bin/CURL.exe"), "curl");
        assert_eq!(normalize("C:\\Tools\\Python3.EXE"), "python3");
        assert_eq!(kind("curl"), Some(Kind::Network));
        assert_eq!(kind("python3.12"), Some(Kind::Interpreter));
        assert_eq!(kind("pythonw"), Some(Kind::Interpreter));
        assert_eq!(kind("perl5.36"), Some(Kind::Interpreter));
        assert_eq!(kind("perldoc"), None);
        assert_eq!(kind("ls"), None);
        assert!(installs("npm", &["install", "x"]) && installs("pacman", &["-Syu"]) && installs("yarn", &[]));
        assert!(!installs("npm", &["test"]) && !installs("cargo", &["build"]));
    }
}
