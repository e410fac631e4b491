//! What a TLS server of the kit is given: its certificate and key, the authority that signed
//! them, and whether clients must present a certificate of that authority too.

use std::path::{Path, PathBuf};

/// A server certificate and its private key, PEM-encoded, for [`PgServer::start_tls`] and
/// [`RedisServer::start_tls`].
///
/// [`PgServer::start_tls`]: crate::PgServer::start_tls
/// [`RedisServer::start_tls`]: crate::RedisServer::start_tls
#[derive(Debug, Clone)]
pub struct ServerTls {
    pub cert_pem: String,
    pub key_pem: String,
    /// The authority that signed `cert_pem`, which client certificates must chain to as well
    /// (and which a TLS Redis Cluster's nodes trust in each other).
    pub ca_pem: String,
    /// Clients must present a certificate `ca_pem` signed: PostgreSQL's `cert` authentication
    /// (the certificate's common name is the database user), Redis's `tls-auth-clients yes`.
    pub client_certificates: bool,
}

/// The files of a [`ServerTls`] as a server reads them.
pub(crate) struct TlsFiles {
    pub cert: PathBuf,
    pub key: PathBuf,
    pub ca: PathBuf,
}

impl ServerTls {
    /// Writes `server.crt`, `server.key` (readable by its owner only, as PostgreSQL demands)
    /// and `root.crt` into `dir`.
    ///
    /// # Panics
    /// If a file cannot be written.
    pub(crate) fn write_into(&self, dir: &Path) -> TlsFiles {
        use std::os::unix::fs::PermissionsExt;
        let write = |name: &str, text: &str, mode: u32| {
            let path = dir.join(name);
            std::fs::write(&path, text)
                .and_then(|()| {
                    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(mode))
                })
                .unwrap_or_else(|e| panic!("testkit: cannot write {}: {e}", path.display()));
            path
        };
        TlsFiles {
            cert: write("server.crt", &self.cert_pem, 0o644),
            key: write("server.key", &self.key_pem, 0o600),
            ca: write("root.crt", &self.ca_pem, 0o644),
        }
    }
}
