//! Files the configuration names (the configuration file itself, a
//! scenario's prompt or context, a skill's `SKILL.md`), read within a bound: a path to a device or a pipe
//! is refused before it is opened (opening a pipe waits for a writer), and
//! a log file named by mistake at its bound, not read whole into memory.

use std::{io::Read, path::Path};

/// The text of `file`, if it is a regular file of at most `max` bytes of
/// UTF-8; else why not, in a few words.
pub fn read_bounded(file: &Path, max: u64) -> Result<String, String> {
    if !std::fs::metadata(file).map_err(|e| format!("cannot read: {e}"))?.is_file() {
        return Err("not a regular file".into());
    }
    let opened = std::fs::File::open(file).map_err(|e| format!("cannot read: {e}"))?;
    // What was looked at may have been replaced since: the file opened is the one read.
    if !opened.metadata().is_ok_and(|m| m.is_file()) {
        return Err("not a regular file".into());
    }
    let mut bytes = Vec::new();
    opened.take(max.saturating_add(1)).read_to_end(&mut bytes).map_err(|e| format!("cannot read: {e}"))?;
    if bytes.len() as u64 > max {
        return Err(format!("larger than {max} bytes"));
    }
    String::from_utf8(bytes).map_err(|e| format!("not UTF-8: {e}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_file_is_read_up_to_its_bound_and_refused_past_it_or_when_it_is_no_file() {
        let dir = std::env::temp_dir().join(format!("megamind-files-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let file = dir.join("prompt.txt");
        std::fs::write(&file, "ы".repeat(5)).unwrap();
        assert_eq!(read_bounded(&file, 10).as_deref(), Ok("ыыыыы"));
        assert_eq!(read_bounded(&file, 9), Err("larger than 9 bytes".into()));
        std::fs::write(&file, [0xff, 0xfe]).unwrap();
        assert!(read_bounded(&file, 10).unwrap_err().starts_with("not UTF-8"));
        assert_eq!(read_bounded(&dir, 10), Err("not a regular file".into()));
        assert_eq!(read_bounded(Path::new("/dev/zero"), 10), Err("not a regular file".into()), "a device");
        let pipe = dir.join("pipe");
        let made = std::process::Command::new("mkfifo").arg(&pipe).status().is_ok_and(|status| status.success());
        assert!(made, "mkfifo makes a pipe");
        assert_eq!(read_bounded(&pipe, 10), Err("not a regular file".into()), "a pipe, not waited on");
        assert!(read_bounded(&dir.join("missing"), 10).unwrap_err().starts_with("cannot read: "));
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
