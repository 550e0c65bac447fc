//! The signals that stop the server: SIGINT (Ctrl-C) and SIGTERM. The first
//! starts the graceful shutdown; the composition root may take a second one
//! as "stop now" (see `serve` in the binary). Both streams are opened once,
//! so that a signal arriving between two waits is not lost.

/// Which signal arrived.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StopSignal {
    /// SIGINT: Ctrl-C in a terminal.
    Interrupt,
    /// SIGTERM: what a supervisor sends.
    Terminate,
}

impl StopSignal {
    /// The signal's name, for the log.
    pub fn name(self) -> &'static str {
        match self {
            StopSignal::Interrupt => "SIGINT",
            StopSignal::Terminate => "SIGTERM",
        }
    }

    /// The exit status a shell gives a process this signal ended: 128 + its number.
    pub fn exit_code(self) -> u8 {
        match self {
            StopSignal::Interrupt => 130,
            StopSignal::Terminate => 143,
        }
    }
}

/// SIGINT and SIGTERM, watched from creation on (within a tokio runtime).
#[derive(Debug)]
pub struct StopSignals {
    #[cfg(unix)]
    interrupt: tokio::signal::unix::Signal,
    #[cfg(unix)]
    terminate: Option<tokio::signal::unix::Signal>,
}

impl StopSignals {
    /// Starts watching. Without SIGTERM (it cannot be watched: rare), SIGINT alone stops.
    #[cfg(unix)]
    pub fn new() -> std::io::Result<StopSignals> {
        use tokio::signal::unix::{SignalKind, signal};
        let interrupt = signal(SignalKind::interrupt())?;
        let terminate = signal(SignalKind::terminate())
            .inspect_err(|error| tracing::warn!(%error, "cannot watch SIGTERM; only SIGINT stops the server"))
            .ok();
        Ok(StopSignals { interrupt, terminate })
    }

    /// Starts watching Ctrl-C.
    #[cfg(not(unix))]
    pub fn new() -> std::io::Result<StopSignals> {
        Ok(StopSignals {})
    }

    /// The next signal.
    #[cfg(unix)]
    pub async fn recv(&mut self) -> StopSignal {
        let terminate = async {
            match &mut self.terminate {
                Some(terminate) => terminate.recv().await,
                None => std::future::pending().await,
            }
        };
        tokio::select! {
            _ = self.interrupt.recv() => StopSignal::Interrupt,
            _ = terminate => StopSignal::Terminate,
        }
    }

    /// The next Ctrl-C.
    #[cfg(not(unix))]
    pub async fn recv(&mut self) -> StopSignal {
        let _ = tokio::signal::ctrl_c().await;
        StopSignal::Interrupt
    }
}
