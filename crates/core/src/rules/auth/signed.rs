//! Signed, expiring addresses: a query `exp=<unix seconds>&sig=<hex>` whose
//! signature is HMAC-SHA256 over the resource it opens and the expiry, with
//! a key every replica shares. Whoever holds such an address may read that
//! resource until it expires; nobody can make one without the key.

use std::{
    fmt,
    time::{SystemTime, UNIX_EPOCH},
};

use ring::hmac;

/// Why an address opens nothing.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum SignatureError {
    /// No `exp` or no `sig` in the query.
    #[error("the address is not signed (exp and sig are missing)")]
    Missing,
    /// `exp` or `sig` is not what this server writes.
    #[error("the address's signature is malformed")]
    Malformed,
    /// The signature does not match the resource and the expiry.
    #[error("the address's signature is not valid for this resource")]
    Invalid,
    /// The address expired.
    #[error("the address expired; ask for a new one")]
    Expired,
}

/// The key addresses are signed with.
pub struct AddressKey {
    key: hmac::Key,
    shared: bool,
}

/// The key never shows.
impl fmt::Debug for AddressKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("AddressKey").field("shared", &self.shared).finish_non_exhaustive()
    }
}

impl AddressKey {
    /// The key made from a configured `secret`, which replicas share.
    pub fn from_secret(secret: &str) -> AddressKey {
        AddressKey { key: hmac::Key::new(hmac::HMAC_SHA256, secret.as_bytes()), shared: true }
    }

    /// A key made at random now, known to this process alone: addresses it
    /// signs open nothing on another replica, nor after a restart.
    pub fn random() -> Result<AddressKey, String> {
        let rng = ring::rand::SystemRandom::new();
        let key =
            hmac::Key::generate(hmac::HMAC_SHA256, &rng).map_err(|_| "no random key: the system gave no randomness")?;
        Ok(AddressKey { key, shared: false })
    }

    /// Whether the key was configured (and so may be shared by replicas).
    pub fn is_shared(&self) -> bool {
        self.shared
    }

    /// The query that opens `resource` until `expires` (unix seconds).
    pub fn sign(&self, resource: &str, expires: u64) -> String {
        let tag = hmac::sign(&self.key, message(resource, expires).as_bytes());
        let mut query = format!("exp={expires}&sig=");
        for byte in tag.as_ref() {
            query.push_str(&format!("{byte:02x}"));
        }
        query
    }

    /// The query that opens `resource` for `ttl_secs` from now.
    pub fn sign_for(&self, resource: &str, ttl_secs: u64) -> String {
        self.sign(resource, unix_now().saturating_add(ttl_secs))
    }

    /// Whether `query` (the address's raw query string) opens `resource`
    /// at `now` (unix seconds). The signature is compared in constant time.
    pub fn verify(&self, resource: &str, query: Option<&str>, now: u64) -> Result<(), SignatureError> {
        let (mut expires, mut signature) = (None, None);
        for (name, value) in url::form_urlencoded::parse(query.unwrap_or("").as_bytes()) {
            let slot = match &*name {
                "exp" => &mut expires,
                "sig" => &mut signature,
                _ => continue,
            };
            // Twice is ambiguous (a proxy may read the first, we the last): refused.
            if slot.replace(value).is_some() {
                return Err(SignatureError::Malformed);
            }
        }
        let (Some(expires), Some(signature)) = (expires, signature) else {
            return Err(SignatureError::Missing);
        };
        let malformed = |_| SignatureError::Malformed;
        let digits = expires.len() <= 20 && expires.bytes().all(|b| b.is_ascii_digit());
        let expires: u64 =
            if digits { expires.parse().map_err(malformed)? } else { return Err(SignatureError::Malformed) };
        let tag = unhex(&signature).ok_or(SignatureError::Malformed)?;
        hmac::verify(&self.key, message(resource, expires).as_bytes(), &tag).map_err(|_| SignatureError::Invalid)?;
        if expires < now {
            return Err(SignatureError::Expired);
        }
        Ok(())
    }
}

/// Seconds since the Unix epoch now.
pub fn unix_now() -> u64 {
    SystemTime::now().duration_since(UNIX_EPOCH).map_or(0, |since| since.as_secs())
}

/// What is signed: the resource and the expiry, on lines of their own so
/// that no resource can pass for another with a different expiry.
fn message(resource: &str, expires: u64) -> String {
    format!("{resource}\n{expires}")
}

/// The bytes of a 32-byte tag written as 64 hex digits.
fn unhex(hex: &str) -> Option<[u8; 32]> {
    let hex = hex.as_bytes();
    if hex.len() != 64 {
        return None;
    }
    let mut tag = [0u8; 32];
    for (byte, pair) in tag.iter_mut().zip(hex.chunks_exact(2)) {
        // Lower case only, as written: one address, one spelling.
        let digit = |c: u8| matches!(c, b'0'..=b'9' | b'a'..=b'f').then(|| char::from(c).to_digit(16)).flatten();
        *byte = u8::try_from(digit(pair[0])? * 16 + digit(pair[1])?).ok()?;
    }
    Some(tag)
}

#[cfg(test)]
mod tests {
    use super::*;

    const NOW: u64 = 1_800_000_000;

    #[test]
    fn a_signed_address_opens_its_resource_until_it_expires() {
        let key = AddressKey::from_secret("shared by every replica");
        let query = key.sign("call-1", NOW + 60);
        assert!(query.starts_with(&format!("exp={}&sig=", NOW + 60)), "{query}");
        assert_eq!(key.verify("call-1", Some(&query), NOW), Ok(()));
        assert_eq!(key.verify("call-1", Some(&format!("after=3&{query}")), NOW + 60), Ok(()));
        assert_eq!(key.verify("call-1", Some(&query), NOW + 61), Err(SignatureError::Expired));
        let replica = AddressKey::from_secret("shared by every replica");
        assert_eq!(replica.verify("call-1", Some(&query), NOW), Ok(()), "another replica with the key");
    }

    #[test]
    fn any_other_address_opens_nothing() {
        let key = AddressKey::from_secret("k");
        let query = key.sign("call-1", NOW + 60);
        assert_eq!(key.verify("call-2", Some(&query), NOW), Err(SignatureError::Invalid), "another call's");
        let later = query.replace(&format!("exp={}", NOW + 60), &format!("exp={}", NOW + 9_999));
        assert_eq!(key.verify("call-1", Some(&later), NOW), Err(SignatureError::Invalid), "a moved expiry");
        let flipped = format!("{}{}", &query[..query.len() - 1], if query.ends_with('0') { '1' } else { '0' });
        assert_eq!(key.verify("call-1", Some(&flipped), NOW), Err(SignatureError::Invalid));
        assert_eq!(key.verify("call-1", None, NOW), Err(SignatureError::Missing));
        assert_eq!(key.verify("call-1", Some("exp=1"), NOW), Err(SignatureError::Missing));
        assert_eq!(key.verify("call-1", Some("exp=-1&sig=00"), NOW), Err(SignatureError::Malformed));
        let upper =
            query.replacen("sig=", "SIG=", 1).to_uppercase().replacen("SIG=", "sig=", 1).replacen("EXP=", "exp=", 1);
        assert_eq!(key.verify("call-1", Some(&upper), NOW), Err(SignatureError::Malformed), "upper-case hex");
        let twice = format!("exp=1&{query}");
        assert_eq!(key.verify("call-1", Some(&twice), NOW), Err(SignatureError::Malformed), "an expiry given twice");
        assert_eq!(
            key.verify("call-1", Some(&format!("exp=1&sig={}", "zz".repeat(32))), NOW),
            Err(SignatureError::Malformed)
        );
        let other = AddressKey::random().unwrap();
        assert_eq!(other.verify("call-1", Some(&query), NOW), Err(SignatureError::Invalid), "another key");
        assert!(!other.is_shared() && key.is_shared());
    }

    #[test]
    fn the_key_never_shows() {
        assert!(!format!("{:?}", AddressKey::from_secret("s3cr3t")).contains("s3cr3t"));
    }
}
