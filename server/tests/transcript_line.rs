//! A document's transcript line: entries put in line under the gate one after another are saved
//! in that order and share commits (the gate is let go once an entry is in line, not once it is
//! durable), yet the room hears each only once it is durable, in `seq` order, and a bootstrap
//! reads what is in line as saved.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use async_trait::async_trait;
use chopin_server::runtime::clock::ManualClock;
use chopin_server::runtime::Shutdown;
use chopin_server::store::{
    NewTranscriptEntry, Pending, StoreError, StoreResult, TranscriptEntry, TranscriptStore,
};
use chopin_server::transcript::{FeedEvent, Transcript};
use tokio::sync::oneshot;
use uuid::Uuid;

/// A transcript store that numbers an entry when it is put in line and makes it durable only
/// when the test says so, one entry at a time and in any order.
#[derive(Default)]
struct HeldCommits {
    state: Mutex<Held>,
}

#[derive(Default)]
struct Held {
    /// Durable entries.
    saved: Vec<TranscriptEntry>,
    /// In line, not durable yet: the entry and who waits for it.
    waiting: Vec<(TranscriptEntry, oneshot::Sender<()>)>,
    next_seq: i64,
}

impl HeldCommits {
    fn in_line(&self) -> usize {
        self.state.lock().unwrap().waiting.len()
    }

    /// Makes the entry at `seq` durable.
    fn commit(&self, seq: i64) {
        let mut state = self.state.lock().unwrap();
        let at = state
            .waiting
            .iter()
            .position(|(e, _)| e.seq == seq)
            .expect("in line");
        let (entry, durable) = state.waiting.remove(at);
        state.saved.push(entry);
        let _ = durable.send(());
    }
}

#[async_trait]
impl TranscriptStore for HeldCommits {
    async fn append_transcript(
        &self,
        document_id: Uuid,
        entry: &NewTranscriptEntry,
    ) -> StoreResult<TranscriptEntry> {
        self.queue_transcript(document_id, entry).await?.await
    }

    async fn queue_transcript(
        &self,
        document_id: Uuid,
        entry: &NewTranscriptEntry,
    ) -> StoreResult<Pending<TranscriptEntry>> {
        let (durable, made_durable) = oneshot::channel();
        let mut state = self.state.lock().unwrap();
        state.next_seq += 1;
        let saved = TranscriptEntry {
            document_id,
            seq: state.next_seq,
            author_login: entry.author_login.clone(),
            kind: entry.kind.clone(),
            body: entry.body.clone(),
            created_at_ms: entry.created_at_ms,
            refs: None,
        };
        state.waiting.push((saved.clone(), durable));
        Ok(Box::pin(async move {
            made_durable
                .await
                .map_err(|_| StoreError::Backend("dropped".into()))?;
            Ok(saved)
        }))
    }

    async fn last_transcript_seq(&self, _: Uuid) -> StoreResult<i64> {
        Ok(self.state.lock().unwrap().saved.len() as i64)
    }

    async fn transcript(
        &self,
        _: Uuid,
        after_seq: i64,
        limit: u32,
    ) -> StoreResult<Vec<TranscriptEntry>> {
        let mut saved = self.state.lock().unwrap().saved.clone();
        saved.sort_by_key(|e| e.seq);
        Ok(saved
            .into_iter()
            .filter(|e| e.seq > after_seq)
            .take(limit as usize)
            .collect())
    }

    /// This store keeps no append keys (every append here is a new entry).
    async fn transcript_by_key(&self, _: Uuid, _: &str) -> StoreResult<Option<TranscriptEntry>> {
        Ok(None)
    }
}

fn said(text: &str) -> NewTranscriptEntry {
    NewTranscriptEntry {
        author_login: Some("mona".into()),
        kind: "member".into(),
        body: text.into(),
        created_at_ms: 0,
        key: None,
        refs: None,
        attachments: Vec::new(),
    }
}

#[tokio::test(start_paused = true)]
async fn entries_in_line_share_commits_and_are_heard_only_once_durable_in_seq_order() {
    let store = Arc::new(HeldCommits::default());
    let shutdown = Shutdown::new();
    let transcript = Transcript::new(
        store.clone(),
        Arc::new(ManualClock::new(0)),
        Arc::new(chopin_server::runtime::entropy::SeededEntropy::new(7)),
        &shutdown,
    );
    let doc = Uuid::from_u128(7);
    let mut room = transcript.subscribe(doc);

    // Three senders, each letting the gate go once its entry is in line.
    let mut saving = Vec::new();
    for text in ["one", "two", "three"] {
        let transcript = transcript.clone();
        saving.push(tokio::spawn(async move {
            let held = transcript.gate(doc).await;
            let saved = transcript.queue_gated(doc, &said(text)).await;
            drop(held);
            saved.await
        }));
    }
    while store.in_line() < 3 {
        tokio::task::yield_now().await;
    }
    // All three are in line before any is durable: one commit can take them all.
    assert_eq!(store.in_line(), 3);

    // The last two become durable first: the room hears nothing until the first is.
    store.commit(3);
    store.commit(2);
    let early = tokio::time::timeout(Duration::from_secs(5), room.recv()).await;
    assert!(early.is_err(), "heard before an earlier entry was durable");
    store.commit(1);
    for seq in 1..=3 {
        let FeedEvent::Message(heard) = room.recv().await else {
            panic!("the room hears entry {seq}");
        };
        assert_eq!(heard.seq, seq);
    }
    for (n, task) in saving.into_iter().enumerate() {
        assert_eq!(task.await.unwrap().unwrap().seq, n as i64 + 1);
    }
}

#[tokio::test(start_paused = true)]
async fn a_bootstrap_waits_for_what_is_in_line() {
    let store = Arc::new(HeldCommits::default());
    let shutdown = Shutdown::new();
    let transcript = Transcript::new(
        store.clone(),
        Arc::new(ManualClock::new(0)),
        Arc::new(chopin_server::runtime::entropy::SeededEntropy::new(7)),
        &shutdown,
    );
    let doc = Uuid::from_u128(8);
    let held = transcript.gate(doc).await;
    let saved = transcript
        .queue_gated(doc, &said("before the session"))
        .await;
    drop(held);
    let saving = tokio::spawn(saved);
    let reading = tokio::spawn({
        let transcript = transcript.clone();
        async move { transcript.bootstrap(doc).await }
    });
    tokio::time::sleep(Duration::from_secs(1)).await;
    assert!(
        !reading.is_finished(),
        "read before the entry in line was saved"
    );
    store.commit(1);
    let bootstrap = reading.await.unwrap().unwrap();
    assert_eq!(bootstrap.entries.len(), 1);
    assert_eq!(bootstrap.entries[0].body, "before the session");
    saving.await.unwrap().unwrap();
}
