//! The visual admission check (ISO-33..42): one server-owned check that foreground Planner
//! writes (`edit_plan`, `edit_child`) on every harness and MCP `create_document` /
//! `update_document` pass before they are written. Every passage of prose, list or quotation
//! the write introduces or changes is assessed — is a faithful visual possible, would it help,
//! and which native type fits (a `seecode` type, a comparison `table`, or `none`) — and where
//! the assessment selects one, that visual must stand right beside its passage (the block just
//! before or after it), valid, before the write is accepted. A passage judged fine as prose is
//! admitted as prose: there is no quota of diagrams.
//!
//! Owns: choosing the passages (by block digest: an unchanged passage with its visual is carried
//! as it is), the bounded batches they are assessed in, the thresholds (no confidence veto
//! added beyond them), a cache of successful assessments by passage and context, the refusal's
//! words (the passage, what it needs, how to write it), and what happens with no assessor
//! model (`VISUAL_ADMISSION`).
//! Does not own: writing (the caller writes after admission, against the revision it read, so
//! a concurrent edit still makes the write stale, ISO-40) or background jobs' writes, which keep
//! their own contracts (ISO-41).

use std::sync::{Arc, Mutex, PoisonError};

use async_trait::async_trait;
use chopin_document::blocks::{block_digest, blocks, Block, BlockKind};
use chopin_document::diagram;
use serde_json::{json, Value};

use crate::runtime::recent::Recent;

pub use crate::config::{VisualMode as Mode, VisualSettings as Settings};

/// The visual an assessment selects for a passage.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Selected {
    /// A `seecode` fence of this type.
    Diagram(String),
    /// A Markdown comparison table.
    Table,
    /// No suitable type: prose.
    None,
}

/// One passage's assessment.
#[derive(Debug, Clone, PartialEq)]
pub struct Assessment {
    pub possible: f64,
    pub helpful: f64,
    pub selected: Selected,
}

/// A passage to assess: its text and the heading it sits under.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Passage {
    pub text: String,
    pub context: String,
}

/// Assesses passages: one answer per passage, in order, or why it could not.
#[async_trait]
pub trait Assessor: Send + Sync {
    async fn assess(&self, passages: &[Passage]) -> Result<Vec<Assessment>, String>;
}

/// Why a write was not admitted: the words for the writer (the Planner's tool result or the
/// MCP refusal, code `invalid`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Refused(pub String);

/// The outcome of an admitted write, for the log and the metrics.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Admitted {
    /// Nothing new to assess, or the check is off.
    Nothing,
    /// Assessed (from the model or the cache) and admitted.
    Assessed,
    /// No assessor model: admitted without assessment (`VISUAL_ADMISSION=model`).
    Unassessed,
}

/// Successful assessments kept, by passage and context.
const CACHE_ENTRIES: usize = 4_096;
/// How long a kept assessment is used (while a diagram is being repaired, ISO-39).
const CACHE_MS: i64 = 60 * 60 * 1000;
/// The longest passage text given to the assessor, in characters.
const PASSAGE_MAX_CHARS: usize = 4_000;

/// The server's one visual admission check.
pub struct VisualAdmission {
    settings: Settings,
    assessor: Option<Arc<dyn Assessor>>,
    cache: Mutex<Recent<String, Assessment>>,
    clock: crate::runtime::SharedClock,
    metrics: Arc<crate::metrics::Metrics>,
}

impl VisualAdmission {
    pub fn new(
        settings: Settings,
        assessor: Option<Arc<dyn Assessor>>,
        clock: crate::runtime::SharedClock,
        metrics: Arc<crate::metrics::Metrics>,
    ) -> Self {
        if assessor.is_none() && settings.mode == Mode::Model {
            tracing::info!("visual admission: no assessor model (VISUAL_ASSESSOR_MODEL); writes are admitted without a visual assessment");
        }
        VisualAdmission {
            settings,
            assessor,
            cache: Mutex::new(Recent::new(CACHE_MS, CACHE_ENTRIES)),
            clock,
            metrics,
        }
    }

    /// Checks a write that turns `old` into `new` (`old` empty for a creation).
    pub async fn check(&self, old: &str, new: &str) -> Result<Admitted, Refused> {
        let outcome = self.check_inner(old, new).await;
        self.metrics.visual_check(match &outcome {
            Ok(Admitted::Nothing) => "nothing",
            Ok(Admitted::Assessed) => "admitted",
            Ok(Admitted::Unassessed) => "unassessed",
            Err(_) => "refused",
        });
        outcome
    }

    async fn check_inner(&self, old: &str, new: &str) -> Result<Admitted, Refused> {
        if self.settings.mode == Mode::Off {
            return Ok(Admitted::Nothing);
        }
        let before: std::collections::BTreeSet<String> =
            blocks(old).into_iter().map(|b| b.digest).collect();
        let all = blocks(new);
        let fresh: Vec<usize> = all
            .iter()
            .filter(|b| is_passage(b) && !before.contains(&b.digest))
            .map(|b| b.index)
            .collect();
        if fresh.is_empty() {
            return Ok(Admitted::Nothing);
        }
        let Some(assessor) = &self.assessor else {
            return match self.settings.mode {
                Mode::Require => Err(Refused(
                    "This server requires a visual assessment of new prose and has no assessor model configured (VISUAL_ASSESSOR_MODEL), so nothing was written.".into(),
                )),
                _ => Ok(Admitted::Unassessed),
            };
        };
        let passages: Vec<Passage> = fresh
            .iter()
            .map(|&i| Passage {
                text: bounded(&new[all[i].bytes.clone()]),
                context: heading_before(new, &all, i),
            })
            .collect();
        let assessments = self.assessments(&**assessor, &passages).await?;
        for (n, &i) in fresh.iter().enumerate() {
            let a = &assessments[n];
            let needed = match &a.selected {
                Selected::None => continue,
                _ if a.possible < self.settings.possible || a.helpful < self.settings.helpful => {
                    continue
                }
                selected => selected,
            };
            let beside = [i.checked_sub(1), Some(i + 1)]
                .into_iter()
                .flatten()
                .filter_map(|j| all.get(j))
                .any(|b| shows(new, b, needed));
            if !beside {
                return Err(Refused(refusal_words(
                    &passages[n].text,
                    all[i].first_line,
                    needed,
                    a,
                )));
            }
        }
        Ok(Admitted::Assessed)
    }

    /// The passages' assessments: kept ones from the cache, the rest asked for in batches of
    /// at most `batch_max`; a failed or malformed answer refuses the write (ISO-36).
    async fn assessments(
        &self,
        assessor: &dyn Assessor,
        passages: &[Passage],
    ) -> Result<Vec<Assessment>, Refused> {
        let key = |p: &Passage| format!("{}\n{}", block_digest(&p.text), block_digest(&p.context));
        let now = self.clock.now_ms();
        let mut found: Vec<Option<Assessment>> = {
            let mut cache = self.cache.lock().unwrap_or_else(PoisonError::into_inner);
            passages
                .iter()
                .map(|p| cache.get(&key(p), now).cloned())
                .collect()
        };
        let missing: Vec<usize> = (0..passages.len())
            .filter(|&i| found[i].is_none())
            .collect();
        for batch in missing.chunks(self.settings.batch_max.max(1)) {
            let asked: Vec<Passage> = batch.iter().map(|&i| passages[i].clone()).collect();
            let answers = assessor.assess(&asked).await.map_err(|why| {
                tracing::warn!(error = %why, "a visual assessment failed; the write is refused");
                Refused(format!(
                    "The visual check could not assess the new text ({why}), so nothing was written. Try the write again."
                ))
            })?;
            if answers.len() != asked.len()
                || answers.iter().any(|a| {
                    !(0.0..=1.0).contains(&a.possible) || !(0.0..=1.0).contains(&a.helpful)
                })
            {
                return Err(Refused(
                    "The visual check's assessment was malformed, so nothing was written. Try the write again.".into(),
                ));
            }
            let mut cache = self.cache.lock().unwrap_or_else(PoisonError::into_inner);
            for (&i, answer) in batch.iter().zip(answers) {
                cache.insert(key(&passages[i]), answer.clone(), now);
                found[i] = Some(answer);
            }
        }
        Ok(found
            .into_iter()
            .map(|a| a.expect("every passage assessed"))
            .collect())
    }
}

/// Prose, lists and quotations (nested passages) are what is assessed.
fn is_passage(block: &Block) -> bool {
    matches!(
        block.kind,
        BlockKind::Paragraph | BlockKind::List | BlockKind::Quote
    )
}

fn bounded(text: &str) -> String {
    text.chars().take(PASSAGE_MAX_CHARS).collect()
}

/// The text of the nearest heading before block `i` (the passage's context), or "".
fn heading_before(source: &str, all: &[Block], i: usize) -> String {
    all[..i]
        .iter()
        .rev()
        .find(|b| b.kind == BlockKind::Heading)
        .map(|b| source[b.bytes.clone()].trim().to_owned())
        .unwrap_or_default()
}

/// Whether `block` of `source` is the visual `needed`, valid.
fn shows(source: &str, block: &Block, needed: &Selected) -> bool {
    let text = &source[block.bytes.clone()];
    match needed {
        Selected::Table => block.kind == BlockKind::Table,
        Selected::Diagram(kind) => {
            block.kind == BlockKind::Code
                && matches!(
                    diagram::checked_fence(text),
                    Some((diagram::SEECODE, body))
                        if diagram::check_seecode(&body).is_ok()
                            && serde_json::from_str::<Value>(&body).is_ok_and(|v| v["type"] == kind.as_str())
                )
        }
        Selected::None => true,
    }
}

/// The refusal (ISO-38): the passage, what it needs, and how to write it.
fn refusal_words(passage: &str, line: usize, needed: &Selected, a: &Assessment) -> String {
    let start: String = passage.split_whitespace().collect::<Vec<_>>().join(" ");
    let start: String = if start.chars().count() > 80 {
        format!("{}…", start.chars().take(79).collect::<String>())
    } else {
        start
    };
    let (what, how) = match needed {
        Selected::Table => (
            "a comparison table".to_owned(),
            "a Markdown table, e.g.\n| Option | Cost | Risk |\n|---|---|---|\n| A | low | high |\n| B | high | low |".to_owned(),
        ),
        Selected::Diagram(kind) => (
            format!("a `{kind}` diagram"),
            format!(
                "a ```seecode fence holding {{\"type\": \"{kind}\", …}} with the data a {kind} needs (see the diagram guide in your instructions), e.g.\n{}",
                example_for(kind)
            ),
        ),
        Selected::None => unreachable!("prose needs nothing beside it"),
    };
    format!(
        "The passage on line {line} (\"{start}\") needs {what} right beside it (the block just before or after it): the visual check found one possible ({:.2}) and helpful ({:.2}). Add {how}\nNothing was written.",
        a.possible, a.helpful
    )
}

/// A minimal valid spec of `kind`.
fn example_for(kind: &str) -> String {
    let spec = match kind {
        "pie" | "polar" | "treemap" | "waterfall" => {
            json!({"type": kind, "items": [{"label": "A", "value": 3}, {"label": "B", "value": 2}]})
        }
        "scatter" => json!({"type": kind, "series": [{"name": "S", "points": [[1, 2], [2, 3]]}]}),
        "heatmap" => json!({"type": kind, "x": ["Mon", "Tue"], "y": ["EU"], "values": [[1, 2]]}),
        "sankey" => {
            json!({"type": kind, "nodes": ["A", "B"], "links": [{"from": "A", "to": "B", "value": 1}]})
        }
        "dumbbell" => json!({"type": kind, "items": [{"label": "A", "from": 1, "to": 2}]}),
        "flowchart" | "state" => {
            json!({"type": kind, "nodes": [{"id": "a", "label": "A"}, {"id": "b", "label": "B"}], "edges": [{"from": "a", "to": "b"}]})
        }
        "sequence" => {
            json!({"type": kind, "participants": ["A", "B"], "messages": [{"from": "A", "to": "B", "text": "hello"}]})
        }
        "timeline" => json!({"type": kind, "events": [{"when": "Q1", "label": "Start"}]}),
        _ => {
            json!({"type": kind, "labels": ["A", "B"], "series": [{"name": "S", "values": [1, 2]}]})
        }
    };
    format!("```seecode\n{spec}\n```")
}

/// What the assessor model is told.
const INSTRUCTIONS: &str = "You assess passages a planning assistant wants to write into a plan document. \
For each passage, in order, judge: possible — the probability (0 to 1) that a faithful visual of exactly what the passage says can be drawn; \
helpful — the probability (0 to 1) that such a visual would help a reader more than the prose alone; \
and type — the one native visual that fits best: a SeeCode type from this list, \"table\" for a comparison table, or \"none\" when no type suits. \
Give only the JSON object.";

/// The assessment's schema for `n` passages.
fn schema() -> Value {
    let mut types: Vec<Value> = diagram::seecode_types().map(Value::from).collect();
    types.push("table".into());
    types.push("none".into());
    json!({
        "type": "object",
        "properties": {
            "assessments": {
                "type": "array",
                "items": {
                    "type": "object",
                    "properties": {
                        "possible": { "type": "number", "minimum": 0, "maximum": 1 },
                        "helpful": { "type": "number", "minimum": 0, "maximum": 1 },
                        "type": { "type": "string", "enum": types }
                    },
                    "required": ["possible", "helpful", "type"],
                    "additionalProperties": false
                }
            }
        },
        "required": ["assessments"],
        "additionalProperties": false
    })
}

/// The operator's assessor model (`VISUAL_ASSESSOR_MODEL`), asked through the same structured
/// call the decisions classifier makes.
pub struct ModelAssessor {
    model: crate::classifier::ModelClassifier,
}

impl ModelAssessor {
    pub fn new(model: crate::classifier::ModelClassifier) -> Self {
        ModelAssessor { model }
    }
}

/// Reads the model's answer: one assessment per passage.
pub fn read_answer(output: &Value) -> Result<Vec<Assessment>, String> {
    let items = output["assessments"]
        .as_array()
        .ok_or("the answer has no assessments")?;
    items
        .iter()
        .map(|item| {
            let possible = item["possible"]
                .as_f64()
                .ok_or("an assessment has no possible")?;
            let helpful = item["helpful"]
                .as_f64()
                .ok_or("an assessment has no helpful")?;
            let selected = match item["type"].as_str() {
                Some("none") => Selected::None,
                Some("table") => Selected::Table,
                Some(t) if diagram::seecode_types().any(|k| k == t) => {
                    Selected::Diagram(t.to_owned())
                }
                _ => return Err("an assessment names no known type".to_owned()),
            };
            Ok(Assessment {
                possible,
                helpful,
                selected,
            })
        })
        .collect()
}

#[async_trait]
impl Assessor for ModelAssessor {
    async fn assess(&self, passages: &[Passage]) -> Result<Vec<Assessment>, String> {
        let prompt = passages
            .iter()
            .enumerate()
            .map(|(i, p)| {
                format!(
                    "Passage {} (under the heading {:?}):\n<<<\n{}\n>>>",
                    i + 1,
                    p.context,
                    p.text
                )
            })
            .collect::<Vec<_>>()
            .join("\n\n");
        let output = self
            .model
            .structured(INSTRUCTIONS, prompt, schema())
            .await
            .map_err(|e| e.to_string())?;
        read_answer(&output)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::runtime::clock::Clock;

    /// Answers from a script, counting calls and the passages each was given.
    struct Scripted {
        answers: Mutex<Vec<Result<Vec<Assessment>, String>>>,
        calls: Mutex<Vec<usize>>,
    }

    #[async_trait]
    impl Assessor for Scripted {
        async fn assess(&self, passages: &[Passage]) -> Result<Vec<Assessment>, String> {
            self.calls.lock().unwrap().push(passages.len());
            let mut answers = self.answers.lock().unwrap();
            if answers.is_empty() {
                return Ok(passages.iter().map(|_| prose()).collect());
            }
            answers.remove(0)
        }
    }

    fn prose() -> Assessment {
        Assessment {
            possible: 0.9,
            helpful: 0.9,
            selected: Selected::None,
        }
    }

    fn wants(kind: &str, possible: f64, helpful: f64) -> Assessment {
        Assessment {
            possible,
            helpful,
            selected: Selected::Diagram(kind.into()),
        }
    }

    struct Fixed;
    impl Clock for Fixed {
        fn now_ms(&self) -> i64 {
            1_000
        }
    }

    fn check_with(
        settings: Settings,
        answers: Vec<Result<Vec<Assessment>, String>>,
    ) -> (VisualAdmission, Arc<Scripted>) {
        let scripted = Arc::new(Scripted {
            answers: Mutex::new(answers),
            calls: Mutex::default(),
        });
        let admission = VisualAdmission::new(
            settings,
            Some(scripted.clone() as Arc<dyn Assessor>),
            Arc::new(Fixed),
            Arc::new(crate::metrics::Metrics::default()),
        );
        (admission, scripted)
    }

    const FLOW: &str = "Orders go from the cart to payment, then to fulfilment.";
    const CHART: &str = "```seecode\n{\"type\": \"flowchart\", \"nodes\": [{\"id\": \"c\", \"label\": \"Cart\"}, {\"id\": \"p\", \"label\": \"Payment\"}], \"edges\": [{\"from\": \"c\", \"to\": \"p\"}]}\n```";

    #[tokio::test]
    async fn iso_34_iso_38_a_selected_visual_must_stand_beside_its_passage_and_the_refusal_says_how(
    ) {
        let (check, _) = check_with(
            Settings::default(),
            vec![Ok(vec![wants("flowchart", 0.9, 0.8)])],
        );
        let new = format!("# Flow\n\n{FLOW}\n");
        let Err(Refused(words)) = check.check("", &new).await else {
            panic!("admitted")
        };
        assert!(
            words.contains("The passage on line 3 (\"Orders go from the cart"),
            "{words}"
        );
        assert!(words.contains("needs a `flowchart` diagram"), "{words}");
        assert!(
            words.contains("```seecode\n{") && words.contains("\"type\":\"flowchart\""),
            "{words}"
        );
        // With the diagram right after it: admitted, from the cache (ISO-39).
        let with = format!("# Flow\n\n{FLOW}\n\n{CHART}\n");
        assert_eq!(check.check("", &with).await, Ok(Admitted::Assessed));
        // A diagram of another type does not count.
        let other = with.replace("flowchart", "state");
        assert!(check.check("", &other).await.is_err());
    }

    #[tokio::test]
    async fn iso_35_iso_37_prose_judged_fine_or_below_a_threshold_is_admitted_with_no_quota() {
        let (check, _) = check_with(
            Settings::default(),
            vec![Ok(vec![
                prose(),
                wants("bar", 0.69, 0.95),
                wants("bar", 0.95, 0.69),
                Assessment {
                    possible: 1.0,
                    helpful: 1.0,
                    selected: Selected::None,
                },
            ])],
        );
        let new = "One.\n\nTwo.\n\nThree.\n\nFour.\n";
        assert_eq!(check.check("", new).await, Ok(Admitted::Assessed));
        // At both thresholds exactly: required.
        let (check, _) = check_with(Settings::default(), vec![Ok(vec![wants("bar", 0.7, 0.7)])]);
        assert!(check.check("", "Sales rose.\n").await.is_err());
    }

    #[tokio::test]
    async fn iso_36_passages_go_in_bounded_batches_and_a_failed_or_malformed_answer_refuses() {
        let settings = Settings {
            batch_max: 2,
            ..Settings::default()
        };
        let (check, scripted) = check_with(settings, Vec::new());
        let new = "A.\n\nB.\n\nC.\n\nD.\n\nE.\n";
        assert_eq!(check.check("", new).await, Ok(Admitted::Assessed));
        assert_eq!(*scripted.calls.lock().unwrap(), [2, 2, 1]);
        let (check, _) = check_with(Settings::default(), vec![Err("the model timed out".into())]);
        let Err(Refused(words)) = check.check("", "A.\n").await else {
            panic!()
        };
        assert!(
            words.contains("could not assess") && words.contains("Nothing was written")
                || words.contains("nothing was written"),
            "{words}"
        );
        let (check, _) = check_with(Settings::default(), vec![Ok(Vec::new())]);
        assert!(check
            .check("", "A.\n")
            .await
            .unwrap_err()
            .0
            .contains("malformed"));
        let (check, _) = check_with(Settings::default(), vec![Ok(vec![wants("bar", 1.5, 0.2)])]);
        assert!(check.check("", "A.\n").await.is_err());
    }

    #[tokio::test]
    async fn iso_39_unchanged_passages_are_not_assessed_and_successful_assessments_are_kept() {
        let (check, scripted) = check_with(Settings::default(), Vec::new());
        let old = "# Plan\n\nKept prose.\n";
        let new = "# Plan\n\nKept prose.\n\nNew prose.\n";
        assert_eq!(check.check(old, new).await, Ok(Admitted::Assessed));
        assert_eq!(*scripted.calls.lock().unwrap(), [1], "only the new passage");
        assert_eq!(check.check(old, new).await, Ok(Admitted::Assessed));
        assert_eq!(*scripted.calls.lock().unwrap(), [1], "kept");
        assert_eq!(check.check(new, new).await, Ok(Admitted::Nothing));
    }

    #[tokio::test]
    async fn without_an_assessor_the_mode_decides_and_never_claims_an_assessment() {
        let metrics = Arc::new(crate::metrics::Metrics::default());
        let lenient =
            VisualAdmission::new(Settings::default(), None, Arc::new(Fixed), metrics.clone());
        assert_eq!(
            lenient.check("", "Prose.\n").await,
            Ok(Admitted::Unassessed)
        );
        let strict = VisualAdmission::new(
            Settings {
                mode: Mode::Require,
                ..Settings::default()
            },
            None,
            Arc::new(Fixed),
            metrics.clone(),
        );
        assert!(strict.check("", "Prose.\n").await.is_err());
        assert_eq!(
            strict.check("", "# Only a heading\n").await,
            Ok(Admitted::Nothing)
        );
        let off = VisualAdmission::new(
            Settings {
                mode: Mode::Off,
                ..Settings::default()
            },
            None,
            Arc::new(Fixed),
            metrics,
        );
        assert_eq!(off.check("", "Prose.\n").await, Ok(Admitted::Nothing));
    }

    #[test]
    fn every_example_a_refusal_gives_is_a_valid_spec() {
        for kind in diagram::seecode_types() {
            let example = example_for(kind);
            assert_eq!(
                diagram::check_fence(&format!("{example}\n"), 1),
                Ok(()),
                "{kind}"
            );
        }
    }
}
