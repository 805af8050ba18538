//! The credential key file and sealed credentials through the public API (RFC-60 / EAR-03):
//! the generated key file beside the database (mode 0600, parent folders created, reread
//! identically, never replaced), a bad key file refused naming its path, and a sealed credential
//! that survives a store reopen and opens only for the login and revision it was sealed for.
//!
//! Owns: the file-system behaviour of `CredentialKey::load_or_create` and the crypto ↔ store
//! hand-off. The AEAD rules themselves (every bound field, tampering, nonces, wrong key) are unit
//! tests in `server/src/crypto.rs`.

use chopin_server::store::prelude::*;
use std::sync::Arc;

use chopin_server::identity::crypto::{
    CredentialAad, CredentialKey, SealError, StoredCredential, KEY_HEX_LEN,
};
use chopin_server::runtime::entropy::{Entropy, OsEntropy, SeededEntropy};
use chopin_server::store::{BrowserLogin, SqliteStore};
use uuid::Uuid;

const KEY_A: &str = "000102030405060708090a0b0c0d0e0f101112131415161718191a1b1c1d1e1f";

fn aad(login: &BrowserLogin, revision: i64) -> CredentialAad {
    CredentialAad {
        origin: "https://chopin.example".into(),
        client_id: "Iv1.client".into(),
        login_id: login.id,
        account_id: login.account_id,
        created_at_ms: login.created_at_ms,
        expires_at_ms: login.expires_at_ms,
        verifier_hash: login.verifier_hash.clone(),
        revision,
    }
}

fn bare_aad() -> CredentialAad {
    aad(
        &BrowserLogin {
            id: Uuid::from_u128(0xb1),
            account_id: Uuid::from_u128(0xacc),
            verifier_hash: "h".into(),
            created_at_ms: 1_000,
            expires_at_ms: 2_000,
            signed_out_at_ms: None,
        },
        1,
    )
}

#[cfg(unix)]
#[test]
fn key_file_is_created_private_and_reread_identically() {
    use std::os::unix::fs::PermissionsExt;
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("not").join("yet").join("credential.key");
    let entropy = SeededEntropy::new(8);
    let created = CredentialKey::load_or_create(&path, &entropy).unwrap();
    let text = std::fs::read_to_string(&path).unwrap();
    assert_eq!(text.len(), KEY_HEX_LEN + 1);
    assert!(text.ends_with('\n'));
    assert!(text[..KEY_HEX_LEN]
        .bytes()
        .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b)));
    assert_eq!(
        std::fs::metadata(&path).unwrap().permissions().mode() & 0o777,
        0o600
    );
    let names: Vec<_> = std::fs::read_dir(path.parent().unwrap())
        .unwrap()
        .map(|e| e.unwrap().file_name())
        .collect();
    assert_eq!(
        names,
        ["credential.key"],
        "no temporary file is left behind"
    );

    // Rereading keeps the file and yields the same key (a different entropy cannot matter).
    let reread = CredentialKey::load_or_create(&path, &SeededEntropy::new(99)).unwrap();
    assert_eq!(
        std::fs::read_to_string(&path).unwrap(),
        text,
        "the file is kept"
    );
    let sealed = created.seal(&entropy, &bare_aad(), b"token");
    assert_eq!(reread.open(&bare_aad(), &sealed).unwrap(), b"token");
    // The file's content works as the SESSION_ENCRYPTION_KEY setting too.
    let from_setting = CredentialKey::from_hex(&text).unwrap();
    assert_eq!(from_setting.open(&bare_aad(), &sealed).unwrap(), b"token");
}

#[test]
fn two_generated_key_files_hold_different_keys() {
    let dir = tempfile::tempdir().unwrap();
    let a = dir.path().join("a.key");
    let b = dir.path().join("b.key");
    CredentialKey::load_or_create(&a, &OsEntropy).unwrap();
    CredentialKey::load_or_create(&b, &OsEntropy).unwrap();
    assert_ne!(std::fs::read(&a).unwrap(), std::fs::read(&b).unwrap());
}

#[test]
fn bad_key_file_is_refused_naming_the_path() {
    let dir = tempfile::tempdir().unwrap();
    let entropy = SeededEntropy::new(9);
    let cases: Vec<(Vec<u8>, &str)> = vec![
        (Vec::new(), "empty"),
        (b"not a key\n".to_vec(), "too short"),
        (format!("{KEY_A}\n\n").into_bytes(), "too long"),
        (
            format!("{}zz\n", &KEY_A[..62]).into_bytes(),
            "not hexadecimal",
        ),
        (vec![0xff; 65], "not text"),
    ];
    for (content, says) in cases {
        let path = dir.path().join("credential.key");
        std::fs::write(&path, &content).unwrap();
        let err = CredentialKey::load_or_create(&path, &entropy)
            .unwrap_err()
            .to_string();
        assert!(err.contains(&path.display().to_string()), "{err}");
        assert!(err.contains("64 hexadecimal characters"), "{err}");
        assert!(err.contains(says), "{err}");
        assert!(
            !err.contains(&KEY_A[..62]),
            "the content is not echoed: {err}"
        );
        assert_eq!(
            std::fs::read(&path).unwrap(),
            content,
            "the file is left alone"
        );
    }
}

#[test]
fn key_file_without_newline_or_with_crlf_is_accepted() {
    let dir = tempfile::tempdir().unwrap();
    let entropy = SeededEntropy::new(10);
    let sealed = CredentialKey::from_hex(KEY_A)
        .unwrap()
        .seal(&entropy, &bare_aad(), b"t");
    for (name, content) in [
        ("bare.key", KEY_A.to_owned()),
        ("crlf.key", format!("{KEY_A}\r\n")),
    ] {
        let path = dir.path().join(name);
        std::fs::write(&path, &content).unwrap();
        let loaded = CredentialKey::load_or_create(&path, &entropy).unwrap();
        assert_eq!(loaded.open(&bare_aad(), &sealed).unwrap(), b"t", "{name}");
    }
}

#[test]
fn key_file_path_that_is_a_folder_is_an_error_naming_it() {
    let dir = tempfile::tempdir().unwrap();
    let err = CredentialKey::load_or_create(dir.path(), &SeededEntropy::new(11))
        .unwrap_err()
        .to_string();
    assert!(err.contains(&dir.path().display().to_string()), "{err}");
}

/// Sign-in seals at revision 1; a restart reopens the database and reloads the key file; the
/// credential opens for its own login and revision only.
#[tokio::test]
async fn sealed_credential_survives_a_restart_and_stays_bound_to_its_login() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("data").join("chopin.db");
    let key_path = dir.path().join("data").join("credential.key");
    let entropy: Arc<dyn Entropy> = Arc::new(SeededEntropy::new(12));

    let store = SqliteStore::open(&db).await.unwrap();
    let key = CredentialKey::load_or_create(&key_path, entropy.as_ref()).unwrap();
    let account = store.upsert_account(1, "ada", 1_000).await.unwrap();
    let login = BrowserLogin {
        id: Uuid::from_u128(0xb1),
        account_id: account.id,
        verifier_hash: "verifier-hash".into(),
        created_at_ms: 1_000,
        expires_at_ms: 1_000_000,
        signed_out_at_ms: None,
    };
    let other = BrowserLogin {
        id: Uuid::from_u128(0xb2),
        verifier_hash: "other-hash".into(),
        ..login.clone()
    };
    store.create_browser_login(&login).await.unwrap();
    store.create_browser_login(&other).await.unwrap();
    let credential = StoredCredential {
        access_token: "ghu_access".into(),
        refresh_token: Some("ghr_refresh".into()),
        access_expires_at_ms: Some(28_801_000),
        refresh_expires_at_ms: None,
    };
    let sealed = key.seal_credential(entropy.as_ref(), &aad(&login, 1), &credential);
    assert_eq!(
        store
            .set_login_credential(login.id, 0, &sealed)
            .await
            .unwrap(),
        Some(1)
    );
    store.close().await;
    drop(key);

    let store = SqliteStore::open(&db).await.unwrap();
    let key = CredentialKey::load_or_create(&key_path, entropy.as_ref()).unwrap();
    let (revision, stored) = store.login_credential(login.id).await.unwrap().unwrap();
    assert_eq!(revision, 1);
    assert_eq!(stored, sealed);
    for file in std::fs::read_dir(db.parent().unwrap()).unwrap() {
        let file = file.unwrap().path();
        let raw = std::fs::read(&file).unwrap();
        assert!(
            !raw.windows(10).any(|w| w == b"ghu_access"),
            "no plaintext token in {}",
            file.display()
        );
    }
    assert_eq!(
        key.open_credential(&aad(&login, revision), &stored)
            .unwrap(),
        credential
    );
    // Copied to another login, or read back at another revision, it does not open.
    assert_eq!(
        key.open_credential(&aad(&other, revision), &stored),
        Err(SealError::Authentication)
    );
    assert_eq!(
        key.open_credential(&aad(&login, revision + 1), &stored),
        Err(SealError::Authentication)
    );
}
