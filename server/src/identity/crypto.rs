//! Browser-login credentials encrypted at rest (RFC-60 / RFC-69 / EAR-03).
//!
//! Owns: the deployment's [`CredentialKey`] — from the `SESSION_ENCRYPTION_KEY` setting
//! ([`CredentialKey::from_hex`]) or a generated key file beside the embedded database
//! ([`CredentialKey::load_or_create`]) — and sealing a login's GitHub credential with it:
//! AES-256-GCM under a key derived from the master key with HKDF-SHA-256 (info
//! [`HKDF_INFO`]), a fresh 96-bit nonce drawn through the [`Entropy`] seam on every seal, and
//! authenticated data ([`CredentialAad`]) binding the ciphertext to the application origin, the
//! GitHub App client id, the login and account ids, the login's creation and expiry, its verifier
//! hash and the credential revision. Changing any of them, or copying sealed bytes to another
//! login, makes [`CredentialKey::open`] fail.
//!
//! Sealed bytes are `[format version = 1][nonce: 12 bytes][ciphertext ‖ 16-byte tag]`.
//!
//! Does not own: where sealed bytes are kept (the store's `set_login_credential`) or when to
//! seal or restore (the session layer). Nothing here prints a key, a token or a plaintext:
//! `Debug` of [`CredentialKey`] and [`StoredCredential`] is redacted, error texts say what was
//! expected, never what was found, and the one log line (a key file others can read) names
//! only the path and its mode.

use std::fmt;
use std::io::Write;
use std::path::{Path, PathBuf};

use aes_gcm::aead::{Aead, KeyInit, Payload};
use aes_gcm::{Aes256Gcm, Nonce};
use hkdf::Hkdf;
use serde::{Deserialize, Serialize};
use sha2::Sha256;
use uuid::Uuid;
use zeroize::{Zeroize, Zeroizing};

use crate::config::decode_credential_key_hex as decode_key_hex;
use crate::runtime::entropy::Entropy;

/// Bytes in the master key (AES-256).
pub const KEY_LEN: usize = crate::config::CREDENTIAL_KEY_LEN;
/// Hex characters in a written-out master key.
pub const KEY_HEX_LEN: usize = crate::config::CREDENTIAL_KEY_HEX_LEN;
/// The HKDF-SHA-256 `info` naming the purpose of the derived key.
pub const HKDF_INFO: &[u8] = b"chopin credentials v1";
/// The first byte of every sealed credential this build writes.
pub const SEAL_FORMAT_V1: u8 = 1;
/// Bytes in an AES-GCM nonce (96 bits).
pub const NONCE_LEN: usize = 12;
/// Bytes in an AES-GCM authentication tag.
pub const TAG_LEN: usize = 16;
/// Domain tag at the start of the serialized authenticated data (versioned with the format).
const AAD_DOMAIN: &[u8] = b"chopin credential aad v1";

/// Why a master key could not be had. The texts name what is expected and, for files, the path;
/// never the key or the file's content.
#[derive(Debug, thiserror::Error)]
pub enum KeyError {
    /// The setting's value is not a key.
    #[error(
        "the credential encryption key must be {KEY_HEX_LEN} hexadecimal characters \
         (a {KEY_LEN}-byte key); {problem}"
    )]
    Malformed { problem: &'static str },
    /// The key file exists but does not hold exactly one key.
    #[error(
        "the key file {} does not hold a credential encryption key: expected \
         {KEY_HEX_LEN} hexadecimal characters and a newline; {problem}. Restore the file that \
         was there (credentials sealed with another key cannot be opened), or remove it to have \
         a new key generated and every stored login signed in again",
        path.display()
    )]
    BadFile {
        path: PathBuf,
        problem: &'static str,
    },
    /// Reading, creating or writing the key file (or its folder) failed.
    #[error("{doing} the key file {}: {source}", path.display())]
    Io {
        doing: &'static str,
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
}

/// Why sealed bytes could not be opened. None of these says which field or byte differed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum SealError {
    #[error("the sealed credential is too short to hold a nonce and a tag")]
    Truncated,
    #[error("the sealed credential has an unknown format version")]
    UnknownFormat,
    /// Wrong key, altered bytes, or bytes sealed for another login, revision or deployment.
    #[error("the sealed credential does not authenticate (wrong key, altered, or sealed for another login or revision)")]
    Authentication,
    /// It authenticated but does not hold a [`StoredCredential`] (only from `open_credential`).
    #[error("the sealed credential does not hold a credential record")]
    Malformed,
}

/// The deployment's credential master key. Holds only the AEAD key derived from it; both are
/// wiped from memory when dropped. `Debug` prints no key material.
#[derive(Clone)]
pub struct CredentialKey {
    cipher: Aes256Gcm,
}

impl fmt::Debug for CredentialKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("CredentialKey(<redacted>)")
    }
}

impl CredentialKey {
    /// A key from its 64 hexadecimal characters (either case; surrounding whitespace ignored),
    /// as given in `SESSION_ENCRYPTION_KEY`.
    pub fn from_hex(text: &str) -> Result<Self, KeyError> {
        let master =
            decode_key_hex(text.trim()).map_err(|problem| KeyError::Malformed { problem })?;
        Ok(Self::from_master(&master))
    }

    /// The key in the key file at `path`. If there is no file, generates a key from `entropy`
    /// and writes it there (64 lowercase hex characters and a newline, mode 0600, parent folders
    /// created), without ever replacing a file another process wrote meanwhile. A file holding
    /// anything else is refused, naming the path.
    pub fn load_or_create(path: &Path, entropy: &dyn Entropy) -> Result<Self, KeyError> {
        match read_key_file(path)? {
            Some(key) => Ok(key),
            None => create_key_file(path, entropy),
        }
    }

    fn from_master(master: &[u8; KEY_LEN]) -> Self {
        let hkdf = Hkdf::<Sha256>::new(None, master);
        let mut derived = Zeroizing::new([0u8; KEY_LEN]);
        hkdf.expand(HKDF_INFO, derived.as_mut())
            .expect("HKDF-SHA-256 yields 32 bytes for any info");
        let cipher =
            Aes256Gcm::new_from_slice(derived.as_ref()).expect("AES-256-GCM takes a 32-byte key");
        Self { cipher }
    }

    /// Seals `plaintext` bound to `aad`, under a fresh nonce drawn from `entropy`.
    pub fn seal(&self, entropy: &dyn Entropy, aad: &CredentialAad, plaintext: &[u8]) -> Vec<u8> {
        let mut nonce = [0u8; NONCE_LEN];
        entropy.fill(&mut nonce);
        let aad_bytes = aad.to_bytes();
        let ciphertext = self
            .cipher
            .encrypt(
                Nonce::from_slice(&nonce),
                Payload {
                    msg: plaintext,
                    aad: &aad_bytes,
                },
            )
            // AES-GCM refuses only messages of 64 GiB or more; credentials are a few hundred bytes.
            .expect("AES-256-GCM seals any message shorter than 64 GiB");
        let mut sealed = Vec::with_capacity(1 + NONCE_LEN + ciphertext.len());
        sealed.push(SEAL_FORMAT_V1);
        sealed.extend_from_slice(&nonce);
        sealed.extend_from_slice(&ciphertext);
        sealed
    }

    /// Opens bytes made by [`Self::seal`] with the same key and the same `aad`.
    pub fn open(&self, aad: &CredentialAad, sealed: &[u8]) -> Result<Vec<u8>, SealError> {
        let (&version, rest) = sealed.split_first().ok_or(SealError::Truncated)?;
        if version != SEAL_FORMAT_V1 {
            return Err(SealError::UnknownFormat);
        }
        if rest.len() < NONCE_LEN + TAG_LEN {
            return Err(SealError::Truncated);
        }
        let (nonce, ciphertext) = rest.split_at(NONCE_LEN);
        let aad_bytes = aad.to_bytes();
        self.cipher
            .decrypt(
                Nonce::from_slice(nonce),
                Payload {
                    msg: ciphertext,
                    aad: &aad_bytes,
                },
            )
            .map_err(|_| SealError::Authentication)
    }

    /// Seals a [`StoredCredential`] (as JSON) bound to `aad`. The JSON is wiped after sealing.
    pub fn seal_credential(
        &self,
        entropy: &dyn Entropy,
        aad: &CredentialAad,
        credential: &StoredCredential,
    ) -> Vec<u8> {
        let json = Zeroizing::new(
            serde_json::to_vec(credential).expect("a credential record always serializes"),
        );
        self.seal(entropy, aad, &json)
    }

    /// Opens bytes made by [`Self::seal_credential`].
    pub fn open_credential(
        &self,
        aad: &CredentialAad,
        sealed: &[u8],
    ) -> Result<StoredCredential, SealError> {
        let json = Zeroizing::new(self.open(aad, sealed)?);
        serde_json::from_slice(&json).map_err(|_| SealError::Malformed)
    }
}

/// What a sealed credential is bound to. Every field goes into the AEAD's authenticated data, so
/// opening with any field changed fails.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct CredentialAad {
    /// `APP_ORIGIN`, e.g. `https://chopin.example.com`.
    pub origin: String,
    /// The GitHub App's client id.
    pub client_id: String,
    /// The browser login (session) id.
    pub login_id: Uuid,
    /// The login's account (user) id.
    pub account_id: Uuid,
    pub created_at_ms: i64,
    pub expires_at_ms: i64,
    /// The stored hash of the login's cookie verifier (never the verifier itself).
    pub verifier_hash: String,
    /// The credential revision the sealed bytes are stored at: for a write through
    /// `Store::set_login_credential(login, expected, …)` that is `expected + 1`.
    pub revision: i64,
}

impl CredentialAad {
    /// The canonical serialization: a domain tag, then each field in declaration order —
    /// strings as a 4-byte big-endian length and their UTF-8 bytes, ids as their 16 bytes,
    /// integers as 8 bytes big-endian. Length prefixes keep `("ab", "c")` and `("a", "bc")` apart.
    pub fn to_bytes(&self) -> Vec<u8> {
        let mut out = Vec::with_capacity(
            AAD_DOMAIN.len()
                + 3 * 4
                + 2 * 16
                + 3 * 8
                + self.origin.len()
                + self.client_id.len()
                + self.verifier_hash.len(),
        );
        out.extend_from_slice(AAD_DOMAIN);
        put_str(&mut out, &self.origin);
        put_str(&mut out, &self.client_id);
        out.extend_from_slice(self.login_id.as_bytes());
        out.extend_from_slice(self.account_id.as_bytes());
        out.extend_from_slice(&self.created_at_ms.to_be_bytes());
        out.extend_from_slice(&self.expires_at_ms.to_be_bytes());
        put_str(&mut out, &self.verifier_hash);
        out.extend_from_slice(&self.revision.to_be_bytes());
        out
    }
}

fn put_str(out: &mut Vec<u8>, s: &str) {
    let len = u32::try_from(s.len()).expect("an authenticated-data field is shorter than 4 GiB");
    out.extend_from_slice(&len.to_be_bytes());
    out.extend_from_slice(s.as_bytes());
}

/// A login's GitHub credential, the plaintext inside a seal (as JSON). `Debug` hides the tokens.
#[derive(Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct StoredCredential {
    pub access_token: String,
    pub refresh_token: Option<String>,
    /// When the access token expires, if GitHub said.
    pub access_expires_at_ms: Option<i64>,
    /// When the refresh token expires, if GitHub said. (Absent in credentials sealed before
    /// token refresh existed.)
    #[serde(default)]
    pub refresh_expires_at_ms: Option<i64>,
}

impl fmt::Debug for StoredCredential {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("StoredCredential")
            .field("access_token", &"<redacted>")
            .field(
                "refresh_token",
                &self.refresh_token.as_ref().map(|_| "<redacted>"),
            )
            .field("access_expires_at_ms", &self.access_expires_at_ms)
            .field("refresh_expires_at_ms", &self.refresh_expires_at_ms)
            .finish()
    }
}

// --- key text and key files ---

/// The key in the file at `path`, `None` if there is no such file.
fn read_key_file(path: &Path) -> Result<Option<CredentialKey>, KeyError> {
    let bytes = match std::fs::read(path) {
        Ok(bytes) => Zeroizing::new(bytes),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(source) => {
            return Err(KeyError::Io {
                doing: "reading",
                path: path.to_owned(),
                source,
            })
        }
    };
    let bad = |problem| KeyError::BadFile {
        path: path.to_owned(),
        problem,
    };
    // Exactly the key and one line ending (written by us or by `openssl rand -hex 32 > file`);
    // a key without the line ending is accepted too.
    let body = bytes
        .strip_suffix(b"\r\n")
        .or_else(|| bytes.strip_suffix(b"\n"))
        .unwrap_or(&bytes);
    let text = std::str::from_utf8(body).map_err(|_| bad("it is not text"))?;
    let master = decode_key_hex(text).map_err(bad)?;
    warn_if_readable_by_others(path);
    Ok(Some(CredentialKey::from_master(&master)))
}

/// Generates a key and publishes it at `path` atomically: written and synced under a temporary
/// name, then hard-linked into place, which fails if a file appeared there meanwhile (then that
/// file's key is used). A reader therefore never sees a partly written key file.
fn create_key_file(path: &Path, entropy: &dyn Entropy) -> Result<CredentialKey, KeyError> {
    let io = |doing: &'static str, source: std::io::Error| KeyError::Io {
        doing,
        path: path.to_owned(),
        source,
    };
    let parent = path
        .parent()
        .filter(|p| !p.as_os_str().is_empty())
        .unwrap_or_else(|| Path::new("."));
    std::fs::create_dir_all(parent).map_err(|e| io("creating the folder of", e))?;

    let mut master = Zeroizing::new([0u8; KEY_LEN]);
    entropy.fill(master.as_mut());
    let mut line = Zeroizing::new(hex::encode(master.as_ref()));
    line.push('\n');

    let file_name = path
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_else(|| "credential-key".to_owned());
    let temp = parent.join(format!(".{file_name}.{}.tmp", entropy.token_hex(8)));
    let written = write_private_file(&temp, line.as_bytes());
    let linked = written.and_then(|()| std::fs::hard_link(&temp, path));
    // The temporary name goes whatever happened; the key lives on only under `path`.
    let _ = std::fs::remove_file(&temp);
    match linked {
        Ok(()) => {
            sync_folder(parent);
            Ok(CredentialKey::from_master(&master))
        }
        Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {
            // Another process created it first: use its key, not ours.
            line.zeroize();
            read_key_file(path)?.ok_or_else(|| {
                io(
                    "reading",
                    std::io::Error::new(
                        std::io::ErrorKind::NotFound,
                        "it disappeared right after another process created it",
                    ),
                )
            })
        }
        Err(e) => Err(io("creating", e)),
    }
}

/// Creates a new file readable and writable by its owner only, writes `bytes` and syncs them.
fn write_private_file(path: &Path, bytes: &[u8]) -> std::io::Result<()> {
    let mut options = std::fs::OpenOptions::new();
    options.write(true).create_new(true);
    #[cfg(unix)]
    {
        use std::os::unix::fs::OpenOptionsExt;
        options.mode(0o600);
    }
    let mut file = options.open(path)?;
    file.write_all(bytes)?;
    file.sync_all()
}

/// Makes the new directory entry durable (best effort: not every platform can sync a folder).
fn sync_folder(folder: &Path) {
    if let Ok(dir) = std::fs::File::open(folder) {
        let _ = dir.sync_all();
    }
}

/// A key file others can read is used, but said so (the path and mode only).
fn warn_if_readable_by_others(path: &Path) {
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        if let Ok(meta) = std::fs::metadata(path) {
            let mode = meta.permissions().mode() & 0o777;
            if mode & 0o077 != 0 {
                tracing::warn!(
                    path = %path.display(),
                    mode = format_args!("{mode:o}"),
                    "the credential key file is accessible to other users; chmod 600 it"
                );
            }
        }
    }
    #[cfg(not(unix))]
    let _ = path;
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::runtime::entropy::SeededEntropy;

    const KEY_A: &str = "000102030405060708090a0b0c0d0e0f101112131415161718191a1b1c1d1e1f";
    const KEY_B: &str = "1f1e1d1c1b1a191817161514131211100f0e0d0c0b0a09080706050403020100";

    fn aad() -> CredentialAad {
        CredentialAad {
            origin: "https://chopin.example".into(),
            client_id: "Iv1.client".into(),
            login_id: Uuid::from_u128(0xb1),
            account_id: Uuid::from_u128(0xacc),
            created_at_ms: 1_000,
            expires_at_ms: 2_000,
            verifier_hash: "verifier-hash".into(),
            revision: 1,
        }
    }

    fn key(hex: &str) -> CredentialKey {
        CredentialKey::from_hex(hex).expect("a valid key")
    }

    #[test]
    fn seal_then_open_round_trips() {
        let entropy = SeededEntropy::new(1);
        let k = key(KEY_A);
        let sealed = k.seal(&entropy, &aad(), b"gho_secret");
        assert_eq!(sealed[0], SEAL_FORMAT_V1);
        assert_eq!(sealed.len(), 1 + NONCE_LEN + b"gho_secret".len() + TAG_LEN);
        assert!(
            !sealed.windows(10).any(|w| w == b"gho_secret"),
            "the plaintext does not appear in the sealed bytes"
        );
        assert_eq!(k.open(&aad(), &sealed).unwrap(), b"gho_secret");
        assert_eq!(k.open(&aad(), &k.seal(&entropy, &aad(), b"")).unwrap(), b"");
    }

    #[test]
    fn every_aad_field_is_bound() {
        let entropy = SeededEntropy::new(2);
        let k = key(KEY_A);
        let sealed = k.seal(&entropy, &aad(), b"token");
        type Change = fn(&mut CredentialAad);
        let changes: [(&str, Change); 8] = [
            ("origin", |a| a.origin.push('/')),
            ("client_id", |a| a.client_id = "Iv1.other".into()),
            ("login_id", |a| a.login_id = Uuid::from_u128(0xb2)),
            ("account_id", |a| a.account_id = Uuid::from_u128(0xacd)),
            ("created_at_ms", |a| a.created_at_ms += 1),
            ("expires_at_ms", |a| a.expires_at_ms += 1),
            ("verifier_hash", |a| a.verifier_hash.push('x')),
            ("revision", |a| a.revision += 1),
        ];
        for (field, change) in changes {
            let mut other = aad();
            change(&mut other);
            assert_ne!(other.to_bytes(), aad().to_bytes(), "{field} is serialized");
            assert_eq!(
                k.open(&other, &sealed),
                Err(SealError::Authentication),
                "changing {field} must fail to open"
            );
        }
        assert_eq!(k.open(&aad(), &sealed).unwrap(), b"token");
    }

    #[test]
    fn aad_fields_are_length_prefixed() {
        let mut a = aad();
        let mut b = aad();
        (a.origin, a.client_id) = ("https://x".into(), "yz".into());
        (b.origin, b.client_id) = ("https://xy".into(), "z".into());
        assert_ne!(a.to_bytes(), b.to_bytes());
    }

    #[test]
    fn tampered_sealed_bytes_fail() {
        let entropy = SeededEntropy::new(3);
        let k = key(KEY_A);
        let sealed = k.seal(&entropy, &aad(), b"token");
        for i in 1..sealed.len() {
            let mut bad = sealed.clone();
            bad[i] ^= 0x01;
            assert_eq!(
                k.open(&aad(), &bad),
                Err(SealError::Authentication),
                "flipping byte {i} must fail"
            );
        }
        let mut other_version = sealed.clone();
        other_version[0] = 2;
        assert_eq!(
            k.open(&aad(), &other_version),
            Err(SealError::UnknownFormat)
        );
        assert_eq!(
            k.open(&aad(), &sealed[..sealed.len() - 1]),
            Err(SealError::Authentication)
        );
        assert_eq!(
            k.open(&aad(), &sealed[..1 + NONCE_LEN]),
            Err(SealError::Truncated)
        );
        assert_eq!(k.open(&aad(), &[]), Err(SealError::Truncated));
    }

    #[test]
    fn each_seal_draws_a_fresh_nonce() {
        let entropy = SeededEntropy::new(4);
        let k = key(KEY_A);
        let first = k.seal(&entropy, &aad(), b"same");
        let second = k.seal(&entropy, &aad(), b"same");
        assert_ne!(first[1..1 + NONCE_LEN], second[1..1 + NONCE_LEN]);
        assert_ne!(first, second);
        assert_eq!(
            k.open(&aad(), &first).unwrap(),
            k.open(&aad(), &second).unwrap()
        );
    }

    #[test]
    fn wrong_key_fails() {
        let entropy = SeededEntropy::new(5);
        let sealed = key(KEY_A).seal(&entropy, &aad(), b"token");
        assert_eq!(
            key(KEY_B).open(&aad(), &sealed),
            Err(SealError::Authentication)
        );
        assert_eq!(
            key(&KEY_A.to_uppercase()).open(&aad(), &sealed).unwrap(),
            b"token",
            "hex case does not change the key"
        );
    }

    #[test]
    fn aead_key_is_derived_not_the_master_key() {
        // Sealing directly under the master key must not open: HKDF stands in between.
        let master: [u8; KEY_LEN] = hex::decode(KEY_A).unwrap().try_into().unwrap();
        let raw = Aes256Gcm::new_from_slice(&master).unwrap();
        let nonce = [7u8; NONCE_LEN];
        let ct = raw
            .encrypt(
                Nonce::from_slice(&nonce),
                Payload {
                    msg: b"token".as_slice(),
                    aad: &aad().to_bytes(),
                },
            )
            .unwrap();
        let mut sealed = vec![SEAL_FORMAT_V1];
        sealed.extend_from_slice(&nonce);
        sealed.extend_from_slice(&ct);
        assert_eq!(
            key(KEY_A).open(&aad(), &sealed),
            Err(SealError::Authentication)
        );
    }

    #[test]
    fn credential_record_round_trips_and_debug_hides_tokens() {
        let entropy = SeededEntropy::new(7);
        let k = key(KEY_A);
        let credential = StoredCredential {
            access_token: "ghu_access".into(),
            refresh_token: Some("ghr_refresh".into()),
            access_expires_at_ms: Some(28_800_000),
            refresh_expires_at_ms: None,
        };
        let sealed = k.seal_credential(&entropy, &aad(), &credential);
        assert_eq!(k.open_credential(&aad(), &sealed).unwrap(), credential);
        let not_json = k.seal(&entropy, &aad(), b"not json");
        assert_eq!(
            k.open_credential(&aad(), &not_json),
            Err(SealError::Malformed)
        );

        let shown = format!("{credential:?} {k:?}");
        assert!(
            !shown.contains("ghu_access") && !shown.contains("ghr_refresh"),
            "{shown}"
        );
        assert!(!shown.contains("0001020304"), "{shown}");
        assert!(shown.contains("28800000"));
    }

    #[test]
    fn from_hex_refuses_non_keys_without_echoing_them() {
        let cases = [
            ("", "empty"),
            ("abcd", "too short"),
            (&*format!("{KEY_A}00"), "too long"),
            (&*format!("{}zz", &KEY_A[..62]), "not hexadecimal"),
        ];
        for (text, says) in cases {
            let err = CredentialKey::from_hex(text).unwrap_err().to_string();
            assert!(err.contains("64 hexadecimal characters"), "{err}");
            assert!(err.contains(says), "{err}");
            if !text.is_empty() {
                assert!(!err.contains(text), "the value is not echoed: {err}");
            }
        }
        assert!(CredentialKey::from_hex(&format!("  {KEY_A}\n")).is_ok());
    }
}
