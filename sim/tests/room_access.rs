//! A document's room socket keeps checking who is in it, as an agent link does: access is asked
//! again every `AGENT_ACCESS_RECHECK_MS` (5 minutes) from the socket's start, through the same
//! 30 s caches. Read access gone closes the socket 4403 `access-revoked`; write access gone makes
//! the socket a reader's (told with `session:access`, then sends and updates refused
//! `read-only`); the sign-in's expiry closes it 4401 at that millisecond; archiving the document
//! closes it 4404 at once. Each at both edges: nothing changes a millisecond before. The
//! y-websocket endpoint's sockets are held to the same, with close codes only.

use axum::body::Bytes;
use chopin_fixtures::github::Permission;
use chopin_server::runtime::connector;
use chopin_sim::actors::typed;
use chopin_sim::cast::{cast, cast_with, Cast};
use chopin_sim::{Browser, Configure, TurmoilConnector, World, WorldOptions, SERVER_ORIGIN};
use serde_json::Value;
use std::sync::{Arc, Mutex};
use uuid::Uuid;

/// `AGENT_ACCESS_RECHECK_MS`'s default.
const RECHECK_MS: u64 = 300_000;
/// GitHub is asked again at the recheck (the cached answer is older than 30 s): two network
/// legs and the server's own steps after the deadline.
const ANSWER_WITHIN_MS: u64 = 10;

fn until(world: &mut World, what: &str, done: impl Fn() -> bool + 'static) {
    world
        .advance_until(10_000, what, move |_| done())
        .unwrap_or_else(|e| panic!("{what}: {e}"));
}

/// A browser in `doc`'s room; returns it and when it heard `session:hello` (one network leg
/// after the socket started on the server).
fn join(world: &mut World, name: &str, cookie: &str, doc: Uuid) -> (Browser, u64) {
    let browser = world.browser(name, cookie, &doc.to_string());
    let b = browser.clone();
    until(world, "joined", move || !b.heard().is_empty());
    let hello = browser.heard()[0].clone();
    assert_eq!(
        hello.message["type"], "session:hello",
        "{:?}",
        hello.message
    );
    (browser, hello.at_ms)
}

fn frames_of(browser: &Browser, kind: &str) -> Vec<(u64, Value)> {
    browser
        .heard()
        .into_iter()
        .filter(|h| h.message["type"] == kind)
        .map(|h| (h.at_ms, h.message))
        .collect()
}

fn hubot(world: &mut World) -> String {
    world.sign_in("hubot").expect("hubot signs in")
}

#[test]
fn a_reader_who_loses_read_access_is_closed_4403_at_the_recheck_not_before() {
    let Cast { mut world, doc, .. } = cast(161, Some(1));
    let cookie = hubot(&mut world);
    let (tab, hello_at) = join(&mut world, "hubot-tab", &cookie, doc);
    world.github().revoke("octo", "plans", "hubot");
    world
        .advance(hello_at + RECHECK_MS - 1 - world.now_ms())
        .unwrap();
    assert_eq!(tab.closed(), None, "not before the recheck");
    let t = tab.clone();
    until(&mut world, "closed", move || t.closed().is_some());
    let (closed_at, code, reason) = tab.closed().unwrap();
    assert_eq!((code, reason.as_str()), (4403, "access-revoked"));
    assert!(
        closed_at <= hello_at + RECHECK_MS + ANSWER_WITHIN_MS,
        "{closed_at} vs {hello_at}"
    );
    let said = frames_of(&tab, "error");
    assert_eq!(said.last().unwrap().1["code"], "access-revoked", "{said:?}");
}

#[test]
fn a_writer_who_loses_push_becomes_a_reader_at_the_recheck() {
    let Cast {
        mut world,
        doc,
        mona_cookie,
        ..
    } = cast(162, Some(1));
    let (tab, hello_at) = join(&mut world, "mona-tab", &mona_cookie, doc);
    world
        .github()
        .grant("octo", "plans", "mona", Permission::Read);
    // A send that reaches the server a millisecond before the recheck (the socket started one
    // network leg before the hello arrived; the send takes one leg too) is still a writer's.
    world
        .advance(hello_at + RECHECK_MS - 3 - world.now_ms())
        .unwrap();
    tab.send_chat("before", "still a writer");
    let t = tab.clone();
    until(&mut world, "answered", move || {
        !t.replies("before").is_empty()
    });
    assert_eq!(
        tab.replies("before")[0].message["type"],
        "chat:ack",
        "{}",
        tab.replies("before")[0].message
    );
    assert!(frames_of(&tab, "session:access").is_empty());
    // At the recheck she is told, and from then on refused.
    let t = tab.clone();
    until(&mut world, "told", move || {
        !frames_of(&t, "session:access").is_empty()
    });
    let (told_at, told) = frames_of(&tab, "session:access").remove(0);
    assert_eq!(told["canWrite"], false);
    assert!(
        told_at <= hello_at + RECHECK_MS + ANSWER_WITHIN_MS,
        "{told_at}"
    );
    tab.send_chat("after", "am I still a writer?");
    tab.send_binary(typed(77, "overwritten"));
    let t = tab.clone();
    until(&mut world, "refused", move || {
        !t.replies("after").is_empty() && frames_of(&t, "error").len() == 1
    });
    let refused = &tab.replies("after")[0].message;
    assert_eq!(refused["type"], "chat:refused", "{refused}");
    assert_eq!(refused["code"], "read-only", "{refused}");
    assert_eq!(frames_of(&tab, "error")[0].1["code"], "read-only");
    assert_eq!(tab.closed(), None, "a reader stays");
}

#[test]
fn a_plain_browser_is_closed_4401_at_its_sign_in_expiry() {
    let configure: Configure = Arc::new(|c| c.session_max_age_ms = 600_000);
    let Cast {
        mut world,
        doc,
        mona_cookie,
        ..
    } = cast_with(
        163,
        WorldOptions {
            fixed_latency_ms: Some(1),
            configure: Some(configure),
            ..WorldOptions::default()
        },
    );
    let app = world.server_app().unwrap();
    let account = chopin_sim::cast::block_on(
        chopin_server::store::prelude::SignInStore::account_by_login(world.store(), "mona"),
    )
    .unwrap()
    .unwrap();
    let now = chopin_sim::SIM_EPOCH_MS + world.now_ms() as i64;
    let expires = app
        .sign_ins
        .live_login_of(account.id, now)
        .unwrap()
        .expires_at_ms;
    let expires = u64::try_from(expires - chopin_sim::SIM_EPOCH_MS).unwrap();
    let (tab, _) = join(&mut world, "mona-tab", &mona_cookie, doc);
    // The close leaves the server at the expiry and arrives one network leg later.
    world.advance(expires - world.now_ms()).unwrap();
    assert_eq!(tab.closed(), None, "open until its expiry");
    world.advance(5).unwrap();
    let (closed_at, code, reason) = tab.closed().expect("closed at the expiry");
    assert_eq!((code, reason.as_str()), (4401, "sign-in-required"));
    assert_eq!(closed_at, expires + 1);
}

/// `POST /api/documents/{id}/archive` as mona's browser would send it; the answer's status.
fn archive(world: &mut World, cookie: &str, doc: Uuid) -> u16 {
    let status = Arc::new(Mutex::new(0u16));
    let (out, cookie) = (status.clone(), cookie.to_owned());
    world
        .run_client("archiver", async move {
            let request =
                http::Request::post(format!("{SERVER_ORIGIN}/api/documents/{doc}/archive"))
                    .header(http::header::COOKIE, cookie)
                    .header(http::header::ORIGIN, SERVER_ORIGIN)
                    .header(http::header::CONTENT_TYPE, "application/json")
                    .body(Bytes::from_static(br#"{"archived":true}"#))?;
            let answer = connector::send(&TurmoilConnector, request)
                .await
                .map_err(|e| e.to_string())?;
            *out.lock().unwrap() = answer.status.as_u16();
            Ok(())
        })
        .unwrap();
    let status = *status.lock().unwrap();
    status
}

#[test]
fn archiving_closes_the_documents_open_rooms_4404_at_once() {
    let Cast {
        mut world,
        doc,
        mona_cookie,
        lisa_cookie,
        ..
    } = cast(164, Some(1));
    let (lisa_tab, _) = join(&mut world, "lisa-tab", &lisa_cookie, doc);
    let (mona_tab, _) = join(&mut world, "mona-tab", &mona_cookie, doc);
    world.advance(1_000).unwrap();
    assert_eq!(lisa_tab.closed(), None);
    let asked_at = world.now_ms();
    assert_eq!(archive(&mut world, &mona_cookie, doc), 200);
    for tab in [&lisa_tab, &mona_tab] {
        let t = tab.clone();
        until(&mut world, "closed", move || t.closed().is_some());
        let (closed_at, code, reason) = tab.closed().unwrap();
        assert_eq!((code, reason.as_str()), (4404, "document-not-found"));
        assert!(closed_at <= asked_at + 10, "{closed_at} vs {asked_at}");
    }
}

#[test]
fn the_y_websocket_endpoint_is_rechecked_and_closed_on_archive_too() {
    let Cast {
        mut world,
        doc,
        mona_cookie,
        ..
    } = cast(165, Some(1));
    let cookie = hubot(&mut world);
    let path = format!("/api/yjs/{doc}");
    let reader = world.browser_at("hubot-yjs", &cookie, &path);
    let writer = world.browser_at("mona-yjs", &mona_cookie, &path);
    world.advance(10).unwrap();
    let opened_at = world.now_ms();
    world.github().revoke("octo", "plans", "hubot");
    world
        .advance(opened_at + RECHECK_MS - 20 - world.now_ms())
        .unwrap();
    assert_eq!(reader.closed(), None, "not before the recheck");
    let r = reader.clone();
    until(&mut world, "reader closed", move || r.closed().is_some());
    let (closed_at, code, reason) = reader.closed().unwrap();
    assert_eq!((code, reason.as_str()), (4403, "access-revoked"));
    assert!(
        closed_at <= opened_at + RECHECK_MS + ANSWER_WITHIN_MS,
        "{closed_at}"
    );
    assert_eq!(writer.closed(), None, "the writer keeps its access");
    assert_eq!(archive(&mut world, &mona_cookie, doc), 200);
    let w = writer.clone();
    until(&mut world, "writer closed", move || w.closed().is_some());
    let (_, code, reason) = writer.closed().unwrap();
    assert_eq!((code, reason.as_str()), (4404, "document-not-found"));
}
