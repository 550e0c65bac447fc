//! Text helpers the modules share: cutting text to a byte bound without
//! splitting a character.

/// The longest prefix of `text` of at most `max_bytes` that ends on a
/// character boundary.
pub fn clip(text: &str, max_bytes: usize) -> &str {
    if text.len() <= max_bytes {
        return text;
    }
    let mut end = max_bytes;
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    &text[..end]
}

#[cfg(test)]
mod tests {
    use super::clip;

    #[test]
    fn clips_never_split_a_character() {
        assert_eq!(clip("привет", 3), "п");
        assert_eq!(clip("привет", 4), "пр");
        assert_eq!(clip("ab", 5), "ab");
        assert_eq!(clip("🐉", 3), "");
    }
}
