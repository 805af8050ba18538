//! The standard cast of a scenario: the server up, mona (write) and lisa (admin) of `octo/plans`
//! signed in through the real OAuth routes, hubot a reader, and one document.
//!
//! Owns: that setup, so every scenario file starts from the same world. Does not own: what a
//! scenario then does (actors, steps, expectations).

use chopin_fixtures::github::Permission;
use chopin_server::store::prelude::*;
use chopin_server::store::NewDocument;
use uuid::Uuid;

use crate::clock::SIM_EPOCH_MS;
use crate::world::{Step, World, WorldOptions};

/// The cast's document's id.
pub const CAST_DOCUMENT: Uuid = Uuid::from_u128(0x5eed);

/// The cast's document's canonical URL.
pub const DOC_URL: &str = "/documents/octo/plans/field-notes";

/// A world with its cast.
pub struct Cast {
    pub world: World,
    /// The document, `octo/plans/field-notes`.
    pub doc: Uuid,
    /// mona's and lisa's GitHub tokens (for their agent clients).
    pub mona: String,
    pub lisa: String,
    /// mona's and lisa's browser sessions (`Cookie` header values).
    pub mona_cookie: String,
    pub lisa_cookie: String,
}

/// Runs a future outside the simulation (to prepare the store between steps).
pub fn block_on<T>(f: impl std::future::Future<Output = T>) -> T {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("a runtime")
        .block_on(f)
}

/// The cast for `seed`; every message takes `fixed_latency_ms` when given (otherwise turmoil
/// draws latencies from the seed).
pub fn cast(seed: u64, fixed_latency_ms: Option<u64>) -> Cast {
    cast_with(
        seed,
        WorldOptions {
            fixed_latency_ms,
            ..WorldOptions::default()
        },
    )
}

/// The cast in a world built with `options` (latency, configuration, held store calls).
pub fn cast_with(seed: u64, options: WorldOptions) -> Cast {
    let mut world = World::with_options(seed, options);
    let github = world.github().clone();
    github
        .add_user("mona", 1001)
        .add_user("lisa", 1002)
        .add_user("hubot", 1003);
    github.add_repo("octo", "plans");
    github.grant("octo", "plans", "mona", Permission::Write);
    github.grant("octo", "plans", "lisa", Permission::Admin);
    github.grant("octo", "plans", "hubot", Permission::Read);
    let (mona, lisa) = (github.issue_token("mona"), github.issue_token("lisa"));
    let doc = CAST_DOCUMENT;
    block_on(world.store().create_document(&NewDocument {
        id: doc,
        repo_owner: "octo".into(),
        repo_name: "plans".into(),
        slug: "field-notes".into(),
        title: "Field notes".into(),
        created_at_ms: SIM_EPOCH_MS,
        parent_id: None,
        ..NewDocument::default()
    }))
    .expect("the cast's document");
    world
        .apply(&Step::AwaitServer { within_ms: 1_000 })
        .expect("the server starts");
    let mona_cookie = world.sign_in("mona").expect("mona signs in");
    let lisa_cookie = world.sign_in("lisa").expect("lisa signs in");
    Cast {
        world,
        doc,
        mona,
        lisa,
        mona_cookie,
        lisa_cookie,
    }
}
