//! A job's disposable worker sessions: every model stage is a fresh isolated session on the
//! document's harness, given a structured-output schema, and destroyed after its one turn
//! (JOB-02, RFC-33, RT-05).
//!
//! Owns: [`Worker::structured`] — one stage: the turn's instructions and prompt, the host tools
//! the stage offers (none for a private worker; the research evidence worker's `web_search`
//! only), the result checked against its schema by the harness driver, and the mapping of how
//! the turn ended to a job [`Failure`].
//! Does not own: what the prompt says (each definition) or the harness itself.
//!
//! A worker never sees a Planner session, Chat or the Planner's tools: an isolated session is
//! started with no tools of the client's own (the harness refuses any it reports), and the
//! turn's host tools are exactly those the stage passes.

use std::sync::Arc;

use async_trait::async_trait;
use serde_json::Value;
use uuid::Uuid;

use super::Failure;
use crate::harness::{
    run_turn, CancelSignal, HostToolResult, Part, SessionMode, SessionRequest, ToolSpec,
    TurnControl, TurnFailure, TurnHost, TurnRequest, TurnResult,
};

/// Opens one attempt's worker sessions on a document's harness.
pub struct Worker {
    adapters: crate::harness::Adapters,
    document: Uuid,
    cancel: CancelSignal,
}

/// The host tools one stage offers, executed in the server.
#[async_trait]
pub trait StageTools: Send + Sync {
    /// The tools' specs, offered to the model and nothing else.
    fn specs(&self) -> Vec<ToolSpec>;
    /// Runs one of them (the driver has checked its name and input).
    async fn execute(&self, name: &str, input: Value, cancel: CancelSignal) -> HostToolResult;
}

/// A stage with no host tools: a private worker.
struct NoTools;

#[async_trait]
impl StageTools for NoTools {
    fn specs(&self) -> Vec<ToolSpec> {
        Vec::new()
    }
    async fn execute(&self, name: &str, _input: Value, _cancel: CancelSignal) -> HostToolResult {
        HostToolResult::error(format!("{name} is not offered to this worker"))
    }
}

/// The stage's host: its tools, and whether the model said anything yet; the stream itself is
/// not kept (a worker's words are not shown anywhere, JOB-03).
struct StageHost {
    tools: Arc<dyn StageTools>,
    said: std::sync::atomic::AtomicBool,
}

#[async_trait]
impl TurnHost for StageHost {
    async fn execute(&self, name: &str, input: Value, cancel: CancelSignal) -> HostToolResult {
        self.said.store(true, std::sync::atomic::Ordering::SeqCst);
        self.tools.execute(name, input, cancel).await
    }
    async fn part(&self, part: &Part) {
        if matches!(
            part,
            Part::Text(_) | Part::Reasoning(_) | Part::ToolInput(_) | Part::ToolCall(_)
        ) {
            self.said.store(true, std::sync::atomic::Ordering::SeqCst);
        }
    }
}

impl Worker {
    pub(super) fn new(
        adapters: crate::harness::Adapters,
        document: Uuid,
        cancel: CancelSignal,
    ) -> Worker {
        Worker {
            adapters,
            document,
            cancel,
        }
    }

    /// One private stage: no tools, `schema`'s structured result.
    pub async fn structured(
        &self,
        instructions: String,
        prompt: String,
        schema: Value,
    ) -> Result<Value, Failure> {
        self.stage(instructions, prompt, schema, Arc::new(NoTools))
            .await
    }

    /// One stage offering `tools`, `schema`'s structured result. A fresh isolated session,
    /// destroyed after its one turn whatever happened; the attempt's stop stops it.
    pub async fn stage(
        &self,
        instructions: String,
        prompt: String,
        schema: Value,
        tools: Arc<dyn StageTools>,
    ) -> Result<Value, Failure> {
        let harness = self.adapters.for_document(self.document).map_err(|e| {
            tracing::error!(error = %e, "the configured harness is not in the registry");
            Failure::fatal("harness-unknown")
        })?;
        let (control, steer) = TurnControl::new(&*harness);
        let turn = TurnRequest {
            instructions,
            prompt,
            host_tools: tools.specs(),
            response_format: Some(schema),
            cancel: control.cancel_signal(),
            // Background work never carries a model choice (MOD): the session's default.
            model: None,
            thinking_level: None,
            attachments: Vec::new(),
        };
        let session = SessionRequest {
            mode: SessionMode::Isolated,
            model: None,
            thinking_level: None,
        };
        let stopped = self.cancel.clone();
        let relay = async {
            stopped.cancelled().await;
            control.cancel(stopped.reason().unwrap_or_default());
            std::future::pending::<()>().await;
        };
        let host = Arc::new(StageHost {
            tools,
            said: std::sync::atomic::AtomicBool::new(false),
        });
        let report = tokio::select! {
            report = run_turn(&*harness, session, turn, steer, host.clone()) => report,
            _ = relay => unreachable!("the relay never ends"),
        };
        let said = host.said.load(std::sync::atomic::Ordering::SeqCst);
        match report.result {
            TurnResult::Completed {
                output: Some(output),
            } => Ok(output),
            TurnResult::Completed { output: None } => Err(Failure::retry("output-missing")),
            TurnResult::Aborted => Err(Failure::fatal(super::INTERRUPTED)),
            // The model had begun answering: the stage was interrupted, and an interrupted model
            // stage is never asked again (OWN-18, SES-27).
            TurnResult::Failed(failure) if said && matches!(failure, TurnFailure::Adapter(_)) => {
                tracing::warn!(error = %failure, "a job's worker turn failed after the model began answering");
                Err(Failure::fatal(super::INTERRUPTED))
            }
            TurnResult::Failed(failure) => {
                tracing::warn!(error = %failure, "a job's worker turn failed");
                Err(match failure {
                    TurnFailure::Start(_) => Failure::retry("worker-unavailable"),
                    TurnFailure::Boundary(_) => Failure::retry("worker-boundary"),
                    TurnFailure::OutputMissing => Failure::retry("output-missing"),
                    TurnFailure::OutputInvalid(_) => Failure::retry("output-invalid"),
                    TurnFailure::Adapter(_) => Failure::retry("worker-failed"),
                })
            }
        }
    }
}
