//! Admission under overload: `/run` is refused first (HTTP 429, gRPC
//! `RESOURCE_EXHAUSTED`) so that Megamind stops retrying, while `/continue`,
//! `/commit` and `/apply`, which finish a dialog the scenario already won,
//! keep a reserve of their own. Only calls that run a scenario are admitted:
//! a repeat of a known `RequestId` is answered from the idempotency cache
//! without a slot.

use std::sync::{
    Arc,
    atomic::{AtomicUsize, Ordering},
};

use crate::scenario::Handler;

/// Counts calls in flight and admits or refuses new ones.
#[derive(Debug, Clone)]
pub struct Admission {
    inner: Arc<Inner>,
}

#[derive(Debug)]
struct Inner {
    in_flight: AtomicUsize,
    max_run: usize,
    max_total: usize,
}

/// Holds one admitted call; dropping it frees the slot.
#[derive(Debug)]
pub struct Permit {
    inner: Arc<Inner>,
}

impl Drop for Permit {
    fn drop(&mut self) {
        self.inner.in_flight.fetch_sub(1, Ordering::AcqRel);
    }
}

impl Admission {
    /// `/run` is admitted while fewer than `max_in_flight` calls run; the
    /// other handlers while fewer than `max_in_flight + reserve`.
    pub fn new(max_in_flight: usize, reserve: usize) -> Admission {
        Admission {
            inner: Arc::new(Inner {
                in_flight: AtomicUsize::new(0),
                max_run: max_in_flight,
                max_total: max_in_flight.saturating_add(reserve),
            }),
        }
    }

    /// Admits a call of `handler`, or `None` when the server is full for it.
    pub fn try_admit(&self, handler: Handler) -> Option<Permit> {
        let limit = if handler == Handler::Run { self.inner.max_run } else { self.inner.max_total };
        self.inner
            .in_flight
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |n| (n < limit).then_some(n + 1))
            .ok()
            .map(|_| Permit { inner: self.inner.clone() })
    }

    /// Calls in flight now.
    pub fn in_flight(&self) -> usize {
        self.inner.in_flight.load(Ordering::Acquire)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn run_is_refused_first_and_others_keep_their_reserve() {
        let admission = Admission::new(2, 1);
        let a = admission.try_admit(Handler::Run).unwrap();
        let _b = admission.try_admit(Handler::Run).unwrap();
        assert!(admission.try_admit(Handler::Run).is_none());
        let c = admission.try_admit(Handler::Commit).unwrap();
        assert!(admission.try_admit(Handler::Apply).is_none());
        assert_eq!(admission.in_flight(), 3);
        drop(c);
        drop(a);
        let _d = admission.try_admit(Handler::Run).unwrap();
        assert_eq!(admission.in_flight(), 2);
    }
}
