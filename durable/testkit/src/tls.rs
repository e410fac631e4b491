//! Certificates a test makes for itself: a certificate authority of its own and server
//! certificates it signs, so TLS tests run against real servers with nothing installed.

use std::path::{Path, PathBuf};

use rcgen::{
    BasicConstraints, CertificateParams, CertifiedIssuer, DnType, ExtendedKeyUsagePurpose, IsCa,
    KeyPair, KeyUsagePurpose,
};
pub use sluice_servers::ServerTls;

/// A certificate authority made for one test.
pub struct TestCa {
    issuer: CertifiedIssuer<'static, KeyPair>,
}

impl TestCa {
    /// A new authority named `name` (its common name, which an error about it may show).
    ///
    /// # Panics
    /// If the key or the certificate cannot be made.
    pub fn new(name: &str) -> TestCa {
        let mut params = CertificateParams::new(Vec::new()).expect("no names, no error");
        params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        params.distinguished_name.push(DnType::CommonName, name);
        params.key_usages = vec![KeyUsagePurpose::KeyCertSign, KeyUsagePurpose::CrlSign];
        let key = KeyPair::generate().expect("a key for the test's authority");
        TestCa {
            issuer: CertifiedIssuer::self_signed(params, key).expect("the authority's certificate"),
        }
    }

    /// The authority's certificate, PEM-encoded: what a client is told to trust.
    pub fn pem(&self) -> String {
        self.issuer.pem()
    }

    /// Writes [`pem`](Self::pem) to `dir/<file>` and returns the path.
    ///
    /// # Panics
    /// If it cannot be written.
    pub fn write_pem(&self, dir: &Path, file: &str) -> PathBuf {
        let path = dir.join(file);
        std::fs::write(&path, self.pem())
            .unwrap_or_else(|e| panic!("testkit: cannot write {}: {e}", path.display()));
        path
    }

    /// A server certificate for `localhost` and `127.0.0.1`, signed by this authority, with its
    /// key.
    ///
    /// # Panics
    /// If the key or the certificate cannot be made.
    pub fn server(&self) -> ServerTls {
        let mut params = CertificateParams::new(vec!["localhost".into(), "127.0.0.1".into()])
            .expect("valid names");
        params
            .distinguished_name
            .push(DnType::CommonName, "localhost");
        params.use_authority_key_identifier_extension = true;
        let key = KeyPair::generate().expect("a key for the server");
        let cert = params
            .signed_by(&key, &self.issuer)
            .expect("the server's certificate");
        ServerTls {
            cert_pem: cert.pem(),
            key_pem: key.serialize_pem(),
            ca_pem: self.pem(),
            client_certificates: false,
        }
    }

    /// A client certificate for `common_name` (PostgreSQL's `cert` authentication takes it as
    /// the user name) signed by this authority, written with its key as `<file>.crt` and
    /// `<file>.key` in `dir`; returns both paths.
    ///
    /// # Panics
    /// If the certificate cannot be made or written.
    pub fn write_client(&self, common_name: &str, dir: &Path, file: &str) -> (PathBuf, PathBuf) {
        let mut params = CertificateParams::new(Vec::new()).expect("no names, no error");
        params
            .distinguished_name
            .push(DnType::CommonName, common_name);
        params.extended_key_usages = vec![ExtendedKeyUsagePurpose::ClientAuth];
        params.use_authority_key_identifier_extension = true;
        let key = KeyPair::generate().expect("a key for the client");
        let cert = params
            .signed_by(&key, &self.issuer)
            .expect("the client's certificate");
        let write = |extension: &str, text: &str| {
            let path = dir.join(format!("{file}.{extension}"));
            std::fs::write(&path, text)
                .unwrap_or_else(|e| panic!("testkit: cannot write {}: {e}", path.display()));
            path
        };
        (
            write("crt", &cert.pem()),
            write("key", &key.serialize_pem()),
        )
    }
}
