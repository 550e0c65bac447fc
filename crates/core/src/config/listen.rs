//! [`ListenAddr`]: where the server listens, `host:port`, the host an IP
//! address or a name. Checked for form when read; a name is resolved when the
//! server binds, so `localhost:9000` works and a container's own host name too.

use std::{fmt, str::FromStr};

use serde::{Deserialize, Serialize};

/// A `host:port` to listen on (`127.0.0.1:8080`, `[::]:8080`, `localhost:9000`).
#[derive(Debug, Clone, PartialEq, Eq, Deserialize, Serialize)]
#[serde(try_from = "String", into = "String")]
pub struct ListenAddr {
    host: String,
    port: u16,
}

impl ListenAddr {
    /// `host:port`; an IPv6 host without its brackets.
    pub fn new(host: impl Into<String>, port: u16) -> ListenAddr {
        ListenAddr { host: host.into(), port }
    }

    /// The port (0: any free one).
    pub fn port(&self) -> u16 {
        self.port
    }

    /// The host: an IP address or a name.
    pub fn host(&self) -> &str {
        &self.host
    }
}

/// Why an address was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0:?} is not host:port (e.g. 127.0.0.1:8080, [::]:8080, localhost:8080): {1}")]
pub struct ListenAddrError(String, &'static str);

impl FromStr for ListenAddr {
    type Err = ListenAddrError;

    fn from_str(text: &str) -> Result<ListenAddr, ListenAddrError> {
        let refuse = |why| ListenAddrError(text.to_owned(), why);
        let (host, port) = text.rsplit_once(':').ok_or_else(|| refuse("no port"))?;
        let port = port.parse().map_err(|_| refuse("the port is not a number from 0 to 65535"))?;
        let host = match host.strip_prefix('[') {
            Some(bracketed) => {
                let inner = bracketed.strip_suffix(']').ok_or_else(|| refuse("an unclosed '['"))?;
                inner.parse::<std::net::Ipv6Addr>().map_err(|_| refuse("not an IPv6 address inside '[]'"))?;
                inner
            }
            None if host.contains(':') => return Err(refuse("an IPv6 address goes inside '[]'")),
            None => host,
        };
        let name_chars = |c: char| c.is_ascii_alphanumeric() || matches!(c, '.' | '-' | '_' | ':');
        if host.is_empty() {
            return Err(refuse("no host"));
        }
        if !host.chars().all(name_chars) {
            return Err(refuse("the host is neither an IP address nor a host name"));
        }
        Ok(ListenAddr::new(host, port))
    }
}

impl TryFrom<String> for ListenAddr {
    type Error = ListenAddrError;

    fn try_from(text: String) -> Result<ListenAddr, ListenAddrError> {
        text.parse()
    }
}

impl From<ListenAddr> for String {
    fn from(addr: ListenAddr) -> String {
        addr.to_string()
    }
}

impl fmt::Display for ListenAddr {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.host.contains(':') {
            write!(f, "[{}]:{}", self.host, self.port)
        } else {
            write!(f, "{}:{}", self.host, self.port)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn addresses_and_names_parse_and_print_back() {
        for text in ["127.0.0.1:8080", "0.0.0.0:0", "[::]:8080", "[::1]:9", "localhost:9000", "svc.ns.cluster.local:80"]
        {
            let addr: ListenAddr = text.parse().unwrap_or_else(|e| panic!("{text}: {e}"));
            assert_eq!(addr.to_string(), text);
        }
        assert_eq!("[::1]:9".parse::<ListenAddr>().unwrap().host(), "::1");
    }

    #[test]
    fn malformed_addresses_say_what_is_wrong() {
        for (text, why) in [
            ("localhost", "no port"),
            ("localhost:http", "port"),
            ("localhost:70000", "port"),
            (":8080", "no host"),
            ("::1:8080", "inside '[]'"),
            ("[::1:8080", "unclosed"),
            ("[nope]:80", "IPv6"),
            ("a b:80", "neither"),
        ] {
            let error = text.parse::<ListenAddr>().unwrap_err().to_string();
            assert!(error.contains(why) && error.contains(text), "{text}: {error}");
        }
    }
}
