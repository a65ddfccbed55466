//! Throwaway certificates for TLS servers, made with `openssl`.

use std::fs;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use super::node::TlsOptions;
use super::process;

/// A fresh CA with a server certificate (for `127.0.0.1` and `localhost`)
/// and a client certificate signed by it, as PEM files in a directory of
/// their own, removed when dropped.
///
/// Keys are ECDSA P-256 (quick to make); every certificate is valid for two
/// days. Two `TestCerts` share nothing, so a server started with one's
/// certificate is "from an unknown CA" for a client that trusts the other.
#[derive(Debug)]
pub struct TestCerts {
    dir: PathBuf,
}

impl TestCerts {
    /// Makes the CA and both certificates.
    ///
    /// # Panics
    /// If `openssl` cannot be run or fails.
    pub fn generate() -> Self {
        let certs = Self {
            dir: process::new_data_dir(),
        };
        let dir = &certs.dir;
        // A CA name of its own: a certificate of another `TestCerts` then
        // has an unknown issuer, not a bad signature by a namesake.
        let ca_subject = format!(
            "/CN=redlock test CA {}",
            dir.file_name().unwrap_or_default().to_string_lossy()
        );
        openssl(
            dir,
            "req -x509 -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes \
             -keyout ca.key -out ca.crt -days 2",
            &["-subj", &ca_subject],
        );
        certs.issue(
            "server",
            "localhost",
            "subjectAltName=IP:127.0.0.1,DNS:localhost\nextendedKeyUsage=serverAuth\n",
        );
        certs.issue(
            "client",
            "redlock test client",
            "extendedKeyUsage=clientAuth\n",
        );
        certs
    }

    /// A key and a certificate signed by the CA: `<name>.key`, `<name>.crt`.
    fn issue(&self, name: &str, common_name: &str, extensions: &str) {
        let ext_file = self.dir.join(format!("{name}.ext"));
        fs::write(
            &ext_file,
            format!("basicConstraints=CA:FALSE\n{extensions}"),
        )
        .unwrap_or_else(|err| panic!("cannot write {}: {err}", ext_file.display()));
        openssl(
            &self.dir,
            &format!(
                "req -new -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes \
                 -keyout {name}.key -out {name}.csr"
            ),
            &["-subj", &format!("/CN={common_name}")],
        );
        openssl(
            &self.dir,
            &format!(
                "x509 -req -in {name}.csr -CA ca.crt -CAkey ca.key -CAcreateserial \
                 -out {name}.crt -days 2 -extfile {name}.ext"
            ),
            &[],
        );
    }

    /// The directory holding the files.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// The CA certificate (PEM).
    pub fn ca_cert(&self) -> PathBuf {
        self.dir.join("ca.crt")
    }

    /// The server certificate (PEM), for `127.0.0.1` and `localhost`.
    pub fn server_cert(&self) -> PathBuf {
        self.dir.join("server.crt")
    }

    /// The server's private key (PEM, PKCS#8).
    pub fn server_key(&self) -> PathBuf {
        self.dir.join("server.key")
    }

    /// The client certificate (PEM).
    pub fn client_cert(&self) -> PathBuf {
        self.dir.join("client.crt")
    }

    /// The client's private key (PEM, PKCS#8).
    pub fn client_key(&self) -> PathBuf {
        self.dir.join("client.key")
    }

    /// Server options with this server certificate; with `auth_clients`,
    /// the server requires a client certificate signed by this CA.
    pub fn server_options(&self, auth_clients: bool) -> TlsOptions {
        TlsOptions {
            cert_file: self.server_cert(),
            key_file: self.server_key(),
            ca_file: self.ca_cert(),
            auth_clients,
        }
    }
}

impl Drop for TestCerts {
    fn drop(&mut self) {
        let _ = fs::remove_dir_all(&self.dir);
    }
}

/// Runs `openssl` in `dir` with the space-separated `args`, then `more`
/// (arguments that may contain spaces).
fn openssl(dir: &Path, args: &str, more: &[&str]) {
    let output = Command::new("openssl")
        .current_dir(dir)
        .args(args.split_whitespace())
        .args(more)
        .stdin(Stdio::null())
        .output()
        .unwrap_or_else(|err| panic!("cannot run openssl (is it installed?): {err}"));
    assert!(
        output.status.success(),
        "openssl {args} {} failed ({}): {}",
        more.join(" "),
        output.status,
        String::from_utf8_lossy(&output.stderr)
    );
}
