//! A server process the benchmarks start, read from `/proc` and kill when
//! dropped, and the environment knobs they take.

use std::{
    io::{BufRead, BufReader},
    net::SocketAddr,
    process::{Child, Command, Stdio},
    sync::mpsc::RecvTimeoutError,
    time::Duration,
};

/// How long a server started may take to print its address.
const ADDRESS_WAIT: Duration = Duration::from_secs(30);

/// The value of environment variable `name`, or `default` when unset or unparsable.
pub fn env_or<T: std::str::FromStr>(name: &str, default: T) -> T {
    std::env::var(name).ok().and_then(|v| v.parse().ok()).unwrap_or(default)
}

/// A server process, killed when dropped.
pub struct Server {
    pub child: Child,
    pub addr: SocketAddr,
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Server {
    /// Starts `command` and reads its address from the first stdout line
    /// that contains `addr=`, waiting [`ADDRESS_WAIT`] at most (a server
    /// whose log level hides that line would keep a benchmark waiting for
    /// ever); the rest of its output is drained (logging on).
    pub fn start(mut command: Command) -> Server {
        let mut child = command.stdout(Stdio::piped()).stderr(Stdio::inherit()).spawn().expect("server starts");
        let mut out = BufReader::new(child.stdout.take().expect("stdout"));
        let (tx, rx) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            let mut line = String::new();
            while !line.contains("addr=") {
                line.clear();
                if out.read_line(&mut line).unwrap_or(0) == 0 {
                    return;
                }
            }
            let _ = tx.send(line);
            // Drained in bulk, as a log shipper reads: not line by line, which
            // would cost this process (and so the server's share of the cores)
            // an allocation per logged request.
            let _ = std::io::copy(&mut out, &mut std::io::sink());
        });
        let line = match rx.recv_timeout(ADDRESS_WAIT) {
            Ok(line) => line,
            Err(error) => {
                let _ = child.kill();
                let why = match error {
                    RecvTimeoutError::Timeout => format!("printed no `addr=` line within {ADDRESS_WAIT:?}"),
                    RecvTimeoutError::Disconnected => "ended before its address line".to_owned(),
                };
                panic!("the server {why}; its log level must let its `serving addr=...` line (info) out");
            }
        };
        let addr = line
            .split("addr=")
            .nth(1)
            .and_then(|s| s.split_whitespace().next())
            .expect("addr")
            .parse()
            .expect("socket address");
        Server { child, addr }
    }

    /// The server's `/metrics` text, read over a connection of its own.
    // The load bench reads it; the hostile bench, which shares this file, does not.
    #[allow(dead_code)]
    pub fn metrics(&self) -> Option<String> {
        use std::io::{Read, Write};
        let mut stream = std::net::TcpStream::connect(self.addr).ok()?;
        stream.write_all(b"GET /metrics HTTP/1.1\r\nhost: bench\r\nconnection: close\r\n\r\n").ok()?;
        let mut text = String::new();
        stream.read_to_string(&mut text).ok()?;
        Some(text)
    }

    /// A memory field of `/proc/PID/status` (`VmRSS`, `VmHWM`, ...) in MiB.
    pub fn status_mib(&self, field: &str) -> Option<f64> {
        let status = std::fs::read_to_string(format!("/proc/{}/status", self.child.id())).ok()?;
        let line = status.lines().find(|l| l.strip_prefix(field).is_some_and(|rest| rest.starts_with(':')))?;
        let kib: f64 = line.split_whitespace().nth(1)?.parse().ok()?;
        Some(kib / 1024.0)
    }
}
