//! Word-level helpers of the catalog's lookups: the text a trigger is
//! compared on, and the edit distance behind "did you mean".

use crate::skills::catalog::MAX_QUERY_CHARS;

/// Lowercase words separated by single spaces; `ё` is `е`.
pub(super) fn normalize(text: &str) -> String {
    let lower = text.to_lowercase().replace('ё', "е");
    let words: Vec<&str> = lower.split(|c: char| !c.is_alphanumeric()).filter(|w| !w.is_empty()).collect();
    words.join(" ")
}

/// Levenshtein distance between `a` and `b`, by chars.
pub(super) fn edit_distance(a: &[char], b: &str) -> usize {
    let b: Vec<char> = b.chars().take(MAX_QUERY_CHARS).collect();
    let mut row: Vec<usize> = (0..=b.len()).collect();
    for (i, ca) in a.iter().enumerate() {
        let mut diagonal = i;
        let mut first = i + 1;
        for (j, cb) in b.iter().enumerate() {
            let above = row.get(j + 1).copied().unwrap_or(usize::MAX);
            let cost = if ca == cb { diagonal } else { diagonal + 1 };
            let next = cost.min(above.saturating_add(1)).min(first + 1);
            diagonal = above;
            if let Some(slot) = row.get_mut(j + 1) {
                *slot = next;
            }
            first = next;
        }
        if let Some(slot) = row.get_mut(0) {
            *slot = i + 1;
        }
    }
    row.last().copied().unwrap_or(0)
}
