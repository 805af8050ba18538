//! The fake GitHub runs as a turmoil host of the world, and the server's own GitHub client and
//! admission reach it over simulated TCP through the connector seam.

use std::sync::Arc;

use chopin_fixtures::github::Permission;
use chopin_server::identity::admission::{Admission, AdmissionError, AdmissionPolicy};
use chopin_server::identity::github::GitHub;
use chopin_sim::{SimClock, TurmoilConnector, World, GITHUB_HOST, GITHUB_PORT};

#[test]
fn the_server_github_client_reaches_the_fake_github_host() {
    let mut world = World::new(7);
    let github = world.github().clone();
    github.add_user("mona", 1001).add_repo("octo", "plans");
    github.grant("octo", "plans", "mona", Permission::Write);
    let token = github.issue_token("mona");

    let seen = Arc::new(std::sync::Mutex::new(Vec::<String>::new()));
    let out = seen.clone();
    world
        .run_client("checker", async move {
            let clock = Arc::new(SimClock::new());
            let client = GitHub::new(
                format!("http://{GITHUB_HOST}:{GITHUB_PORT}"),
                Arc::new(TurmoilConnector),
                clock.clone(),
            );
            let user = client.user(&token).await?;
            let access = client.repo_access(&token, "OCTO", "Plans").await?;
            let admission = Admission::new(
                AdmissionPolicy::new(["hubot"], Vec::<String>::new()),
                client,
                clock,
            );
            let verdict = admission.check(&token).await;
            let mut out = out.lock().unwrap();
            out.push(format!("user {} {}", user.login, user.id));
            out.push(format!(
                "access {}/{} write={}",
                access.as_ref().map(|a| a.owner.as_str()).unwrap_or("-"),
                access.as_ref().map(|a| a.repo.as_str()).unwrap_or("-"),
                access.as_ref().is_some_and(|a| a.can_write())
            ));
            out.push(format!("admission {:?}", verdict.map(|a| a.user.login)));
            Ok(())
        })
        .unwrap();

    assert_eq!(
        *seen.lock().unwrap(),
        vec![
            "user mona 1001".to_string(),
            "access octo/plans write=true".to_string(),
            format!(
                "admission {:?}",
                Err::<String, _>(AdmissionError::Refused {
                    login: "mona".into()
                })
            ),
        ]
    );
    assert_eq!(
        github.request_count("GET /user"),
        2,
        "{:?}",
        github.requests()
    );
}

#[test]
fn a_github_outage_in_the_world_is_unavailable_to_the_server() {
    let mut world = World::new(8);
    let github = world.github().clone();
    github.add_user("mona", 1001);
    let token = github.issue_token("mona");
    github.set_outage(true);

    let verdict = Arc::new(std::sync::Mutex::new(None));
    let out = verdict.clone();
    world
        .run_client("checker", async move {
            let clock = Arc::new(SimClock::new());
            let client = GitHub::new(
                format!("http://{GITHUB_HOST}:{GITHUB_PORT}"),
                Arc::new(TurmoilConnector),
                clock.clone(),
            );
            let admission = Admission::new(AdmissionPolicy::default(), client, clock);
            *out.lock().unwrap() = Some(admission.check(&token).await);
            Ok(())
        })
        .unwrap();
    let verdict = verdict.lock().unwrap().take().expect("the check ran");
    assert_eq!(verdict.unwrap_err(), AdmissionError::Unavailable);
}
