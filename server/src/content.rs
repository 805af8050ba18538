//! Live document content: one yrs document per open room, loaded from storage on demand,
//! persisted update by update, checkpointed, and unloaded when idle.
//!
//! Owns: [`OpenDocuments`] (the documents open in this process) and [`OpenDocument`] (a
//! document's yrs doc, the relay of Yjs and awareness frames to the sockets editing it, and the
//! rule that an update is journalled in the store *before* it is applied or relayed, so nothing a
//! client has seen relayed is lost by a crash). Does not own: who may write (the sockets decide,
//! in the transport layer), or the document's Markdown rules (`chopin-document`).

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::Duration;

use chopin_document::edit::{self, EditBatch, EditOutcome, EditResult, EditTarget};
use chopin_document::{ydoc, DocumentRef};
use tokio::sync::broadcast;
use uuid::Uuid;
use yrs::sync::awareness::{AwarenessUpdate, AwarenessUpdateEntry};
use yrs::updates::decoder::Decode;
use yrs::updates::encoder::Encode;
use yrs::{ClientID, Doc, ReadTxn, StateVector, Transact, Update};

use crate::runtime::{SharedClock, SharedEntropy, Shutdown};
use crate::store::{ContentStore, DocumentStore, PlanCommit, StoreError, StoreResult};

/// A document with no socket is unloaded after this long.
pub const IDLE_UNLOAD: Duration = Duration::from_secs(30);
/// A checkpoint is written after this many journalled updates.
pub const CHECKPOINT_EVERY: u32 = 200;
/// How many relayed frames a slow socket may fall behind before it must resync.
const RELAY_BACKLOG: usize = 1024;

/// A frame to relay to a document's sockets, with the connection it came from (not sent back).
#[derive(Debug, Clone)]
pub struct Relay {
    pub from: u64,
    pub frame: Arc<Vec<u8>>,
    /// An awareness frame (rather than a document update): a socket that echoes awareness, as
    /// y-websocket's own server does, sends these back to their sender too.
    pub awareness: bool,
}

/// Why an update was not accepted.
#[derive(Debug, thiserror::Error)]
pub enum UpdateError {
    #[error("not a Yjs v1 update: {0}")]
    Malformed(String),
    #[error(transparent)]
    Store(#[from] StoreError),
}

struct Loaded {
    doc: Doc,
    /// The journal sequence number of the last update applied.
    last_seq: i64,
    /// Updates journalled since the last checkpoint.
    since_checkpoint: u32,
}

/// What every open document reaches: the store and the clock.
struct Deps {
    content: Arc<dyn ContentStore>,
    documents: Arc<dyn DocumentStore>,
    clock: SharedClock,
}

/// One open document.
pub struct OpenDocument {
    pub document_id: Uuid,
    deps: Arc<Deps>,
    content: tokio::sync::Mutex<Loaded>,
    relay: broadcast::Sender<Relay>,
    sockets: AtomicUsize,
    /// Bumped whenever a socket joins, so an idle timer started earlier knows it is stale.
    joins: AtomicU64,
    /// The latest awareness state of each Yjs client, by the socket that reported it: a socket
    /// that joins is told everyone present, and a socket that leaves takes its clients along.
    awareness: Mutex<HashMap<u64, HashMap<ClientID, AwarenessUpdateEntry>>>,
}

impl OpenDocument {
    /// Frames relayed to this document's sockets from now on.
    pub fn subscribe(&self) -> broadcast::Receiver<Relay> {
        self.relay.subscribe()
    }

    /// The Yjs sync step 2 for a client whose state vector is `sv`: what it is missing.
    pub async fn missing_for(&self, sv: &StateVector) -> Vec<u8> {
        let content = self.content.lock().await;
        let txn = content.doc.transact();
        txn.encode_state_as_update_v1(sv)
    }

    /// This document's state vector (for its sync step 1).
    pub async fn state_vector(&self) -> StateVector {
        let content = self.content.lock().await;
        let txn = content.doc.transact();
        txn.state_vector()
    }

    /// The document's source text now.
    pub async fn source(&self) -> String {
        let content = self.content.lock().await;
        ydoc::read_source(&content.doc)
    }

    /// Accepts a writer's update: journalled first, then applied and relayed (as a sync
    /// `update` frame) to the document's other sockets. An update that changes nothing is
    /// dropped.
    pub async fn apply_update(&self, from: u64, update: &[u8]) -> Result<bool, UpdateError> {
        let decoded =
            Update::decode_v1(update).map_err(|e| UpdateError::Malformed(e.to_string()))?;
        if decoded.is_empty() {
            return Ok(false);
        }
        let mut content = self.content.lock().await;
        let now = self.deps.clock.now_ms();
        let seq = self
            .deps
            .content
            .append_update(self.document_id, update, now)
            .await?;
        {
            let mut txn = content.doc.transact_mut();
            if let Err(e) = txn.apply_update(decoded) {
                // Journalled already: the same bytes replay the same way on load, so the room
                // and the journal agree. Worth a log line, not a refusal.
                tracing::warn!(document = %self.document_id, error = %e, "a journalled update did not apply cleanly");
            }
        }
        content.last_seq = seq;
        content.since_checkpoint += 1;
        if content.since_checkpoint >= CHECKPOINT_EVERY {
            self.checkpoint(&mut content).await;
        }
        let frame = sync_update_frame(update);
        let _ = self.relay.send(Relay {
            from,
            frame: Arc::new(frame),
            awareness: false,
        });
        Ok(true)
    }

    /// `edit_plan` against this document: the batch is checked against the source and the document's
    /// plan revision, turned into one yrs change, committed to the store under that revision
    /// (so of two batches made from the same revision exactly one applies), and only then applied
    /// to the open document and relayed to its sockets.
    pub async fn edit_plan(
        &self,
        document: DocumentRef,
        earlier_urls: &[String],
        batch: &EditBatch,
    ) -> StoreResult<EditResult> {
        let mut content = self.content.lock().await;
        let current = self
            .deps
            .documents
            .document(self.document_id)
            .await?
            .ok_or(StoreError::NotFound("document"))?;
        let source = ydoc::read_source(&content.doc);
        let target = EditTarget {
            document: document.clone(),
            earlier_urls,
            revision: current.plan_revision as u64,
            source: &source,
            locked: false,
        };
        let mut result = edit::edit_plan(&target, batch);
        let EditOutcome::Applied {
            source: new_source, ..
        } = &result.outcome
        else {
            return Ok(result);
        };
        // The change is made on a copy, so nothing reaches a socket before the store has it.
        let scratch = ydoc::empty_doc(content.doc.client_id().get());
        {
            let full = content
                .doc
                .transact()
                .encode_state_as_update_v1(&StateVector::default());
            let mut txn = scratch.transact_mut();
            apply_stored(&mut txn, self.document_id, &full);
        }
        let update = ydoc::replace_source(&scratch, new_source);
        let now = self.deps.clock.now_ms();
        match self
            .deps
            .content
            .commit_plan_edit(self.document_id, current.plan_revision, &update, now)
            .await?
        {
            PlanCommit::Committed { plan_revision, seq } => {
                {
                    let mut txn = content.doc.transact_mut();
                    apply_stored(&mut txn, self.document_id, &update);
                }
                content.last_seq = seq;
                content.since_checkpoint += 1;
                let _ = self.relay.send(Relay {
                    from: 0,
                    frame: Arc::new(sync_update_frame(&update)),
                    awareness: false,
                });
                if let EditOutcome::Applied { revision, .. } = &mut result.outcome {
                    *revision = plan_revision as u64;
                }
                Ok(result)
            }
            PlanCommit::Stale { current } => Ok(EditResult {
                document,
                earlier_urls: earlier_urls.to_vec(),
                outcome: EditOutcome::Stale {
                    current_revision: current as u64,
                    op: None,
                    message: format!(
                        "The document changed while this batch was applied (it is now at revision {current}); read it again and redo the batch."
                    ),
                },
            }),
        }
    }

    fn awareness_lock(
        &self,
    ) -> MutexGuard<'_, HashMap<u64, HashMap<ClientID, AwarenessUpdateEntry>>> {
        self.awareness
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
    }

    /// Records a socket's awareness update and relays its frame to the other sockets.
    pub fn relay_awareness(&self, from: u64, update: AwarenessUpdate, frame: Vec<u8>) {
        {
            let mut all = self.awareness_lock();
            let mine = all.entry(from).or_default();
            for (client, entry) in update.clients {
                let newer = mine.get(&client).is_none_or(|e| e.clock <= entry.clock);
                if newer {
                    mine.insert(client, entry);
                }
            }
        }
        let _ = self.relay.send(Relay {
            from,
            frame: Arc::new(frame),
            awareness: true,
        });
    }

    /// One awareness frame with everyone present, for a socket that just joined.
    pub fn awareness_snapshot(&self) -> Option<Vec<u8>> {
        let clients: HashMap<ClientID, AwarenessUpdateEntry> = self
            .awareness_lock()
            .values()
            .flat_map(|m| m.iter().map(|(c, e)| (*c, e.clone())))
            .filter(|(_, e)| &*e.json != "null")
            .collect();
        (!clients.is_empty())
            .then(|| yrs::sync::Message::Awareness(AwarenessUpdate { clients }).encode_v1())
    }

    /// A socket left: its clients' awareness is removed for everyone (a `null` state).
    fn leave_awareness(&self, connection: u64) {
        let Some(gone) = self.awareness_lock().remove(&connection) else {
            return;
        };
        let clients: HashMap<ClientID, AwarenessUpdateEntry> = gone
            .into_iter()
            .filter(|(_, e)| &*e.json != "null")
            .map(|(c, e)| {
                (
                    c,
                    AwarenessUpdateEntry {
                        clock: e.clock + 1,
                        json: Arc::from("null"),
                    },
                )
            })
            .collect();
        if clients.is_empty() {
            return;
        }
        let frame = yrs::sync::Message::Awareness(AwarenessUpdate { clients }).encode_v1();
        let _ = self.relay.send(Relay {
            from: connection,
            frame: Arc::new(frame),
            awareness: true,
        });
    }

    async fn checkpoint(&self, content: &mut Loaded) {
        let encoded = {
            let txn = content.doc.transact();
            txn.encode_state_as_update_v1(&StateVector::default())
        };
        match self
            .deps
            .content
            .write_checkpoint(self.document_id, content.last_seq, &encoded)
            .await
        {
            Ok(()) => content.since_checkpoint = 0,
            Err(e) => {
                tracing::warn!(document = %self.document_id, error = %e, "checkpoint failed; the journal still holds every update")
            }
        }
    }
}

/// A sync `update` frame (`[0 = sync, 2 = update, buf]`) carrying `update`.
pub fn sync_update_frame(update: &[u8]) -> Vec<u8> {
    yrs::sync::Message::Sync(yrs::sync::SyncMessage::Update(update.to_vec())).encode_v1()
}

/// The documents open in this process.
pub struct OpenDocuments {
    open: Mutex<HashMap<Uuid, Arc<OpenDocument>>>,
    /// Serializes loads, so a document is never loaded twice at once.
    loading: tokio::sync::Mutex<()>,
    /// Connection ids of the sockets that join, never reused in this process.
    next_connection: AtomicU64,
    deps: Arc<Deps>,
    entropy: SharedEntropy,
    shutdown: Shutdown,
}

/// A socket's place in an open document; leaving (drop) may start the idle timer.
pub struct Membership {
    pub document: Arc<OpenDocument>,
    pub connection: u64,
    open: Arc<OpenDocuments>,
}

impl Drop for Membership {
    fn drop(&mut self) {
        let document = self.document.clone();
        document.leave_awareness(self.connection);
        if document.sockets.fetch_sub(1, Ordering::SeqCst) == 1 {
            let joins = document.joins.load(Ordering::SeqCst);
            let open = self.open.clone();
            let stopping = self.open.shutdown.stopping();
            self.open.shutdown.spawn(async move {
                // A stopping process checkpoints at once rather than waiting out the idle time.
                tokio::select! {
                    () = tokio::time::sleep(IDLE_UNLOAD) => {}
                    () = stopping => {}
                }
                open.unload_if_idle(&document, joins).await;
            });
        }
    }
}

impl OpenDocuments {
    pub fn new(
        content: Arc<dyn ContentStore>,
        documents: Arc<dyn DocumentStore>,
        clock: SharedClock,
        entropy: SharedEntropy,
        shutdown: Shutdown,
    ) -> Self {
        OpenDocuments {
            open: Mutex::default(),
            loading: tokio::sync::Mutex::new(()),
            next_connection: AtomicU64::new(1),
            deps: Arc::new(Deps {
                content,
                documents,
                clock,
            }),
            entropy,
            shutdown,
        }
    }

    fn lock(&self) -> MutexGuard<'_, HashMap<Uuid, Arc<OpenDocument>>> {
        self.open.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// How many documents are open.
    pub fn count(&self) -> usize {
        self.lock().len()
    }

    /// Whether `document_id` is loaded in this process.
    pub fn is_open(&self, document_id: Uuid) -> bool {
        self.lock().contains_key(&document_id)
    }

    /// The open document `document_id`, loaded from storage if it is not open yet.
    pub async fn open(&self, document_id: Uuid) -> StoreResult<Arc<OpenDocument>> {
        if let Some(room) = self.lock().get(&document_id) {
            return Ok(room.clone());
        }
        let _loading = self.loading.lock().await;
        if let Some(room) = self.lock().get(&document_id) {
            return Ok(room.clone());
        }
        let stored = self.deps.content.document_content(document_id).await?;
        let doc = ydoc::empty_doc(self.entropy.next_u64());
        let mut last_seq = 0;
        {
            let mut txn = doc.transact_mut();
            if let Some(checkpoint) = &stored.checkpoint {
                apply_stored(&mut txn, document_id, &checkpoint.state);
                last_seq = checkpoint.upto_seq;
            }
            for (seq, update) in &stored.updates {
                apply_stored(&mut txn, document_id, update);
                last_seq = *seq;
            }
        }
        let room = Arc::new(OpenDocument {
            document_id,
            deps: self.deps.clone(),
            content: tokio::sync::Mutex::new(Loaded {
                doc,
                last_seq,
                since_checkpoint: stored.updates.len() as u32,
            }),
            relay: broadcast::channel(RELAY_BACKLOG).0,
            sockets: AtomicUsize::new(0),
            joins: AtomicU64::new(0),
            awareness: Mutex::default(),
        });
        tracing::debug!(document = %document_id, last_seq, "document loaded");
        self.lock().insert(document_id, room.clone());
        Ok(room)
    }

    /// Opens the document and counts a socket in it until the membership is dropped.
    pub async fn join(self: &Arc<Self>, document_id: Uuid) -> StoreResult<Membership> {
        let document = self.open(document_id).await?;
        document.sockets.fetch_add(1, Ordering::SeqCst);
        document.joins.fetch_add(1, Ordering::SeqCst);
        Ok(Membership {
            document,
            connection: self.next_connection.fetch_add(1, Ordering::SeqCst),
            open: self.clone(),
        })
    }

    /// Checkpoints and unloads `room` if nobody joined since `joins` and nobody is in it.
    async fn unload_if_idle(&self, room: &Arc<OpenDocument>, joins: u64) {
        if room.sockets.load(Ordering::SeqCst) > 0 || room.joins.load(Ordering::SeqCst) != joins {
            return;
        }
        {
            let mut content = room.content.lock().await;
            if content.since_checkpoint > 0 {
                room.checkpoint(&mut content).await;
            }
        }
        let mut open = self.lock();
        if room.sockets.load(Ordering::SeqCst) == 0 && room.joins.load(Ordering::SeqCst) == joins {
            open.remove(&room.document_id);
            tracing::debug!(document = %room.document_id, "idle document unloaded");
        }
    }
}

fn apply_stored(txn: &mut yrs::TransactionMut<'_>, document_id: Uuid, bytes: &[u8]) {
    match Update::decode_v1(bytes) {
        Ok(update) => {
            if let Err(e) = txn.apply_update(update) {
                tracing::warn!(document = %document_id, error = %e, "a stored update did not apply cleanly");
            }
        }
        Err(e) => {
            tracing::error!(document = %document_id, error = %e, "a stored update could not be decoded; skipped")
        }
    }
}
