//! The assistant's background work (the warm-up, the skills' SIGHUP
//! listener), started where the scenario is built: on the runtime it is
//! built in, or, when it is built before any runtime (as `serve` builds
//! it), on a thread of its own with a small runtime, so that nothing it
//! holds outlives the runtime that drives it.

use std::future::Future;

/// Runs `task` in the background; `name` names its thread when it needs one.
pub(crate) fn spawn(name: &str, task: impl Future<Output = ()> + Send + 'static) -> std::io::Result<()> {
    if let Ok(runtime) = tokio::runtime::Handle::try_current() {
        runtime.spawn(task);
        return Ok(());
    }
    let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build()?;
    std::thread::Builder::new().name(name.into()).spawn(move || runtime.block_on(task))?;
    Ok(())
}
