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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_source_past_the_bound_is_refused_and_one_of_exactly_the_bound_is_read() {
        let of = |length| read_at_most(std::io::repeat(b'\n').take(length), 1000).unwrap().map(|bytes| bytes.len());
        assert_eq!(of(1000), Some(1000));
        assert_eq!(of(0), Some(0));
        assert_eq!(of(1001), None);
        assert_eq!(read_at_most(std::io::repeat(0), 1000).unwrap(), None, "an endless source is refused, not cut");
    }
}
