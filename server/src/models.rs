//! The document's Planner model and commands, as Chat's composer offers them (hosted-agent.md,
//! "Choosing the model and reasoning level" and "Commands the Planner offers").
//!
//! Owns: [`Models`]: the catalog asked of the configured adapter for a document (the `provider`
//! adapter's configured models; the attached client's `catalog` report under `remote`), the
//! stored choice (`planner_model_choices`) and how the two meet — the state `chat:model` tells
//! a document's writers ([`ModelView`]), a writer's choice checked against the catalog reported
//! now and stored before anyone is told ([`Models::choose`], MOD-14), the choice resolved again
//! for every turn a person starts with its fallbacks said in Chat once while their reason
//! stands ([`Models::for_turn`], MOD-20..23), and an unreadable choice said once and told to
//! the room (MOD-32..34). Which documents changed is broadcast ([`Models::subscribe`]); each
//! room socket reads the state again and sends it to its writers if it differs.
//! Does not own: what a catalog holds (the adapters), the room socket's frames (transport), or
//! running the turn (`turns`).
//!
//! Invariants: the browser never decides what can be chosen; a choice is stored exactly as the
//! catalog writes it, and kept when its model leaves (MOD-23); nothing stored changes when it
//! cannot be read (MOD-34); a child document has no choice of its own (MOD-17). What this
//! keeps in memory — the fallback Chat last said and whether the choice was unreadable, per
//! document — is only for documents in such a state now.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex, MutexGuard};

use serde_json::{json, Value};
use tokio::sync::broadcast;
use uuid::Uuid;

use crate::harness::{Adapters, Catalog, Offer};
use crate::runtime::clock::SharedClock;
use crate::store::{Document, ModelChoice, ModelChoiceStore};

/// Document ids whose model state changed that may wait for a slow room socket; one that falls
/// further behind reads every state again.
const CHANGES_BACKLOG: usize = 256;
/// The most characters of a model id or level quoted in Chat's words.
const QUOTED_MAX_CHARS: usize = 120;

/// Why a stored choice is not what runs (MOD-21, MOD-28).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Fallback {
    /// The stored model is not in the catalog now.
    ModelGone,
    /// The model is offered but not the stored level: the model runs at its own level.
    LevelGone,
    /// No catalog is offered now (no models at all; also a client that offered one and never
    /// reported it, once a turn ran for want of it, MOD-28).
    NoCatalog,
}

impl Fallback {
    fn code(&self) -> &'static str {
        match self {
            Fallback::ModelGone => "model-gone",
            Fallback::LevelGone => "level-gone",
            Fallback::NoCatalog => "no-catalog",
        }
    }

    /// What Chat says when a turn ran on the default for this reason.
    fn words(&self, choice: &ModelChoice) -> String {
        let model = quoted(&choice.model);
        match self {
            Fallback::ModelGone => format!(
                "The model chosen for this document ({model}) is not offered now, so chopin ran \
                 on the default model. The choice is kept and applies again when the model returns."
            ),
            Fallback::LevelGone => format!(
                "{model} does not offer the reasoning level chosen for this document ({}) now, so \
                 it ran at its own level. The choice is kept.",
                quoted(choice.thinking_level.as_deref().unwrap_or_default())
            ),
            Fallback::NoCatalog => format!(
                "No model can be chosen for this document's Planner now, so chopin ran on the \
                 default model instead of {model}. The choice is kept."
            ),
        }
    }
}

/// What Chat says when a turn ran on the default because the client never reported the
/// catalog it offered (MOD-28).
fn never_reported_words(choice: &ModelChoice) -> String {
    format!(
        "chopin's client has not said which models it offers, so chopin ran on the default \
         model instead of {}. The choice is kept.",
        quoted(&choice.model)
    )
}

/// What Chat says once while a turn cannot read the choice (MOD-32).
pub const UNREADABLE_WORDS: &str =
    "This document's model choice couldn't be read, so chopin ran on the default model.";

/// Where the document's choice stands, as the composer shows it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ChoiceState {
    /// Nobody chose: the harness runs its own default, and nothing is said (MOD-03, MOD-26).
    Default,
    /// The choice runs.
    Chosen,
    /// What the Planner offers is not known now: the choice is held back, neither gone nor
    /// honoured (MOD-27).
    Unknown,
    /// The choice cannot run; the default does. `said`: Chat has already said so, so the
    /// composer does not repeat it (MOD-25, MOD-28).
    Unavailable { why: Fallback, said: bool },
}

/// The model state of a document: the catalog, the stored choice, and how they meet.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ModelView {
    /// `None`: unknown now.
    pub catalog: Option<Catalog>,
    pub choice: Option<ModelChoice>,
    pub state: ChoiceState,
}

impl ModelView {
    /// `chat:model`: the catalog (`models`: `null` where none is offered or it is unknown),
    /// the Planner's `commands` (left out where they could not be read, CMD-09), the stored
    /// `choice`, its `state`, and what a turn would run now (`runs`; `null`: the default).
    pub fn frame(&self) -> Value {
        let models = match &self.catalog {
            Some(c) if !c.models.is_empty() => json!(c.models),
            _ => Value::Null,
        };
        let (state, reason) = match &self.state {
            ChoiceState::Default => ("default", None),
            ChoiceState::Chosen => ("chosen", None),
            ChoiceState::Unknown => ("unknown", None),
            ChoiceState::Unavailable { why, said: false } => ("unavailable", Some(why.code())),
            ChoiceState::Unavailable { why, said: true } => ("said", Some(why.code())),
        };
        let mut frame = json!({
            "type": "chat:model",
            "models": models,
            "choice": self.choice.as_ref().map(|c| json!({
                "model": c.model,
                "thinkingLevel": c.thinking_level,
                "chosenBy": c.chosen_by,
            })),
            "state": state,
            "runs": match self.runs() {
                (Some(model), level) => json!({ "model": model, "thinkingLevel": level }),
                (None, _) => Value::Null,
            },
        });
        if let Some(reason) = reason {
            frame["reason"] = json!(reason);
        }
        match &self.catalog {
            Some(Catalog {
                commands: Some(commands),
                ..
            }) => frame["commands"] = json!(commands),
            // Unknown: nothing is offered now.
            None => frame["commands"] = json!([]),
            Some(_) => {}
        }
        frame
    }

    /// Whether the model a turn started now would run reads images (FILE-23, FILE-24): its
    /// catalog entry (the chosen one, else the one marked default) lists `image` among its
    /// `inputTypes`. No catalog, or no entry: text only.
    pub fn reads_images(&self) -> bool {
        let Some(catalog) = &self.catalog else {
            return false;
        };
        let entry = match self.runs().0 {
            Some(model) => catalog.models.iter().find(|m| m.id == model),
            None => catalog.models.iter().find(|m| m.default),
        };
        entry.is_some_and(|m| m.input_types.iter().any(|t| t == "image"))
    }

    /// The model and level a turn started now would carry (`None`: the default).
    pub fn runs(&self) -> (Option<String>, Option<String>) {
        match (&self.state, &self.choice) {
            (ChoiceState::Chosen, Some(c)) => (Some(c.model.clone()), c.thinking_level.clone()),
            (
                ChoiceState::Unavailable {
                    why: Fallback::LevelGone,
                    ..
                },
                Some(c),
            ) => (Some(c.model.clone()), None),
            _ => (None, None),
        }
    }
}

/// What a turn a person started runs, and what Chat says first.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct TurnModel {
    pub model: Option<String>,
    pub thinking_level: Option<String>,
    /// A line for Chat before the turn: a fallback or an unreadable choice, said once.
    pub notice: Option<String>,
    /// The model the turn runs reads images, by its catalog entry's `inputTypes` (FILE-23).
    pub reads_images: bool,
}

/// Why a `chat:model` choice was refused: a code and the composer's words.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Refusal {
    pub code: &'static str,
    pub message: String,
}

impl Refusal {
    fn new(code: &'static str, message: impl Into<String>) -> Self {
        Refusal {
            code,
            message: message.into(),
        }
    }

    /// `chat:model-refused`.
    pub fn frame(&self) -> Value {
        json!({ "type": "chat:model-refused", "code": self.code, "message": self.message })
    }
}

/// What a choice asks for, read from the `chat:model` frame.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Choose {
    pub model: Option<String>,
    pub thinking_level: Option<String>,
}

impl Choose {
    /// `{type: "chat:model", model: string | null, thinkingLevel?: string | null}`; a field of
    /// any other type is refused (MOD-16), as is a level with no model.
    pub fn from_frame(frame: &Value) -> Result<Self, Refusal> {
        let field = |name: &str| match frame.get(name) {
            None | Some(Value::Null) => Ok(None),
            Some(Value::String(s)) => Ok(Some(s.clone())),
            Some(_) => Err(Refusal::new(
                "malformed",
                format!("\"{name}\" is a string, or null for the default."),
            )),
        };
        let choose = Choose {
            model: field("model")?,
            thinking_level: field("thinkingLevel")?,
        };
        if choose.model.is_none() && choose.thinking_level.is_some() {
            return Err(Refusal::new(
                "malformed",
                "A reasoning level is chosen with its model: send \"model\" too.",
            ));
        }
        Ok(choose)
    }
}

/// Per document, only while it is in such a state.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
struct Said {
    /// The fallback Chat said last, while its reason stands (MOD-22).
    fallback: Option<Fallback>,
    /// A turn could not read the choice, and the room was told (MOD-33).
    unreadable: bool,
}

/// The documents' Planner model state. See the module documentation.
pub struct Models {
    choices: Arc<dyn ModelChoiceStore>,
    adapters: Adapters,
    clock: SharedClock,
    changes: broadcast::Sender<Uuid>,
    said: Mutex<BTreeMap<Uuid, Said>>,
}

impl Models {
    pub fn new(choices: Arc<dyn ModelChoiceStore>, adapters: Adapters, clock: SharedClock) -> Self {
        Models {
            choices,
            adapters,
            clock,
            changes: broadcast::channel(CHANGES_BACKLOG).0,
            said: Mutex::new(BTreeMap::new()),
        }
    }

    /// Document ids whose model state may have changed.
    pub fn subscribe(&self) -> broadcast::Receiver<Uuid> {
        self.changes.subscribe()
    }

    /// `document`'s model state may have changed (a client's catalog report).
    pub fn changed(&self, document: Uuid) {
        let _ = self.changes.send(document);
    }

    /// Whether a turn last found `document`'s choice unreadable (MOD-33).
    pub fn unreadable(&self, document: Uuid) -> bool {
        self.lock().get(&document).is_some_and(|s| s.unreadable)
    }

    /// The commands `document`'s Planner reports now (CMD-02, CMD-11); `None`: none reported
    /// (nothing attached, unknown, or unreadable).
    pub async fn commands(&self, document: Uuid) -> Option<Vec<crate::harness::CatalogCommand>> {
        match self.offer(document).await {
            Ok(Offer::Known(catalog)) => catalog.commands,
            _ => None,
        }
    }

    /// What `document`'s adapter offers now; an error: it could not be read.
    async fn offer(&self, document: Uuid) -> Result<Offer, String> {
        let harness = self
            .adapters
            .for_document(document)
            .map_err(|e| e.to_string())?;
        harness.catalog().await.map_err(|e| e.to_string())
    }

    /// `document`'s model state now. An error: the catalog or the stored choice could not be
    /// read.
    pub async fn view(&self, document: Uuid) -> Result<ModelView, String> {
        let (offer, choice) = self.read(document).await?;
        let said = self.lock().get(&document).and_then(|s| s.fallback.clone());
        Ok(view_of(offer, choice, said.as_ref()))
    }

    /// A writer's choice for `doc` (MOD-14..19): checked against the catalog reported now,
    /// stored under the writer lease, and only then answered; the room is told.
    pub async fn choose(
        &self,
        doc: &Document,
        login: &str,
        can_write: bool,
        choose: Choose,
    ) -> Result<ModelView, Refusal> {
        if !can_write {
            return Err(Refusal::new(
                "read-only",
                "Choosing chopin's model needs push access to this document's repository.",
            ));
        }
        if doc.parent_id.is_some() {
            return Err(Refusal::new(
                "child-document",
                "A child document uses its parent's model choice; choose it in the parent document.",
            ));
        }
        let not_saved = || {
            Refusal::new(
                "storage-unavailable",
                "The model choice could not be saved; try again shortly.",
            )
        };
        match choose.model {
            // Choosing nothing: back to the default (MOD-19).
            None => {
                self.choices
                    .clear_model_choice(doc.id)
                    .await
                    .map_err(|_| not_saved())?;
            }
            Some(model) => {
                let catalog =
                    match self.offer(doc.id).await.map_err(|_| not_saved())? {
                        Offer::Known(catalog) => catalog,
                        Offer::Unknown { .. } => return Err(Refusal::new(
                            "model-choice-unavailable",
                            "What chopin offers is not known now (its client is away or has not \
                             reported it yet), so no model can be chosen.",
                        )),
                    };
                if catalog.models.is_empty() {
                    return Err(Refusal::new(
                        "model-choice-unavailable",
                        "This document's Planner offers no choice of model.",
                    ));
                }
                // Only the catalog decides, whatever the spelling (MOD-15).
                let Some(entry) = catalog.model(&model) else {
                    return Err(Refusal::new(
                        "model-not-offered",
                        "That model is not one chopin offers now.",
                    ));
                };
                if let Some(level) = &choose.thinking_level {
                    if !entry.thinking_levels.contains(level) {
                        return Err(Refusal::new(
                            "level-not-offered",
                            format!(
                                "That reasoning level is not one {} offers.",
                                quoted(&entry.id)
                            ),
                        ));
                    }
                }
                self.choices
                    .put_model_choice(&ModelChoice {
                        document_id: doc.id,
                        model: entry.id.clone(),
                        thinking_level: choose.thinking_level,
                        chosen_by: login.to_owned(),
                        chosen_at_ms: self.clock.now_ms(),
                    })
                    .await
                    .map_err(|_| not_saved())?;
            }
        }
        tracing::info!(document = %doc.id, login, "a writer chose the Planner's model");
        self.changed(doc.id);
        self.view(doc.id).await.map_err(|_| not_saved())
    }

    /// Whether the model a turn started now for `document` would run reads images (FILE-24).
    /// `None`: what the Planner offers is not known now (nothing attached, or a catalog still
    /// awaited): the turn itself decides, and leaves out images its model does not read
    /// (FILE-27).
    pub async fn reads_images(&self, document: Uuid) -> Option<bool> {
        match self.view(document).await {
            Ok(view) if view.catalog.is_none() => None,
            Ok(view) => Some(view.reads_images()),
            Err(_) => Some(false),
        }
    }

    /// What a turn a person started for `document` runs (MOD-20): the stored choice resolved
    /// against the catalog now, and the line Chat says first, if any (MOD-22, MOD-28, MOD-32).
    pub async fn for_turn(&self, document: Uuid) -> TurnModel {
        let read = self.read(document).await;
        let mut said = self.lock().get(&document).cloned().unwrap_or_default();
        let before = said.clone();
        let turn = match read {
            Err(e) => {
                tracing::warn!(document = %document, error = %e, "the document's model choice could not be read; the default runs");
                let notice = (!said.unreadable).then(|| UNREADABLE_WORDS.to_owned());
                said.unreadable = true;
                TurnModel {
                    notice,
                    ..TurnModel::default()
                }
            }
            Ok((offer, choice)) => {
                said.unreadable = false;
                // A client that offered a catalog and never reported it: the turn runs for want
                // of it, and from now on that client offers nothing until it reports (MOD-28).
                let in_vain = match (&offer, &choice) {
                    (Offer::Unknown { pending: Some(p) }, Some(_)) => {
                        p.ran_without();
                        true
                    }
                    _ => false,
                };
                let offer = if in_vain {
                    Offer::Known(Catalog::none())
                } else {
                    offer
                };
                let view = view_of(offer, choice.clone(), said.fallback.as_ref());
                let (model, thinking_level) = view.runs();
                let mut notice = None;
                match (&view.state, &choice) {
                    (ChoiceState::Unavailable { why, said: already }, Some(choice)) => {
                        if !already {
                            notice = Some(if in_vain {
                                never_reported_words(choice)
                            } else {
                                why.words(choice)
                            });
                        }
                        said.fallback = Some(why.clone());
                    }
                    // Held back: neither gone nor honoured (MOD-27).
                    (ChoiceState::Unknown, _) => {}
                    // Honoured, or nobody chose: a later fallback is said again (MOD-22).
                    _ => said.fallback = None,
                }
                TurnModel {
                    model,
                    thinking_level,
                    notice,
                    reads_images: view.reads_images(),
                }
            }
        };
        if said != before {
            let mut all = self.lock();
            if said == Said::default() {
                all.remove(&document);
            } else {
                all.insert(document, said);
            }
            drop(all);
            self.changed(document);
        }
        turn
    }

    async fn read(&self, document: Uuid) -> Result<(Offer, Option<ModelChoice>), String> {
        let offer = self.offer(document).await?;
        let choice = self
            .choices
            .model_choice(document)
            .await
            .map_err(|e| e.to_string())?;
        Ok((offer, choice))
    }

    /// `document` is served by another process now (`PROCESSES=many`): what Chat was told of
    /// its model here is forgotten, so a tree that comes back is told again when it needs to be.
    pub fn moved(&self, document: Uuid) {
        self.lock().remove(&document);
    }

    fn lock(&self) -> MutexGuard<'_, BTreeMap<Uuid, Said>> {
        self.said.lock().unwrap_or_else(|p| p.into_inner())
    }
}

/// How `offer` and `choice` meet; `said` is the fallback Chat last said.
fn view_of(offer: Offer, choice: Option<ModelChoice>, said: Option<&Fallback>) -> ModelView {
    let catalog = match offer {
        Offer::Known(c) => Some(c),
        Offer::Unknown { .. } => None,
    };
    let state = match (&catalog, &choice) {
        (_, None) => ChoiceState::Default,
        (None, Some(_)) => ChoiceState::Unknown,
        (Some(c), Some(choice)) => {
            let why = if c.models.is_empty() {
                Some(Fallback::NoCatalog)
            } else {
                match c.model(&choice.model) {
                    None => Some(Fallback::ModelGone),
                    Some(entry) => match &choice.thinking_level {
                        Some(level) if !entry.thinking_levels.contains(level) => {
                            Some(Fallback::LevelGone)
                        }
                        _ => None,
                    },
                }
            };
            match why {
                None => ChoiceState::Chosen,
                Some(why) => ChoiceState::Unavailable {
                    said: said == Some(&why),
                    why,
                },
            }
        }
    };
    ModelView {
        catalog,
        choice,
        state,
    }
}

/// `text` for Chat's words: at most [`QUOTED_MAX_CHARS`] characters, no control characters.
fn quoted(text: &str) -> String {
    let clean: String = text
        .chars()
        .filter(|c| !c.is_control())
        .take(QUOTED_MAX_CHARS)
        .collect();
    if text.chars().count() > QUOTED_MAX_CHARS {
        format!("{clean}…")
    } else {
        clean
    }
}
