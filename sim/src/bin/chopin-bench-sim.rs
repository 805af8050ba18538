//! `chopin-bench-sim`: how fast the simulator runs the real server, against a bare baseline
//! measured in the same run.
//!
//! 1. Ten simulated minutes of reconnects (`sim/benches/reconnect-10-min.toml`: three agent
//!    clients attaching, detaching and going silent, two browsers), in simulated seconds per
//!    wall second, next to bare turmoil running an axum WebSocket echo server with five clients
//!    that each send a message every 5 s, over the same simulated time and tick.
//! 2. Exploration of a one-simulated-minute scenario (`sim/benches/reconnect-1-min.toml`) under
//!    every fault class, in seeds per minute (the simulator runs on one thread, so one core).
//!
//! Run it in release: `cargo run --release -p chopin-sim --bin chopin-bench-sim`.

use std::time::{Duration, Instant};

use axum::extract::ws::{Message, WebSocket, WebSocketUpgrade};
use axum::routing::get;
use axum::Router;
use chopin_fixtures::browser::BrowserSocket;
use chopin_sim::explore::{explore, FaultClass};
use chopin_sim::scenario::{play, ScenarioFile};
use chopin_sim::world::{SIMULATION_BOUND_MS, TICK_MS};
use chopin_sim::TurmoilListener;
use clap::Parser;

const TEN_MINUTES: &str = include_str!("../../benches/reconnect-10-min.toml");
const ONE_MINUTE: &str = include_str!("../../benches/reconnect-1-min.toml");

/// Measures the simulator's speed against bare turmoil in the same run (release build).
#[derive(Parser)]
#[command(name = "chopin-bench-sim")]
struct Cli {
    /// Runs of each side (the best is kept).
    #[arg(long, default_value_t = 3)]
    runs: u32,
    /// Seeds to explore for the seeds-per-minute figure.
    #[arg(long, default_value_t = 60)]
    seeds: u64,
}

fn main() {
    let cli = Cli::parse();
    let ten = ScenarioFile::parse(TEN_MINUTES).expect("the bench scenario");
    let one = ScenarioFile::parse(ONE_MINUTE).expect("the bench scenario");

    let mut chopin = Duration::MAX;
    let mut simulated_ms = 0;
    for _ in 0..cli.runs {
        let started = Instant::now();
        let verdict = play(&ten, None);
        chopin = chopin.min(started.elapsed());
        if let Some((step, why)) = &verdict.failure {
            eprintln!("the bench scenario failed at step {step}: {why}");
            std::process::exit(1);
        }
        simulated_ms = verdict.ended_ms;
    }
    let mut bare = Duration::MAX;
    for _ in 0..cli.runs {
        bare = bare.min(bare_turmoil(simulated_ms));
    }
    let rate = |wall: Duration| simulated_ms as f64 / 1_000.0 / wall.as_secs_f64();
    println!(
        "10 simulated minutes of reconnects: {:.0} simulated s per wall s ({:.2} s wall)",
        rate(chopin),
        chopin.as_secs_f64()
    );
    println!(
        "bare turmoil + axum WebSocket echo, 5 clients, same time and tick: {:.0} simulated s per wall s ({:.2} s wall)",
        rate(bare),
        bare.as_secs_f64()
    );
    println!(
        "ratio (chopin / bare): {:.2} (goal: at least 0.50)",
        rate(chopin) / rate(bare)
    );

    let explored = explore(
        &one,
        0..cli.seeds,
        &FaultClass::ALL,
        Duration::from_secs(600),
    );
    let per_minute = explored.seeds_run as f64 / explored.elapsed.as_secs_f64() * 60.0;
    println!(
        "explore, 1-simulated-minute scenario, every fault class: {} seeds in {:.1} s = {per_minute:.0} seeds a minute on one core (goal: at least 100){}",
        explored.seeds_run,
        explored.elapsed.as_secs_f64(),
        if explored.found.is_some() {
            " — an invariant broke!"
        } else {
            ""
        }
    );
}

/// Wall time for bare turmoil to run `simulated_ms`: an axum WebSocket echo server and five
/// clients each sending a message every 5 s and reading the echo.
fn bare_turmoil(simulated_ms: u64) -> Duration {
    let mut sim = turmoil::Builder::new()
        .rng_seed(1)
        .tick_duration(Duration::from_millis(TICK_MS))
        .simulation_duration(Duration::from_millis(SIMULATION_BOUND_MS))
        .enable_random_order()
        .build();
    sim.host("server", || async {
        let router = Router::new().route(
            "/ws",
            get(|upgrade: WebSocketUpgrade| async move { upgrade.on_upgrade(echo) }),
        );
        let listener = TurmoilListener::bind(("0.0.0.0", 8787)).await?;
        axum::serve(listener, router).await?;
        Ok(())
    });
    for i in 0..5 {
        sim.client(format!("client-{i}"), async move {
            tokio::time::sleep(Duration::from_millis(10 * i)).await;
            let stream = turmoil::net::TcpStream::connect(("server", 8787)).await?;
            let mut socket = BrowserSocket::connect(stream, "server:8787", "/ws", None, None)
                .await
                .map_err(|e| e.to_string())?;
            loop {
                tokio::time::sleep(Duration::from_secs(5)).await;
                socket
                    .send_json(&serde_json::json!({ "type": "ping", "from": i }))
                    .await
                    .map_err(|e| e.to_string())?;
                socket.recv_json().await.map_err(|e| e.to_string())?;
            }
        });
    }
    let started = Instant::now();
    while sim.elapsed() < Duration::from_millis(simulated_ms) {
        let _ = sim.step();
    }
    started.elapsed()
}

async fn echo(mut socket: WebSocket) {
    while let Some(Ok(message)) = socket.recv().await {
        if let Message::Text(_) = message {
            if socket.send(message).await.is_err() {
                return;
            }
        }
    }
}
