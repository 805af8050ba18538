//! Chat (`crate::chat`) and the transcript (`crate::transcript`) wired over the memory store,
//! with no server process and no writer lease: sends, `@chopin` requests with nothing attached, write access, MSG-16 request ids, the MSG-20 cap, history
//! paging, the room broadcast, and the bootstrap selection (CTX-04, CTX-05) over plain data.

use std::sync::Arc;

use chopin_server::app::App;
use chopin_server::chat::{self, Place, SendReply, SendRequest, Sender};
use chopin_server::config::Config;
use chopin_server::identity::crypto::CredentialKey;
use chopin_server::runtime::clock::ManualClock;
use chopin_server::runtime::connector::TcpConnector;
use chopin_server::runtime::entropy::{Entropy, OsEntropy};
use chopin_server::runtime::lease::LeaseWatch;
use chopin_server::runtime::Shutdown;
use chopin_server::store::instrumented::{Call, Hold, Hook, Instrumented};
use chopin_server::store::{MemoryStore, NewDocument, NewTranscriptEntry, Store, TranscriptEntry};
use chopin_server::transcript::{self, Bootstrap, FeedEvent, HistoryQuery};
use chopin_server::Runtime;
use uuid::Uuid;

const T0: i64 = 1_700_000_000_000;

/// Makes every `append_transcript` yield a few times before it runs.
struct YieldOnAppend;

impl Hook for YieldOnAppend {
    fn call(&self, _: Call) {}

    fn hold(&self, method: &'static str, _write: bool) -> Option<Hold> {
        (method == "append_transcript").then(|| {
            Box::pin(async {
                for _ in 0..3 {
                    tokio::task::yield_now().await;
                }
            }) as Hold
        })
    }
}

struct World {
    state: App,
    clock: Arc<ManualClock>,
    place: Place,
    _dir: tempfile::TempDir,
}

impl World {
    async fn new() -> World {
        let dir = tempfile::tempdir().unwrap();
        let config = Config::defaults_with_data_dir(dir.path().to_path_buf());
        let clock = Arc::new(ManualClock::new(T0));
        let store: Arc<dyn Store> = Arc::new(MemoryStore::new());
        // Every transcript append yields to the runtime first, so sends made "at once" really
        // overlap inside the store (the memory store alone never yields).
        let store: Arc<dyn Store> = Arc::new(Instrumented::new(store, YieldOnAppend));
        let runtime = Runtime {
            clock: clock.clone(),
            entropy: Arc::new(OsEntropy),
            connector: Arc::new(TcpConnector),
        };
        let key = CredentialKey::from_hex(&"11".repeat(32)).unwrap();
        let state = App::wire(
            config,
            store.clone(),
            runtime,
            key,
            LeaseWatch::fixed(None),
            Shutdown::new(),
        );
        let id = OsEntropy.uuid();
        store
            .create_document(&NewDocument {
                id,
                repo_owner: "octo".into(),
                repo_name: "plans".into(),
                slug: "chat".into(),
                title: "Chat".into(),
                created_at_ms: T0,
                parent_id: None,
                ..NewDocument::default()
            })
            .await
            .unwrap();
        World {
            state,
            clock,
            place: Place {
                document: id,
                url: "/documents/octo/plans/chat".into(),
                focus: None,
            },
            _dir: dir,
        }
    }

    async fn send(&self, sender: &Sender, id: &str, text: &str) -> SendReply {
        self.state
            .chat
            .send(
                &self.place,
                sender,
                SendRequest {
                    request_id: id.into(),
                    text: text.into(),
                    commands: Vec::new(),
                    files: Vec::new(),
                    mentions: Vec::new(),
                },
            )
            .await
    }

    async fn transcript(&self) -> Vec<TranscriptEntry> {
        self.state
            .store
            .transcript(self.place.document, 0, 100_000)
            .await
            .unwrap()
    }

    async fn stop(self) {
        self.state.shutdown.begin();
    }
}

fn writer(login: &str) -> Sender {
    Sender {
        login: login.into(),
        can_write: true,
        owner: None,
        session: None,
    }
}

fn ack_seq(reply: &SendReply) -> i64 {
    match reply {
        SendReply::Ack { seq, .. } => *seq,
        other => panic!("expected an ack, got {other:?}"),
    }
}

#[tokio::test]
async fn una_06_a_room_message_is_saved_acked_and_broadcast() {
    let w = World::new().await;
    let mut feed = w.state.transcript.subscribe(w.place.document);
    let reply = w.send(&writer("mona"), "r-1", "Hello room").await;
    assert_eq!(
        reply,
        SendReply::Ack {
            request_id: "r-1".into(),
            seq: 1,
            planner: None
        }
    );
    assert_eq!(
        reply.frame(),
        Some(
            serde_json::json!({ "type": "chat:ack", "requestId": "r-1", "seq": 1, "planner": null })
        )
    );
    let FeedEvent::Message(heard) = feed.recv().await else {
        panic!("the room hears the message");
    };
    assert_eq!(
        heard.frame(),
        serde_json::json!({ "type": "chat:message", "seq": 1, "author": "mona", "kind": "member", "text": "Hello room", "at": T0 })
    );
    let saved = w.transcript().await;
    assert_eq!(saved.len(), 1);
    assert_eq!(saved[0].author_login.as_deref(), Some("mona"));
    assert_eq!(saved[0].kind, "member");
    assert_eq!(saved[0].body, "Hello room");
    assert_eq!(saved[0].created_at_ms, T0, "the server clock's time");
    w.stop().await;
}

#[tokio::test]
async fn every_socket_of_a_room_is_given_the_same_encoded_chat_message() {
    let w = World::new().await;
    let mut first = w.state.transcript.subscribe(w.place.document);
    let mut second = w.state.transcript.subscribe(w.place.document);
    w.send(&writer("mona"), "r-1", "Hello room").await;
    let (FeedEvent::Message(a), FeedEvent::Message(b)) = (first.recv().await, second.recv().await)
    else {
        panic!("both sockets hear the message");
    };
    let (a, b) = (a.frame_bytes(), b.frame_bytes());
    assert_eq!(a.as_ptr(), b.as_ptr(), "encoded once, the bytes shared");
    let text = std::str::from_utf8(&a).unwrap();
    assert_eq!(
        serde_json::from_str::<serde_json::Value>(text).unwrap(),
        serde_json::json!({ "type": "chat:message", "seq": 1, "author": "mona", "kind": "member", "text": "Hello room", "at": T0 })
    );
    w.stop().await;
}

#[tokio::test]
async fn una_02_una_04_msg_11_chopin_with_nothing_attached_is_refused_and_nothing_saved() {
    let w = World::new().await;
    w.send(&writer("mona"), "r-0", "before").await;
    let before = w.transcript().await;
    let mut feed = w.state.transcript.subscribe(w.place.document);
    let reply = w
        .send(&writer("mona"), "r-1", "@chopin please outline the plan")
        .await;
    let SendReply::Refused {
        request_id,
        code,
        message,
    } = &reply
    else {
        panic!("refused: {reply:?}");
    };
    assert_eq!(request_id, "r-1");
    assert_eq!(code, "planner-not-attached");
    assert!(
        message.contains("/documents/octo/plans/chat"),
        "names the document URL: {message}"
    );
    assert!(
        message.contains("agent connection") && message.contains("checkout of the repository"),
        "says how to attach: {message}"
    );
    assert_eq!(w.transcript().await, before, "nothing saved");
    // The room heard nothing: the next thing it hears is the next room message.
    w.send(&writer("lisa"), "r-2", "next").await;
    let FeedEvent::Message(next) = feed.recv().await else {
        panic!()
    };
    assert_eq!((next.seq, next.text.as_str()), (2, "next"));
    w.stop().await;
}

#[tokio::test]
async fn chopin_is_a_word_in_any_case() {
    for yes in [
        "@chopin",
        "@Chopin, help",
        "hey @CHOPIN.",
        "(@chopin)",
        "ask\n@chopin: now",
    ] {
        assert!(chat::mentions_planner(yes), "{yes:?}");
    }
    for no in [
        "chopin",
        "@chopinx",
        "@chopin-bot",
        "@chopin_2",
        "me@chopin",
        "see @chopin.dev",
        "@@chopin",
    ] {
        assert!(!chat::mentions_planner(no), "{no:?}");
    }
}

#[tokio::test]
async fn msg_06_a_reader_is_refused_read_only() {
    let w = World::new().await;
    let reader = Sender {
        login: "hubot".into(),
        can_write: false,
        owner: None,
        session: None,
    };
    for text in ["hello", "@chopin steer this"] {
        let reply = w.send(&reader, "r-1", text).await;
        assert_eq!(reply.code(), Some("read-only"), "{reply:?}");
    }
    assert!(w.transcript().await.is_empty());
    w.stop().await;
}

#[tokio::test]
async fn a_message_is_non_empty_and_at_most_20000_characters() {
    let w = World::new().await;
    let mona = writer("mona");
    assert_eq!(w.send(&mona, "a", "  \n ").await.code(), Some("empty"));
    let long = "é".repeat(20_001);
    let reply = w.send(&mona, "b", &long).await;
    let SendReply::Refused { code, message, .. } = &reply else {
        panic!("{reply:?}")
    };
    assert_eq!(code, "too-long");
    assert!(message.contains("20,000"), "names the limit: {message}");
    // Exactly 20,000 characters (40,000 bytes) is accepted.
    let fits = "é".repeat(20_000);
    assert_eq!(ack_seq(&w.send(&mona, "c", &fits).await), 1);
    w.stop().await;
}

#[tokio::test]
async fn a_request_id_is_1_to_100_characters() {
    let frame = |id: serde_json::Value| {
        SendRequest::from_frame(
            &serde_json::json!({ "type": "chat:send", "requestId": id, "text": "x" }),
        )
    };
    assert!(frame("".into()).is_err());
    assert!(frame("x".repeat(101).into()).is_err());
    assert!(frame(7.into()).is_err());
    assert_eq!(frame("x".repeat(100).into()).unwrap().request_id.len(), 100);
    assert!(
        SendRequest::from_frame(&serde_json::json!({ "type": "chat:send", "requestId": "a" }))
            .is_err()
    );
}

#[tokio::test]
async fn msg_16_a_resent_request_id_returns_the_same_ack_and_saves_once() {
    let w = World::new().await;
    let mona = writer("mona");
    let first = w.send(&mona, "r-1", "Once only").await;
    // A re-send within 10 minutes (T+10 min − 1 ms) is answered from memory.
    w.clock.advance(10 * 60 * 1000 - 1);
    let again = w.send(&mona, "r-1", "Once only").await;
    assert_eq!(first, again);
    assert_eq!(w.transcript().await.len(), 1, "saved once");
    // The same id from another sender, or in another document, is another request.
    let lisa = w.send(&writer("lisa"), "r-1", "Mine").await;
    assert_eq!(ack_seq(&lisa), 2);
    // A refusal is remembered as well.
    let refused = w.send(&mona, "r-2", "@chopin go").await;
    assert_eq!(refused.code(), Some("planner-not-attached"));
    assert_eq!(w.send(&mona, "r-2", "@chopin go").await, refused);
    // At 10 minutes this process has forgotten the id, but the line its first send saved
    // carries it: the re-send is answered from the transcript with its seq, and nothing is
    // saved (issue 27: the line is found so by any process, this one or another).
    w.clock.advance(1);
    let later = w.send(&mona, "r-1", "Once only").await;
    assert_eq!(ack_seq(&later), 1);
    assert_eq!(w.transcript().await.len(), 2, "nothing saved again");
    w.stop().await;
}

#[tokio::test]
async fn msg_16_two_concurrent_sends_of_one_request_id_save_once() {
    let w = World::new().await;
    let mona = writer("mona");
    let (a, b) = tokio::join!(
        w.send(&mona, "same", "Twice at once"),
        w.send(&mona, "same", "Twice at once")
    );
    assert_eq!(a, b);
    assert_eq!(w.transcript().await.len(), 1);
    w.stop().await;
}

#[tokio::test]
async fn msg_16_past_10000_ids_the_oldest_is_answered_from_the_line_it_saved() {
    let w = World::new().await;
    let mona = writer("mona");
    for i in 0..=10_000 {
        w.send(&mona, &format!("r-{i}"), "x").await;
    }
    assert_eq!(w.transcript().await.len(), 10_001);
    // The newest is still remembered; the oldest was dropped from memory, and its re-send is
    // answered from the line it saved, which carries its id.
    assert_eq!(ack_seq(&w.send(&mona, "r-10000", "x").await), 10_001);
    assert_eq!(ack_seq(&w.send(&mona, "r-0", "x").await), 1);
    assert_eq!(w.transcript().await.len(), 10_001, "nothing saved twice");
    w.stop().await;
}

#[tokio::test]
async fn msg_20_the_21st_send_in_flight_is_temporarily_unavailable_and_processed_on_retry() {
    let w = World::new().await;
    let mona = writer("mona");
    let held: Vec<_> = (0..20)
        .map(|_| w.state.chat.try_admit().expect("a place in flight"))
        .collect();
    assert_eq!(w.state.chat.in_flight(), 20);
    let reply = w.send(&mona, "r-21", "one too many").await;
    let SendReply::Refused { code, message, .. } = &reply else {
        panic!("{reply:?}")
    };
    assert_eq!(code, "temporarily-unavailable");
    assert!(message.contains("again in a moment"), "{message}");
    assert!(w.transcript().await.is_empty(), "nothing saved");
    drop(held);
    assert_eq!(w.state.chat.in_flight(), 0);
    // MSG-15/MSG-16: a temporarily-unavailable refusal is not remembered; the retry with the
    // same id is processed.
    let retry = w.send(&mona, "r-21", "one too many").await;
    assert_eq!(ack_seq(&retry), 1);
    assert_eq!(w.state.chat.in_flight(), 0, "every place is given back");
    w.stop().await;
}

/// MSG-19, MSG-20: 21 sends at once, really overlapping in the store: 20 are processed (the
/// room hears them in seq order), the 21st is `temporarily-unavailable` and saves nothing.
#[tokio::test]
async fn msg_19_msg_20_twenty_one_sends_at_once_twenty_processed_in_seq_order_one_turned_away() {
    let w = World::new().await;
    let mut feed = w.state.transcript.subscribe(w.place.document);
    let senders: Vec<(Sender, String)> = (0..21)
        .map(|i| (writer(&format!("user{i}")), format!("m{i}")))
        .collect();
    let sends = senders.iter().map(|(s, text)| w.send(s, "r", text));
    let replies = futures::future::join_all(sends).await;
    let turned_away: Vec<_> = replies.iter().filter_map(SendReply::code).collect();
    assert_eq!(turned_away, vec!["temporarily-unavailable"], "{replies:?}");
    let mut seqs: Vec<i64> = replies
        .iter()
        .filter(|r| r.code().is_none())
        .map(ack_seq)
        .collect();
    seqs.sort();
    assert_eq!(seqs, (1..=20).collect::<Vec<_>>());
    assert_eq!(w.transcript().await.len(), 20);
    for expect in 1..=20 {
        let FeedEvent::Message(m) = feed.recv().await else {
            panic!()
        };
        assert_eq!(m.seq, expect, "the room hears them in seq order");
    }
    w.stop().await;
}

#[tokio::test]
async fn a_room_socket_that_falls_behind_catches_up_from_storage_in_order() {
    let w = World::new().await;
    let mut feed = w.state.transcript.subscribe(w.place.document);
    for i in 0..300 {
        w.send(&writer("mona"), &format!("r-{i}"), "x").await;
    }
    let mut heard = Vec::new();
    while heard.len() < 300 {
        match feed.recv().await {
            FeedEvent::Message(m) => heard.push(m.seq),
            FeedEvent::Lagged => heard.extend(
                feed.catch_up(&w.state.transcript)
                    .await
                    .unwrap()
                    .iter()
                    .map(|m| m.seq),
            ),
            FeedEvent::Closed => panic!("closed"),
        }
    }
    assert_eq!(heard, (1..=300).collect::<Vec<_>>());
    w.stop().await;
}

#[tokio::test]
async fn history_pages_back_from_the_newest() {
    let w = World::new().await;
    let page = |before: Option<i64>, limit: Option<i64>| {
        let q = HistoryQuery { before, limit };
        let state = w.state.clone();
        let doc = w.place.document;
        async move { state.transcript.history(doc, &q).await.unwrap() }
    };
    let empty = page(None, None).await;
    assert!(empty.entries.is_empty() && !empty.more);
    for i in 1..=120 {
        w.send(&writer("mona"), &format!("r-{i}"), &format!("m{i}"))
            .await;
    }
    let seqs = |h: &transcript::History| h.entries.iter().map(|e| e.seq).collect::<Vec<_>>();
    // Default 50, the newest, oldest first.
    let newest = page(None, None).await;
    assert_eq!(seqs(&newest), (71..=120).collect::<Vec<_>>());
    assert!(newest.more);
    assert_eq!(newest.entries[0].text, "m71");
    let older = page(Some(71), Some(50)).await;
    assert_eq!(seqs(&older), (21..=70).collect::<Vec<_>>());
    assert!(older.more);
    let oldest = page(Some(21), Some(50)).await;
    assert_eq!(seqs(&oldest), (1..=20).collect::<Vec<_>>());
    assert!(!oldest.more);
    assert!(page(Some(1), None).await.entries.is_empty());
    // A `before` past the end reads the newest.
    assert_eq!(seqs(&page(Some(1_000), Some(2)).await), vec![119, 120]);
    // `limit` is clamped to 1–100.
    assert_eq!(page(None, Some(0)).await.entries.len(), 1);
    assert_eq!(page(None, Some(500)).await.entries.len(), 100);
    // Entries appended elsewhere (not through Chat) are found too.
    w.state
        .store
        .append_transcript(
            w.place.document,
            &NewTranscriptEntry {
                author_login: None,
                kind: "planner".into(),
                body: "Done.".into(),
                created_at_ms: T0,
                key: None,
                refs: None,
                attachments: Vec::new(),
            },
        )
        .await
        .unwrap();
    let last = page(None, Some(1)).await;
    assert_eq!(seqs(&last), vec![121]);
    assert_eq!(
        last.frame()["entries"][0],
        serde_json::json!({ "seq": 121, "author": null, "kind": "planner", "text": "Done.", "at": T0 })
    );
    assert_eq!(last.frame()["type"], "chat:history");
    w.stop().await;
}

// --- Bootstrap (CTX-04, CTX-05) over plain data ---------------------------------------------

fn entry(seq: i64, kind: &str, chars: usize) -> TranscriptEntry {
    TranscriptEntry {
        document_id: Uuid::nil(),
        seq,
        author_login: (kind == "member").then(|| "mona".to_owned()),
        kind: kind.into(),
        body: "a".repeat(chars),
        created_at_ms: 0,
        refs: None,
    }
}

fn members(n: usize, chars: usize) -> Vec<TranscriptEntry> {
    (1..=n).map(|s| entry(s as i64, "member", chars)).collect()
}

/// CTX-05: "A recreated Copilot session receives at most the last 100 transcript entries and
/// 50,000 characters."
#[test]
fn ctx_05_at_most_the_last_100_entries() {
    let entries = members(150, 10);
    let chosen = transcript::select(&entries);
    assert_eq!(entries.len() - chosen.context_from, 100);
    assert_eq!(entries[chosen.context_from].seq, 51, "the newest 100");
    let few = members(7, 10);
    assert_eq!(
        transcript::select(&few).context_from,
        0,
        "all of a short transcript"
    );
}

#[test]
fn ctx_05_at_most_50000_characters() {
    // 60 entries of 1,000 characters: the newest 50 fit exactly, the 51st would not.
    let entries = members(60, 1_000);
    let chosen = transcript::select(&entries);
    assert_eq!(entries.len() - chosen.context_from, 50);
    // One character more and only 49 fit.
    let mut over = members(60, 1_000);
    over[59] = entry(60, "member", 1_001);
    assert_eq!(over.len() - transcript::select(&over).context_from, 49);
    // Whole entries only, and never an older one past one that did not fit.
    let mut gap = members(5, 100);
    gap[2] = entry(3, "planner", 49_900);
    assert_eq!(gap.len() - transcript::select(&gap).context_from, 2);
}

/// CTX-04: "Messages since the last turn are retained as immediate backscroll, capped at 40
/// entries and normally 8,000 characters. One message is retained intact even when it alone
/// exceeds that character budget."
#[test]
fn ctx_04_backscroll_is_the_messages_since_the_last_turn_at_most_40() {
    let mut entries = members(100, 10);
    entries[9] = entry(10, "planner", 10);
    let chosen = transcript::select(&entries);
    assert_eq!(entries.len() - chosen.backscroll_from, 40, "capped at 40");
    let mut recent = members(30, 10);
    recent[24] = entry(25, "planner", 10);
    let chosen = transcript::select(&recent);
    assert_eq!(
        recent[chosen.backscroll_from..]
            .iter()
            .map(|e| e.seq)
            .collect::<Vec<_>>(),
        vec![26, 27, 28, 29, 30],
        "since the Planner's last entry"
    );
    let mut answered = members(3, 10);
    answered[2] = entry(3, "planner", 10);
    assert_eq!(
        transcript::select(&answered).backscroll_from,
        3,
        "nothing since the last turn"
    );
}

#[test]
fn ctx_04_backscroll_is_normally_8000_characters() {
    // 10 messages of 1,000 characters: the newest 8 fit exactly.
    let entries = members(10, 1_000);
    assert_eq!(
        entries.len() - transcript::select(&entries).backscroll_from,
        8
    );
    let mut over = members(10, 1_000);
    over[9] = entry(10, "member", 1_001);
    assert_eq!(over.len() - transcript::select(&over).backscroll_from, 7);
}

#[test]
fn ctx_04_one_oversize_message_is_kept_whole() {
    let mut entries = members(5, 100);
    entries[4] = entry(5, "member", 19_000);
    let chosen = transcript::select(&entries);
    assert_eq!(
        entries.len() - chosen.backscroll_from,
        1,
        "only the oversize newest"
    );
    assert_eq!(entries[chosen.backscroll_from].body.len(), 19_000, "whole");
    // Only one: an oversize message before it is not kept past the budget.
    let mut two = members(5, 100);
    two[3] = entry(4, "member", 9_000);
    two[4] = entry(5, "member", 100);
    assert_eq!(two.len() - transcript::select(&two).backscroll_from, 1);
}

#[tokio::test]
async fn bootstrap_reads_the_newest_entries_and_counts_what_it_leaves_out() {
    let w = World::new().await;
    let Bootstrap {
        entries,
        omitted,
        backscroll,
    } = w
        .state
        .transcript
        .bootstrap(w.place.document)
        .await
        .unwrap();
    assert!(entries.is_empty() && backscroll.is_empty());
    assert_eq!(omitted, 0);
    for i in 1..=130 {
        let kind = if i == 120 { "planner" } else { "member" };
        w.state
            .transcript
            .post(
                w.place.document,
                &NewTranscriptEntry {
                    author_login: (kind == "member").then(|| "mona".to_owned()),
                    kind: kind.into(),
                    body: format!("message {i:03} {}", "z".repeat(400)),
                    created_at_ms: T0,
                    key: None,
                    refs: None,
                    attachments: Vec::new(),
                },
            )
            .await
            .unwrap();
    }
    let b = w
        .state
        .transcript
        .bootstrap(w.place.document)
        .await
        .unwrap();
    // 100 entries of 412 characters is 41,200: the entry cap binds.
    assert_eq!(b.entries.len(), 100);
    assert_eq!(b.entries[0].seq, 31);
    assert_eq!(b.entries[99].seq, 130);
    assert_eq!(b.omitted, 30);
    assert_eq!(
        b.backscroll.iter().map(|e| e.seq).collect::<Vec<_>>(),
        (121..=130).collect::<Vec<_>>()
    );
    w.stop().await;
}

// --- With a Planner attached (a scripted agent client over real sockets) -------------------

mod support;

mod attached {
    use super::support::{next, served};
    use super::*;
    use chopin_protocol::agent::{
        ClientMessage, PartMessage, ServerMessage, Started, TextPart, TurnEnd, TurnStatus,
    };

    async fn heard(feed: &mut transcript::Feed) -> transcript::ChatMessage {
        match tokio::time::timeout(std::time::Duration::from_secs(10), feed.recv())
            .await
            .expect("the room hears something within 10 s")
        {
            FeedEvent::Message(m) => (*m).clone(),
            other => panic!("{other:?}"),
        }
    }

    /// MSG-02, MSG-03, MSG-15, UNA-07: `@chopin` starts a turn (acked `started`), a message
    /// while the session is starting is `temporarily-unavailable` and, re-sent with the same
    /// id once it runs, is processed and steers the turn (acked `steered`); the Planner's reply
    /// is saved and heard by the room after both.
    #[tokio::test]
    async fn chopin_starts_a_turn_then_a_retried_message_steers_it_and_the_reply_is_heard() {
        let served = served().await;
        let (state, doc) = (served.state.clone(), served.doc);
        let mut client = served.attach(&["steer-turn"]).await;

        let place = Place {
            document: doc,
            url: "/documents/octo/plans/notes".into(),
            focus: None,
        };
        let mut feed = state.transcript.subscribe(doc);
        let say = |id: &'static str, text: &'static str| {
            let (state, place) = (state.clone(), place.clone());
            async move {
                state
                    .chat
                    .send(
                        &place,
                        &writer("mona"),
                        SendRequest {
                            request_id: id.into(),
                            text: text.into(),
                            commands: Vec::new(),
                            files: Vec::new(),
                            mentions: Vec::new(),
                        },
                    )
                    .await
            }
        };
        let started = say("r-1", "@chopin add a heading").await;
        assert_eq!(
            started.frame(),
            Some(
                serde_json::json!({ "type": "chat:ack", "requestId": "r-1", "seq": 1, "planner": "started" })
            )
        );
        assert_eq!(heard(&mut feed).await.text, "@chopin add a heading");
        // The session is not started yet: passing trouble, nothing saved, not remembered.
        let early = say("r-2", "@chopin and a list").await;
        assert_eq!(early.code(), Some("temporarily-unavailable"), "{early:?}");
        let session = match next(&mut client).await {
            ServerMessage::Start(s) => s.session_id,
            other => panic!("expected start, got {other:?}"),
        };
        client
            .send(&ClientMessage::Started(Started {
                session_id: session.clone(),
            }))
            .await
            .unwrap();
        let turn = match next(&mut client).await {
            ServerMessage::Turn(t) => t.turn_id,
            other => panic!("expected turn, got {other:?}"),
        };
        let steered = say("r-2", "@chopin and a list").await;
        assert_eq!(
            steered,
            SendReply::Ack {
                request_id: "r-2".into(),
                seq: 2,
                planner: Some(chat::PlannerTook::Steered)
            }
        );
        assert_eq!(say("r-2", "@chopin and a list").await, steered, "MSG-16");
        match next(&mut client).await {
            ServerMessage::Steer(st) => assert_eq!(st.text, "@mona: @chopin and a list"),
            other => panic!("expected steer, got {other:?}"),
        }
        assert_eq!(heard(&mut feed).await.seq, 2);
        client
            .send(&ClientMessage::Part(PartMessage {
                turn_id: turn.clone(),
                part: chopin_protocol::agent::Part::Text(TextPart {
                    text: "Added both.".into(),
                }),
            }))
            .await
            .unwrap();
        client
            .send(&ClientMessage::TurnEnd(TurnEnd {
                turn_id: turn,
                status: TurnStatus::Completed,
                output: None,
                message: None,
            }))
            .await
            .unwrap();
        let reply = heard(&mut feed).await;
        assert_eq!(
            reply.frame(),
            serde_json::json!({ "type": "chat:message", "seq": 3, "author": null, "kind": "planner", "text": "Added both.", "at": reply.at })
        );
        let saved = served.store.transcript(doc, 0, 10).await.unwrap();
        assert_eq!(
            saved.iter().map(|e| e.kind.as_str()).collect::<Vec<_>>(),
            ["member", "member", "planner"]
        );
        served.running.stop().await;
    }
}

/// Hostile input 2: 27 messages of 20,000 emoji (80 KB each) made a `chat:history` page over
/// 2 MiB, more than a browser's socket could be sent. A page keeps the newest entries within
/// `HISTORY_MAX_BYTES` (always at least one) and says `more`; paging back reads the rest.
#[tokio::test]
async fn hostile_2_a_history_page_is_bounded_by_bytes_and_pages_back_through_everything() {
    let w = World::new().await;
    let emoji = "🎹".repeat(transcript::MESSAGE_MAX_CHARS);
    for i in 1..=27 {
        w.send(&writer("mona"), &format!("r-{i}"), &emoji).await;
    }
    let mut seen = Vec::new();
    let mut before = None;
    loop {
        let page = w
            .state
            .transcript
            .history(
                w.place.document,
                &HistoryQuery {
                    before,
                    limit: Some(100),
                },
            )
            .await
            .unwrap();
        let bytes = serde_json::to_vec(&page.frame()).unwrap().len();
        assert!(
            bytes <= transcript::HISTORY_MAX_BYTES + 256,
            "a page of {bytes} bytes"
        );
        assert!(!page.entries.is_empty());
        seen.splice(0..0, page.entries.iter().map(|e| e.seq));
        if !page.more {
            break;
        }
        before = Some(page.entries[0].seq);
    }
    assert_eq!(seen, (1..=27).collect::<Vec<_>>());
    w.stop().await;
}
