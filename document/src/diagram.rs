//! The two validated fence languages (DIA-01): `seecode`, a JSON spec of a registered diagram
//! or numerical chart, and `wireframe`, an indented outline of interface parts. A block an
//! edit introduces or changes is checked here (DIA-07); an unchanged one is carried as it is
//! (DIA-09, the edit module's rule for every block).
//!
//! Owns: the catalogue of `seecode` types and what each needs, the wireframe outline's grammar,
//! the words of a refusal (a wireframe's failing lines counted inside the fence, DIA-08), and
//! the examples the Planner is taught, each of which passes its own check.
//! Does not own: drawing (the browser renders the fences) or when a block counts as new.

use serde_json::Value;

/// The fence language of a SeeCode spec.
pub const SEECODE: &str = "seecode";
/// The fence language of a wireframe outline.
pub const WIREFRAME: &str = "wireframe";

/// What one `seecode` type needs besides `type` (and an optional `title`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Needs {
    /// `labels` (strings) and `series` (`{name, values}`, one number per label).
    Series,
    /// `items`: `{label, value}` with a number value (`non_negative`: at least 0).
    Items { non_negative: bool },
    /// `series`: `{name, points}`, each point `[x, y]`.
    Points,
    /// `x`, `y` (strings) and `values`, one row per `y` of one number per `x`.
    Grid,
    /// `nodes` (strings) and `links` `{from, to, value}` between them, `value` above 0.
    Flows,
    /// `items`: `{label, from, to}` with numbers.
    Ranges,
    /// `nodes` `{id, label}` (unique ids) and `edges` `{from, to}` between them.
    Graph,
    /// `participants` (strings) and `messages` `{from, to, text}` between them.
    Exchange,
    /// `events`: `{when, label}` strings.
    Events,
}

/// The registered types (DIA-02's native catalogue): charts, then diagrams.
const CATALOGUE: &[(&str, Needs)] = &[
    ("bar", Needs::Series),
    ("stacked-bar", Needs::Series),
    ("line", Needs::Series),
    ("area", Needs::Series),
    ("radar", Needs::Series),
    ("marimekko", Needs::Series),
    ("pie", Needs::Items { non_negative: true }),
    ("polar", Needs::Items { non_negative: true }),
    ("treemap", Needs::Items { non_negative: true }),
    (
        "waterfall",
        Needs::Items {
            non_negative: false,
        },
    ),
    ("scatter", Needs::Points),
    ("heatmap", Needs::Grid),
    ("sankey", Needs::Flows),
    ("dumbbell", Needs::Ranges),
    ("flowchart", Needs::Graph),
    ("state", Needs::Graph),
    ("sequence", Needs::Exchange),
    ("timeline", Needs::Events),
];

/// The registered `seecode` type names, in catalogue order.
pub fn seecode_types() -> impl Iterator<Item = &'static str> {
    CATALOGUE.iter().map(|(name, _)| *name)
}

/// The most entries one list of a spec holds.
const ENTRIES_MAX: usize = 500;

/// The language and body of a closed fenced block `text` (its fences included), if it is one
/// of the two checked languages.
pub fn checked_fence(text: &str) -> Option<(&'static str, String)> {
    let mut lines = text.lines();
    let first = lines.next()?.trim_start_matches(' ');
    let fence_char = first.chars().next().filter(|c| *c == '`' || *c == '~')?;
    let length = first.chars().take_while(|c| *c == fence_char).count();
    if length < 3 {
        return None;
    }
    let info = first[length * fence_char.len_utf8()..].trim();
    let language = match info.split_whitespace().next() {
        Some(SEECODE) => SEECODE,
        Some(WIREFRAME) => WIREFRAME,
        _ => return None,
    };
    let body: Vec<&str> = lines.collect();
    let closes = |line: &&str| {
        let t = line.trim();
        t.chars().count() >= length && t.chars().all(|c| c == fence_char)
    };
    let inner = match body.split_last() {
        Some((last, inner)) if closes(last) => inner,
        // An unclosed fence is the edit module's refusal, not this one's.
        _ => return None,
    };
    Some((language, inner.join("\n")))
}

/// Checks a closed `seecode` or `wireframe` block; the refusal's words name the fence's first
/// line in the content (`first_line`) and, for a wireframe, each failing line inside it.
pub fn check_fence(text: &str, first_line: usize) -> Result<(), String> {
    let Some((language, body)) = checked_fence(text) else {
        return Ok(());
    };
    let result = match language {
        SEECODE => check_seecode(&body),
        _ => check_wireframe(&body),
    };
    result.map_err(|why| {
        format!("the {language} fence on line {first_line} of the content is not valid: {why}")
    })
}

/// A `seecode` body: one JSON object whose `type` is registered and whose data meets that
/// type's needs.
pub fn check_seecode(body: &str) -> Result<(), String> {
    let spec: Value = serde_json::from_str(body)
        .map_err(|e| format!("a seecode fence holds one JSON object ({e})"))?;
    let Some(spec) = spec.as_object() else {
        return Err("a seecode fence holds one JSON object".into());
    };
    let Some(kind) = spec.get("type").and_then(Value::as_str) else {
        return Err(format!(
            "it needs a string \"type\", one of: {}",
            seecode_types().collect::<Vec<_>>().join(", ")
        ));
    };
    let Some((_, needs)) = CATALOGUE.iter().find(|(name, _)| *name == kind) else {
        return Err(format!(
            "\"{kind}\" is not a registered type; use one of: {} (Mermaid only for what none of these can show)",
            seecode_types().collect::<Vec<_>>().join(", ")
        ));
    };
    if spec.get("title").is_some_and(|t| !t.is_string()) {
        return Err("\"title\" is a string".into());
    }
    let at = |name: &str| spec.get(name).unwrap_or(&Value::Null);
    match needs {
        Needs::Series => {
            let labels = strings(at("labels"), "labels")?;
            let series = list(at("series"), "series")?;
            for (i, s) in series.iter().enumerate() {
                text(&s["name"], &format!("series[{i}].name"))?;
                let values = numbers(&s["values"], &format!("series[{i}].values"))?;
                if values.len() != labels.len() {
                    return Err(format!(
                        "series[{i}].values has {} numbers for {} labels; give one per label",
                        values.len(),
                        labels.len()
                    ));
                }
            }
        }
        Needs::Items { non_negative } => {
            for (i, item) in list(at("items"), "items")?.iter().enumerate() {
                text(&item["label"], &format!("items[{i}].label"))?;
                let value = number(&item["value"], &format!("items[{i}].value"))?;
                if *non_negative && value < 0.0 {
                    return Err(format!(
                        "items[{i}].value is negative; a {kind} shows parts of a whole"
                    ));
                }
            }
        }
        Needs::Points => {
            for (i, s) in list(at("series"), "series")?.iter().enumerate() {
                text(&s["name"], &format!("series[{i}].name"))?;
                for (j, p) in list(&s["points"], &format!("series[{i}].points"))?
                    .iter()
                    .enumerate()
                {
                    let pair = numbers(p, &format!("series[{i}].points[{j}]"))?;
                    if pair.len() != 2 {
                        return Err(format!("series[{i}].points[{j}] is [x, y]"));
                    }
                }
            }
        }
        Needs::Grid => {
            let x = strings(at("x"), "x")?;
            let y = strings(at("y"), "y")?;
            let rows = list(at("values"), "values")?;
            if rows.len() != y.len() {
                return Err(format!(
                    "values has {} rows for {} y labels; give one row per y",
                    rows.len(),
                    y.len()
                ));
            }
            for (i, row) in rows.iter().enumerate() {
                if numbers(row, &format!("values[{i}]"))?.len() != x.len() {
                    return Err(format!("values[{i}] needs one number per x label"));
                }
            }
        }
        Needs::Flows => {
            let nodes = strings(at("nodes"), "nodes")?;
            for (i, link) in list(at("links"), "links")?.iter().enumerate() {
                for end in ["from", "to"] {
                    let name = text(&link[end], &format!("links[{i}].{end}"))?;
                    if !nodes.contains(&name) {
                        return Err(format!(
                            "links[{i}].{end} names {name:?}, which is not in nodes"
                        ));
                    }
                }
                if number(&link["value"], &format!("links[{i}].value"))? <= 0.0 {
                    return Err(format!("links[{i}].value is above 0"));
                }
            }
        }
        Needs::Ranges => {
            for (i, item) in list(at("items"), "items")?.iter().enumerate() {
                text(&item["label"], &format!("items[{i}].label"))?;
                number(&item["from"], &format!("items[{i}].from"))?;
                number(&item["to"], &format!("items[{i}].to"))?;
            }
        }
        Needs::Graph => {
            let mut ids = Vec::new();
            for (i, node) in list(at("nodes"), "nodes")?.iter().enumerate() {
                let id = text(&node["id"], &format!("nodes[{i}].id"))?;
                text(&node["label"], &format!("nodes[{i}].label"))?;
                if ids.contains(&id) {
                    return Err(format!("nodes[{i}].id {id:?} is used twice"));
                }
                ids.push(id);
            }
            for (i, edge) in optional_list(at("edges"), "edges")?.iter().enumerate() {
                for end in ["from", "to"] {
                    let id = text(&edge[end], &format!("edges[{i}].{end}"))?;
                    if !ids.contains(&id) {
                        return Err(format!(
                            "edges[{i}].{end} names {id:?}, which is no node's id"
                        ));
                    }
                }
            }
        }
        Needs::Exchange => {
            let participants = strings(at("participants"), "participants")?;
            for (i, m) in list(at("messages"), "messages")?.iter().enumerate() {
                for end in ["from", "to"] {
                    let name = text(&m[end], &format!("messages[{i}].{end}"))?;
                    if !participants.contains(&name) {
                        return Err(format!(
                            "messages[{i}].{end} names {name:?}, which is not a participant"
                        ));
                    }
                }
                text(&m["text"], &format!("messages[{i}].text"))?;
            }
        }
        Needs::Events => {
            for (i, e) in list(at("events"), "events")?.iter().enumerate() {
                text(&e["when"], &format!("events[{i}].when"))?;
                text(&e["label"], &format!("events[{i}].label"))?;
            }
        }
    }
    Ok(())
}

fn list<'a>(value: &'a Value, name: &str) -> Result<&'a Vec<Value>, String> {
    match value.as_array() {
        Some(items) if !items.is_empty() && items.len() <= ENTRIES_MAX => Ok(items),
        Some(items) if items.len() > ENTRIES_MAX => {
            Err(format!("{name} has more than {ENTRIES_MAX} entries"))
        }
        _ => Err(format!("{name} is a list of at least one entry")),
    }
}

fn optional_list(value: &Value, name: &str) -> Result<Vec<Value>, String> {
    if value.is_null() {
        return Ok(Vec::new());
    }
    list(value, name).cloned()
}

fn text(value: &Value, name: &str) -> Result<String, String> {
    match value.as_str() {
        Some(s) if !s.trim().is_empty() => Ok(s.to_owned()),
        _ => Err(format!("{name} is a non-empty string")),
    }
}

fn number(value: &Value, name: &str) -> Result<f64, String> {
    value
        .as_f64()
        .filter(|n| n.is_finite())
        .ok_or_else(|| format!("{name} is a number"))
}

fn strings(value: &Value, name: &str) -> Result<Vec<String>, String> {
    list(value, name)?
        .iter()
        .enumerate()
        .map(|(i, v)| text(v, &format!("{name}[{i}]")))
        .collect()
}

fn numbers(value: &Value, name: &str) -> Result<Vec<f64>, String> {
    list(value, name)?
        .iter()
        .enumerate()
        .map(|(i, v)| number(v, &format!("{name}[{i}]")))
        .collect()
}

/// The parts a wireframe outline is made of.
pub const WIREFRAME_PARTS: &[&str] = &[
    "app",
    "screen",
    "window",
    "header",
    "footer",
    "nav",
    "sidebar",
    "main",
    "section",
    "row",
    "column",
    "grid",
    "card",
    "list",
    "item",
    "table",
    "form",
    "input",
    "button",
    "text",
    "heading",
    "image",
    "chart",
    "tabs",
    "tab",
    "modal",
    "menu",
    "toolbar",
    "search",
    "link",
    "icon",
    "avatar",
    "badge",
    "line",
    "divider",
    "statusbar",
];

/// Characters that draw boxes rather than name parts (box drawing and block elements).
fn draws(c: char) -> bool {
    ('\u{2500}'..='\u{259F}').contains(&c)
}

/// A `wireframe` body: non-empty lines, each `part ["label"] [w=N% | flush | repeat=N |
/// cols=N]…`, indented two spaces per level under its parent, one level deeper at most; no box
/// drawing or ASCII art (DIA-06). The failing lines, numbered from 1 inside the fence (DIA-08).
pub fn check_wireframe(body: &str) -> Result<(), String> {
    let mut failing = Vec::new();
    let mut depth_before: Option<usize> = None;
    let mut any = false;
    for (n, line) in body.lines().enumerate() {
        let number = n + 1;
        if line.trim().is_empty() {
            continue;
        }
        any = true;
        match check_wireframe_line(line, depth_before) {
            Ok(depth) => depth_before = Some(depth),
            Err(why) => failing.push(format!("line {number}: {why}")),
        }
    }
    if !any {
        return Err("a wireframe outlines at least one part".into());
    }
    if failing.is_empty() {
        Ok(())
    } else {
        Err(failing.join("; "))
    }
}

/// One outline line, after a line at `depth_before`: its depth, or why not.
fn check_wireframe_line(line: &str, depth_before: Option<usize>) -> Result<usize, String> {
    if line.chars().any(draws)
        || line.contains("+-")
        || line.contains("-+")
        || line.contains('|')
        || line.contains("---")
        || line.contains("===")
    {
        return Err(
            "box drawing or ASCII art; name the part instead (e.g. `card \"Total\"`)".into(),
        );
    }
    if line.starts_with('\t') || line.trim_start_matches(' ').starts_with('\t') {
        return Err("indent with two spaces per level, not tabs".into());
    }
    let spaces = line.len() - line.trim_start_matches(' ').len();
    if !spaces.is_multiple_of(2) {
        return Err("indent with two spaces per level".into());
    }
    let depth = spaces / 2;
    let deepest = depth_before.map_or(0, |d| d + 1);
    if depth > deepest {
        return Err(format!(
            "indented {depth} levels where at most {deepest} can follow the line before"
        ));
    }
    let mut rest = line.trim();
    let part_end = rest.find([' ', '"']).unwrap_or(rest.len());
    let part = &rest[..part_end];
    if !WIREFRAME_PARTS.contains(&part) {
        return Err(format!(
            "{part:?} is not a part; use one of: {}",
            WIREFRAME_PARTS.join(", ")
        ));
    }
    rest = rest[part_end..].trim_start();
    if let Some(quoted) = rest.strip_prefix('"') {
        let Some(end) = quoted.find('"') else {
            return Err("a label is one quoted string; this one is not closed".into());
        };
        rest = quoted[end + 1..].trim_start();
    }
    for attribute in rest.split_whitespace() {
        let fits = |value: &str, lo: u32, hi: u32| {
            value.parse::<u32>().is_ok_and(|n| (lo..=hi).contains(&n))
        };
        let ok = match attribute.split_once('=') {
            None => attribute == "flush",
            Some(("w", value)) => value.strip_suffix('%').is_some_and(|v| fits(v, 1, 100)),
            Some(("repeat", value)) => fits(value, 1, 50),
            Some(("cols", value)) => fits(value, 1, 12),
            Some(_) => false,
        };
        if !ok {
            return Err(format!(
                "{attribute:?} is not an attribute; after the part and its quoted label come only w=N% (1-100), flush, repeat=N (1-50) or cols=N (1-12)"
            ));
        }
    }
    Ok(depth)
}

/// The examples the Planner is taught (DIA-02): language and body; each passes its check.
pub const EXAMPLES: &[(&str, &str)] = &[
    (
        SEECODE,
        r#"{"type": "bar", "title": "Orders by region (synthetic)", "labels": ["EU", "US", "APAC"], "series": [{"name": "Q1", "values": [120, 95, 40]}]}"#,
    ),
    (
        SEECODE,
        r#"{"type": "marimekko", "title": "Share by segment (synthetic)", "labels": ["Retail", "Wholesale"], "series": [{"name": "EU", "values": [60, 30]}, {"name": "US", "values": [40, 70]}]}"#,
    ),
    (
        SEECODE,
        r#"{"type": "dumbbell", "title": "Latency before and after (synthetic)", "items": [{"label": "EU", "from": 180, "to": 90}, {"label": "US", "from": 120, "to": 80}]}"#,
    ),
    (
        SEECODE,
        r#"{"type": "flowchart", "nodes": [{"id": "cart", "label": "Cart"}, {"id": "pay", "label": "Payment"}], "edges": [{"from": "cart", "to": "pay"}]}"#,
    ),
    (
        WIREFRAME,
        "screen \"Checkout\"\n  header \"Shop\" flush\n  row\n    main w=70%\n      list \"Items\"\n        item repeat=3\n    sidebar \"Summary\" w=30%\n      button \"Pay\"",
    ),
];

/// What the Planner is taught about diagrams and wireframes (DIA-02, DIA-04, DIA-06): the two
/// languages, the whole native catalogue with what each type needs, and the examples above.
/// Taught on every Planner turn: no setting turns it on (DIA-03).
pub fn guide() -> String {
    let needs = |n: Needs| match n {
        Needs::Series => "labels: [string], series: [{name, values: [number, one per label]}]",
        Needs::Items { non_negative: true } => "items: [{label, value: number >= 0}]",
        Needs::Items {
            non_negative: false,
        } => "items: [{label, value: number}] (a running total)",
        Needs::Points => "series: [{name, points: [[x, y]]}]",
        Needs::Grid => {
            "x: [string], y: [string], values: [[number]] (one row per y, one number per x)"
        }
        Needs::Flows => "nodes: [string], links: [{from, to, value: number > 0}]",
        Needs::Ranges => "items: [{label, from: number, to: number}]",
        Needs::Graph => "nodes: [{id, label}], edges: [{from, to}]",
        Needs::Exchange => "participants: [string], messages: [{from, to, text}]",
        Needs::Events => "events: [{when, label}]",
    };
    let mut out = String::from(
        "Diagrams and wireframes. Where a picture says it better, write a fenced block in one of two \
languages; each is checked when you write it, and a write with an invalid block is refused with the reason.\n\
- ```seecode holds one JSON object: \"type\" (one of the native types below), an optional \"title\", and the data \
that type needs. Prefer seecode whenever one of these types can show the information; use a ```mermaid block only \
for what none of them can show, or when someone asks for Mermaid. Types:\n",
    );
    for (name, n) in CATALOGUE {
        out.push_str(&format!("  - {name}: {}\n", needs(*n)));
    }
    out.push_str(
        "- ```wireframe holds an indented outline of interface parts for layouts and mockups, two spaces per level: \
each line is a part, an optional \"quoted label\", then w=N% or flush for proportions and app chrome, repeat=N for \
repeated content, cols=N for a grid. Keep it low fidelity: short labels on the key areas, and line, image and grid \
with repeat for content. Never draw boxes or ASCII art (no box-drawing characters, | or +--) in any text fence. Parts: ",
    );
    out.push_str(&WIREFRAME_PARTS.join(", "));
    out.push_str(".\nExamples (the data is synthetic):\n");
    for (language, body) in EXAMPLES {
        out.push_str(&format!("```{language}\n{body}\n```\n"));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn fenced(language: &str, body: &str) -> String {
        format!("```{language}\n{body}\n```\n")
    }

    #[test]
    fn dia_01_dia_02_every_taught_example_passes_its_own_check() {
        for (language, body) in EXAMPLES {
            assert_eq!(check_fence(&fenced(language, body), 1), Ok(()), "{body}");
        }
        for name in [
            "bar",
            "line",
            "scatter",
            "radar",
            "polar",
            "waterfall",
            "treemap",
            "heatmap",
            "sankey",
            "marimekko",
            "dumbbell",
        ] {
            assert!(seecode_types().any(|t| t == name), "{name} is registered");
        }
    }

    #[test]
    fn dia_01_dia_07_a_seecode_spec_needs_a_registered_type_and_its_data() {
        let bad = [
            ("not json", "one JSON object"),
            (r#"[1, 2]"#, "one JSON object"),
            (r#"{"labels": []}"#, "needs a string \"type\""),
            (r#"{"type": "gauge"}"#, "not a registered type"),
            (
                r#"{"type": "bar", "labels": ["a", "b"], "series": [{"name": "s", "values": [1]}]}"#,
                "1 numbers for 2 labels",
            ),
            (
                r#"{"type": "pie", "items": [{"label": "a", "value": -1}]}"#,
                "negative",
            ),
            (
                r#"{"type": "sankey", "nodes": ["a", "b"], "links": [{"from": "a", "to": "c", "value": 1}]}"#,
                "not in nodes",
            ),
            (
                r#"{"type": "flowchart", "nodes": [{"id": "a", "label": "A"}, {"id": "a", "label": "B"}]}"#,
                "used twice",
            ),
            (
                r#"{"type": "heatmap", "x": ["a"], "y": ["r1", "r2"], "values": [[1]]}"#,
                "1 rows for 2 y labels",
            ),
            (
                r#"{"type": "scatter", "series": [{"name": "s", "points": [[1, 2, 3]]}]}"#,
                "[x, y]",
            ),
        ];
        for (body, words) in bad {
            let refused = check_fence(&fenced(SEECODE, body), 4).unwrap_err();
            assert!(refused.contains(words), "{body}: {refused}");
            assert!(
                refused.starts_with("the seecode fence on line 4 of the content"),
                "{refused}"
            );
        }
        let ok = r#"{"type": "sequence", "participants": ["web", "api"], "messages": [{"from": "web", "to": "api", "text": "POST /pay"}]}"#;
        assert_eq!(check_seecode(ok), Ok(()));
    }

    #[test]
    fn dia_06_dia_08_a_wireframe_refusal_names_its_failing_lines_inside_the_fence() {
        let body =
            "screen \"Home\"\n  header\n      card\n  +------+\n  button Pay\n  image w=120%";
        let refused = check_fence(&fenced(WIREFRAME, body), 7).unwrap_err();
        assert!(
            refused.starts_with("the wireframe fence on line 7 of the content"),
            "{refused}"
        );
        for line in ["line 3:", "line 4:", "line 5:", "line 6:"] {
            assert!(refused.contains(line), "{line} in {refused}");
        }
        assert!(
            !refused.contains("line 1:") && !refused.contains("line 2:"),
            "{refused}"
        );
        assert!(refused.contains("box drawing or ASCII art"), "{refused}");
        let drawn = "screen\n  ┌──────┐";
        assert!(check_wireframe(drawn)
            .unwrap_err()
            .contains("line 2: box drawing"));
        assert!(check_wireframe("\n\n").is_err());
    }

    #[test]
    fn dia_02_dia_04_dia_06_the_guide_teaches_the_whole_catalogue_prefers_seecode_and_forbids_box_drawing(
    ) {
        let guide = guide();
        for name in seecode_types() {
            assert!(guide.contains(&format!("  - {name}: ")), "{name}");
        }
        assert!(guide.contains("Prefer seecode") && guide.contains("use a ```mermaid block only"));
        assert!(guide.contains("low fidelity") && guide.contains("Never draw boxes or ASCII art"));
        // Every example in the guide passes the check a write would meet.
        let examples =
            guide.matches("```seecode\n").count() + guide.matches("```wireframe\n").count();
        assert_eq!(examples, EXAMPLES.len());
    }

    #[test]
    fn other_fences_and_unclosed_ones_are_not_this_checks() {
        assert_eq!(check_fence("```rust\nfn main() {}\n```\n", 1), Ok(()));
        assert_eq!(
            check_fence("```seecode\nnot json\n", 1),
            Ok(()),
            "unclosed: the edit module's"
        );
        assert!(check_fence("~~~~seecode\n{\"type\": \"bar\"}\n~~~~\n", 1).is_err());
    }
}
