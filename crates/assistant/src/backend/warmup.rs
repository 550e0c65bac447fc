//! Warm-up: the system prompt sent to the model server once at start-up and
//! again after `warmup_idle_secs` without a call, so that its prefix cache
//! holds the prompt when a user asks (llama.cpp answers a cold prompt in
//! 3-10 s on a small machine, a warm one in 0.3-0.5 s).
//!
//! `auto` warms servers on loopback or a private network only: a local server
//! keeps a prefix cache for free, a paid API bills the call. A warm-up is one
//! request with `max_tokens: 1`, outside the retries and the breaker, not
//! counted as a model call; its outcome is counted apart and logged, and a
//! failure never stops anything. The task holds the scenario's activity
//! weakly and ends with the scenario.

use std::{
    future::Future,
    net::IpAddr,
    sync::{
        Arc, Weak,
        atomic::{AtomicU64, Ordering},
    },
    time::Duration,
};

use tokio::time::Instant;

use crate::config::Warmup;

/// When the scenario last started a model call (or warmed up).
#[derive(Debug)]
pub(crate) struct Activity {
    since: Instant,
    last_millis: AtomicU64,
}

impl Activity {
    pub(crate) fn new() -> Arc<Activity> {
        Arc::new(Activity { since: Instant::now(), last_millis: AtomicU64::new(0) })
    }

    /// A model call starts now.
    pub(crate) fn touch(&self) {
        let millis = u64::try_from(self.since.elapsed().as_millis()).unwrap_or(u64::MAX);
        self.last_millis.store(millis, Ordering::Relaxed);
    }

    fn last(&self) -> Instant {
        self.since + Duration::from_millis(self.last_millis.load(Ordering::Relaxed))
    }
}

/// Whether `setting` warms the server at `base_url`.
pub(crate) fn wanted(setting: Warmup, base_url: &str) -> bool {
    match setting {
        Warmup::On => true,
        Warmup::Off => false,
        Warmup::Auto => {
            reqwest::Url::parse(base_url.trim()).ok().and_then(|url| url.host().map(is_local)).unwrap_or(false)
        }
    }
}

/// Loopback, private and link-local addresses, `localhost`, and single-label
/// names (a cluster's service names, `llm`).
fn is_local(host: url::Host<&str>) -> bool {
    let ip = match host {
        url::Host::Domain(name) => {
            let name = name.trim_end_matches('.').to_ascii_lowercase();
            return name == "localhost" || name.ends_with(".localhost") || !name.contains('.');
        }
        url::Host::Ipv4(ip) => IpAddr::V4(ip),
        url::Host::Ipv6(ip) => IpAddr::V6(ip),
    };
    match ip {
        IpAddr::V4(ip) => ip.is_loopback() || ip.is_private() || ip.is_link_local(),
        IpAddr::V6(ip) => {
            ip.is_loopback() || (ip.segments()[0] & 0xfe00) == 0xfc00 || (ip.segments()[0] & 0xffc0) == 0xfe80
        }
    }
}

/// Warms at once, then again whenever `idle` passes without activity, until
/// the activity's owner is gone. `warm` sends one warm-up.
pub(crate) async fn keep_warm<F, W>(activity: Weak<Activity>, idle: Duration, warm: W)
where
    W: Fn() -> F,
    F: Future<Output = ()>,
{
    loop {
        warm().await;
        let Some(alive) = activity.upgrade() else { return };
        alive.touch();
        drop(alive);
        // Sleep until the activity is `idle` old; a call meanwhile moves it.
        loop {
            let Some(alive) = activity.upgrade() else { return };
            let due = alive.last() + idle;
            drop(alive);
            if Instant::now() >= due {
                break;
            }
            tokio::time::sleep_until(due).await;
        }
    }
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::AtomicUsize;

    use super::*;

    #[test]
    fn auto_warms_local_servers_only() {
        let auto = |url: &str| wanted(Warmup::Auto, url);
        for local in [
            "http://localhost:8080/v1",
            "http://127.0.0.1:8080/v1",
            "http://10.1.2.3/v1",
            "http://172.20.0.5/v1",
            "http://192.168.1.10/v1",
            "http://169.254.1.1/v1",
            "http://[::1]:8080/v1",
            "http://[fd00::5]/v1",
            "http://llm:8000/v1",
            "http://model.localhost/v1",
        ] {
            assert!(auto(local), "{local}");
        }
        for remote in ["https://api.openai.com/v1", "http://8.8.8.8/v1", "http://[2001:db8::1]/v1", "not a url", ""] {
            assert!(!auto(remote), "{remote}");
        }
        assert!(wanted(Warmup::On, "https://api.openai.com/v1"));
        assert!(!wanted(Warmup::Off, "http://localhost/v1"));
    }

    #[tokio::test(start_paused = true)]
    async fn warms_at_start_and_after_each_idle_stretch_until_the_owner_goes() {
        let idle = Duration::from_secs(60);
        let activity = Activity::new();
        let warmed = Arc::new(AtomicUsize::new(0));
        let counter = warmed.clone();
        let task = tokio::spawn(keep_warm(Arc::downgrade(&activity), idle, move || {
            counter.fetch_add(1, Ordering::SeqCst);
            async {}
        }));
        let count = || warmed.load(Ordering::SeqCst);
        tokio::time::sleep(Duration::from_secs(1)).await;
        assert_eq!(count(), 1, "at start");
        tokio::time::sleep(Duration::from_secs(30)).await;
        activity.touch();
        tokio::time::sleep(Duration::from_secs(45)).await;
        assert_eq!(count(), 1, "a call 45 s ago: not idle yet");
        tokio::time::sleep(Duration::from_secs(20)).await;
        assert_eq!(count(), 2, "idle for 60 s: warmed again");
        tokio::time::sleep(Duration::from_secs(61)).await;
        assert_eq!(count(), 3);
        drop(activity);
        tokio::time::sleep(Duration::from_secs(120)).await;
        assert!(task.is_finished(), "ends with its owner");
        assert_eq!(count(), 3);
    }
}
