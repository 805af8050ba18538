//! The closing table: Chopin's figures beside the raw baseline's, their ratio, and the goals
//! they are held to.
//!
//! Owns: which rows there are, how each cell is written, and the goal column (a reading, not an
//! assertion: the bench always exits 0 once it has measured). Does not own: measuring.

use std::time::Duration;

use crate::stats::{ms, RssDelta, Summary};

/// The goals of the socket-cost issue.
pub const GOAL_KIB_PER_SOCKET: f64 = 48.0;
pub const GOAL_ATTACH_P99_MS: f64 = 20.0;

/// One server's figures (Chopin's or the raw echo's).
pub struct Figures {
    /// RSS around the agent links (raw: the first batch of sockets).
    pub links: RssDelta,
    /// `attach` → `attached` (raw: one echo round trip).
    pub attach: Option<Summary>,
    /// Connect → `attached` (raw: connect → upgrade → echo).
    pub attach_total: Option<Summary>,
    /// RSS around the room sockets (raw: the second batch).
    pub rooms: RssDelta,
    /// Connect → greeting read (raw: connect → upgrade → echo).
    pub room_open: Option<Summary>,
    /// `chat:send` → `chat:ack` one after another (raw: sequential echoes).
    pub acks: Option<Summary>,
    pub acks_per_sec: f64,
}

/// Prints the table.
pub fn print(chopin: &Figures, raw: &Figures, concurrency: usize) {
    let mut rows: Vec<[String; 5]> = vec![[
        "what".into(),
        "chopin".into(),
        "raw".into(),
        "ratio (chopin/raw)".into(),
        "goal".into(),
    ]];
    let kib = |d: &RssDelta| d.per_socket();
    rows.push([
        "KiB per agent link".into(),
        kib_cell(kib(&chopin.links)),
        kib_cell(kib(&raw.links)),
        ratio_cell(kib(&chopin.links), kib(&raw.links)),
        kib_goal(kib(&chopin.links)),
    ]);
    rows.push([
        "KiB per room socket".into(),
        kib_cell(kib(&chopin.rooms)),
        kib_cell(kib(&raw.rooms)),
        ratio_cell(kib(&chopin.rooms), kib(&raw.rooms)),
        kib_goal(kib(&chopin.rooms)),
    ]);
    rows.push(latency_row(
        &format!("attach p50 / p99 (ms) at {concurrency} concurrent"),
        chopin.attach,
        raw.attach,
        attach_goal(chopin.attach),
    ));
    rows.push(latency_row(
        "connect+upgrade+attach p50 / p99 (ms)",
        chopin.attach_total,
        raw.attach_total,
        "-".into(),
    ));
    rows.push(latency_row(
        "room socket open → greeting p50 / p99 (ms)",
        chopin.room_open,
        raw.room_open,
        "-".into(),
    ));
    rows.push(latency_row(
        "chat ack p50 / p99 (ms), sequential",
        chopin.acks,
        raw.acks,
        "-".into(),
    ));
    rows.push([
        "chat acks per second".into(),
        format!("{:.0}", chopin.acks_per_sec),
        format!("{:.0}", raw.acks_per_sec),
        ratio_cell(Some(chopin.acks_per_sec), Some(raw.acks_per_sec)),
        "-".into(),
    ]);

    let widths: Vec<usize> = (0..5)
        .map(|c| rows.iter().map(|r| r[c].chars().count()).max().unwrap_or(0))
        .collect();
    for (n, row) in rows.iter().enumerate() {
        let cells: Vec<String> = row
            .iter()
            .zip(&widths)
            .enumerate()
            .map(|(c, (cell, width))| {
                let pad = width - cell.chars().count();
                if c == 0 {
                    format!("{cell}{}", " ".repeat(pad))
                } else {
                    format!("{}{cell}", " ".repeat(pad))
                }
            })
            .collect();
        println!("| {} |", cells.join(" | "));
        if n == 0 {
            let rule: Vec<String> = widths.iter().map(|w| "-".repeat(*w)).collect();
            println!("|-{}-|", rule.join("-|-"));
        }
    }
}

fn kib_cell(kib: Option<f64>) -> String {
    kib.map_or_else(|| "n/a".into(), |k| format!("{k:.1}"))
}

fn ratio(a: f64, b: f64) -> String {
    if b > 0.0 && a.is_finite() {
        let r = a / b;
        // Small ratios (a throughput far below the baseline's) keep three significant digits.
        if r >= 0.1 {
            format!("{r:.1}×")
        } else {
            format!("{r:.2e}×")
        }
    } else {
        "n/a".into()
    }
}

fn ratio_cell(a: Option<f64>, b: Option<f64>) -> String {
    match (a, b) {
        (Some(a), Some(b)) => ratio(a, b),
        _ => "n/a".into(),
    }
}

fn kib_goal(kib: Option<f64>) -> String {
    let verdict = match kib {
        Some(k) if k <= GOAL_KIB_PER_SOCKET => "met",
        Some(_) => "NOT met",
        None => "n/a",
    };
    format!("≤ {GOAL_KIB_PER_SOCKET:.0} KiB: {verdict}")
}

fn attach_goal(attach: Option<Summary>) -> String {
    let verdict = match attach {
        Some(s) if secs_ms(s.p99) <= GOAL_ATTACH_P99_MS => "met",
        Some(_) => "NOT met",
        None => "n/a",
    };
    format!("p99 ≤ {GOAL_ATTACH_P99_MS:.0} ms: {verdict}")
}

fn secs_ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1000.0
}

fn latency_row(
    what: &str,
    chopin: Option<Summary>,
    raw: Option<Summary>,
    goal: String,
) -> [String; 5] {
    let pair = |s: Option<Summary>| {
        s.map_or_else(
            || "n/a".into(),
            |s| format!("{} / {}", ms(s.p50), ms(s.p99)),
        )
    };
    let ratios = match (chopin, raw) {
        (Some(c), Some(r)) => format!(
            "{} / {}",
            ratio(secs_ms(c.p50), secs_ms(r.p50)),
            ratio(secs_ms(c.p99), secs_ms(r.p99))
        ),
        _ => "n/a".into(),
    };
    [what.into(), pair(chopin), pair(raw), ratios, goal]
}
