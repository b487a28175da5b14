//! The Docker endpoint, parsed at config time: the profile's `docker.host`, else
//! `DOCKER_HOST`, else the local socket. A malformed endpoint is bad input (exit 2) and
//! is never dialled; only a well-formed one that does not answer is "unreachable".

use std::fmt;
use std::net::IpAddr;

use serde::{Deserialize, Deserializer, Serialize, Serializer};

pub const DEFAULT_SOCKET: &str = "unix:///var/run/docker.sock";

pub const VALID_ENDPOINTS: &str = "unix:///var/run/docker.sock, tcp://HOST:2375 or http://HOST:2375 (TLS: tcp://HOST:2376 with DOCKER_TLS_VERIFY=1 or tls: in the profile), ssh://[USER@]HOST (port and key in ~/.ssh/config; HOST: an IP address or a host name)";

/// A Docker Engine endpoint argus can dial.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DockerEndpoint {
    raw: String,
    kind: EndpointKind,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum EndpointKind {
    /// `unix://<absolute socket path>`.
    Unix(String),
    /// `tcp://host[:port]` or `http://host[:port]`.
    Tcp { host: String, port: Option<u16> },
    /// `ssh://[user@]host[:port]`: the engine of that host, through `ssh` and
    /// `docker system dial-stdio` there.
    Ssh { user: Option<String>, host: String },
}

impl DockerEndpoint {
    pub fn parse(text: &str) -> Result<Self, String> {
        let malformed = |why: &str| format!("malformed Docker endpoint {text:?}: {why}");
        let (scheme, rest) = text
            .split_once("://")
            .ok_or_else(|| malformed("no scheme"))?;
        let kind = match scheme {
            "unix" => {
                let path = crate::ids::ContainerPath::parse_as("socket path", rest)
                    .map_err(|e| malformed(&e.reason))?;
                EndpointKind::Unix(path.as_str().to_string())
            }
            "tcp" | "http" => {
                let authority = rest.strip_suffix('/').unwrap_or(rest);
                let (host, port) = split_host_port(authority).ok_or_else(|| {
                    malformed("expected HOST or HOST:PORT with a port from 1 to 65535")
                })?;
                EndpointKind::Tcp { host, port }
            }
            "ssh" => {
                let authority = rest.strip_suffix('/').unwrap_or(rest);
                let (user, authority) = match authority.split_once('@') {
                    Some((user, host)) => (Some(user), host),
                    None => (None, authority),
                };
                if let Some(user) = user
                    && !valid_ssh_user(user)
                {
                    return Err(malformed(
                        "the user must be 1-32 of [a-z0-9_.-], starting with a letter or _",
                    ));
                }
                let (host, port) =
                    split_host_port(authority).ok_or_else(|| malformed("expected [USER@]HOST"))?;
                if host.contains(':') {
                    return Err(format!(
                        "Docker endpoint {text:?}: an IPv6 address in ssh:// is not supported; name the host in ~/.ssh/config (Host NAME / HostName {host})"
                    ));
                }
                if port.is_some() {
                    // bollard hands `ssh` the authority as one destination, which ssh
                    // would read as a host name ending in `:PORT`.
                    return Err(format!(
                        "Docker endpoint {text:?}: a port in ssh:// is not supported; set it in ~/.ssh/config (Host {host} / Port N)"
                    ));
                }
                EndpointKind::Ssh {
                    user: user.map(str::to_string),
                    host,
                }
            }
            "https" | "npipe" => {
                return Err(format!(
                    "Docker endpoint {text:?}: {scheme}:// is not supported"
                ));
            }
            _ => return Err(malformed(&format!("unknown scheme {scheme:?}"))),
        };
        Ok(DockerEndpoint {
            raw: text.to_string(),
            kind,
        })
    }

    /// `DOCKER_HOST` when set and not empty, parsed.
    pub fn from_env() -> Result<Option<Self>, String> {
        match std::env::var("DOCKER_HOST") {
            Ok(value) if !value.is_empty() => DockerEndpoint::parse(&value)
                .map(Some)
                .map_err(|e| format!("DOCKER_HOST: {e}")),
            _ => Ok(None),
        }
    }

    /// The endpoint argus dials: `given` (the profile's), else `DOCKER_HOST`, else the
    /// local socket.
    pub fn resolve(given: Option<&DockerEndpoint>) -> Result<Self, String> {
        if let Some(given) = given {
            return Ok(given.clone());
        }
        Ok(Self::from_env()?.unwrap_or_else(|| DockerEndpoint {
            raw: DEFAULT_SOCKET.to_string(),
            kind: EndpointKind::Unix("/var/run/docker.sock".into()),
        }))
    }

    pub fn as_str(&self) -> &str {
        &self.raw
    }

    pub fn kind(&self) -> &EndpointKind {
        &self.kind
    }
}

/// An ssh login name that `ssh` cannot take for an option: `[a-z_][a-z0-9_.-]{0,31}`.
fn valid_ssh_user(user: &str) -> bool {
    !user.is_empty()
        && user.len() <= 32
        && user.starts_with(|c: char| c.is_ascii_lowercase() || c == '_')
        && user
            .chars()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || "_.-".contains(c))
}

/// `host`, `host:port`, `[v6]`, `[v6]:port`; host an IP address or a DNS name.
fn split_host_port(authority: &str) -> Option<(String, Option<u16>)> {
    let (host, port) = if let Some(rest) = authority.strip_prefix('[') {
        let (v6, after) = rest.split_once(']')?;
        v6.parse::<std::net::Ipv6Addr>().ok()?;
        let port = match after {
            "" => None,
            p => Some(p.strip_prefix(':')?),
        };
        (v6.to_string(), port)
    } else {
        match authority.rsplit_once(':') {
            Some((host, port)) => (host.to_string(), Some(port)),
            None => (authority.to_string(), None),
        }
    };
    let port = match port {
        None => None,
        Some(p) => match p.parse::<u16>() {
            Ok(0) | Err(_) => return None,
            Ok(p) => Some(p),
        },
    };
    let host_ok = host.parse::<IpAddr>().is_ok()
        || (!host.is_empty()
            && host.len() <= 253
            && host.split('.').all(|l| {
                !l.is_empty()
                    && l.len() <= 63
                    && !l.starts_with('-')
                    && l.chars().all(|c| c.is_ascii_alphanumeric() || c == '-')
            }));
    host_ok.then_some((host, port))
}

impl std::ops::Deref for DockerEndpoint {
    type Target = str;
    fn deref(&self) -> &str {
        &self.raw
    }
}

impl fmt::Display for DockerEndpoint {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.raw)
    }
}

impl Serialize for DockerEndpoint {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(&self.raw)
    }
}

impl<'de> Deserialize<'de> for DockerEndpoint {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        crate::ids::deserialize_checked(d, "a Docker endpoint", |text| {
            DockerEndpoint::parse(text).map_err(|e| format!("{e} (valid: {VALID_ENDPOINTS})"))
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn endpoints_parse_or_say_why_not() {
        for good in [
            "unix:///var/run/docker.sock",
            "tcp://127.0.0.1:2375",
            "tcp://docker-1.example:2376",
            "http://10.0.0.2:2375/",
            "tcp://[::1]:2375",
            "tcp://dockerhost",
            "ssh://root@10.0.0.12",
            "ssh://me@gpu-1.example",
            "ssh://gpu-1",
        ] {
            assert!(DockerEndpoint::parse(good).is_ok(), "{good}");
        }
        for (bad, why) in [
            ("garbage", "no scheme"),
            ("foo://x", "unknown scheme"),
            ("tcp://", "expected HOST"),
            ("tcp://h:0", "expected HOST"),
            ("tcp://h:99999", "expected HOST"),
            ("tcp://h:x", "expected HOST"),
            ("tcp://a b:2375", "expected HOST"),
            ("tcp://h:1/path", "expected HOST"),
            ("unix://relative.sock", "not absolute"),
            ("unix:///a/../b", ".."),
            ("ssh://-oProxyCommand=x@host", "the user must be"),
            ("ssh://me@-host", "expected [USER@]HOST"),
            ("ssh://me@host:2222", "a port in ssh:// is not supported"),
            ("ssh://me@host/path", "expected [USER@]HOST"),
            ("ssh://Me@host", "the user must be"),
            (
                "ssh://root@[::1]",
                "an IPv6 address in ssh:// is not supported",
            ),
        ] {
            let err = DockerEndpoint::parse(bad).unwrap_err();
            assert!(err.contains(why), "{bad}: {err}");
        }
    }
}
