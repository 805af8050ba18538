//! The repository files a Chat message may mention (CTX-38): the default branch's listing, read
//! with the asking person's own GitHub session, kept a minute per repository, at most 50,000
//! paths.
//!
//! Owns: [`RepoFiles`] — the cache (bounded to [`REPOSITORIES_MAX`] repositories, the oldest
//! forgotten first) and one listing read at a time in this process (a person asking while
//! another's read is under way waits for it and uses what it got).
//! Does not own: the GitHub calls ([`crate::repository::RepositoryTools::file_paths`]) or who may
//! ask (the route and Chat check read access first).
//!
//! Invariants: a listing is used for a minute on the server's clock and never longer; a failed
//! read is not kept (the next ask tries again); no token is kept.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex, PoisonError};

use crate::repository::RepositoryTools;
use crate::runtime::SharedClock;
use crate::store::UnixMillis;

/// How long a listing is used (CTX-38: a minute).
pub const LISTING_KEPT_MS: i64 = 60_000;
/// The most paths kept of one repository (CTX-38).
pub const PATHS_MAX: usize = 50_000;
/// The most repositories whose listing is kept at once.
pub const REPOSITORIES_MAX: usize = 256;

type Key = (String, String);
/// A repository's paths and when they were read.
type Listing = (UnixMillis, Arc<Vec<String>>);

/// See the module docs.
pub struct RepoFiles {
    tools: Arc<RepositoryTools>,
    clock: SharedClock,
    kept: Mutex<BTreeMap<Key, Listing>>,
    reading: tokio::sync::Mutex<()>,
}

impl RepoFiles {
    pub fn new(tools: Arc<RepositoryTools>, clock: SharedClock) -> Self {
        RepoFiles {
            tools,
            clock,
            kept: Mutex::default(),
            reading: tokio::sync::Mutex::new(()),
        }
    }

    fn fresh(&self, key: &Key) -> Option<Arc<Vec<String>>> {
        let now = self.clock.now_ms();
        let kept = self.kept.lock().unwrap_or_else(PoisonError::into_inner);
        kept.get(key)
            .filter(|(at, _)| now - at < LISTING_KEPT_MS)
            .map(|(_, paths)| paths.clone())
    }

    /// The file paths of `owner/repo`, read with `token` unless a listing under a minute old is
    /// kept; `None` where GitHub will not list them now.
    pub async fn paths(&self, token: &str, owner: &str, repo: &str) -> Option<Arc<Vec<String>>> {
        let key = (owner.to_ascii_lowercase(), repo.to_ascii_lowercase());
        if let Some(paths) = self.fresh(&key) {
            return Some(paths);
        }
        let _reading = self.reading.lock().await;
        if let Some(paths) = self.fresh(&key) {
            return Some(paths);
        }
        match self.tools.file_paths(token, owner, repo, PATHS_MAX).await {
            Ok(paths) => {
                let paths = Arc::new(paths);
                let mut kept = self.kept.lock().unwrap_or_else(PoisonError::into_inner);
                if kept.len() >= REPOSITORIES_MAX && !kept.contains_key(&key) {
                    let oldest = kept
                        .iter()
                        .min_by_key(|(_, (at, _))| *at)
                        .map(|(k, _)| k.clone());
                    if let Some(oldest) = oldest {
                        kept.remove(&oldest);
                    }
                }
                kept.insert(key, (self.clock.now_ms(), paths.clone()));
                Some(paths)
            }
            Err(why) => {
                tracing::info!(%owner, %repo, %why, "a repository's files could not be listed for a mention");
                None
            }
        }
    }
}
