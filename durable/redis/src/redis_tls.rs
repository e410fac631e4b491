//! The TLS client configuration of a `rediss://` connection: the authorities it trusts (the file
//! the URL names, or else the system's store) and the client certificate it presents, if any.
//! Every file is read once, at start, so a missing or malformed one is named before anything
//! connects; the server's certificate is always verified (there is no "insecure" switch).

use std::sync::Arc;

use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use rustls::{ClientConfig, RootCertStore};

use crate::DurableError;
use crate::redis_url::{NamedFile, TlsFiles};

/// The rustls configuration for `files`, on ring (the provider every TLS client of Sluice uses).
///
/// # Errors
/// `Misconfigured` naming the parameter and the path of a file that cannot be read or holds no
/// certificate (or key) rustls accepts; or when no authority is trusted at all.
pub fn client_config(files: &TlsFiles) -> Result<ClientConfig, DurableError> {
    let roots = match &files.root {
        Some(file) => file_roots(file)?,
        None => system_roots()?,
    };
    let builder =
        ClientConfig::builder_with_provider(Arc::new(rustls::crypto::ring::default_provider()))
            .with_safe_default_protocol_versions()
            .map_err(|e| misconfigured(format!("TLS: {e}")))?
            .with_root_certificates(roots);
    match (&files.cert, &files.key) {
        (Some(cert), Some(key)) => {
            let chain = certificates(cert)?;
            let bytes = read(key)?;
            let private = PrivateKeyDer::from_pem_slice(&bytes).map_err(|e| {
                misconfigured(format!("{} holds no private key in PEM ({e})", named(key)))
            })?;
            builder.with_client_auth_cert(chain, private).map_err(|e| {
                misconfigured(format!(
                    "{} and {} are not a certificate and its key ({e})",
                    named(cert),
                    named(key)
                ))
            })
        }
        _ => Ok(builder.with_no_client_auth()),
    }
}

fn misconfigured(detail: String) -> DurableError {
    DurableError::Misconfigured(format!("SLUICE_REDIS_URL: {detail}"))
}

fn named(file: &NamedFile) -> String {
    format!("{}={}", file.parameter, file.path.display())
}

fn read(file: &NamedFile) -> Result<Vec<u8>, DurableError> {
    std::fs::read(&file.path)
        .map_err(|e| misconfigured(format!("{} cannot be read: {e}", named(file))))
}

/// The PEM certificates of `file`, at least one.
fn certificates(file: &NamedFile) -> Result<Vec<CertificateDer<'static>>, DurableError> {
    let bytes = read(file)?;
    let chain = CertificateDer::pem_slice_iter(&bytes)
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| misconfigured(format!("{} is not PEM ({e})", named(file))))?;
    if chain.is_empty() {
        return Err(misconfigured(format!(
            "{} holds no PEM certificate",
            named(file)
        )));
    }
    Ok(chain)
}

/// Only the authorities of `file` (as `sslrootcert` means for libpq): a private CA is not
/// diluted by the hundred public ones.
fn file_roots(file: &NamedFile) -> Result<RootCertStore, DurableError> {
    let mut roots = RootCertStore::empty();
    for certificate in certificates(file)? {
        roots.add(certificate).map_err(|e| {
            misconfigured(format!(
                "{} holds a certificate that is no authority rustls accepts ({e})",
                named(file)
            ))
        })?;
    }
    Ok(roots)
}

/// The system's store (`/etc/ssl/certs` on Debian; `SSL_CERT_FILE`/`SSL_CERT_DIR` are honoured),
/// what managed Redis services' certificates chain to. Certificates rustls cannot read are
/// skipped; a store left empty is an error that says how to name a CA instead.
fn system_roots() -> Result<RootCertStore, DurableError> {
    let found = rustls_native_certs::load_native_certs();
    let mut roots = RootCertStore::empty();
    roots.add_parsable_certificates(found.certs);
    if roots.is_empty() {
        let why = found
            .errors
            .first()
            .map(|e| format!(" ({e})"))
            .unwrap_or_default();
        return Err(misconfigured(format!(
            "rediss:// trusts the system's certificate store, which holds no certificate{why}; \
             name the server's CA with ?sslrootcert=/path/ca.pem"
        )));
    }
    Ok(roots)
}
