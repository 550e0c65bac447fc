//! Text helpers the modules share: cutting text to a byte bound without
//! splitting a character, the "did you mean" of a misspelt name, and what a
//! secret shows instead of itself (a URL without its password).

/// What a set secret (a token, a key, a URL's password) shows instead of
/// itself wherever the config is printed: `--print-config`, debug prints,
/// errors.
pub const HIDDEN: &str = "<hidden>";

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

/// The candidate `word` is most likely a misspelling of (a letter or two
/// off, case aside, in proportion to its length), if any: what a "did you
/// mean" names. On a tie the first candidate wins.
pub fn nearest<'a>(word: &str, candidates: impl IntoIterator<Item = &'a str>) -> Option<&'a str> {
    let lower = word.to_lowercase();
    let bound = 1 + word.chars().count() / 4;
    candidates
        .into_iter()
        .filter(|candidate| *candidate != word)
        .map(|candidate| (strsim::osa_distance(&lower, &candidate.to_lowercase()), candidate))
        .filter(|(distance, _)| *distance <= bound)
        .min_by_key(|(distance, _)| *distance)
        .map(|(_, candidate)| candidate)
}

/// `; did you mean `nearest`?` when `word` looks like a misspelling of one
/// of `candidates`, else nothing: the tail of an "unknown name" message.
pub fn did_you_mean<'a>(word: &str, candidates: impl IntoIterator<Item = &'a str>) -> String {
    nearest(word, candidates).map(|near| format!("; did you mean `{near}`?")).unwrap_or_default()
}

/// Whether `c` is a bidirectional override or isolate (U+202A–U+202E,
/// U+2066–U+2069): shown as it is, it reorders the text after it.
pub fn reorders(c: char) -> bool {
    matches!(c, '\u{202a}'..='\u{202e}' | '\u{2066}'..='\u{2069}')
}

/// Whether `c`, written as it is, makes a log viewer or a terminal show
/// other text than there is: a control character, a line or paragraph
/// separator (U+2028, U+2029), a directional mark (U+200E, U+200F), or a
/// character that [`reorders`] the text after it.
pub fn misleads_a_line(c: char) -> bool {
    c.is_control() || matches!(c, '\u{2028}' | '\u{2029}' | '\u{200e}' | '\u{200f}') || reorders(c)
}

/// `text` with each character `escaped` picks written as its escape
/// (`\r`, `\u{1b}`), every other one as it is (Cyrillic stays readable):
/// text shown on a terminal or in a log line that must stay one line and
/// show what it holds.
pub fn escape(text: &str, escaped: impl Fn(char) -> bool) -> String {
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
        if escaped(c) {
            out.extend(c.escape_default());
        } else {
            out.push(c);
        }
    }
    out
}

/// `text` with the password of its `user:password@` part replaced by
/// `<hidden>`; text that is not such a URL, unchanged. For every URL the
/// configuration takes (the store's, tvmtool's): shown in problems, debug
/// prints and logs.
pub fn redact_url(text: &str) -> String {
    match url::Url::parse(text) {
        Ok(mut url) if url.password().is_some() => {
            // Setting a password fails only on URLs that cannot have one.
            let _ = url.set_password(Some(HIDDEN));
            // The placeholder's `<>` are percent-encoded in a password.
            url.to_string().replace("%3Chidden%3E", HIDDEN)
        }
        Ok(_) => text.to_owned(),
        // A URL too broken to parse (a bad port, a stray space) may still
        // carry a password: whatever follows the user's name up to the
        // last `@` of the authority is hidden.
        Err(_) => {
            let Some(scheme_end) = text.find("://").map(|at| at + 3) else { return text.to_owned() };
            let rest = &text[scheme_end..];
            let authority = rest.find(['/', '?', '#']).map_or(rest, |end| &rest[..end]);
            let Some(at) = authority.rfind('@') else { return text.to_owned() };
            let Some(colon) = authority[..at].find(':') else { return text.to_owned() };
            let (start, end) = (scheme_end + colon + 1, scheme_end + at);
            format!("{}{HIDDEN}{}", &text[..start], &text[end..])
        }
    }
}

/// `text` with the signature of every signed address in it (a query's
/// `sig=` value, as `rules::auth::signed` writes it) replaced by
/// `<hidden>`; `None` when it holds none. A signature lets anyone who
/// reads it follow the call's answer until the address expires, so it is
/// a secret wherever text is logged: a `ShowStreamDirective`'s URL in a
/// logged answer.
pub fn hide_signatures(text: &str) -> Option<String> {
    const KEY: &str = "sig=";
    let starts_value = |at: usize| at == 0 || matches!(text.as_bytes()[at - 1], b'?' | b'&' | b';');
    let (mut out, mut rest) = (None::<String>, 0);
    for (at, _) in text.match_indices(KEY).filter(|&(at, _)| starts_value(at)) {
        if at < rest {
            continue;
        }
        let out = out.get_or_insert_with(|| String::with_capacity(text.len()));
        let value = at + KEY.len();
        let end = text[value..].find(['&', '#', ';', '"', '\'', ' ', '\n']).map_or(text.len(), |len| value + len);
        out.push_str(&text[rest..value]);
        out.push_str(HIDDEN);
        rest = end;
    }
    out.map(|mut out| {
        out.push_str(&text[rest..]);
        out
    })
}

#[cfg(test)]
mod tests {
    use super::{clip, hide_signatures, nearest, redact_url};

    #[test]
    fn a_signed_address_is_shown_without_its_signature_and_other_text_as_it_is() {
        let url = format!("https://a.example/llm/stream/r1?exp=1795924485&sig={}", "8e".repeat(32));
        assert_eq!(hide_signatures(&url).unwrap(), "https://a.example/llm/stream/r1?exp=1795924485&sig=<hidden>");
        assert_eq!(
            hide_signatures("see /a?sig=1&part=2 and /b?exp=1&sig=ff#x, sig=3").unwrap(),
            "see /a?sig=<hidden>&part=2 and /b?exp=1&sig=<hidden>#x, sig=3"
        );
        assert_eq!(hide_signatures("sig="), Some("sig=<hidden>".into()));
        for plain in ["no address", "https://a.example/?design=1", "mysig=1", "ключ sig"] {
            assert_eq!(hide_signatures(plain), None, "{plain}");
        }
    }

    #[test]
    fn a_url_is_shown_without_its_password_and_other_text_as_it_is() {
        assert_eq!(redact_url("redis://user:s3cret@host:6379/1"), "redis://user:<hidden>@host:6379/1");
        assert_eq!(redact_url("http://:pw@127.0.0.1:1/"), "http://:<hidden>@127.0.0.1:1/");
        assert_eq!(redact_url("redis://host:6379"), "redis://host:6379");
        assert_eq!(redact_url("sk-plain-key"), "sk-plain-key");
        // Too broken to parse, the password is hidden all the same.
        assert_eq!(redact_url("http://u:s3cret@host:99999"), "http://u:<hidden>@host:99999");
        assert_eq!(redact_url("redis://u:p@ss:w@rd@ho st:1/0?x=@"), "redis://u:<hidden>@ho st:1/0?x=@");
        assert_eq!(redact_url("http://host:99999/a@b:c"), "http://host:99999/a@b:c", "no user part");
        assert_eq!(redact_url("http://user@host:99999"), "http://user@host:99999", "a name, no password");
    }

    #[test]
    fn a_near_miss_finds_the_name_it_missed_and_a_stranger_finds_none() {
        let keys = ["addr", "default_scenario", "body_limit", "commit_ms", "commit_ttl_secs"];
        assert_eq!(nearest("defualt_scenario", keys), Some("default_scenario"), "two letters swapped");
        assert_eq!(nearest("comit_ms", keys), Some("commit_ms"), "a letter left out");
        assert_eq!(nearest("ADDR", keys), Some("addr"), "case aside");
        assert_eq!(
            nearest("TScenarioRunRequst", ["TScenarioRunRequest", "TScenarioRunResponse"]),
            Some("TScenarioRunRequest")
        );
        assert_eq!(nearest("foo", keys), None);
        assert_eq!(nearest("max_bytes", keys), None, "far from every one");
        assert_eq!(nearest("addr", keys), None, "a known name is no misspelling");
    }

    #[test]
    fn clips_never_split_a_character() {
        assert_eq!(clip("привет", 3), "п");
        assert_eq!(clip("привет", 4), "пр");
        assert_eq!(clip("ab", 5), "ab");
        assert_eq!(clip("🐉", 3), "");
    }
}
