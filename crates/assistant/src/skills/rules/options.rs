//! How an option word matches a list of options the way getopt and git
//! read them: long options in every accepted spelling, short ones inside a
//! cluster up to a letter that takes a value.

/// How an option word reads against a list of forbidden options.
#[derive(Debug, PartialEq, Eq)]
pub(super) enum OptionWord {
    Forbidden,
    /// Its value is the next word.
    ValueNext,
    Fine,
}

/// `text`, a word starting with `-`, against `forbidden` (options
/// separated by spaces): a long option (`--output`) matches itself,
/// `--output=…`, `--output-…` and the abbreviations getopt accepts
/// (`--out`); a single-dash word option (`-exec`) matches itself; a short
/// option (`-o`) matches anywhere in a cluster (`-ro`) before a letter that
/// takes a value (`valued`, the next word when it ends the cluster, or
/// `attached`, in the same word only).
pub(super) fn option(text: &str, forbidden: &str, valued: &str, attached: &str) -> OptionWord {
    let forbidden = || forbidden.split_whitespace();
    if text.starts_with("--") {
        let name = text.split('=').next().unwrap_or(text);
        return if forbidden().any(|f| f.starts_with("--") && long_matches(name, f)) {
            OptionWord::Forbidden
        } else {
            OptionWord::Fine
        };
    }
    if forbidden().any(|f| f.len() > 2 && text.split('=').next() == Some(f)) {
        return OptionWord::Forbidden;
    }
    let letters: Vec<char> = text.chars().skip(1).collect();
    for (i, &letter) in letters.iter().enumerate() {
        if forbidden().any(|f| f.len() == 2 && f.ends_with(letter)) {
            return OptionWord::Forbidden;
        }
        if valued.contains(letter) {
            return if i + 1 == letters.len() { OptionWord::ValueNext } else { OptionWord::Fine };
        }
        if attached.contains(letter) {
            return OptionWord::Fine;
        }
    }
    OptionWord::Fine
}

/// Whether the long option `name` (`--out`) is `forbidden` (`--output`),
/// one of its family (`--output-directory`) or an abbreviation of it.
pub(super) fn long_matches(name: &str, forbidden: &str) -> bool {
    name == forbidden
        || name.strip_prefix(forbidden).is_some_and(|rest| rest.starts_with('-'))
        || (name.len() > 2 && forbidden.starts_with(name))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn options_against_a_forbidden_list() {
        let forbidden = "-o --output -exec";
        assert_eq!(option("--output=x", forbidden, "", ""), OptionWord::Forbidden);
        assert_eq!(option("--output-directory", forbidden, "", ""), OptionWord::Forbidden);
        assert_eq!(option("--outp", forbidden, "", ""), OptionWord::Forbidden);
        assert_eq!(option("--oneline", forbidden, "", ""), OptionWord::Fine);
        assert_eq!(option("-exec", forbidden, "", ""), OptionWord::Forbidden);
        assert_eq!(option("-ro", forbidden, "", ""), OptionWord::Forbidden);
        assert_eq!(option("-So", forbidden, "", "S"), OptionWord::Fine, "a value after -S");
        assert_eq!(option("-k", forbidden, "k", ""), OptionWord::ValueNext);
        assert_eq!(option("-k2", forbidden, "k", ""), OptionWord::Fine);
    }
}
