//! Features: optional parts of the protocol a client offers in `attach` and the server accepts
//! in `attached`.
//!
//! Owns: the feature names and the negotiation rule. Does not own: which features a server
//! supports (a server setting) or what each one changes (the server's agent link).
//!
//! Unknown names are ignored, not refused: a client written against a later revision of
//! `chopin.agent.v1` may offer a feature this server has never heard of, and the answer to that
//! is simply not accepting it, which `attached` already expresses. Refusing would turn every
//! additive feature into a breaking change. Everywhere else decoding stays strict, and the
//! server's `attached` may only list names from [`Feature::ALL`].

use std::fmt;

use serde::{Deserialize, Deserializer, Serialize, Serializer};

/// A feature of `chopin.agent.v1` that a client may offer and a server may accept.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Feature {
    /// A link that drops unexpectedly keeps its sessions, open questions and live runs for the
    /// same account, with no deadline; the client takes them back with `resume`.
    ResumableSessions,
    /// The server may send `steer`: a person's message given to the running turn.
    SteerTurn,
    /// The client reports its models and commands with `catalog`; the server may then send
    /// `thinkingLevel` in `turn`.
    CapabilityCatalog,
    /// `runs` carries only new and changed stages of each run, merged by `stageId`.
    RunStageDeltas,
    /// `turn` may carry the files sent with the message in `attachments`, instead of words in
    /// the prompt.
    Attachments,
}

impl Feature {
    /// Every feature of this version, in the order `attached` lists them.
    pub const ALL: [Feature; 5] = [
        Feature::ResumableSessions,
        Feature::SteerTurn,
        Feature::CapabilityCatalog,
        Feature::RunStageDeltas,
        Feature::Attachments,
    ];

    /// The name on the wire.
    pub fn as_str(self) -> &'static str {
        match self {
            Feature::ResumableSessions => "resumable-sessions",
            Feature::SteerTurn => "steer-turn",
            Feature::CapabilityCatalog => "capability-catalog",
            Feature::RunStageDeltas => "run-stage-deltas",
            Feature::Attachments => "attachments",
        }
    }

    /// The feature with this wire name, if this version knows it.
    pub fn from_name(name: &str) -> Option<Feature> {
        Feature::ALL.into_iter().find(|f| f.as_str() == name)
    }
}

impl fmt::Display for Feature {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// One entry of `attach.features`: a feature this version knows, or a name it does not (kept
/// only so the server can log it; it is never accepted).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum OfferedFeature {
    Known(Feature),
    Unknown(String),
}

impl OfferedFeature {
    pub fn as_str(&self) -> &str {
        match self {
            OfferedFeature::Known(f) => f.as_str(),
            OfferedFeature::Unknown(name) => name,
        }
    }

    pub fn known(&self) -> Option<Feature> {
        match self {
            OfferedFeature::Known(f) => Some(*f),
            OfferedFeature::Unknown(_) => None,
        }
    }
}

impl From<Feature> for OfferedFeature {
    fn from(f: Feature) -> Self {
        OfferedFeature::Known(f)
    }
}

impl Serialize for OfferedFeature {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.serialize_str(self.as_str())
    }
}

impl<'de> Deserialize<'de> for OfferedFeature {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let name = String::deserialize(deserializer)?;
        Ok(match Feature::from_name(&name) {
            Some(f) => OfferedFeature::Known(f),
            None => OfferedFeature::Unknown(name),
        })
    }
}

/// The features a server accepts: those both offered and supported, each once, in
/// [`Feature::ALL`]'s order. Unknown offers are dropped.
pub fn accept_features(offered: &[OfferedFeature], supported: &[Feature]) -> Vec<Feature> {
    Feature::ALL
        .into_iter()
        .filter(|f| supported.contains(f) && offered.iter().any(|o| o.known() == Some(*f)))
        .collect()
}
