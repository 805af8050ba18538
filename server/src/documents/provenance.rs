//! The shape of a document's creation provenance (ISO-43): the branch and commit of the checkout
//! the creating agent worked in, as MCP `create_document`'s `baseBranch` and `baseCommit`.
//!
//! Owns: [`provenance_of`] — both or neither; `baseBranch` a git branch name by
//! `git check-ref-format --branch`'s rules ([`branch_problem`]); `baseCommit` a full object id,
//! 40 (SHA-1) or 64 (SHA-256) lowercase hex digits ([`commit_problem`]); a refusal
//! `invalid-provenance` naming the field and the rule it breaks.
//! Does not own: whether the branch or commit exists. They are never resolved against GitHub
//! or compared with anything: the creating agent reads them from its own checkout, and a
//! reader compares them with theirs.
//!
//! Invariants: pure (no I/O); a value accepted here is stored exactly as given.

use http::StatusCode;

use crate::error::ApiError;
use crate::store::Provenance;

/// Most bytes of a branch name (git allows longer refs; 255 is what a file name can hold, and
/// GitHub's own limit for a ref's last component).
pub const BRANCH_MAX_BYTES: usize = 255;

/// The provenance a `create_document` call gives: both fields or neither (`None`), each of its
/// shape; `invalid-provenance` otherwise, before anything is created.
pub fn provenance_of(
    base_branch: Option<String>,
    base_commit: Option<String>,
) -> Result<Option<Provenance>, ApiError> {
    match (base_branch, base_commit) {
        (None, None) => Ok(None),
        (Some(_), None) => Err(invalid(
            "baseCommit",
            "is missing: send baseBranch and baseCommit together, or neither",
        )),
        (None, Some(_)) => Err(invalid(
            "baseBranch",
            "is missing: send baseBranch and baseCommit together, or neither",
        )),
        (Some(base_branch), Some(base_commit)) => {
            if let Some(problem) = branch_problem(&base_branch) {
                return Err(invalid("baseBranch", problem));
            }
            if let Some(problem) = commit_problem(&base_commit) {
                return Err(invalid("baseCommit", problem));
            }
            Ok(Some(Provenance {
                base_branch,
                base_commit,
            }))
        }
    }
}

fn invalid(field: &str, problem: &str) -> ApiError {
    ApiError::new(
        StatusCode::BAD_REQUEST,
        "invalid-provenance",
        format!(
            "{field} {problem}. Chopin checks only the shape of baseBranch (a git branch name) and baseCommit (a full 40- or 64-digit lowercase hex commit id) and never looks them up. Nothing was created."
        ),
    )
}

/// Why `name` is not a git branch name, or `None` if it is one. The rules of
/// `git check-ref-format --branch` (see git-check-ref-format(1)), plus a bound of
/// [`BRANCH_MAX_BYTES`].
pub fn branch_problem(name: &str) -> Option<&'static str> {
    if name.is_empty() {
        return Some("is empty");
    }
    if name.len() > BRANCH_MAX_BYTES {
        return Some("is longer than 255 bytes");
    }
    if name.bytes().any(|b| b < 0x20 || b == 0x7f) {
        return Some("has a control character");
    }
    if let Some(c) = name
        .chars()
        .find(|c| matches!(c, ' ' | '~' | '^' | ':' | '?' | '*' | '[' | '\\'))
    {
        return Some(match c {
            ' ' => "has a space",
            '~' => "has a ~",
            '^' => "has a ^",
            ':' => "has a :",
            '?' => "has a ?",
            '*' => "has a *",
            '[' => "has a [",
            _ => "has a \\",
        });
    }
    if name.starts_with('-') {
        return Some("starts with -");
    }
    if name.starts_with('/') || name.ends_with('/') {
        return Some("starts or ends with /");
    }
    if name.contains("//") {
        return Some("has //");
    }
    if name.contains("..") {
        return Some("has ..");
    }
    if name.contains("@{") {
        return Some("has @{");
    }
    if name == "@" {
        return Some("is @ alone");
    }
    if name == "HEAD" {
        return Some("is HEAD, which names no branch");
    }
    if name.ends_with('.') {
        return Some("ends with .");
    }
    for part in name.split('/') {
        if part.starts_with('.') {
            return Some("has a part that starts with .");
        }
        if part.ends_with(".lock") {
            return Some("has a part that ends with .lock");
        }
    }
    None
}

/// Why `id` is not a full commit id (40 or 64 lowercase hex digits), or `None` if it is one.
/// An abbreviated id is refused: it is only unique in one repository at one time.
pub fn commit_problem(id: &str) -> Option<&'static str> {
    if !id.bytes().all(|b| b.is_ascii_hexdigit()) {
        return Some("is not hexadecimal");
    }
    if id.bytes().any(|b| b.is_ascii_uppercase()) {
        return Some("has upper-case digits; send it lower-case, as git prints it");
    }
    if id.len() != 40 && id.len() != 64 {
        return Some("is not a full commit id of 40 (SHA-1) or 64 (SHA-256) digits; abbreviated ids are refused");
    }
    None
}

#[cfg(test)]
mod tests {
    use super::{branch_problem, commit_problem, provenance_of};

    #[test]
    fn iso_43_branch_names_follow_git_check_ref_format() {
        for good in [
            "main",
            "feature/quay",
            "release-1.2",
            "a/b/c",
            "fix_#12",
            "wip@home",
            "é-branche",
            "refs/heads/x",
            &"b".repeat(255),
        ] {
            assert_eq!(branch_problem(good), None, "{good:?}");
        }
        for bad in [
            "",
            "a..b",
            "a b",
            "a\tb",
            "a\u{7f}b",
            "a~1",
            "a^",
            "a:b",
            "a?",
            "a*",
            "a[b",
            "a\\b",
            "-main",
            "/main",
            "main/",
            "a//b",
            "main.lock",
            "a.lock/b",
            "main.",
            "a/.b",
            ".hidden",
            "a@{1}",
            "@",
            "HEAD",
            &"b".repeat(256),
        ] {
            assert!(branch_problem(bad).is_some(), "{bad:?}");
        }
    }

    #[test]
    fn iso_43_commit_ids_are_full_lowercase_hex_of_40_or_64_digits() {
        assert_eq!(commit_problem(&"0123456789abcdef".repeat(4)), None);
        assert_eq!(commit_problem(&"a".repeat(40)), None);
        for bad in [
            String::new(),
            "abc1234".into(),
            "a".repeat(39),
            "a".repeat(41),
            "a".repeat(63),
            "a".repeat(65),
            "A".repeat(40),
            "g".repeat(40),
            format!("{} ", "a".repeat(39)),
        ] {
            assert!(commit_problem(&bad).is_some(), "{bad:?}");
        }
    }

    #[test]
    fn iso_43_provenance_is_both_fields_or_neither() {
        assert!(provenance_of(None, None).unwrap().is_none());
        assert!(provenance_of(Some("main".into()), None).is_err());
        assert!(provenance_of(None, Some("a".repeat(40))).is_err());
        let both = provenance_of(Some("main".into()), Some("a".repeat(40)))
            .unwrap()
            .unwrap();
        assert_eq!(both.base_branch, "main");
    }
}
