//! What an implementation graph version holds (LIFE-28): its ordered tasks, each with acceptance
//! criteria and the tasks it depends on (the dependency edges); the checks a definition passes
//! before it is saved; and which tasks are ready to start once others are done (LIFE-43).
//!
//! Owns: the definition's JSON shape (`{"tasks": [{"id", "title", "description",
//! "acceptanceCriteria", "dependsOn"}]}`, tasks in their order), its bounds, and the refusal
//! that names the first thing wrong with one: an empty or repeated id, an unknown or repeated
//! dependency, a task depending on itself, a cycle.
//! The graph service lives here too ([`Graphs`]): the Planner's `read_implementation_graph`
//! and `edit_implementation_graph`, which draft and revise (GRA-01, LIFE-04). Nothing here
//! approves, locks or starts an implementation: only a person approves (RULINGS GRA-04).
//! Does not own: a version's states and counters (`chopin_store::graphs`), who may edit or
//! approve (the callers), or a run's progress through the tasks.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

use chopin_protocol::agent::ToolSpec;
use serde::{Deserialize, Serialize};
use serde_json::{json, Value};
use uuid::Uuid;

use crate::harness::HostToolResult;
use crate::runtime::SharedClock;
use crate::store::{
    DocumentStore, GraphChange, GraphRefusal, GraphState, GraphStore, GraphVersion,
};

/// The most tasks a graph holds.
pub const TASKS_MAX: usize = 200;
/// The longest task id, in characters (ASCII letters, digits, `-`, `_` and `.`).
pub const TASK_ID_MAX_CHARS: usize = 64;
/// The longest task title, in characters.
pub const TITLE_MAX_CHARS: usize = 200;
/// The longest description or acceptance criterion, in characters.
pub const TEXT_MAX_CHARS: usize = 4_000;
/// The most acceptance criteria of one task.
pub const CRITERIA_MAX: usize = 20;

/// A graph version's definition.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Definition {
    /// The tasks, in the order the plan gives them.
    pub tasks: Vec<Task>,
}

/// One task.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Task {
    pub id: String,
    pub title: String,
    #[serde(default)]
    pub description: String,
    /// What must hold for the task to count as done.
    #[serde(default)]
    pub acceptance_criteria: Vec<String>,
    /// Ids of the tasks it depends on: each edge of the graph, from the dependency to this task.
    #[serde(default)]
    pub depends_on: Vec<String>,
}

/// Why a definition was refused: the first thing wrong with it, in words for whoever wrote it.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct Invalid(pub String);

impl Definition {
    /// Reads a definition from JSON text and checks it ([`Definition::check`]).
    pub fn parse(text: &str) -> Result<Definition, Invalid> {
        let definition: Definition = serde_json::from_str(text)
            .map_err(|e| Invalid(format!("The graph is not a valid definition: {e}.")))?;
        definition.check()?;
        Ok(definition)
    }

    /// The definition as stored.
    pub fn to_json(&self) -> String {
        serde_json::to_string(self).expect("a definition is always JSON")
    }

    /// Checks the bounds, that ids are well formed and unique, that every dependency names
    /// another task of the graph once, and that the dependencies have no cycle.
    pub fn check(&self) -> Result<(), Invalid> {
        if self.tasks.len() > TASKS_MAX {
            return Err(Invalid(format!(
                "A graph holds at most {TASKS_MAX} tasks; this one has {}.",
                self.tasks.len()
            )));
        }
        let mut ids = BTreeSet::new();
        for (n, task) in self.tasks.iter().enumerate() {
            let named = || format!("Task {} ({:?})", n + 1, task.id);
            let id_ok = !task.id.is_empty()
                && task.id.chars().count() <= TASK_ID_MAX_CHARS
                && task
                    .id
                    .chars()
                    .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.'));
            if !id_ok {
                return Err(Invalid(format!(
                    "{}: an id is 1 to {TASK_ID_MAX_CHARS} ASCII letters, digits, '-', '_' or '.'.",
                    named()
                )));
            }
            if !ids.insert(task.id.as_str()) {
                return Err(Invalid(format!("{}: another task has this id.", named())));
            }
            let title = task.title.trim();
            if title.is_empty() || title.chars().count() > TITLE_MAX_CHARS {
                return Err(Invalid(format!(
                    "{}: a title is 1 to {TITLE_MAX_CHARS} characters.",
                    named()
                )));
            }
            if task.description.chars().count() > TEXT_MAX_CHARS {
                return Err(Invalid(format!(
                    "{}: a description is at most {TEXT_MAX_CHARS} characters.",
                    named()
                )));
            }
            if task.acceptance_criteria.len() > CRITERIA_MAX
                || task
                    .acceptance_criteria
                    .iter()
                    .any(|c| c.trim().is_empty() || c.chars().count() > TEXT_MAX_CHARS)
            {
                return Err(Invalid(format!(
                    "{}: at most {CRITERIA_MAX} acceptance criteria, each 1 to {TEXT_MAX_CHARS} characters.",
                    named()
                )));
            }
        }
        for (n, task) in self.tasks.iter().enumerate() {
            let mut seen = BTreeSet::new();
            for dependency in &task.depends_on {
                let named = format!("Task {} ({:?})", n + 1, task.id);
                if dependency == &task.id {
                    return Err(Invalid(format!("{named} depends on itself.")));
                }
                if !ids.contains(dependency.as_str()) {
                    return Err(Invalid(format!(
                        "{named} depends on {dependency:?}, which is not a task of this graph."
                    )));
                }
                if !seen.insert(dependency.as_str()) {
                    return Err(Invalid(format!(
                        "{named} names {dependency:?} twice among its dependencies."
                    )));
                }
            }
        }
        if let Some(cycle) = self.cycle() {
            return Err(Invalid(format!(
                "The dependencies go round in a cycle: {}.",
                cycle.join(" → ")
            )));
        }
        Ok(())
    }

    /// A cycle of dependencies (its ids, the first repeated at the end), if there is one.
    /// Assumes every dependency names a task.
    fn cycle(&self) -> Option<Vec<String>> {
        let index: BTreeMap<&str, usize> = self
            .tasks
            .iter()
            .enumerate()
            .map(|(i, t)| (t.id.as_str(), i))
            .collect();
        // 0: not visited, 1: on the current path, 2: done. Iterative, so a long chain cannot
        // overflow the stack.
        let mut mark = vec![0u8; self.tasks.len()];
        for start in 0..self.tasks.len() {
            if mark[start] != 0 {
                continue;
            }
            let mut path: Vec<(usize, usize)> = vec![(start, 0)];
            mark[start] = 1;
            while let Some(&mut (task, ref mut next)) = path.last_mut() {
                let deps = &self.tasks[task].depends_on;
                if *next == deps.len() {
                    mark[task] = 2;
                    path.pop();
                    continue;
                }
                let dep = index[deps[*next].as_str()];
                *next += 1;
                match mark[dep] {
                    0 => {
                        mark[dep] = 1;
                        path.push((dep, 0));
                    }
                    1 => {
                        let from = path.iter().position(|&(t, _)| t == dep).unwrap_or(0);
                        let mut ids: Vec<String> = path[from..]
                            .iter()
                            .map(|&(t, _)| self.tasks[t].id.clone())
                            .collect();
                        ids.push(self.tasks[dep].id.clone());
                        return Some(ids);
                    }
                    _ => {}
                }
            }
        }
        None
    }

    /// The ids of the tasks not in `done` whose dependencies are all in `done`, in task order:
    /// the tasks that may start (LIFE-43).
    pub fn ready<'a>(&'a self, done: &BTreeSet<&str>) -> Vec<&'a str> {
        self.tasks
            .iter()
            .filter(|t| !done.contains(t.id.as_str()))
            .filter(|t| t.depends_on.iter().all(|d| done.contains(d.as_str())))
            .map(|t| t.id.as_str())
            .collect()
    }
}

/// The graph service: the Planner's graph tools, on the document of its turn (any document, a
/// child included: GRA-02), and what the coding agents' hand-over reads
/// ([`Graphs::handed_over`]).
pub struct Graphs {
    pub graphs: Arc<dyn GraphStore>,
    /// Browser builds: a queued or launching one freezes the plan too (LIFE-64).
    pub builds: Arc<dyn crate::store::BuildStore>,
    pub records: Arc<dyn DocumentStore>,
    pub clock: SharedClock,
    /// `plan:implementation` frames, with the document each is about (LIFE-68).
    pub news: tokio::sync::broadcast::Sender<(Uuid, Value)>,
}

/// How many `plan:implementation` frames a slow room may fall behind before it misses some.
pub const NEWS_CAPACITY: usize = 64;

/// Whether `name` is one of the Planner's graph tools.
pub fn is_graph_tool(name: &str) -> bool {
    matches!(name, READ_TOOL | EDIT_TOOL)
}

const READ_TOOL: &str = "read_implementation_graph";
const EDIT_TOOL: &str = "edit_implementation_graph";

/// The two tools' specifications.
pub fn tool_specs() -> Vec<ToolSpec> {
    let task = json!({
        "type": "object",
        "properties": {
            "id": { "type": "string", "minLength": 1, "maxLength": TASK_ID_MAX_CHARS },
            "title": { "type": "string", "minLength": 1, "maxLength": TITLE_MAX_CHARS },
            "description": { "type": "string", "maxLength": TEXT_MAX_CHARS },
            "acceptanceCriteria": { "type": "array", "maxItems": CRITERIA_MAX, "items": { "type": "string", "minLength": 1 } },
            "dependsOn": { "type": "array", "items": { "type": "string" } }
        },
        "required": ["id", "title"],
        "additionalProperties": false
    });
    vec![
        ToolSpec {
            name: READ_TOOL.to_owned(),
            description: "Read this document's implementation graph: its latest version (tasks in order, each with acceptance criteria and the tasks it depends on; its state and counters) and the document's current plan revision. Read it before you edit it.".to_owned(),
            input_schema: json!({ "type": "object", "properties": {}, "additionalProperties": false }),
        },
        ToolSpec {
            name: EDIT_TOOL.to_owned(),
            description: "Draft or revise the implementation graph from the current plan: the whole list of tasks, in order. base is the graphVersion and graphRevision you read (null when there was no graph). A draft is revised in place; an approved graph gets a new draft version beside it. You cannot approve, lock or start an implementation: people do.".to_owned(),
            input_schema: json!({
                "type": "object",
                "properties": {
                    "base": {
                        "type": ["object", "null"],
                        "properties": {
                            "graphVersion": { "type": "integer", "minimum": 1 },
                            "graphRevision": { "type": "integer", "minimum": 1 }
                        },
                        "required": ["graphVersion", "graphRevision"],
                        "additionalProperties": false
                    },
                    "tasks": { "type": "array", "maxItems": TASKS_MAX, "items": task }
                },
                "required": ["base", "tasks"],
                "additionalProperties": false
            }),
        },
    ]
}

/// `edit_implementation_graph`'s arguments.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct EditArgs {
    base: Option<Base>,
    tasks: Vec<Task>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
struct Base {
    graph_version: i64,
    graph_revision: i64,
}

/// A version as the tools show it.
fn version_json(version: &GraphVersion) -> Value {
    let tasks = Definition::parse(&version.definition)
        .map(|d| json!(d.tasks))
        .unwrap_or(Value::Null);
    json!({
        "graphVersion": version.counters.graph_version,
        "graphRevision": version.counters.graph_revision,
        "planRevision": version.counters.plan_revision,
        "state": version.state.as_str(),
        "verified": version.verified,
        "revisionRequested": version.revision_requested,
        "tasks": tasks,
    })
}

/// A refused edit, in words for the model.
fn refusal_words(refusal: &GraphRefusal) -> String {
    match refusal {
        GraphRefusal::Stale {
            latest_version,
            latest_revision,
        } => format!("the graph changed since you read it: the latest is version {latest_version} at revision {latest_revision}; read it again and edit from there"),
        GraphRefusal::NoGraph => "there is no graph yet: edit with base null".to_owned(),
        GraphRefusal::Locked { graph_version } => format!("an implementation run holds version {graph_version}: the graph cannot change until it ends"),
        other => other.to_string(),
    }
}

impl Graphs {
    /// Runs graph tool `name` for `document`.
    pub async fn run(&self, document: Uuid, name: &str, input: Value) -> HostToolResult {
        match name {
            READ_TOOL => self.read(document, input).await,
            EDIT_TOOL => self.edit(document, input).await,
            other => HostToolResult::error(format!("unknown graph tool {other:?}")),
        }
    }

    async fn read(&self, document: Uuid, input: Value) -> HostToolResult {
        if input.as_object().is_some_and(|o| !o.is_empty()) {
            return HostToolResult::error(format!("{READ_TOOL} takes no arguments"));
        }
        let (doc, versions) = match (
            self.records.document(document).await,
            self.graphs.graph_versions(document).await,
        ) {
            (Ok(Some(doc)), Ok(versions)) => (doc, versions),
            _ => return HostToolResult::error("the graph could not be read just now"),
        };
        HostToolResult::ok(json!({
            "planRevision": doc.plan_revision,
            "graph": versions.last().map(version_json),
            "versions": versions
                .iter()
                .map(|v| json!({ "graphVersion": v.counters.graph_version, "state": v.state.as_str() }))
                .collect::<Vec<_>>(),
        }))
    }

    async fn edit(&self, document: Uuid, input: Value) -> HostToolResult {
        let args: EditArgs = match serde_json::from_value(input) {
            Ok(a) => a,
            Err(e) => return HostToolResult::error(format!("invalid {EDIT_TOOL} arguments: {e}")),
        };
        let definition = Definition { tasks: args.tasks };
        if let Err(Invalid(why)) = definition.check() {
            return HostToolResult::error(why);
        }
        let Ok(Some(doc)) = self.records.document(document).await else {
            return HostToolResult::error("the document could not be read just now");
        };
        // A build waiting or starting claims the version it queued, which must stay the latest
        // (LIFE-36): no new draft until it is claimed or fails (a run's lock is the store's).
        match self.held(document).await {
            Ok(Some(held @ Held::Build { .. })) => {
                return HostToolResult::error(format!("{EDIT_TOOL} is refused: {}", held.words()))
            }
            Ok(_) => {}
            Err(_) => return HostToolResult::error("the plan's lock could not be read just now"),
        }
        let change = GraphChange::Edit {
            base: args.base.map(|b| (b.graph_version, b.graph_revision)),
            plan_revision: doc.plan_revision,
            definition: definition.to_json(),
        };
        match self
            .graphs
            .change_graph(document, &change, self.clock.now_ms())
            .await
        {
            Ok(Ok(saved)) => {
                self.changed(document).await;
                HostToolResult::ok(version_json(&saved))
            }
            Ok(Err(refusal)) => HostToolResult::error(refusal_words(&refusal)),
            Err(e) => {
                tracing::warn!(%document, error = %e, "the Planner's graph edit could not be saved");
                HostToolResult::error("the graph could not be saved just now; try again")
            }
        }
    }
}

/// The words of an edit refused while a run holds the graph (LIFE-65).
pub fn held_words(graph_version: i64) -> String {
    format!("an implementation run holds version {graph_version} of this plan's graph, so the plan cannot change until the run ends or requests a revision; nothing was changed")
}

/// What freezes a document's plan: a run holding a graph version (LIFE-65), or a build of one
/// queued or launching on a machine, before its claim (LIFE-64).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Held {
    Run { graph_version: i64 },
    Build { graph_version: i64, build: Uuid },
}

/// What freezes a plan, from its graph versions and its newest builds: the version a run holds
/// (LIFE-65), else a first build queued or launching (LIFE-64); a rebuild freezes nothing, since
/// it builds the sources it was queued with and later edits are the next one's.
pub fn held_of(versions: &[GraphVersion], builds: &[crate::store::Build]) -> Option<Held> {
    if let Some(v) = versions.iter().find(|v| v.state == GraphState::Locked) {
        return Some(Held::Run {
            graph_version: v.counters.graph_version,
        });
    }
    builds
        .iter()
        .find(|b| b.kind == crate::store::BuildKind::Build && b.state.is_pending())
        .map(|b| Held::Build {
            graph_version: b.graph_version,
            build: b.id,
        })
}

/// The editing lock as the room and the Build view tell it, from the same: `{graphVersion,
/// runId}` while a run holds a version, `{graphVersion, buildId}` while a build of one is
/// queued or launching, else `null` (LIFE-64, LIFE-68, LIFE-69).
pub fn lock_of(versions: &[GraphVersion], builds: &[crate::store::Build]) -> Value {
    if let Some(v) = versions.iter().find(|v| v.state == GraphState::Locked) {
        return json!({ "graphVersion": v.counters.graph_version, "runId": v.run_id });
    }
    match held_of(versions, builds) {
        Some(Held::Build {
            graph_version,
            build,
        }) => json!({ "graphVersion": graph_version, "buildId": build }),
        _ => Value::Null,
    }
}

impl Held {
    pub fn graph_version(self) -> i64 {
        match self {
            Held::Run { graph_version } | Held::Build { graph_version, .. } => graph_version,
        }
    }

    /// Why a change to the plan is refused, in lower case (a tool's or an edit's refusal).
    pub fn words(self) -> String {
        match self {
            Held::Run { graph_version } => held_words(graph_version),
            Held::Build { graph_version, .. } => format!("a build of version {graph_version} of this plan's graph is starting on a machine, so the plan cannot change until its coding agent claims it or it fails; nothing was changed"),
        }
    }
}

impl Graphs {
    /// Every `plan:implementation` frame from now on, with its document.
    pub fn subscribe(&self) -> tokio::sync::broadcast::Receiver<(Uuid, Value)> {
        self.news.subscribe()
    }

    /// The editing lock of `document` as the room tells it ([`lock_of`]), reading its builds
    /// only when no run holds a version.
    pub async fn lock_json(&self, document: Uuid) -> Result<Value, crate::store::StoreError> {
        let (versions, builds) = self.freezers(document).await?;
        Ok(lock_of(&versions, &builds))
    }

    /// `document`'s graph versions, and its newest builds unless a run holds a version (then
    /// no build can freeze anything more, and none is read).
    async fn freezers(
        &self,
        document: Uuid,
    ) -> Result<(Vec<GraphVersion>, Vec<crate::store::Build>), crate::store::StoreError> {
        let versions = self.graphs.graph_versions(document).await?;
        let builds = if versions.iter().any(|v| v.state == GraphState::Locked) {
            Vec::new()
        } else {
            self.builds.document_builds(document).await?
        };
        Ok((versions, builds))
    }

    /// Tells `document`'s rooms that its graph, build or run changed and is committed (LIFE-68):
    /// `plan:implementation` with the storage revision and the editing lock, for the Build view
    /// to read its snapshot again.
    pub async fn changed(&self, document: Uuid) {
        let told = async {
            let doc = self.records.document(document).await?;
            let lock = self.lock_json(document).await?;
            Ok::<_, crate::store::StoreError>(json!({
                "type": "plan:implementation",
                "storageRevision": doc.map(|d| d.storage_revision),
                "lock": lock,
            }))
        };
        match told.await {
            Ok(frame) => {
                let _ = self.news.send((document, frame));
            }
            Err(e) => {
                tracing::warn!(%document, error = %e, "plan:implementation could not be told")
            }
        }
    }

    /// What freezes `document`'s plan now, if anything ([`held_of`]), reading its builds only
    /// when no run holds a version.
    pub async fn held(&self, document: Uuid) -> Result<Option<Held>, crate::store::StoreError> {
        let (versions, builds) = self.freezers(document).await?;
        Ok(held_of(&versions, &builds))
    }
}

#[async_trait::async_trait]
impl crate::content::EditLock for Graphs {
    async fn why_locked(&self, document: Uuid) -> crate::store::StoreResult<Option<String>> {
        Ok(self.held(document).await?.map(Held::words))
    }
}

/// What `read_implementation` shows of a document (LIFE-49): its graph's latest version when it
/// is approved or held by a run, with the creation provenance.
#[derive(Debug, Clone)]
pub struct Implementation {
    pub version: GraphVersion,
    pub provenance: Option<crate::store::Provenance>,
}

/// Why `read_implementation` shows no graph.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum NotShown {
    /// The document was not created through MCP: the supported hand-over reads only those
    /// (LIFE-76, GRA-03).
    NotCreatedThroughMcp,
    /// The latest version is not approved (a draft, or none at all).
    NoApprovedGraph { latest: Option<GraphState> },
}

impl Graphs {
    /// `document`'s implementation as the hand-over shows it, or why it shows none. Claims
    /// inspect the latest version only (LIFE-36), so an older approved one is not shown.
    pub async fn handed_over(
        &self,
        document: Uuid,
    ) -> Result<Result<Implementation, NotShown>, crate::store::StoreError> {
        if !self.records.created_through_mcp(document).await? {
            return Ok(Err(NotShown::NotCreatedThroughMcp));
        }
        let latest = self.graphs.graph_versions(document).await?.pop();
        match latest {
            Some(version) if matches!(version.state, GraphState::Approved | GraphState::Locked) => {
                let provenance = self.records.document_provenance(document).await?;
                Ok(Ok(Implementation {
                    version,
                    provenance,
                }))
            }
            other => Ok(Err(NotShown::NoApprovedGraph {
                latest: other.map(|v| v.state),
            })),
        }
    }
}

/// A version as the hand-over shows it: [`version_json`], and whether a run may claim it now.
pub fn implementation_json(version: &GraphVersion) -> Value {
    let mut shown = version_json(version);
    shown["claimable"] = json!(version.state == GraphState::Approved && !version.verified);
    shown
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn task(id: &str, deps: &[&str]) -> Task {
        Task {
            id: id.into(),
            title: format!("Do {id}"),
            description: String::new(),
            acceptance_criteria: vec![format!("{id} works")],
            depends_on: deps.iter().map(|d| (*d).to_owned()).collect(),
        }
    }

    fn graph(tasks: Vec<Task>) -> Definition {
        Definition { tasks }
    }

    #[test]
    fn life_28_a_definition_reads_back_as_it_was_written() {
        let text = r#"{"tasks":[{"id":"schema","title":"Add the table","acceptanceCriteria":["migrates"]},{"id":"api","title":"Serve it","description":"GET route","dependsOn":["schema"]}]}"#;
        let definition = Definition::parse(text).unwrap();
        assert_eq!(definition.tasks[1].depends_on, ["schema"]);
        assert_eq!(
            Definition::parse(&definition.to_json()).unwrap(),
            definition
        );
        assert!(Definition::parse(r#"{"tasks":[],"extra":1}"#).is_err());
    }

    #[test]
    fn life_28_each_wrong_definition_is_refused_naming_what_is_wrong() {
        let cases: Vec<(Definition, &str)> = vec![
            (graph(vec![task("", &[])]), "an id is 1 to"),
            (graph(vec![task("a b", &[])]), "an id is 1 to"),
            (
                graph(vec![task("a", &[]), task("a", &[])]),
                "another task has this id",
            ),
            (graph(vec![task("a", &["a"])]), "depends on itself"),
            (graph(vec![task("a", &["z"])]), "\"z\", which is not a task"),
            (graph(vec![task("a", &[]), task("b", &["a", "a"])]), "twice"),
            (
                graph(vec![
                    task("a", &["c"]),
                    task("b", &["a"]),
                    task("c", &["b"]),
                ]),
                "cycle: a → c → b → a",
            ),
            (
                graph(vec![Task {
                    title: " ".into(),
                    ..task("a", &[])
                }]),
                "a title is 1 to",
            ),
            (
                graph(vec![Task {
                    acceptance_criteria: vec![String::new()],
                    ..task("a", &[])
                }]),
                "acceptance criteria",
            ),
            (
                graph(
                    (0..=TASKS_MAX)
                        .map(|n| task(&format!("t{n}"), &[]))
                        .collect(),
                ),
                "at most 200 tasks",
            ),
        ];
        for (definition, words) in cases {
            let Invalid(why) = definition.check().unwrap_err();
            assert!(why.contains(words), "{why:?} should say {words:?}");
        }
    }

    #[test]
    fn life_43_only_tasks_whose_dependencies_are_done_are_ready() {
        let g = graph(vec![
            task("schema", &[]),
            task("api", &["schema"]),
            task("docs", &[]),
            task("ui", &["api", "docs"]),
        ]);
        g.check().unwrap();
        assert_eq!(g.ready(&BTreeSet::new()), ["schema", "docs"]);
        assert_eq!(g.ready(&BTreeSet::from(["schema"])), ["api", "docs"]);
        assert_eq!(g.ready(&BTreeSet::from(["schema", "api"])), ["docs"]);
        assert_eq!(g.ready(&BTreeSet::from(["schema", "api", "docs"])), ["ui"]);
    }

    #[test]
    fn a_long_chain_is_checked_without_recursion() {
        let tasks: Vec<Task> = (0..TASKS_MAX)
            .map(|n| {
                let dep = format!("t{}", n + 1);
                if n + 1 < TASKS_MAX {
                    task(&format!("t{n}"), &[&dep])
                } else {
                    task(&format!("t{n}"), &[])
                }
            })
            .collect();
        graph(tasks).check().unwrap();
    }

    proptest! {
        /// Random dependencies among up to 12 tasks: the check finds a cycle exactly when no
        /// order starts every task after its dependencies, and completing ready tasks one by
        /// one finishes an acyclic graph, never starting a task before its dependencies.
        #[test]
        fn a_graph_is_accepted_exactly_when_its_tasks_can_all_be_done_in_dependency_order(
            edges in proptest::collection::vec((0..12usize, 0..12usize), 0..30),
            size in 1..12usize,
        ) {
            let mut tasks: Vec<Task> = (0..size).map(|n| task(&format!("t{n}"), &[])).collect();
            for (from, to) in edges {
                let (from, to) = (from % size, to % size);
                let dep = format!("t{from}");
                if from != to && !tasks[to].depends_on.contains(&dep) {
                    tasks[to].depends_on.push(dep);
                }
            }
            let g = graph(tasks);
            let mut done: BTreeSet<&str> = BTreeSet::new();
            loop {
                let ready = g.ready(&done);
                let Some(next) = ready.first() else { break };
                let t = g.tasks.iter().find(|t| t.id == *next).unwrap();
                prop_assert!(t.depends_on.iter().all(|d| done.contains(d.as_str())));
                done.insert(next);
            }
            let orderable = done.len() == size;
            prop_assert_eq!(g.check().is_ok(), orderable, "{:?}", g.check());
        }
    }
}
