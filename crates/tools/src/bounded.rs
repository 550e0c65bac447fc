//! Reading a whole file or stream under a bound, refusing a longer one
//! rather than cutting it: a cut transcript, log or script would be judged
//! on its start alone.

use std::io::Read;

/// All of `source` when it holds at most `max` bytes, `None` when it holds
/// more. A byte past the bound is read to tell, so a source that never
/// ends (`/dev/zero`) costs `max` bytes, no more.
pub fn read_at_most(source: impl Read, max: u64) -> std::io::Result<Option<Vec<u8>>> {
    let mut bytes = Vec::new();
    source.take(max.saturating_add(1)).read_to_end(&mut bytes)?;
    Ok((bytes.len() as u64 <= max).then_some(bytes))
}

/// The file at `path` as [`read_at_most`] reads it, a regular file longer
/// than `max` refused by its length before a byte is read.
pub fn read_file_at_most(path: &std::path::Path, max: u64) -> std::io::Result<Option<Vec<u8>>> {
    let file = std::fs::File::open(path)?;
    let metadata = file.metadata()?;
    if metadata.is_file() && metadata.len() > max {
        return Ok(None);
    }
    // Read under the bound still: a pipe or a device has no length, and a
    // file may grow while it is read.
    read_at_most(file, max)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_file_past_the_bound_is_refused_by_its_length_unread() {
        let dir = std::env::temp_dir().join(format!("bounded-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("huge.log");
        // Sparse: a terabyte on no disk, which a read would take hours over.
        std::fs::File::create(&path).unwrap().set_len(1 << 40).unwrap();
        assert_eq!(read_file_at_most(&path, 1000).unwrap(), None);
        std::fs::write(&path, b"0123456789").unwrap();
        assert_eq!(read_file_at_most(&path, 10).unwrap().as_deref(), Some(&b"0123456789"[..]));
        assert_eq!(read_file_at_most(&path, 9).unwrap(), None);
        assert!(read_file_at_most(&dir.join("absent"), 10).is_err());
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn a_source_past_the_bound_is_refused_and_one_of_exactly_the_bound_is_read() {
        let of = |length| read_at_most(std::io::repeat(b'\n').take(length), 1000).unwrap().map(|bytes| bytes.len());
        assert_eq!(of(1000), Some(1000));
        assert_eq!(of(0), Some(0));
        assert_eq!(of(1001), None);
        assert_eq!(read_at_most(std::io::repeat(0), 1000).unwrap(), None, "an endless source is refused, not cut");
    }
}
