//! Questions in the simulator: the real router on simulated TCP, the Planner's `ask` played by
//! a scripted agent client, mona and lisa answering and cancelling its cards from their rooms
//! in races at the same simulated instant. Whatever the order, a card takes one answer, the
//! asker hears one outcome, and the document agrees with it. And a question has no time limit
//! (RULINGS ATM-32, over RQ-01's "the same 30-minute expiry"): it still waits on either side of
//! 30 minutes.

use chopin_document::blocks::blocks;
use chopin_document::decision::{decisions, Decision, DecisionState};
use chopin_protocol::agent::TurnStatus;
use chopin_sim::cast::{cast, Cast};
use chopin_sim::{Agent, Browser, TurnScript, World};
use serde_json::{json, Value};
use uuid::Uuid;

/// RQ-01's expiry an earlier release applied; nothing expires questions now.
const OLD_EXPIRY_MS: u64 = 30 * 60 * 1000;

fn join(world: &mut World, name: &str, cookie: &str, doc: Uuid) -> Browser {
    let browser = world.browser(name, cookie, &doc.to_string());
    let b = browser.clone();
    world.until(5_000, &format!("{name} joined"), move || {
        !b.heard().is_empty()
    });
    browser
}

/// The document's Decisions, from the live copy.
fn cards(world: &World, doc: Uuid) -> Vec<Decision> {
    let app = world.server_app().expect("a running server");
    let source = chopin_sim::cast::block_on(async move {
        let open = app.open.open(doc).await.expect("the document opens");
        open.source().await
    });
    decisions(&source, &blocks(&source))
        .into_iter()
        .map(|(_, d)| d)
        .collect()
}

/// Starts a turn whose only step is `ask` with two questions, and waits for its cards.
fn asking(seed: u64) -> (Cast, Agent, Browser, Browser, Vec<Decision>) {
    let mut c = cast(seed, None);
    let doc = c.doc;
    let agent = c
        .world
        .attached_agent("client", &c.mona, &doc.to_string(), &[]);
    let mona = join(&mut c.world, "mona-room", &c.mona_cookie, doc);
    let lisa = join(&mut c.world, "lisa-room", &c.lisa_cookie, doc);
    agent.script(
        TurnScript::new()
            .started()
            .await_turn()
            .host_tool_call(
                "ask",
                json!({ "questions": [
                    { "question": "Which region first?", "options": [{"label": "eu-west"}, {"label": "us-east"}] },
                    { "question": "Who signs off?" }
                ]}),
            )
            .end(TurnStatus::Completed),
    );
    mona.send_chat("go", "@chopin ask us");
    c.world
        .advance_until(10_000, "the cards are in the document", move |w| {
            cards(w, doc).len() == 2
        })
        .unwrap();
    let placed = cards(&c.world, doc);
    (c, agent, mona, lisa, placed)
}

fn answer(browser: &Browser, id: &str, decision: &str, body: Value) {
    let mut frame = json!({ "type": "decision:answer", "requestId": id, "decision": decision });
    frame
        .as_object_mut()
        .unwrap()
        .extend(body.as_object().unwrap().clone());
    browser.send_json(frame);
}

/// The type of the first frame answering `id` (a `decision:*` answer).
fn reply_type(browser: &Browser, id: &str) -> Option<String> {
    browser
        .heard()
        .into_iter()
        .find(|h| h.message["requestId"] == id)
        .and_then(|h| h.message["type"].as_str().map(str::to_owned))
}

fn tool_results(agent: &Agent) -> Vec<String> {
    agent
        .frames_of("host-tool-result")
        .into_iter()
        .map(|(_, detail)| detail)
        .collect()
}

#[test]
fn two_people_answering_one_card_at_the_same_instant_one_answer_is_taken() {
    for seed in 0..12 {
        let (mut c, agent, mona, lisa, placed) = asking(seed);
        let first = placed[0].id.clone();
        answer(&mona, "m-1", &first, json!({ "options": [0] }));
        answer(&lisa, "l-1", &first, json!({ "options": [1] }));
        let (m, l) = (mona.clone(), lisa.clone());
        c.world.until(10_000, "both answered", move || {
            reply_type(&m, "m-1").is_some() && reply_type(&l, "l-1").is_some()
        });
        let outcomes = [
            reply_type(&mona, "m-1").unwrap(),
            reply_type(&lisa, "l-1").unwrap(),
        ];
        let taken = outcomes
            .iter()
            .filter(|t| *t == "decision:answered")
            .count();
        assert_eq!(taken, 1, "seed {seed}: {outcomes:?}");
        let now = cards(&c.world, c.doc);
        assert_eq!(now[0].state, DecisionState::Answered, "seed {seed}");
        assert_eq!(now[0].answers.len(), 1, "seed {seed}: one answer line");
        assert!(
            tool_results(&agent).is_empty(),
            "seed {seed}: one card still open"
        );

        answer(&lisa, "l-2", &placed[1].id, json!({ "text": "@mona" }));
        let a = agent.clone();
        c.world
            .until(10_000, "ask returned", move || !tool_results(&a).is_empty());
        c.world.advance(100).unwrap();
        assert_eq!(
            tool_results(&agent).len(),
            1,
            "seed {seed}: the answer reaches the client once"
        );
    }
}

#[test]
fn an_answer_and_a_cancellation_at_the_same_instant_settle_one_way() {
    for seed in 0..12 {
        let (mut c, agent, mona, lisa, placed) = asking(seed);
        // The first card is answered; then the second is answered and the question cancelled
        // at the same instant.
        answer(&mona, "m-1", &placed[0].id, json!({ "options": [0] }));
        let m = mona.clone();
        c.world.until(10_000, "first answered", move || {
            reply_type(&m, "m-1").is_some()
        });
        answer(&mona, "m-2", &placed[1].id, json!({ "text": "@lisa" }));
        lisa.send_json(
            json!({ "type": "decision:cancel", "requestId": "l-1", "decision": placed[1].id }),
        );
        let (m, l, a) = (mona.clone(), lisa.clone(), agent.clone());
        c.world
            .until(10_000, "both settled and ask returned", move || {
                reply_type(&m, "m-2").is_some()
                    && reply_type(&l, "l-1").is_some()
                    && !tool_results(&a).is_empty()
            });
        c.world.advance(100).unwrap();
        let results = tool_results(&agent);
        assert_eq!(results.len(), 1, "seed {seed}: one outcome: {results:?}");
        let now = cards(&c.world, c.doc);
        let answered = reply_type(&mona, "m-2").unwrap() == "decision:answered";
        let cancelled = reply_type(&lisa, "l-1").unwrap() == "decision:cancelled";
        assert!(
            answered != cancelled,
            "seed {seed}: exactly one of the two takes"
        );
        if answered {
            // The answer completed the question first: the cancel found nothing to cancel.
            assert_eq!(now.len(), 2, "seed {seed}");
            assert!(now.iter().all(|d| d.state == DecisionState::Answered));
            assert!(results[0].contains("isError=false"), "{results:?}");
        } else {
            // Cancelled first: the open card left the document, and the answer already given
            // to the first card is kept (ATM-30).
            assert_eq!(now.len(), 1, "seed {seed}: {now:?}");
            assert_eq!(now[0].state, DecisionState::Answered, "seed {seed}");
            assert!(results[0].contains("isError=true"), "{results:?}");
        }
    }
}

#[test]
fn atm_32_a_question_still_waits_either_side_of_the_old_30_minute_expiry() {
    let (mut c, agent, mona, _lisa, placed) = asking(3);
    c.world.advance(OLD_EXPIRY_MS - 1).unwrap();
    assert!(cards(&c.world, c.doc)
        .iter()
        .all(|d| d.state == DecisionState::Open));
    c.world.advance(2).unwrap();
    assert!(
        cards(&c.world, c.doc)
            .iter()
            .all(|d| d.state == DecisionState::Open),
        "nothing expired"
    );
    assert!(tool_results(&agent).is_empty(), "ask still waits");
    answer(&mona, "m-1", &placed[0].id, json!({ "options": [1] }));
    answer(&mona, "m-2", &placed[1].id, json!({ "text": "@lisa" }));
    let a = agent.clone();
    c.world
        .until(10_000, "ask returned", move || !tool_results(&a).is_empty());
    let result = &tool_results(&agent)[0];
    assert!(result.contains("us-east"), "{result}");
}

#[test]
fn atm_29_rt_10_a_stop_and_an_answer_at_the_same_instant_withdraw_the_rest_once() {
    for seed in 0..12 {
        let (mut c, agent, mona, lisa, placed) = asking(seed);
        // mona stops the Planner (its turn is aborted, `ask` is withdrawn) while lisa answers
        // the first card at the same instant.
        mona.send_json(json!({ "type": "planner:stop", "requestId": "stop-1" }));
        answer(&lisa, "l-1", &placed[0].id, json!({ "options": [1] }));
        let (l, a) = (lisa.clone(), agent.clone());
        c.world
            .until(10_000, "the answer settled, ask returned", move || {
                reply_type(&l, "l-1").is_some() && !tool_results(&a).is_empty()
            });
        let doc = c.doc;
        c.world
            .advance_until(10_000, "no open card left", move |w| {
                cards(w, doc).iter().all(|d| d.state != DecisionState::Open)
            })
            .unwrap();
        c.world.advance(100).unwrap();
        let results = tool_results(&agent);
        assert_eq!(results.len(), 1, "seed {seed}: one outcome: {results:?}");
        assert!(
            results[0].contains("isError=true"),
            "seed {seed}: {results:?}"
        );
        let now = cards(&c.world, c.doc);
        match reply_type(&lisa, "l-1").unwrap().as_str() {
            // The answer came first: its card stays answered, the other left.
            "decision:answered" => {
                assert_eq!(now.len(), 1, "seed {seed}: {now:?}");
                assert_eq!(now[0].id, placed[0].id);
            }
            // The withdrawal came first: both cards left, the answer found nothing.
            other => {
                assert_eq!(other, "decision:refused", "seed {seed}");
                assert!(now.is_empty(), "seed {seed}: {now:?}");
            }
        }
        // A late answer cannot approve withdrawn input (ATM-30).
        answer(&mona, "m-late", &placed[1].id, json!({ "text": "@mona" }));
        let m = mona.clone();
        c.world.until(10_000, "the late answer refused", move || {
            reply_type(&m, "m-late").is_some()
        });
        assert_eq!(
            reply_type(&mona, "m-late").as_deref(),
            Some("decision:refused"),
            "seed {seed}"
        );
    }
}
