//! The skills catalog as the assistant serves it: loaded at start, loaded
//! again when the folder changes (`notify`) and on SIGHUP, and swapped
//! whole, so a turn reads one consistent catalog. A load that finds
//! problems keeps the skills that are valid, and the last good version of
//! a skill whose file turned invalid; an unreadable folder empties the
//! catalog (the folder is the truth) and says so in the log.

use std::{
    path::{Path, PathBuf},
    sync::{Arc, Mutex, RwLock, Weak, mpsc},
    time::Duration,
};

use notify::{EventKind, RecursiveMode, Watcher};

use crate::{background, metrics::AssistantMetrics, skills::catalog::Catalog};

/// How long the folder must stay still before a change reloads it. A new
/// skill's folder is watched only once its creation is seen, so a file
/// written into it at once may come before the watch and never be told:
/// a reload this long after the last change finds it all the same (and a
/// copy of several files reloads once, not once per file).
const SETTLE: Duration = Duration::from_millis(200);

/// The longest a change waits for the folder to settle: one that never
/// stops changing is still reloaded this often.
const SETTLE_AT_MOST: Duration = Duration::from_secs(2);

/// The catalog of a skills folder, kept current.
#[derive(Debug)]
pub(crate) struct LiveCatalog {
    dir: Option<PathBuf>,
    current: RwLock<Arc<Catalog>>,
    metrics: AssistantMetrics,
    watcher: Mutex<Option<notify::RecommendedWatcher>>,
}

impl LiveCatalog {
    /// The catalog of `dir` (none: no skills), loaded now.
    pub(crate) fn load(dir: Option<PathBuf>, metrics: &AssistantMetrics) -> Arc<LiveCatalog> {
        let live = Arc::new(LiveCatalog {
            dir,
            current: RwLock::new(Arc::new(Catalog::default())),
            metrics: metrics.clone(),
            watcher: Mutex::new(None),
        });
        live.reload("start");
        live
    }

    /// The catalog now.
    pub(crate) fn get(&self) -> Arc<Catalog> {
        // A poisoned lock still holds a whole catalog: swaps are single stores.
        self.current.read().unwrap_or_else(|e| e.into_inner()).clone()
    }

    /// Loads the folder again; `trigger` says why, for the metric and the log.
    pub(crate) fn reload(&self, trigger: &str) {
        let Some(dir) = &self.dir else { return };
        let (mut catalog, problems) = Catalog::load(dir);
        for name in catalog.keep_last_good(dir, &self.get(), &problems) {
            tracing::warn!(skill = %name, "skills: the skill's file is invalid now; its last good version stays");
        }
        let invalid = problems.iter().filter(|p| p.skipped).count();
        self.metrics.skill_reloads.with_label_values(&[trigger]).inc();
        self.metrics.skills_loaded.set(i64::try_from(catalog.len()).unwrap_or(i64::MAX));
        self.metrics.skills_invalid.set(i64::try_from(invalid).unwrap_or(i64::MAX));
        tracing::info!(dir = %dir.display(), skills = catalog.len(), invalid, trigger, "skills: catalog loaded");
        *self.current.write().unwrap_or_else(|e| e.into_inner()) = Arc::new(catalog);
    }

    /// Reloads once the folder has been still for [`SETTLE`] after a change
    /// of a file under it. A folder that cannot be watched (no inotify
    /// instances left) is only logged: SIGHUP still reloads it.
    pub(crate) fn watch(self: &Arc<Self>) {
        let Some(dir) = self.dir.clone() else { return };
        let (changed, changes) = mpsc::channel::<()>();
        let handler = move |event: notify::Result<notify::Event>| {
            let Ok(event) = event else { return };
            if matches!(event.kind, EventKind::Access(_)) || !touches_skills(&event.paths) {
                return;
            }
            let _ = changed.send(());
        };
        let weak = Arc::downgrade(self);
        let reloader = std::thread::Builder::new().name("skills-watch".into()).spawn(move || settle(&changes, &weak));
        if let Err(error) = reloader {
            return tracing::warn!(%error, "skills: cannot start the folder's reloader; SIGHUP reloads it");
        }
        let watcher = notify::recommended_watcher(handler)
            .and_then(|mut watcher| watcher.watch(&dir, RecursiveMode::Recursive).map(|()| watcher));
        match watcher {
            Ok(watcher) => *self.watcher.lock().unwrap_or_else(|e| e.into_inner()) = Some(watcher),
            Err(error) => {
                tracing::warn!(dir = %dir.display(), %error, "skills: cannot watch the folder; SIGHUP reloads it")
            }
        }
    }

    /// Reloads on every SIGHUP, for as long as the catalog lives (a task
    /// in the [background]).
    pub(crate) fn reload_on_sighup(self: &Arc<Self>) {
        if self.dir.is_none() {
            return;
        }
        if let Err(error) = background::spawn("skills-sighup", on_sighup(Arc::downgrade(self))) {
            tracing::warn!(%error, "skills: cannot start the SIGHUP listener");
        }
    }
}

/// Reloads `live` each time `changes` has told of a change and then been
/// quiet for [`SETTLE`] (or [`SETTLE_AT_MOST`] after the first change);
/// ends with the watcher (its sender) or the catalog.
fn settle(changes: &mpsc::Receiver<()>, live: &Weak<LiveCatalog>) {
    while changes.recv().is_ok() {
        let first = std::time::Instant::now();
        while first.elapsed() < SETTLE_AT_MOST {
            match changes.recv_timeout(SETTLE) {
                Ok(()) => {}
                Err(mpsc::RecvTimeoutError::Timeout) => break,
                Err(mpsc::RecvTimeoutError::Disconnected) => return,
            }
        }
        let Some(live) = live.upgrade() else { return };
        live.reload("change");
    }
}

async fn on_sighup(live: Weak<LiveCatalog>) {
    use tokio::signal::unix::{SignalKind, signal};
    let mut hangups = match signal(SignalKind::hangup()) {
        Ok(hangups) => hangups,
        Err(error) => return tracing::warn!(%error, "skills: cannot listen for SIGHUP"),
    };
    while hangups.recv().await.is_some() {
        let Some(live) = live.upgrade() else { return };
        // Reading and parsing a folder of files blocks: not on a thread
        // that serves calls.
        if let Err(error) = tokio::task::spawn_blocking(move || live.reload("sighup")).await {
            tracing::warn!(%error, "skills: the SIGHUP reload failed");
        }
    }
}

/// Whether a change of `paths` may change the catalog: anything but an
/// editor's scratch files (a ConfigMap volume changes through renamed
/// `..data` links and timestamped folders, which must count).
fn touches_skills(paths: &[PathBuf]) -> bool {
    paths.iter().any(|path| !is_scratch(path))
}

/// An editor's swap, backup or probe file.
fn is_scratch(path: &Path) -> bool {
    let name = path.file_name().and_then(|name| name.to_str()).unwrap_or_default();
    name.ends_with(".swp") || name.ends_with(".swx") || name.ends_with('~') || name == "4913"
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_change_but_scratch_files_matters() {
        assert!(touches_skills(&[PathBuf::from("/s/git-quick-commit/SKILL.md")]));
        assert!(touches_skills(&[PathBuf::from("/s/new-skill")]));
        assert!(touches_skills(&[PathBuf::from("/s/..data")]), "a ConfigMap's swap");
        assert!(touches_skills(&[PathBuf::from("/s/..2026_11_24_09_00_00.123")]));
        assert!(!touches_skills(&[PathBuf::from("/s/git-quick-commit/.SKILL.md.swp")]));
        assert!(!touches_skills(&[PathBuf::from("/s/git-quick-commit/SKILL.md~")]));
    }

    #[test]
    fn a_reload_swaps_the_catalog_and_counts() {
        let dir = std::env::temp_dir().join(format!("skills-live-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(dir.join("one")).unwrap();
        std::fs::write(dir.join("one/SKILL.md"), "---\nname: one\ndescription: The first.\n---\nBody.\n").unwrap();
        let metrics = AssistantMetrics::new(&prometheus::Registry::new()).unwrap();
        let live = LiveCatalog::load(Some(dir.clone()), &metrics);
        let before = live.get();
        assert_eq!(before.len(), 1);
        std::fs::create_dir_all(dir.join("two")).unwrap();
        std::fs::write(dir.join("two/SKILL.md"), "---\nname: two\n---\nno description\n").unwrap();
        live.reload("sighup");
        assert_eq!(live.get().len(), 1, "the invalid one is skipped");
        assert_eq!(metrics.skills_invalid.get(), 1);
        std::fs::write(dir.join("two/SKILL.md"), "---\nname: two\ndescription: The second.\n---\nBody.\n").unwrap();
        live.reload("sighup");
        assert_eq!(live.get().len(), 2);
        assert_eq!((metrics.skills_loaded.get(), metrics.skills_invalid.get()), (2, 0));
        assert_eq!(before.len(), 1, "a turn holding the old catalog keeps it whole");
        assert_eq!(metrics.skill_reloads.with_label_values(&["sighup"]).get(), 2);

        // Saved half-way: the last good version stays, and counts as invalid.
        std::fs::write(dir.join("two/SKILL.md"), "---\nname: two\ndescri").unwrap();
        live.reload("change");
        let two = live.get().get("two").map(|skill| skill.description.clone());
        assert_eq!(two.as_deref(), Some("The second."), "the last good version");
        assert_eq!((metrics.skills_loaded.get(), metrics.skills_invalid.get()), (2, 1));
        // Removed: gone, whatever it was before.
        std::fs::remove_dir_all(dir.join("two")).unwrap();
        live.reload("change");
        assert!(live.get().get("two").is_none(), "a removed skill is gone");
        assert_eq!((metrics.skills_loaded.get(), metrics.skills_invalid.get()), (1, 0));
        let _ = std::fs::remove_dir_all(&dir);
    }
}
