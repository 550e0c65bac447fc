//! Work a call leaves running after its answer has gone: an answer stored
//! in the shared store, a lease given back, work past its budget finishing
//! to complete its idempotency entry. A server stopping waits for it, within
//! a bound, instead of dropping it with the runtime: a `/commit` answered
//! but never stored would leave its claim to run out, and a retry after that
//! would run the side effect again. Work still running near the bound is
//! told to stop ([`Background::stopping`]), so that it ends its entry (a
//! side effect cut midway as one not to run again) before the process goes.

use std::{
    sync::{Arc, Mutex, PoisonError},
    time::Duration,
};

use tokio::{runtime::Handle, task::JoinHandle};
use tokio_util::{sync::CancellationToken, task::TaskTracker};

/// How long before its bound [`Background::settle`] tells the work left to
/// stop, for it to end its entries: a shared store's command or two.
const LAST_WORDS: Duration = Duration::from_millis(100);

/// The background work of one server; cheap to clone (one set of tasks).
#[derive(Debug, Clone, Default)]
pub struct Background {
    tasks: TaskTracker,
    /// Cancelled when the server stopping can wait no longer; a new one
    /// after, for work started in a process that goes on.
    stop: Arc<Mutex<CancellationToken>>,
}

impl Background {
    /// A set with no work in it.
    pub fn new() -> Background {
        Background::default()
    }

    /// Runs `work` on the current runtime, counted until it ends.
    pub fn spawn<F>(&self, work: F) -> JoinHandle<F::Output>
    where
        F: Future + Send + 'static,
        F::Output: Send + 'static,
    {
        self.tasks.spawn(work)
    }

    /// Runs `work` on `runtime`, counted until it ends.
    pub fn spawn_on<F>(&self, work: F, runtime: &Handle) -> JoinHandle<F::Output>
    where
        F: Future + Send + 'static,
        F::Output: Send + 'static,
    {
        self.tasks.spawn_on(work, runtime)
    }

    /// Work running now.
    pub fn len(&self) -> usize {
        self.tasks.len()
    }

    /// Whether no work runs now.
    pub fn is_empty(&self) -> bool {
        self.tasks.is_empty()
    }

    /// Resolves when the server stopping can wait for work no longer: work
    /// that can end early (a scenario's past its budget) ends then.
    pub fn stopping(&self) -> impl Future<Output = ()> + Send + 'static {
        self.stop.lock().unwrap_or_else(PoisonError::into_inner).clone().cancelled_owned()
    }

    /// Waits up to `bound` for the work running now, and any it starts, to
    /// end, telling what is left to stop [`LAST_WORDS`] before it; how much
    /// was still running at the bound (0: all ended).
    pub async fn settle(&self, bound: Duration) -> usize {
        self.tasks.close();
        let until = tokio::time::Instant::now() + bound;
        let mut ended = tokio::time::timeout_at(until - LAST_WORDS.min(bound), self.tasks.wait()).await.is_ok();
        if !ended {
            let stop = std::mem::take(&mut *self.stop.lock().unwrap_or_else(PoisonError::into_inner));
            stop.cancel();
            ended = tokio::time::timeout_at(until, self.tasks.wait()).await.is_ok();
        }
        // Work may still be started afterwards (a server in a process that goes on).
        self.tasks.reopen();
        if ended { 0 } else { self.tasks.len().max(1) }
    }
}

#[cfg(test)]
mod tests {
    use std::sync::{
        Arc,
        atomic::{AtomicBool, Ordering},
    };

    use super::*;

    #[tokio::test(start_paused = true)]
    async fn settling_waits_for_the_work_running_and_stops_at_its_bound() {
        let background = Background::new();
        let done = Arc::new(AtomicBool::new(false));
        let flag = done.clone();
        background.spawn(async move {
            tokio::time::sleep(Duration::from_millis(50)).await;
            flag.store(true, Ordering::SeqCst);
        });
        assert_eq!(background.settle(Duration::from_secs(1)).await, 0);
        assert!(done.load(Ordering::SeqCst), "settled only once the work ended");

        background.spawn(std::future::pending::<()>());
        assert_eq!(background.settle(Duration::from_millis(10)).await, 1, "work that never ends is left at the bound");

        // Work that listens is told to stop before the bound, and ends in it.
        let stopping = background.stopping();
        let started = tokio::time::Instant::now();
        let stopped = background.spawn(async move {
            stopping.await;
            tokio::time::Instant::now()
        });
        assert_eq!(background.settle(Duration::from_secs(1)).await, 1, "only the deaf work is left");
        let at = stopped.await.unwrap() - started;
        assert!(at >= Duration::from_secs(1) - LAST_WORDS && at < Duration::from_secs(1), "{at:?}");
        let after = background.stopping();
        assert!(tokio::time::timeout(Duration::ZERO, after).await.is_err(), "work started after is not told to stop");
        assert_eq!(background.len(), 1);
        let again = background.clone();
        again.spawn(async {});
        assert_eq!(background.len(), 2, "clones share one set of work");
    }
}
