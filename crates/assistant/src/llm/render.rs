//! Renders of a call's whole record (an answer, or a stream resumed far
//! into it) run aside: for a call of tens of thousands of events one takes
//! some tens to hundreds of milliseconds of CPU, and on a worker thread it
//! would hold every `/run` queued behind it past its budget. Anyone holding
//! a signed address may ask for one again and again.
//!
//! A render hands its worker's other tasks to another thread first
//! (`block_in_place`), and at most one render a CPU runs at a time: more
//! wait their turn on their own threads, so that a flood of them costs that
//! many CPUs and a render's memory that many times, never the workers.
//! On a runtime of one thread (the stream lane, tests) a render runs where
//! it is: there is no other worker to hand the tasks to.

use std::sync::{Condvar, LazyLock, Mutex, PoisonError};

use tokio::runtime::{Handle, RuntimeFlavor};

/// Renders running now, and how many may.
struct Slots {
    running: Mutex<usize>,
    freed: Condvar,
    max: usize,
}

static SLOTS: LazyLock<Slots> = LazyLock::new(|| Slots {
    running: Mutex::new(0),
    freed: Condvar::new(),
    max: std::thread::available_parallelism().map_or(1, std::num::NonZeroUsize::get),
});

/// A render running: its slot, given back when it ends (or panics).
struct Slot(&'static Slots);

impl Slots {
    /// Waits for a slot, on this thread.
    fn take(&'static self) -> Slot {
        let mut running = self.running.lock().unwrap_or_else(PoisonError::into_inner);
        while *running >= self.max {
            running = self.freed.wait(running).unwrap_or_else(PoisonError::into_inner);
        }
        *running += 1;
        Slot(self)
    }
}

impl Drop for Slot {
    fn drop(&mut self) {
        *self.0.running.lock().unwrap_or_else(PoisonError::into_inner) -= 1;
        self.0.freed.notify_one();
    }
}

/// `render()`, run off the worker thread when there is another to take
/// its tasks, one a CPU at a time.
pub(crate) fn aside<T>(render: impl FnOnce() -> T) -> T {
    let many_workers = Handle::try_current().is_ok_and(|handle| handle.runtime_flavor() == RuntimeFlavor::MultiThread);
    if !many_workers {
        return render();
    }
    tokio::task::block_in_place(|| {
        let _slot = SLOTS.take();
        render()
    })
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    /// One worker: a task queued behind a render runs while the render
    /// does, or not at all until it ends.
    #[tokio::test(flavor = "multi_thread", worker_threads = 1)]
    async fn a_render_leaves_its_worker_to_the_tasks_queued_behind_it() {
        let render = tokio::spawn(async {
            let (told, heard) = std::sync::mpsc::channel();
            tokio::spawn(async move { told.send(()).unwrap() });
            aside(|| heard.recv_timeout(Duration::from_secs(10)).is_ok())
        });
        assert!(render.await.unwrap(), "the task queued behind the render never ran");
    }

    #[test]
    fn renders_past_one_a_cpu_wait_for_a_slot() {
        let slots: &'static Slots =
            Box::leak(Box::new(Slots { running: Mutex::new(0), freed: Condvar::new(), max: 2 }));
        let (first, second) = (slots.take(), slots.take());
        let (taken, took) = std::sync::mpsc::channel();
        let third = std::thread::spawn(move || {
            let _slot = slots.take();
            taken.send(()).unwrap();
        });
        assert!(took.recv_timeout(Duration::from_millis(100)).is_err(), "a third ran beside two");
        drop(first);
        took.recv_timeout(Duration::from_secs(10)).expect("the third ran once a slot was free");
        third.join().unwrap();
        drop(second);
        assert_eq!(*slots.running.lock().unwrap(), 0);
    }
}
