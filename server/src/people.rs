//! Who a message can mention as a person (CTX-39..41): the people of a document's repository.
//!
//! Owns: [`People`] — the repository's collaborators as GitHub lists them to the asker's own
//! session (bots left out, at most three pages of 100), kept a minute per session and
//! repository (at most [`LISTINGS_MAX`] listings, the oldest forgotten first), and the
//! fallback where GitHub will not list them to the asker: the document's creator and the
//! people who wrote in its Chat lately, marked not authoritative.
//! Does not own: who may ask (the route checks read access first) or the GitHub call
//! ([`crate::identity::github::GitHub::collaborators`]).
//!
//! Invariants: no token is kept (listings are keyed by its digest); a failed read is not kept.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex, PoisonError};

use uuid::Uuid;

use crate::identity::github::{Collaborator, GitHub, TokenDigest};
use crate::runtime::SharedClock;
use crate::store::{Document, TranscriptStore, UnixMillis};

/// How long a listing is used (CTX-39: a minute).
pub const LISTING_KEPT_MS: i64 = 60_000;
/// The most listings kept at once.
pub const LISTINGS_MAX: usize = 1_024;
/// How many of the latest Chat entries the fallback reads for their authors.
pub const RECENT_ENTRIES: u32 = 200;
/// The most people the fallback names.
pub const FALLBACK_MAX: usize = 50;

type Key = (TokenDigest, String, String);

/// A person the route names.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Person {
    pub login: String,
    pub avatar_url: String,
}

/// The people of a document, and whether GitHub said so (`authoritative`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Listed {
    pub people: Vec<Person>,
    pub authoritative: bool,
}

/// Listings kept for a minute: when each was read, and what it said.
type Kept = BTreeMap<Key, (UnixMillis, Arc<Vec<Collaborator>>)>;

/// See the module docs.
pub struct People {
    github: GitHub,
    transcript: Arc<dyn TranscriptStore>,
    clock: SharedClock,
    /// Where a login's picture is when GitHub did not give one (`GITHUB_WEB_URL`).
    web_url: String,
    kept: Mutex<Kept>,
}

impl People {
    pub fn new(
        github: GitHub,
        transcript: Arc<dyn TranscriptStore>,
        clock: SharedClock,
        web_url: String,
    ) -> Self {
        People {
            github,
            transcript,
            clock,
            web_url,
            kept: Mutex::default(),
        }
    }

    fn picture(&self, login: &str) -> String {
        format!("{}/{login}.png", self.web_url.trim_end_matches('/'))
    }

    /// The people of `doc`'s repository as `token`'s session may see them.
    pub async fn list(&self, token: &str, doc: &Document) -> Listed {
        match self.collaborators(token, doc).await {
            Some(listed) => Listed {
                people: listed
                    .iter()
                    .map(|c| Person {
                        login: c.login.clone(),
                        avatar_url: c
                            .avatar_url
                            .clone()
                            .unwrap_or_else(|| self.picture(&c.login)),
                    })
                    .collect(),
                authoritative: true,
            },
            None => Listed {
                people: self.fallback(doc).await,
                authoritative: false,
            },
        }
    }

    /// GitHub's listing, kept a minute per session and repository; `None` where GitHub will
    /// not list them to this session or could not be asked.
    async fn collaborators(&self, token: &str, doc: &Document) -> Option<Arc<Vec<Collaborator>>> {
        let key = (
            TokenDigest::of(token),
            doc.repo_owner.to_ascii_lowercase(),
            doc.repo_name.to_ascii_lowercase(),
        );
        let now = self.clock.now_ms();
        if let Some((at, listed)) = self.lock().get(&key) {
            if now - at < LISTING_KEPT_MS {
                return Some(listed.clone());
            }
        }
        match self
            .github
            .collaborators(token, &doc.repo_owner, &doc.repo_name)
            .await
        {
            Ok(Some(listed)) => {
                let listed = Arc::new(listed);
                let mut kept = self.lock();
                if kept.len() >= LISTINGS_MAX && !kept.contains_key(&key) {
                    let oldest = kept
                        .iter()
                        .min_by_key(|(_, (at, _))| *at)
                        .map(|(k, _)| k.clone());
                    if let Some(oldest) = oldest {
                        kept.remove(&oldest);
                    }
                }
                kept.insert(key, (now, listed.clone()));
                Some(listed)
            }
            Ok(None) => None,
            Err(e) => {
                tracing::warn!(document = %doc.id, error = %e, "GitHub could not list a repository's collaborators");
                None
            }
        }
    }

    /// The document's creator, then the people who wrote in its Chat lately, newest first.
    async fn fallback(&self, doc: &Document) -> Vec<Person> {
        let mut logins: Vec<String> = doc.creator.iter().map(|c| c.login.clone()).collect();
        for login in self.recent_authors(doc.id).await {
            if logins.len() >= FALLBACK_MAX {
                break;
            }
            if !logins.iter().any(|l| l.eq_ignore_ascii_case(&login)) {
                logins.push(login);
            }
        }
        logins
            .into_iter()
            .map(|login| Person {
                avatar_url: self.picture(&login),
                login,
            })
            .collect()
    }

    async fn recent_authors(&self, document: Uuid) -> Vec<String> {
        let last = match self.transcript.last_transcript_seq(document).await {
            Ok(seq) => seq,
            Err(_) => return Vec::new(),
        };
        let after = (last - i64::from(RECENT_ENTRIES)).max(0);
        let Ok(entries) = self
            .transcript
            .transcript(document, after, RECENT_ENTRIES)
            .await
        else {
            return Vec::new();
        };
        entries
            .into_iter()
            .rev()
            .filter(|e| e.kind == "member")
            .filter_map(|e| e.author_login)
            .collect()
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Kept> {
        self.kept.lock().unwrap_or_else(PoisonError::into_inner)
    }
}
