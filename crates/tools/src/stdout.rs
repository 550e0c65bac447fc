//! Standard output of the commands. A reader that goes away early
//! (`dialog --replay LOG | head -1`) ends the program quietly with exit 0,
//! as it would end a shell tool, instead of the panic `println!` makes of
//! a broken pipe; any other failure to write ends it with exit 2 and the
//! reason on stderr. Every command prints through [`Stdout`] or [`outln!`](crate::outln).

use std::io::{self, Write};

/// The process's standard output; a closed one ends the program quietly.
#[derive(Debug, Clone, Copy, Default)]
pub struct Stdout;

impl Write for Stdout {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        io::stdout().lock().write(buf).map_err(quiet_if_closed)
    }

    fn write_all(&mut self, buf: &[u8]) -> io::Result<()> {
        io::stdout().lock().write_all(buf).map_err(quiet_if_closed)
    }

    fn flush(&mut self) -> io::Result<()> {
        io::stdout().lock().flush().map_err(quiet_if_closed)
    }
}

/// Ends the process when the reader of standard output has gone: nobody
/// reads what follows.
fn quiet_if_closed(error: io::Error) -> io::Error {
    if error.kind() == io::ErrorKind::BrokenPipe {
        std::process::exit(0);
    }
    error
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
