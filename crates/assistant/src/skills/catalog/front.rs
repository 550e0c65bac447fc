//! Front matter: the YAML between a `SKILL.md`'s first line `---` and the
//! next line `---`; the rest is the body. A UTF-8 byte order mark and
//! trailing spaces or `\r` on the fence lines are tolerated.

/// The front matter's YAML and the body after it; `None` when the text
/// does not open with a `---` line closed by another.
pub(super) fn split(text: &str) -> Option<(&str, &str)> {
    let text = text.strip_prefix('\u{feff}').unwrap_or(text);
    let (first, rest) = text.split_once('\n')?;
    if first.trim_end() != "---" {
        return None;
    }
    let mut offset = 0;
    for line in rest.split_inclusive('\n') {
        if line.trim_end() == "---" {
            let yaml = rest.get(..offset)?;
            let body = rest.get(offset + line.len()..)?;
            return Some((yaml, body));
        }
        offset += line.len();
    }
    None
}

/// The file line (1-based, counting the opening `---`) where the top-level
/// `key` is written in `yaml`.
pub(super) fn line_of_key(yaml: &str, key: &str) -> Option<u64> {
    let index = yaml.lines().position(|line| {
        line.strip_prefix(key).is_some_and(|rest| rest.trim_start().starts_with(':'))
            || line.strip_prefix(&format!("\"{key}\"")).is_some_and(|rest| rest.trim_start().starts_with(':'))
    })?;
    u64::try_from(index).ok().map(|i| i + 2)
}
