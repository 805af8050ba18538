//! What an implementation graph version holds (LIFE-28): its ordered tasks, each with acceptance
//! criteria and the tasks it depends on (the dependency edges); the checks a definition passes
//! before it is saved; and which tasks are ready to start once others are done (LIFE-43).
//!
//! Owns: the definition's JSON shape (`{"tasks": [{"id", "title", "description",
//! "acceptanceCriteria", "dependsOn"}]}`, tasks in their order), its bounds, and the refusal
//! that names the first thing wrong with one: an empty or repeated id, an unknown or repeated
//! dependency, a task depending on itself, a cycle.
//! Does not own: a version's states and counters (`chopin_store::graphs`), who may edit or
//! approve (the callers), or a run's progress through the tasks.

use std::collections::{BTreeMap, BTreeSet};

use serde::{Deserialize, Serialize};

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
