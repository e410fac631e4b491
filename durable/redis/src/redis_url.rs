//! `SLUICE_REDIS_URL` read into fred's configuration: one node or a cluster's nodes, plaintext
//! (`redis://`) or TLS (`rediss://`), and the certificate files a TLS connection is given.
//!
//! fred reads `rediss://` by trusting the system's store and nothing else, with no way to name a
//! CA file or a client certificate in the URL, and it ignores query parameters it does not know.
//! So the URL is read here: the certificate parameters are taken out (under libpq's names, as in
//! the database URL, or redis-py's), a parameter nobody knows is refused rather than ignored, and
//! fred gets a plaintext URL plus a TLS configuration built by [`crate::redis_tls`].

use std::path::PathBuf;

use fred::prelude::Config;
use fred::types::config::{TlsConfig, TlsHostMapping};

use crate::DurableError;

/// A certificate file a Redis URL names, with the parameter that named it (said back in errors).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NamedFile {
    pub parameter: String,
    pub path: PathBuf,
}

/// What a TLS connection to Redis trusts and presents.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct TlsFiles {
    /// The authorities trusted instead of the system's store (`sslrootcert`, `ssl_ca_certs`).
    pub root: Option<NamedFile>,
    /// A client certificate chain (`sslcert`, `ssl_certfile`), with its key.
    pub cert: Option<NamedFile>,
    /// The client certificate's key (`sslkey`, `ssl_keyfile`).
    pub key: Option<NamedFile>,
}

/// A Redis URL, read.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RedisUrl {
    /// The first node as fred reads it: `redis://[user:password@]host:port[/db]`.
    first: String,
    /// Every further node of a cluster, `host:port`.
    others: Vec<String>,
    /// `Some` for `rediss://`.
    tls: Option<TlsFiles>,
    /// The first node's `host:port`.
    address: String,
}

/// The parameters a Redis URL may carry, and which file each one names.
#[derive(Clone, Copy)]
enum Parameter {
    Root,
    Cert,
    Key,
    /// fred's own way to name a further cluster node (`?node=host:port`).
    Node,
}

fn parameter(name: &str) -> Option<Parameter> {
    Some(match name {
        "sslrootcert" | "ssl_ca_certs" => Parameter::Root,
        "sslcert" | "ssl_certfile" => Parameter::Cert,
        "sslkey" | "ssl_keyfile" => Parameter::Key,
        "node" => Parameter::Node,
        _ => return None,
    })
}

fn misconfigured(detail: String) -> DurableError {
    DurableError::Misconfigured(format!("SLUICE_REDIS_URL: {detail}"))
}

impl RedisUrl {
    /// Reads `redis://host:port`, `rediss://host:port?sslrootcert=/path/ca.pem`, or a cluster's
    /// nodes separated by commas (`rediss://a:7000,rediss://b:7001?sslrootcert=…`; a node
    /// without a scheme takes the first one's). The query may follow any node and applies to
    /// all of them.
    ///
    /// # Errors
    /// `Misconfigured`, naming what is wrong: not a URL, a scheme other than `redis`/`rediss`,
    /// nodes mixing the two, an unknown parameter, a certificate parameter on a plaintext URL,
    /// a parameter given twice, or a client certificate without its key.
    pub fn parse(text: &str) -> Result<RedisUrl, DurableError> {
        let mut scheme: Option<String> = None;
        let mut first: Option<(url::Url, String)> = None;
        let mut others = Vec::new();
        let mut files = TlsFiles::default();
        for node in text.split(',').map(str::trim) {
            let written = match (&scheme, node.contains("://")) {
                (Some(scheme), false) => format!("{scheme}://{node}"),
                _ => node.to_string(),
            };
            let mut url = url::Url::parse(&written)
                .map_err(|e| misconfigured(format!("{node:?} is not a URL ({e})")))?;
            if !matches!(url.scheme(), "redis" | "rediss") {
                return Err(misconfigured(format!(
                    "{node:?}: the scheme is {}://; use redis:// (plaintext) or rediss:// (TLS)",
                    url.scheme()
                )));
            }
            match &scheme {
                Some(s) if s != url.scheme() => {
                    return Err(misconfigured(format!(
                        "the nodes mix {s}:// and {}://; a cluster is reached one way",
                        url.scheme()
                    )));
                }
                Some(_) => {}
                None => scheme = Some(url.scheme().to_string()),
            }
            for (name, value) in url.query_pairs() {
                let slot = match parameter(&name) {
                    Some(Parameter::Node) => {
                        others.push(value.into_owned());
                        continue;
                    }
                    Some(Parameter::Root) => &mut files.root,
                    Some(Parameter::Cert) => &mut files.cert,
                    Some(Parameter::Key) => &mut files.key,
                    None => {
                        return Err(misconfigured(format!(
                            "unknown parameter {name:?}; known: sslrootcert (or ssl_ca_certs), \
                             sslcert (or ssl_certfile), sslkey (or ssl_keyfile), node"
                        )));
                    }
                };
                if let Some(earlier) = slot {
                    return Err(misconfigured(format!(
                        "{name} is given twice ({} and {value})",
                        earlier.path.display()
                    )));
                }
                *slot = Some(NamedFile {
                    parameter: name.into_owned(),
                    path: PathBuf::from(value.as_ref()),
                });
            }
            url.set_query(None);
            let address = match (url.host_str(), url.port()) {
                (Some(host), port) => format!("{host}:{}", port.unwrap_or(6379)),
                (None, _) => return Err(misconfigured(format!("{node:?} names no host"))),
            };
            match first {
                None => {
                    // fred is given plaintext URLs; TLS is the configuration built below.
                    url.set_scheme("redis")
                        .map_err(|()| misconfigured(format!("{node:?}: cannot be read")))?;
                    first = Some((url, address));
                }
                Some(_) => others.push(address),
            }
        }
        let (first, address) = first.ok_or_else(|| misconfigured("no node is named".into()))?;
        let tls = scheme.as_deref() == Some("rediss");
        let named = [&files.root, &files.cert, &files.key];
        if !tls && let Some(file) = named.into_iter().flatten().next() {
            return Err(misconfigured(format!(
                "{} is given but the URL is plaintext redis://; a certificate is used only over \
                 TLS (rediss://)",
                file.parameter
            )));
        }
        match (&files.cert, &files.key) {
            (Some(only), None) | (None, Some(only)) => {
                return Err(misconfigured(format!(
                    "{} is given without the other half of the client certificate (sslcert and \
                     sslkey go together)",
                    only.parameter
                )));
            }
            _ => {}
        }
        Ok(RedisUrl {
            first: first.to_string(),
            others,
            tls: tls.then_some(files),
            address,
        })
    }

    /// Whether the connection is TLS (`rediss://`).
    pub fn tls(&self) -> Option<&TlsFiles> {
        self.tls.as_ref()
    }

    /// The first node's `host:port`, said in errors (the URL itself may hold a password).
    pub fn address(&self) -> &str {
        &self.address
    }

    /// Whether more than one node is named: a Redis Cluster.
    pub fn clustered(&self) -> bool {
        !self.others.is_empty()
    }

    /// fred's configuration: its reading of the plaintext URL, with the TLS configuration (the
    /// certificate files read now) for `rediss://`.
    ///
    /// # Errors
    /// fred's refusal of the URL; a certificate file that cannot be read or holds no usable
    /// certificate or key (`Misconfigured`, naming the parameter and the path).
    pub fn config(&self) -> Result<Config, DurableError> {
        let mut config = if self.clustered() {
            let nodes = self
                .others
                .iter()
                .map(|node| format!("node={node}"))
                .collect::<Vec<_>>()
                .join("&");
            Config::from_url_clustered(&format!("{}?{nodes}", self.first))?
        } else {
            Config::from_url(&self.first)?
        };
        if let Some(files) = &self.tls {
            config.tls = Some(TlsConfig {
                connector: crate::redis_tls::client_config(files)?.into(),
                // Nodes are reached by the address they announce: a cluster's certificates name
                // the addresses its nodes announce (an IP address is checked as one).
                hostnames: TlsHostMapping::None,
            });
        }
        Ok(config)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn refusal(text: &str) -> String {
        RedisUrl::parse(text).expect_err(text).to_string()
    }

    #[test]
    fn plaintext_single_nodes_and_clusters_are_read_as_before() {
        let single = RedisUrl::parse("redis://127.0.0.1:6379").expect("single");
        assert!(single.tls().is_none() && !single.clustered());
        let cluster =
            RedisUrl::parse("redis://127.0.0.1:7000, redis://127.0.0.1:7001,127.0.0.1:7002")
                .expect("cluster");
        assert!(cluster.clustered());
        assert_eq!(cluster.others, ["127.0.0.1:7001", "127.0.0.1:7002"]);
        let with_password = RedisUrl::parse("redis://:s%40cret@h:1/2").expect("password");
        assert_eq!(with_password.first, "redis://:s%40cret@h:1/2");
    }

    #[test]
    fn rediss_takes_its_certificate_files_under_either_name_and_gives_fred_plaintext() {
        let url = RedisUrl::parse(
            "rediss://u:p@a:7000,rediss://b:7001?sslrootcert=/ca.pem&ssl_certfile=/c.pem&sslkey=/k.pem",
        )
        .expect("tls cluster");
        assert_eq!(url.first, "redis://u:p@a:7000");
        assert_eq!(url.others, ["b:7001"]);
        let files = url.tls().expect("tls");
        assert_eq!(
            files.root,
            Some(NamedFile {
                parameter: "sslrootcert".into(),
                path: "/ca.pem".into()
            })
        );
        assert_eq!(
            files.cert.as_ref().map(|f| f.parameter.as_str()),
            Some("ssl_certfile")
        );
        assert!(files.key.is_some());
        assert_eq!(
            RedisUrl::parse("rediss://h:6380")
                .expect("system roots")
                .tls(),
            Some(&TlsFiles::default())
        );
    }

    #[test]
    fn what_cannot_be_meant_is_refused_with_its_reason() {
        assert!(refusal("http://h:1").contains("redis:// (plaintext) or rediss://"));
        assert!(refusal("redis://a:1,rediss://b:2").contains("mix redis:// and rediss://"));
        assert!(
            refusal("rediss://h:1?ssl_ca_cert=/x").contains("unknown parameter \"ssl_ca_cert\"")
        );
        assert!(refusal("redis://h:1?sslrootcert=/ca.pem").contains("plaintext redis://"));
        assert!(refusal("rediss://h:1?sslcert=/c.pem").contains("without the other half"));
        assert!(refusal("rediss://h:1?sslkey=/k.pem").contains("sslkey is given without"));
        assert!(
            refusal("rediss://a:1?sslrootcert=/x,rediss://b:2?ssl_ca_certs=/y").contains("twice")
        );
        assert!(refusal("not a url").contains("is not a URL"));
    }
}
