//! Reports and recordings written whole: to a file beside the target, then
//! renamed over it, so that a reader (a CI job's report publisher) never
//! finds half of one, and a run stopped midway never leaves half of one
//! over a good file (a recording over the script it was made from).

use std::{io, path::Path};

/// Writes `bytes` to `path` whole. A path that is there and is no regular
/// file (`/dev/stdout`, a pipe, a link) is written to as it is.
pub fn write(path: &Path, bytes: &[u8]) -> io::Result<()> {
    if std::fs::symlink_metadata(path).is_ok_and(|meta| !meta.is_file()) {
        return std::fs::write(path, bytes);
    }
    let name = path.file_name().ok_or_else(|| io::Error::new(io::ErrorKind::InvalidInput, "not a file's path"))?;
    let mut partial = name.to_owned();
    partial.push(format!(".partial-{}", std::process::id()));
    let partial = path.with_file_name(partial);
    let written = std::fs::write(&partial, bytes).and_then(|()| std::fs::rename(&partial, path));
    if written.is_err() {
        let _ = std::fs::remove_file(&partial);
    }
    written
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_file_is_replaced_whole_and_nothing_is_left_beside_it() {
        let dir = std::env::temp_dir().join(format!("whole-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("report.xml");
        std::fs::write(&path, "old").unwrap();
        write(&path, b"new").unwrap();
        assert_eq!(std::fs::read_to_string(&path).unwrap(), "new");
        let names: Vec<_> = std::fs::read_dir(&dir).unwrap().map(|e| e.unwrap().file_name()).collect();
        assert_eq!(names, ["report.xml"], "no partial file left");
        assert!(write(&dir.join("missing").join("report.xml"), b"x").is_err(), "a folder that is not there");
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
