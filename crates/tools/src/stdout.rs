//! Standard output of the commands. A reader that goes away early
//! (`dialog --replay LOG | head -1`) ends the program quietly with exit 0,
//! as it would end a shell tool, instead of the panic `println!` makes of
//! a broken pipe; a command whose work goes on regardless (scripts whose
//! reports and exit code a CI job reads, [`keep_going_when_closed`]) stops
//! printing instead. Any other failure to write ends it with exit 2 and the
//! reason on stderr. Every command prints through [`Stdout`] or [`outln!`](crate::outln).

use std::{
    io::{self, Write},
    sync::atomic::{AtomicBool, Ordering},
};

/// Writes `line` to standard error, and nothing when it is closed (its
/// reader gone): `eprintln!` would panic, exiting 101 instead of the
/// command's own exit code.
pub fn errln(line: &str) {
    use std::io::Write;
    let _ = writeln!(std::io::stderr(), "{line}");
}

/// Set by [`keep_going_when_closed`].
static KEEP_GOING: AtomicBool = AtomicBool::new(false);

/// From now on a closed standard output is written to no more, and the
/// program goes on: its reports and exit code still matter
/// (`dialog --script s.yaml --junit r.xml | grep -q ✗`).
pub fn keep_going_when_closed() {
    KEEP_GOING.store(true, Ordering::Relaxed);
}

/// The process's standard output; a closed one ends the program quietly.
#[derive(Debug, Clone, Copy, Default)]
pub struct Stdout;

impl Write for Stdout {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        io::stdout().lock().write(buf).or_else(|error| quiet_if_closed(error).map(|()| buf.len()))
    }

    fn write_all(&mut self, buf: &[u8]) -> io::Result<()> {
        io::stdout().lock().write_all(buf).or_else(quiet_if_closed)
    }

    fn flush(&mut self) -> io::Result<()> {
        io::stdout().lock().flush().or_else(quiet_if_closed)
    }
}

/// When the reader of standard output has gone, nobody reads what
/// follows: the process ends, or (see [`keep_going_when_closed`]) what it
/// writes is dropped. Other errors are errors.
fn quiet_if_closed(error: io::Error) -> io::Result<()> {
    if error.kind() != io::ErrorKind::BrokenPipe {
        return Err(error);
    }
    if KEEP_GOING.load(Ordering::Relaxed) {
        return Ok(());
    }
    std::process::exit(0);
}

/// `text` from a server as a terminal may show it: the characters that
/// [mislead](misleads) escaped (`\r`, `\u{1b}`), anything else (Cyrillic
/// too) as it is.
pub fn shown(text: &str) -> String {
    megamind_core::text::escape(text, misleads)
}

/// Whether a terminal shows text holding `c` as other than it is: a control
/// character moves the cursor, clears a line, recolours; a bidirectional
/// override or isolate reorders what follows it.
pub fn misleads(c: char) -> bool {
    c.is_control() || megamind_core::text::reorders(c)
}

/// Writes one line to standard output (see the module docs).
pub fn line(args: std::fmt::Arguments<'_>) {
    let mut out = Stdout;
    if let Err(error) = out.write_fmt(args).and_then(|()| out.write_all(b"\n")) {
        let _ = writeln!(io::stderr(), "cannot write to standard output: {error}");
        std::process::exit(2);
    }
}

/// `println!` for the commands: a closed standard output ends the program
/// quietly instead of panicking.
#[macro_export]
macro_rules! outln {
    ($($arg:tt)*) => {
        $crate::stdout::line(format_args!($($arg)*))
    };
}
