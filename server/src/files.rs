//! Files in Chat: what an upload is (decided from its bytes), whether it is kept, who may read
//! it, taking one back, forgetting what nobody sent, and the files a message sends.
//!
//! Owns: [`Files`] and the rules of hosted-agent.md "Files in Chat" that are not the routes' or
//! the store's — [`sniff`] (FILE-14..17, RULINGS FILE-17), the refusal order of RULINGS FILE-33
//! after the route's own `not-allowed`, the unsent limit handed to the store (FILE-12, RULINGS
//! FILE-13), the one-day window on the server's clock (FILE-11), the uploader-only rule before a
//! send (FILE-09, FILE-29) and a message's own checks ([`Files::for_message`]).
//! Does not own: the bytes at rest ([`crate::store::AttachmentStore`]), the routes and their
//! headers (the transport layer), or what a turn makes of a file (the turns and the
//! harness adapters).
//!
//! Invariants:
//! - A file is stored only under the type its bytes have; a text file always as `text/plain`.
//! - A file nobody sent is unreachable from the moment its day is over, whether or not the
//!   sweep has deleted it yet: every read and every send checks the window itself.
//! - Nothing here reads a body: the route gives the bytes it read under the per-file cap.

use std::sync::Arc;

use serde_json::{json, Value};
use uuid::Uuid;

use crate::runtime::{SharedClock, SharedEntropy};
use crate::store::{
    Attachment, AttachmentStore, Kept, NewAttachment, StoreError, TakeBack, UnixMillis, UnsentLimit,
};

/// How long a file nobody sent is kept (FILE-11: a day).
pub const UNSENT_KEPT_MS: i64 = 24 * 60 * 60 * 1000;
/// The longest file name kept, in bytes of UTF-8.
pub const NAME_MAX_BYTES: usize = 255;
/// How many times what a message may carry one person may leave unsent (FILE-12).
pub const UNSENT_MESSAGES: u64 = 4;

/// The four raster types an image may be (FILE-14), as their bytes say.
pub const IMAGE_TYPES: [&str; 4] = ["image/png", "image/jpeg", "image/webp", "image/gif"];

/// The three attachment settings (FILE-18..20), after the `remote` ceiling (FILE-22).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Limits {
    /// One file, in bytes (`CHAT_ATTACHMENT_MAX_BYTES`).
    pub max_bytes: u64,
    /// Files a message carries (`CHAT_ATTACHMENT_MAX_COUNT`); 0 turns files off.
    pub max_count: u32,
    /// All of one message's files, in bytes (`CHAT_ATTACHMENT_MAX_TOTAL_BYTES`).
    pub max_total_bytes: u64,
}

impl Limits {
    /// As the browser is told on joining (FILE-21): `{maxBytes, maxCount, maxTotalBytes}`.
    pub fn json(&self) -> Value {
        json!({
            "maxBytes": self.max_bytes,
            "maxCount": self.max_count,
            "maxTotalBytes": self.max_total_bytes,
        })
    }
}

/// Why an upload, a read or a send of a file was refused: the spec's code and our words.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Refusal {
    pub code: &'static str,
    pub message: String,
}

impl Refusal {
    fn new(code: &'static str, message: impl Into<String>) -> Self {
        Refusal {
            code,
            message: message.into(),
        }
    }

    /// `not-allowed` (FILE-08).
    pub fn not_allowed(why: impl Into<String>) -> Self {
        Refusal::new("not-allowed", why)
    }

    /// `empty` (FILE-06).
    pub fn empty() -> Self {
        Refusal::new("empty", "The file is empty.")
    }

    /// `too-large` (FILE-05): one file over the per-file cap.
    pub fn too_large(limits: &Limits) -> Self {
        Refusal::new(
            "too-large",
            format!(
                "A file is at most {}; this one is larger.",
                size_words(limits.max_bytes)
            ),
        )
    }
}

/// What the bytes of an upload are (FILE-14): `kind` (`image` or `text`) and the type it is
/// stored under (FILE-16).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Sniffed {
    pub kind: &'static str,
    pub mime_type: &'static str,
}

/// Decides what `bytes` are, whatever `name` and `declared` say (FILE-14..16): one of the four
/// rasters by its bytes is an image; UTF-8 with no stray control character (RULINGS FILE-17:
/// every C0 control but tab, LF, CR and form feed; a leading BOM allowed) is text; anything else
/// is `unsupported`. A name or declared type that says image needs one of the four rasters:
/// text bytes under it are `image-type` (an SVG, a page named `.png`); other bytes, a HEIC
/// among them, are `unsupported` first (RULINGS FILE-33's order). An empty file is not sniffed.
pub fn sniff(name: &str, declared: Option<&str>, bytes: &[u8]) -> Result<Sniffed, Refusal> {
    let raster = infer::get(bytes)
        .map(|t| t.mime_type())
        .and_then(|m| IMAGE_TYPES.iter().copied().find(|i| *i == m));
    if let Some(mime_type) = raster {
        return Ok(Sniffed {
            kind: "image",
            mime_type,
        });
    }
    if !is_plain_text(bytes) {
        return Err(Refusal::new(
            "unsupported",
            "Only PNG, JPEG, WebP and GIF images and plain UTF-8 text files can be attached.",
        ));
    }
    if says_image(name, declared) {
        return Err(Refusal::new(
            "image-type",
            "An image has to be a PNG, JPEG, WebP or GIF; this file's contents are not one.",
        ));
    }
    Ok(Sniffed {
        kind: "text",
        mime_type: "text/plain",
    })
}

/// UTF-8 with no stray control character (RULINGS FILE-17).
pub fn is_plain_text(bytes: &[u8]) -> bool {
    let body = bytes.strip_prefix(b"\xEF\xBB\xBF").unwrap_or(bytes);
    let Ok(text) = std::str::from_utf8(body) else {
        return false;
    };
    !text
        .chars()
        .any(|c| (c as u32) < 0x20 && !matches!(c, '\t' | '\n' | '\r' | '\x0c'))
}

/// Whether the name's extension or the declared type says image.
fn says_image(name: &str, declared: Option<&str>) -> bool {
    let declared = declared.is_some_and(|t| {
        t.trim()
            .get(..6)
            .is_some_and(|p| p.eq_ignore_ascii_case("image/"))
    });
    let named = mime_guess::from_path(name)
        .iter()
        .any(|m| m.type_() == mime_guess::mime::IMAGE);
    declared || named
}

/// `n` bytes in words: `1 MiB`, `512 KiB`, `300 bytes`.
pub fn size_words(n: u64) -> String {
    const KIB: u64 = 1024;
    const MIB: u64 = 1024 * 1024;
    if n >= MIB && n.is_multiple_of(MIB) {
        format!("{} MiB", n / MIB)
    } else if n >= KIB && n.is_multiple_of(KIB) {
        format!("{} KiB", n / KIB)
    } else {
        format!("{n} bytes")
    }
}

/// A file as the API and the room show it (FILE-04): `{id, name, kind, mimeType, size}`.
pub fn file_json(a: &Attachment) -> Value {
    json!({
        "id": a.id,
        "name": a.name,
        "kind": a.kind,
        "mimeType": a.mime_type,
        "size": a.size,
    })
}

/// A file a message sends, with its bytes, for the Planner's turn.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SentFile {
    pub file: Attachment,
    pub bytes: Vec<u8>,
}

/// The Chat files of every document (see the module docs).
pub struct Files {
    store: Arc<dyn AttachmentStore>,
    clock: SharedClock,
    entropy: SharedEntropy,
    limits: Limits,
}

impl Files {
    pub fn new(
        store: Arc<dyn AttachmentStore>,
        clock: SharedClock,
        entropy: SharedEntropy,
        limits: Limits,
    ) -> Self {
        Files {
            store,
            clock,
            entropy,
            limits,
        }
    }

    pub fn limits(&self) -> Limits {
        self.limits
    }

    /// Whether files are on at all (FILE-19: a count of 0 turns them off).
    pub fn enabled(&self) -> bool {
        self.limits.max_count > 0
    }

    /// The oldest `created_at_ms` a file nobody sent may have now and still be kept.
    fn window_start(&self) -> UnixMillis {
        self.clock.now_ms() - UNSENT_KEPT_MS + 1
    }

    /// Keeps an upload of `uploader` to `document` (its write access and the document checked
    /// by the route, and `bytes` read under the per-file cap): the refusals after
    /// `not-allowed` in RULINGS FILE-33's order, then the store's unsent limit.
    pub async fn keep(
        &self,
        document: Uuid,
        uploader: &str,
        name: &str,
        declared: Option<&str>,
        bytes: Vec<u8>,
    ) -> Result<Attachment, FileError> {
        if bytes.is_empty() {
            return Err(Refusal::empty().into());
        }
        if bytes.len() as u64 > self.limits.max_bytes {
            return Err(Refusal::too_large(&self.limits).into());
        }
        let sniffed = sniff(name, declared, &bytes)?;
        let file = Attachment {
            id: self.entropy.uuid(),
            document_id: document,
            uploader: uploader.to_owned(),
            name: name.to_owned(),
            kind: sniffed.kind.to_owned(),
            mime_type: sniffed.mime_type.to_owned(),
            size: bytes.len() as i64,
            created_at_ms: self.clock.now_ms(),
            sent_seq: None,
        };
        let limit = UnsentLimit {
            max_files: UNSENT_MESSAGES * u64::from(self.limits.max_count),
            max_bytes: UNSENT_MESSAGES.saturating_mul(self.limits.max_total_bytes),
            since_ms: self.window_start(),
        };
        let kept = self
            .store
            .put_attachment(
                &NewAttachment {
                    attachment: file.clone(),
                    bytes,
                },
                limit,
            )
            .await?;
        let unsent = UNSENT_MESSAGES;
        match kept {
            Kept::Kept => Ok(file),
            Kept::TooMany => Err(Refusal::new(
                "too-many",
                format!(
                    "You already have {} files waiting to be sent here, {unsent} messages' worth. Send or remove some first.",
                    limit.max_files
                ),
            )
            .into()),
            Kept::TooMuch => Err(Refusal::new(
                "too-much",
                format!(
                    "Your files waiting to be sent here would pass {}, {unsent} messages' worth. Send or remove some first.",
                    size_words(limit.max_bytes)
                ),
            )
            .into()),
        }
    }

    /// `document`'s file `id` with its bytes, for `reader` who can read the document: sent
    /// ones for anyone, an unsent one only for its uploader and only within its day (FILE-29).
    /// `None` for everything else alike (FILE-30).
    pub async fn read(
        &self,
        document: Uuid,
        id: Uuid,
        reader: &str,
    ) -> Result<Option<(Attachment, Vec<u8>)>, StoreError> {
        let found = self.store.attachment(document, id).await?;
        Ok(found.filter(|(a, _)| a.sent_seq.is_some() || self.unsent_of(a, reader)))
    }

    /// Whether `a` is `login`'s unsent file, still within its day.
    fn unsent_of(&self, a: &Attachment, login: &str) -> bool {
        a.sent_seq.is_none() && a.uploader == login && a.created_at_ms >= self.window_start()
    }

    /// Takes back `uploader`'s unsent file `id` of `document` (FILE-09).
    pub async fn take_back(
        &self,
        document: Uuid,
        id: Uuid,
        uploader: &str,
    ) -> Result<TakeBack, StoreError> {
        // One past its day is gone already, whatever the sweep has done.
        match self.store.attachment(document, id).await? {
            Some((a, _)) if a.sent_seq.is_none() && !self.unsent_of(&a, uploader) => {
                return Ok(TakeBack::Missing)
            }
            _ => {}
        }
        self.store
            .take_back_attachment(document, id, uploader)
            .await
    }

    /// Deletes the files nobody sent within their day (FILE-11). How many.
    pub async fn forget_unsent(&self) -> Result<u64, StoreError> {
        self.store
            .forget_unsent_attachments(self.window_start())
            .await
    }

    /// The files a message by `sender` to `document` sends, with their bytes: each the
    /// sender's own unsent upload within its day, at most the message's count and total
    /// (FILE-19, FILE-20). The refusal says which rule.
    pub async fn for_message(
        &self,
        document: Uuid,
        sender: &str,
        ids: &[Uuid],
    ) -> Result<Vec<SentFile>, FileError> {
        if ids.is_empty() {
            return Ok(Vec::new());
        }
        if !self.enabled() {
            return Err(Refusal::not_allowed("Files are turned off on this server.").into());
        }
        if ids.len() > self.limits.max_count as usize {
            return Err(Refusal::new(
                "too-many",
                format!(
                    "A message carries at most {} files; this one has {}.",
                    self.limits.max_count,
                    ids.len()
                ),
            )
            .into());
        }
        let mut files: Vec<SentFile> = Vec::with_capacity(ids.len());
        for id in ids {
            if files.iter().any(|f| f.file.id == *id) {
                continue;
            }
            match self.store.attachment(document, *id).await? {
                Some((file, bytes)) if self.unsent_of(&file, sender) => {
                    files.push(SentFile { file, bytes });
                }
                _ => {
                    return Err(Refusal::new(
                        "file-not-found",
                        "A file of this message is no longer waiting to be sent (sent already, removed, or older than a day). Attach it again.",
                    )
                    .into())
                }
            }
        }
        let total: u64 = files.iter().map(|f| f.file.size as u64).sum();
        if total > self.limits.max_total_bytes {
            return Err(Refusal::new(
                "too-much",
                format!(
                    "A message's files are at most {} in all; these are {}.",
                    size_words(self.limits.max_total_bytes),
                    size_words(total)
                ),
            )
            .into());
        }
        Ok(files)
    }
}

/// A refused file, or storage that failed.
#[derive(Debug, Clone)]
pub enum FileError {
    Refused(Refusal),
    Store(StoreError),
}

impl From<Refusal> for FileError {
    fn from(r: Refusal) -> Self {
        FileError::Refused(r)
    }
}

impl From<StoreError> for FileError {
    fn from(e: StoreError) -> Self {
        FileError::Store(e)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const PNG: &[u8] = &[
        0x89, 0x50, 0x4E, 0x47, 0x0D, 0x0A, 0x1A, 0x0A, 0, 0, 0, 0x0D, b'I', b'H', b'D', b'R',
    ];
    const GIF: &[u8] = b"GIF89a\x01\x00\x01\x00\x00\x00\x00";
    const JPEG: &[u8] = &[0xFF, 0xD8, 0xFF, 0xE0, 0, 0x10, b'J', b'F', b'I', b'F'];
    const WEBP: &[u8] = b"RIFF\x1a\x00\x00\x00WEBPVP8 ";
    const HEIC: &[u8] = b"\x00\x00\x00\x18ftypheic\x00\x00\x00\x00mif1heic";

    fn code(r: Result<Sniffed, Refusal>) -> &'static str {
        match r {
            Ok(s) => s.mime_type,
            Err(r) => r.code,
        }
    }

    #[test]
    fn file_14_file_16_the_type_comes_from_the_bytes_whatever_the_name_says() {
        for (bytes, mime) in [
            (PNG, "image/png"),
            (GIF, "image/gif"),
            (JPEG, "image/jpeg"),
            (WEBP, "image/webp"),
        ] {
            assert_eq!(code(sniff("notes.txt", Some("text/plain"), bytes)), mime);
        }
        // A text file, whatever it is called, is text/plain (FILE-16).
        assert_eq!(
            sniff("deploy.yml", Some("application/yaml"), b"on: push\n"),
            Ok(Sniffed {
                kind: "text",
                mime_type: "text/plain"
            })
        );
        assert_eq!(
            code(sniff("a.pdf", None, b"%PDF-1.7\n\x00\x01")),
            "unsupported"
        );
        assert_eq!(
            code(sniff("a.bin", None, &[0xff, 0xfe, 0x00])),
            "unsupported"
        );
    }

    #[test]
    fn file_15_an_svg_a_heic_or_a_page_named_png_is_refused() {
        let svg = br#"<svg xmlns="http://www.w3.org/2000/svg"><script>alert(1)</script></svg>"#;
        assert_eq!(code(sniff("logo.svg", None, svg)), "image-type");
        assert_eq!(code(sniff("x", Some("image/svg+xml"), svg)), "image-type");
        assert_eq!(
            code(sniff("shot.png", None, b"<html><body>hi</body></html>")),
            "image-type"
        );
        assert_eq!(
            code(sniff("IMG_1.HEIC", Some("image/heic"), HEIC)),
            "unsupported"
        );
    }

    #[test]
    fn file_17_stray_control_characters_are_c0_but_tab_lf_cr_and_form_feed_and_a_bom_is_fine() {
        assert!(is_plain_text(b"\xEF\xBB\xBFa\tb\r\nc\x0cd"));
        for c in (0u8..0x20).filter(|c| ![b'\t', b'\n', b'\r', 0x0c].contains(c)) {
            assert!(!is_plain_text(&[b'a', c, b'b']), "control {c:#04x}");
        }
        assert!(!is_plain_text(b"caf\xe9"), "not UTF-8");
        assert!(
            is_plain_text("Ωmega — ok\u{7f}".as_bytes()),
            "DEL is not C0"
        );
    }

    #[test]
    fn sizes_are_said_in_their_round_unit() {
        assert_eq!(size_words(1024 * 1024), "1 MiB");
        assert_eq!(size_words(4 * 1024 * 1024), "4 MiB");
        assert_eq!(size_words(1536), "1536 bytes");
        assert_eq!(size_words(2048), "2 KiB");
    }

    proptest::proptest! {
        /// Whatever the bytes, name and declared type: no panic, and a kept type is what the
        /// bytes are (an image only for one of the four rasters' signatures, text only for
        /// clean UTF-8).
        #[test]
        fn sniffing_never_panics_and_never_keeps_a_type_the_bytes_do_not_have(
            bytes in proptest::collection::vec(proptest::num::u8::ANY, 0..64),
            prefix in proptest::sample::select(vec![&b""[..], PNG, GIF, JPEG, WEBP, HEIC, b"<svg", b"\xEF\xBB\xBF"]),
            name in "[a-zA-Z0-9 .]{0,12}",
            declared in proptest::option::of("[a-z]{1,6}/[a-z+.-]{1,8}"),
        ) {
            let mut all = prefix.to_vec();
            all.extend(&bytes);
            match sniff(&name, declared.as_deref(), &all) {
                Ok(Sniffed { kind: "image", mime_type }) => {
                    proptest::prop_assert_eq!(
                        infer::get(&all).map(|t| t.mime_type()),
                        Some(mime_type)
                    );
                }
                Ok(Sniffed { kind, mime_type }) => {
                    proptest::prop_assert_eq!((kind, mime_type), ("text", "text/plain"));
                    proptest::prop_assert!(is_plain_text(&all));
                    proptest::prop_assert!(!says_image(&name, declared.as_deref()));
                }
                Err(r) => proptest::prop_assert!(["unsupported", "image-type"].contains(&r.code)),
            }
        }
    }
}
