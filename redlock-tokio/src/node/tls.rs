//! TLS options of the builder: a CA to trust and a client certificate, read
//! from PEM files and checked once at build, so that a missing file or a key
//! that does not match its certificate is a configuration error rather than
//! a node that never connects.

use std::fs;
use std::path::{Path, PathBuf};

use redis::{ClientTlsConfig, ConnectionAddr, TlsCertificates};
use redlock_core::ConfigError;
use rustls::RootCertStore;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};

use crate::node::server::Server;

/// The files given to [`Builder::tls_ca_file`](crate::Builder::tls_ca_file)
/// and [`Builder::tls_client_cert`](crate::Builder::tls_client_cert).
#[derive(Clone, Debug, Default)]
pub(crate) struct TlsFiles {
    pub(crate) ca: Option<PathBuf>,
    pub(crate) client: Option<(PathBuf, PathBuf)>,
}

impl TlsFiles {
    /// Reads and checks the files; `None` when no option was set.
    pub(crate) fn load(&self) -> Result<Option<TlsCertificates>, ConfigError> {
        if self.ca.is_none() && self.client.is_none() {
            return Ok(None);
        }
        let root_cert = match &self.ca {
            Some(path) => {
                let pem = read(path, "CA file")?;
                let mut store = RootCertStore::empty();
                for cert in certificates(&pem, path, "CA file")? {
                    store.add(cert).map_err(|err| {
                        invalid(format!(
                            "the CA file {} holds a certificate that cannot be a trust anchor: {err}",
                            path.display()
                        ))
                    })?;
                }
                Some(pem)
            }
            None => None,
        };
        let client_tls = match &self.client {
            Some((cert_path, key_path)) => {
                let client_cert = read(cert_path, "client certificate file")?;
                let client_key = read(key_path, "client key file")?;
                check_key_pair(&client_cert, cert_path, &client_key, key_path)?;
                Some(ClientTlsConfig {
                    client_cert,
                    client_key,
                })
            }
            None => None,
        };
        Ok(Some(TlsCertificates {
            client_tls,
            root_cert,
        }))
    }
}

/// The server's client with these certificates; a server that is not
/// `rediss://` is an error, since the options would silently not apply.
pub(crate) fn apply(server: Server, certificates: &TlsCertificates) -> Result<Server, ConfigError> {
    if server.cluster.is_some() {
        return Err(invalid(format!(
            "node {}: a CA or client certificate cannot apply to a cluster node yet \
             (cluster nodes are plain TCP in this version)",
            server.name
        )));
    }
    let info = server.client.get_connection_info();
    if !matches!(info.addr(), ConnectionAddr::TcpTls { .. }) {
        return Err(invalid(format!(
            "a CA or client certificate is set, but server {} is not a TLS server \
             (use rediss:// for every server)",
            server.name
        )));
    }
    let client = redis::Client::build_with_tls(info.clone(), certificates.clone())
        .map_err(|err| invalid(format!("server {}: {err}", server.name)))?;
    Ok(Server { client, ..server })
}

fn invalid(reason: String) -> ConfigError {
    ConfigError::InvalidTls { reason }
}

fn read(path: &Path, what: &str) -> Result<Vec<u8>, ConfigError> {
    fs::read(path)
        .map_err(|err| invalid(format!("cannot read the {what} {}: {err}", path.display())))
}

/// Every certificate of a PEM file; at least one.
fn certificates(
    pem: &[u8],
    path: &Path,
    what: &str,
) -> Result<Vec<CertificateDer<'static>>, ConfigError> {
    let certs = CertificateDer::pem_slice_iter(pem)
        .collect::<Result<Vec<_>, _>>()
        .map_err(|err| {
            invalid(format!(
                "the {what} {} is not valid PEM: {err}",
                path.display()
            ))
        })?;
    if certs.is_empty() {
        return Err(invalid(format!(
            "the {what} {} holds no PEM certificate (-----BEGIN CERTIFICATE-----)",
            path.display()
        )));
    }
    Ok(certs)
}

/// The client certificate chain and its private key parse, and the key is
/// the certificate's.
fn check_key_pair(
    cert_pem: &[u8],
    cert_path: &Path,
    key_pem: &[u8],
    key_path: &Path,
) -> Result<(), ConfigError> {
    let chain = certificates(cert_pem, cert_path, "client certificate file")?;
    let key = PrivateKeyDer::from_pem_slice(key_pem).map_err(|err| {
        invalid(format!(
            "the client key file {} holds no usable PEM private key: {err}",
            key_path.display()
        ))
    })?;
    let provider = rustls::crypto::ring::default_provider();
    rustls::sign::CertifiedKey::from_der(chain, key, &provider).map_err(|err| {
        invalid(format!(
            "the client key {} does not go with the certificate {}: {err}",
            key_path.display(),
            cert_path.display()
        ))
    })?;
    Ok(())
}
