//! A `redis-server` of a test's own on an ephemeral port, persistence off
//! (or an append-only file synced at every write, as the deploy runs it),
//! that the test can kill (SIGKILL) and start again on the same port.
//!
//! Without `redis-server` installed, [`RedisServer::start`] says `SKIPPED`
//! with the reason and gives `None`, unless `MEGAMIND_REQUIRE_REDIS=1`
//! (which CI sets), when it fails the test.

use std::{
    io::{BufRead, BufReader},
    net::TcpListener,
    path::PathBuf,
    process::{Child, Command, Stdio},
};

/// A running `redis-server`, killed when dropped.
pub struct RedisServer {
    child: Option<Child>,
    port: u16,
    dir: PathBuf,
    /// How it syncs the append-only file it keeps in `dir` (read again at a
    /// restart); `None` keeps none.
    appendfsync: Option<&'static str>,
}

impl RedisServer {
    /// Starts one, persistence off, or says why not (see the module's doc).
    pub fn start(test: &str) -> Option<RedisServer> {
        RedisServer::start_with(test, None)
    }

    /// Starts one that writes every change to its append-only file before
    /// it answers (`appendfsync always`) and reads it again when it is
    /// started again, or says why not.
    pub fn start_durable(test: &str) -> Option<RedisServer> {
        RedisServer::start_with(test, Some("always"))
    }

    /// Starts one with an append-only file synced as `appendfsync` says
    /// (`always`, `everysec`, `no`), or, with `None`, with none.
    pub fn start_with(test: &str, appendfsync: Option<&'static str>) -> Option<RedisServer> {
        let found = Command::new("redis-server").arg("--version").stdout(Stdio::null()).status().is_ok();
        if !found {
            let reason = "redis-server is not installed (apt-get install redis-server)";
            if std::env::var("MEGAMIND_REQUIRE_REDIS").as_deref() == Ok("1") {
                panic!("{test}: {reason}, and MEGAMIND_REQUIRE_REDIS=1");
            }
            eprintln!("SKIPPED {test}: {reason}");
            return None;
        }
        let dir = std::env::temp_dir().join(format!("megamind-redis-{}-{}", std::process::id(), unique()));
        std::fs::create_dir_all(&dir).expect("a directory for redis-server");
        // A port just freed may be taken again before redis binds it: try a few.
        for _ in 0..5 {
            let port = TcpListener::bind("127.0.0.1:0").and_then(|l| l.local_addr()).expect("a free port").port();
            let mut server = RedisServer { child: None, port, dir: dir.clone(), appendfsync };
            if server.launch() {
                return Some(server);
            }
        }
        panic!("{test}: redis-server did not start");
    }

    /// How it syncs its append-only file, if it keeps one.
    pub fn appendfsync(&self) -> Option<&'static str> {
        self.appendfsync
    }

    /// `redis://127.0.0.1:<port>`.
    pub fn url(&self) -> String {
        format!("redis://127.0.0.1:{}", self.port)
    }

    /// Kills it with SIGKILL, as a crash would: what it held is gone unless
    /// it keeps an append-only file.
    pub fn kill(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }

    /// Stops it (SIGSTOP): connections stay open and nothing answers, as
    /// with a Redis stuck or far too slow.
    pub fn freeze(&self) {
        self.signal("-STOP");
    }

    /// Lets a frozen server go on (SIGCONT).
    pub fn thaw(&self) {
        self.signal("-CONT");
    }

    fn signal(&self, signal: &str) {
        let pid = self.child.as_ref().expect("redis-server runs").id().to_string();
        let sent = Command::new("kill").args([signal, &pid]).status().expect("kill runs");
        assert!(sent.success(), "kill {signal} {pid}");
    }

    /// Starts it again on the same port: empty, or with what its
    /// append-only file holds.
    pub fn restart(&mut self) {
        self.kill();
        assert!(self.launch(), "redis-server started again on port {}", self.port);
    }

    /// A command's answer, through a connection of its own.
    pub fn query<T: redis::FromRedisValue>(&self, command: &mut redis::Cmd) -> T {
        let client = redis::Client::open(self.url()).expect("a Redis URL");
        let mut connection = client.get_connection().expect("a connection to the test's Redis");
        command.query(&mut connection).expect("the test's Redis answers")
    }

    /// Starts `redis-server` and reads its log until it accepts connections.
    fn launch(&mut self) -> bool {
        let mut child = Command::new("redis-server")
            .args(["--port", &self.port.to_string(), "--bind", "127.0.0.1", "--save", ""])
            .args(match self.appendfsync {
                Some(appendfsync) => vec!["--appendonly", "yes", "--appendfsync", appendfsync],
                None => vec!["--appendonly", "no"],
            })
            .args(["--maxmemory-policy", "noeviction", "--loglevel", "notice"])
            .arg("--dir")
            .arg(&self.dir)
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .expect("redis-server runs");
        let mut lines = BufReader::new(child.stdout.take().expect("piped stdout")).lines();
        let ready = lines.by_ref().map_while(Result::ok).any(|line| line.contains("Ready to accept connections"));
        if !ready {
            let _ = child.kill();
            let _ = child.wait();
            return false;
        }
        // Keep reading, so that the server never blocks on a full pipe.
        std::thread::spawn(move || lines.map_while(Result::ok).for_each(drop));
        self.child = Some(child);
        true
    }
}

impl Drop for RedisServer {
    fn drop(&mut self) {
        self.kill();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

fn unique() -> u64 {
    use std::sync::atomic::{AtomicU64, Ordering};
    static NEXT: AtomicU64 = AtomicU64::new(0);
    NEXT.fetch_add(1, Ordering::Relaxed)
}
