//! Whether tickets can be checked now, as tvmtool's last answers tell: up,
//! down (no answer, or a failure), or refusing this server's own requests
//! (its local token, or the `dst` it asks about) — a configuration fault
//! that no ping can see, since a ping sends neither.

use std::sync::atomic::{AtomicU8, Ordering};

use super::tvmtool::Unavailable;

/// What checking tickets looks like now.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Health {
    /// Not known yet: nothing asked since start.
    Unknown,
    /// tvmtool checks tickets.
    Up,
    /// tvmtool does not answer, or fails.
    Down,
    /// tvmtool refuses this server's local token.
    TokenRefused,
    /// tvmtool does not know the `dst` this server asks about.
    DstUnknown,
}

const ALL: [Health; 5] = [Health::Unknown, Health::Up, Health::Down, Health::TokenRefused, Health::DstUnknown];

impl Health {
    /// What an answer of tvmtool's (`failure`: why it gave no verdict, or
    /// `None`) tells; `None` when it tells nothing about tvmtool (the check
    /// never reached it).
    pub fn after(failure: Option<&Unavailable>) -> Option<Health> {
        Some(match failure {
            None => Health::Up,
            Some(Unavailable::Busy(_)) => return None,
            Some(Unavailable::TokenRefused) => Health::TokenRefused,
            Some(Unavailable::DstUnknown(_)) => Health::DstUnknown,
            Some(
                Unavailable::Timeout(_)
                | Unavailable::Unreachable(_)
                | Unavailable::Status { .. }
                | Unavailable::Unreadable(_),
            ) => Health::Down,
        })
    }
}

/// The health, shared by every check.
#[derive(Debug)]
pub struct HealthCell(AtomicU8);

/// Unknown, until something is asked.
impl Default for HealthCell {
    fn default() -> HealthCell {
        HealthCell(AtomicU8::new(Health::Unknown as u8))
    }
}

impl HealthCell {
    /// The health now.
    pub fn get(&self) -> Health {
        ALL[usize::from(self.0.load(Ordering::Acquire))]
    }

    /// Sets it to `health`; the health before when that is a change, so
    /// that each change is told once, whoever makes it.
    pub fn set(&self, health: Health) -> Option<Health> {
        let before = ALL[usize::from(self.0.swap(health as u8, Ordering::AcqRel))];
        (before != health).then_some(before)
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    #[test]
    fn the_table_lists_the_variants_in_their_order() {
        assert!(ALL.iter().enumerate().all(|(i, health)| *health as usize == i));
    }

    #[test]
    fn answers_tell_a_configuration_fault_from_an_outage_and_a_full_queue_tells_nothing() {
        assert_eq!(Health::after(None), Some(Health::Up));
        assert_eq!(Health::after(Some(&Unavailable::TokenRefused)), Some(Health::TokenRefused));
        assert_eq!(Health::after(Some(&Unavailable::DstUnknown("no".into()))), Some(Health::DstUnknown));
        let timeout = Unavailable::Timeout(Duration::from_millis(50));
        assert_eq!(Health::after(Some(&timeout)), Some(Health::Down));
        assert_eq!(Health::after(Some(&Unavailable::Busy(Duration::from_millis(50)))), None);
    }

    #[test]
    fn a_change_is_reported_once_however_often_the_same_health_is_set() {
        let cell = HealthCell::default();
        assert_eq!(cell.get(), Health::Unknown);
        assert_eq!(cell.set(Health::TokenRefused), Some(Health::Unknown));
        for _ in 0..10 {
            assert_eq!(cell.set(Health::TokenRefused), None);
        }
        assert_eq!(cell.set(Health::Up), Some(Health::TokenRefused));
        assert_eq!(cell.get(), Health::Up);
    }
}
