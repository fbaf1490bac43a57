//! TLS on the listeners: the certificate, its key and (for mutual TLS) the
//! CA that client certificates must chain to, read from PEM files.
//!
//! The files are re-read when their content changes and on SIGHUP
//! ([`crate::watch`]): handshakes after a reload use the new material,
//! connections already open keep theirs. Files that do not load (a
//! missing file, no certificate, a key that does not match) are refused:
//! the error is logged and counted, and the material in force stays.
//! Every listener shares one [`TlsCell`] and gets its [`ListenerTls`]
//! (its ALPN protocols) from it.

use crate::metrics::Metrics;
use rustls::crypto::CryptoProvider;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use rustls::server::WebPkiClientVerifier;
use rustls::{RootCertStore, ServerConfig};
use std::path::PathBuf;
use std::sync::{Arc, Mutex, RwLock};

/// ALPN of an HTTP listener: HTTP/2 first, HTTP/1.1 too.
pub const ALPN_HTTP: &[&[u8]] = &[b"h2", b"http/1.1"];

/// ALPN of a gRPC listener: HTTP/2 only.
pub const ALPN_GRPC: &[&[u8]] = &[b"h2"];

/// Where the TLS material is read from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TlsFiles {
    /// PEM certificate chain, the server's certificate first.
    pub cert: PathBuf,
    /// PEM private key (PKCS#8, PKCS#1 or SEC1).
    pub key: PathBuf,
    /// PEM CA certificates: when given, clients must present a
    /// certificate that chains to one of them (mutual TLS).
    pub client_ca: Option<PathBuf>,
}

/// The bytes of the files as read.
#[derive(Debug, PartialEq, Eq)]
struct Pem {
    cert: Vec<u8>,
    key: Vec<u8>,
    client_ca: Option<Vec<u8>>,
}

impl TlsFiles {
    fn read(&self) -> Result<Pem, String> {
        let read = |flag: &str, path: &PathBuf| {
            std::fs::read(path).map_err(|e| format!("{flag} {}: {e}", path.display()))
        };
        Ok(Pem {
            cert: read("--tls-cert", &self.cert)?,
            key: read("--tls-key", &self.key)?,
            client_ca: self
                .client_ca
                .as_ref()
                .map(|p| read("--tls-client-ca", p))
                .transpose()?,
        })
    }
}

fn certificates(flag: &str, pem: &[u8]) -> Result<Vec<CertificateDer<'static>>, String> {
    let certs = CertificateDer::pem_slice_iter(pem)
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| format!("{flag}: {e}"))?;
    if certs.is_empty() {
        return Err(format!("{flag}: no PEM certificate in the file"));
    }
    Ok(certs)
}

/// The server configuration of `pem` (no ALPN: each listener sets its own).
fn server_config(pem: &Pem) -> Result<ServerConfig, String> {
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let chain = certificates("--tls-cert", &pem.cert)?;
    let key = PrivateKeyDer::from_pem_slice(&pem.key).map_err(|e| format!("--tls-key: {e}"))?;
    let builder = ServerConfig::builder_with_provider(Arc::clone(&provider))
        .with_safe_default_protocol_versions()
        .map_err(|e| format!("TLS: {e}"))?;
    let builder = match &pem.client_ca {
        Some(ca) => builder.with_client_cert_verifier(client_verifier(ca, provider)?),
        None => builder.with_no_client_auth(),
    };
    builder
        .with_single_cert(chain, key)
        .map_err(|e| format!("--tls-cert and --tls-key: {e}"))
}

fn client_verifier(
    ca: &[u8],
    provider: Arc<CryptoProvider>,
) -> Result<Arc<dyn rustls::server::danger::ClientCertVerifier>, String> {
    let mut roots = RootCertStore::empty();
    for cert in certificates("--tls-client-ca", ca)? {
        roots
            .add(cert)
            .map_err(|e| format!("--tls-client-ca: {e}"))?;
    }
    WebPkiClientVerifier::builder_with_provider(Arc::new(roots), provider)
        .build()
        .map_err(|e| format!("--tls-client-ca: {e}"))
}

/// The TLS material in force and the files it comes from.
#[derive(Debug)]
pub struct TlsCell {
    files: TlsFiles,
    current: RwLock<Arc<ServerConfig>>,
    /// The files as last read, whether they loaded or not.
    seen: Mutex<Option<Pem>>,
}

impl TlsCell {
    /// Loads `files`; an error refuses to start.
    pub fn load(files: TlsFiles) -> Result<TlsCell, String> {
        let pem = files.read()?;
        let config = server_config(&pem)?;
        Ok(TlsCell {
            files,
            current: RwLock::new(Arc::new(config)),
            seen: Mutex::new(Some(pem)),
        })
    }

    /// The server configuration in force (no ALPN).
    pub fn current(&self) -> Arc<ServerConfig> {
        Arc::clone(&self.current.read().unwrap_or_else(|e| e.into_inner()))
    }

    /// The TLS of one listener, offering `alpn`.
    pub fn listener(self: &Arc<Self>, alpn: &'static [&'static [u8]]) -> ListenerTls {
        ListenerTls {
            cell: Arc::clone(self),
            alpn,
            derived: Mutex::new(None),
        }
    }

    /// Reads the files again now; on error the material in force stays.
    pub fn reload(&self, metrics: &Metrics) -> Result<(), String> {
        let read = self.files.read();
        let loaded = read.as_ref().map_err(Clone::clone).and_then(server_config);
        *self.seen.lock().unwrap_or_else(|e| e.into_inner()) = read.ok();
        match loaded {
            Ok(config) => {
                *self.current.write().unwrap_or_else(|e| e.into_inner()) = Arc::new(config);
                metrics.record_tls_load(true);
                tracing::info!(cert = %self.files.cert.display(), "TLS certificate loaded");
                Ok(())
            }
            Err(e) => {
                metrics.record_tls_load(false);
                tracing::error!("TLS files refused, the certificate in force stays: {e}");
                Err(e)
            }
        }
    }

    /// Reloads when the files' content differs from the last read; `None`
    /// when it did not change.
    pub fn reload_if_changed(&self, metrics: &Metrics) -> Option<Result<(), String>> {
        let now = self.files.read().ok();
        if *self.seen.lock().unwrap_or_else(|e| e.into_inner()) == now {
            return None;
        }
        Some(self.reload(metrics))
    }
}

impl crate::watch::Reloadable for TlsCell {
    const WHAT: &'static str = "TLS certificates";

    fn reload_now(&self, metrics: &Metrics) {
        let _ = self.reload(metrics);
    }

    fn reload_changed(&self, metrics: &Metrics) {
        let _ = self.reload_if_changed(metrics);
    }
}

/// One listener's TLS: the cell's material with the listener's ALPN.
#[derive(Debug)]
pub struct ListenerTls {
    cell: Arc<TlsCell>,
    alpn: &'static [&'static [u8]],
    /// The cell's configuration last seen, and this listener's copy of it.
    derived: Mutex<Option<(Arc<ServerConfig>, Arc<ServerConfig>)>>,
}

impl ListenerTls {
    /// The configuration for the next handshake.
    pub fn config(&self) -> Arc<ServerConfig> {
        let base = self.cell.current();
        let mut derived = self.derived.lock().unwrap_or_else(|e| e.into_inner());
        if let Some((seen, config)) = derived.as_ref() {
            if Arc::ptr_eq(seen, &base) {
                return Arc::clone(config);
            }
        }
        let mut config = (*base).clone();
        config.alpn_protocols = self.alpn.iter().map(|p| p.to_vec()).collect();
        let config = Arc::new(config);
        *derived = Some((base, Arc::clone(&config)));
        config
    }
}

/// Throwaway certificates made with the `openssl` command (tests).
#[cfg(test)]
pub(crate) mod testing {
    use std::path::{Path, PathBuf};
    use std::process::Command;

    /// Runs `openssl` with `args` (split at whitespace) in `dir`.
    fn openssl(dir: &Path, args: &str) {
        let out = Command::new("openssl")
            .args(args.split_whitespace())
            .current_dir(dir)
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
    }

    /// A new P-256 key in `name.key` and its request (`req_args`) in `out`.
    fn new_key(dir: &Path, req_args: &str, name: &str, out: &str) {
        openssl(
            dir,
            &format!(
                "req {req_args} -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes \
                 -keyout {name}.key -out {out} -subj /CN={name}"
            ),
        );
    }

    /// A directory of its own under the system's temporary one.
    pub(crate) fn temp_dir(name: &str) -> PathBuf {
        let dir = std::env::temp_dir().join(format!("sluice-tls-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        dir
    }

    /// A CA in `dir` (`<ca>.crt`, `<ca>.key`).
    pub(crate) fn ca(dir: &Path, ca: &str) -> PathBuf {
        new_key(dir, "-x509 -days 2", ca, &format!("{ca}.crt"));
        dir.join(format!("{ca}.crt"))
    }

    /// A certificate for `localhost` named `name`, signed by the CA `ca`
    /// with serial `serial`: (certificate, key).
    pub(crate) fn leaf(dir: &Path, ca: &str, name: &str, serial: u32) -> (PathBuf, PathBuf) {
        std::fs::write(
            dir.join(format!("{name}.ext")),
            "subjectAltName=DNS:localhost,IP:127.0.0.1\nextendedKeyUsage=serverAuth,clientAuth\n",
        )
        .unwrap();
        new_key(dir, "", name, &format!("{name}.csr"));
        openssl(
            dir,
            &format!(
                "x509 -req -in {name}.csr -CA {ca}.crt -CAkey {ca}.key -set_serial {serial} \
                 -out {name}.crt -days 2 -extfile {name}.ext"
            ),
        );
        (
            dir.join(format!("{name}.crt")),
            dir.join(format!("{name}.key")),
        )
    }
}

#[cfg(test)]
mod tests {
    use super::testing::{ca, leaf, temp_dir};
    use super::*;

    fn files(cert: &std::path::Path, key: &std::path::Path) -> TlsFiles {
        TlsFiles {
            cert: cert.to_path_buf(),
            key: key.to_path_buf(),
            client_ca: None,
        }
    }

    #[test]
    fn each_listener_offers_its_alpn_on_the_same_material() {
        let dir = temp_dir("alpn");
        ca(&dir, "ca");
        let (cert, key) = leaf(&dir, "ca", "server", 1);
        let cell = Arc::new(TlsCell::load(files(&cert, &key)).unwrap());
        let http = cell.listener(ALPN_HTTP).config();
        let grpc = cell.listener(ALPN_GRPC);
        assert_eq!(
            http.alpn_protocols,
            vec![b"h2".to_vec(), b"http/1.1".to_vec()]
        );
        assert_eq!(grpc.config().alpn_protocols, vec![b"h2".to_vec()]);
        // Built once per version of the material.
        assert!(Arc::ptr_eq(&grpc.config(), &grpc.config()));
    }

    #[test]
    fn bad_files_refuse_to_load_and_say_which_flag() {
        let dir = temp_dir("bad");
        ca(&dir, "ca");
        let (cert, key) = leaf(&dir, "ca", "server", 1);
        let (_, other_key) = leaf(&dir, "ca", "other", 2);
        let missing = dir.join("missing.pem");
        let err = TlsCell::load(files(&missing, &key)).unwrap_err();
        assert!(
            err.starts_with("--tls-cert ") && err.contains("missing.pem"),
            "{err}"
        );
        let err = TlsCell::load(files(&cert, &missing)).unwrap_err();
        assert!(err.starts_with("--tls-key "), "{err}");
        // A key file given as the certificate: no certificate in it.
        let err = TlsCell::load(files(&key, &key)).unwrap_err();
        assert_eq!(err, "--tls-cert: no PEM certificate in the file");
        let err = TlsCell::load(files(&cert, &cert)).unwrap_err();
        assert!(err.starts_with("--tls-key: "), "{err}");
        let err = TlsCell::load(files(&cert, &other_key)).unwrap_err();
        assert!(err.starts_with("--tls-cert and --tls-key: "), "{err}");
        let mut with_ca = files(&cert, &key);
        with_ca.client_ca = Some(key.clone());
        let err = TlsCell::load(with_ca).unwrap_err();
        assert_eq!(err, "--tls-client-ca: no PEM certificate in the file");
    }

    #[test]
    fn a_changed_file_is_reloaded_and_a_bad_one_refused() {
        let dir = temp_dir("reload");
        let ca_cert = ca(&dir, "ca");
        let (cert_a, key_a) = leaf(&dir, "ca", "a", 1);
        let (cert_b, key_b) = leaf(&dir, "ca", "b", 2);
        let (cert, key) = (dir.join("server.crt"), dir.join("server.key"));
        std::fs::copy(&cert_a, &cert).unwrap();
        std::fs::copy(&key_a, &key).unwrap();
        let metrics = Metrics::default();
        let mut tls = files(&cert, &key);
        tls.client_ca = Some(ca_cert);
        let cell = TlsCell::load(tls).unwrap();
        let first = cell.current();
        assert!(cell.reload_if_changed(&metrics).is_none());

        // A new certificate whose key is not there yet: refused, A stays.
        std::fs::copy(&cert_b, &cert).unwrap();
        assert!(cell.reload_if_changed(&metrics).unwrap().is_err());
        assert!(Arc::ptr_eq(&first, &cell.current()));
        assert_eq!(metrics.tls_load_count(false), 1);
        // Not retried until the files change again.
        assert!(cell.reload_if_changed(&metrics).is_none());

        std::fs::copy(&key_b, &key).unwrap();
        assert!(cell.reload_if_changed(&metrics).unwrap().is_ok());
        assert!(!Arc::ptr_eq(&first, &cell.current()));
        assert_eq!(metrics.tls_load_count(true), 1);
        assert!(metrics
            .render()
            .contains("sluice_limiter_tls_config_loads_total{result=\"error\"} 1"));
    }
}
