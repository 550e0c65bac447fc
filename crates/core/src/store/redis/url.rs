//! The shared store's address: `redis://[user:password@]host:port[/db]`
//! or `rediss://` for TLS, checked once and never shown with its password.

use std::fmt;

use crate::text::redact_url;

/// A checked Redis URL. `Display` and `Debug` hide its password.
#[derive(Clone, PartialEq, Eq)]
pub struct StoreUrl(String);

impl StoreUrl {
    /// Checks `text`. The reason it is refused never repeats the text,
    /// which may hold a password.
    pub fn parse(text: &str) -> Result<StoreUrl, String> {
        let url = url::Url::parse(text).map_err(|e| format!("not a URL ({e})"))?;
        if !matches!(url.scheme(), "redis" | "rediss") {
            return Err(format!("the scheme is {:?}: redis:// or rediss:// (TLS)", url.scheme()));
        }
        if url.host_str().is_none_or(str::is_empty) {
            return Err("the host is missing: redis://host:port".into());
        }
        match url.path().trim_start_matches('/') {
            "" => {}
            db if db.parse::<u16>().is_ok() => {}
            _ => return Err("the path must be a database number (redis://host:port/0)".into()),
        }
        if url.query().is_some() || url.fragment().is_some() {
            return Err("a query or fragment is not understood".into());
        }
        Ok(StoreUrl(text.to_owned()))
    }

    /// The URL as given, password included: for the client alone.
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl fmt::Display for StoreUrl {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&redact_url(&self.0))
    }
}

impl fmt::Debug for StoreUrl {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "StoreUrl({self})")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn urls_of_redis_are_taken_and_others_refused_without_being_repeated() {
        for good in ["redis://127.0.0.1:6379", "redis://:pw@host:1/2", "rediss://user:pw@redis.example:6380/0"] {
            assert!(StoreUrl::parse(good).is_ok(), "{good}");
        }
        for bad in [
            "http://secret@host:1",
            "redis://",
            "redis://host:1/db",
            "not a url secret",
            "redis://host:1/?password=secret",
        ] {
            let error = StoreUrl::parse(bad).expect_err(bad);
            assert!(!error.contains("secret"), "{error}");
        }
    }

    #[test]
    fn a_password_is_never_shown() {
        let url = StoreUrl::parse("redis://user:s3cret@host:6379/1").unwrap();
        assert_eq!(url.to_string(), "redis://user:<hidden>@host:6379/1");
        assert!(!format!("{url:?}").contains("s3cret"));
        assert_eq!(url.as_str(), "redis://user:s3cret@host:6379/1");
    }
}
