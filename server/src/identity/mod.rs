//! Who people are: GitHub, instance admission, sign-ins and the credentials they hold.
//!
//! Owns: the GitHub REST client ([`github`]), instance admission and its token-digest caches
//! ([`admission`]), credential sealing at rest ([`crypto`]), the table of live browser sign-ins
//! ([`sign_ins`]) and renewing their expiring GitHub user tokens ([`tokens`]), and the two ways to
//! sign in: GitHub's OAuth web flow ([`web_flow`]) and, under
//! `AUTH_MODE=local`, its device flow ([`device_flow`]).
//! Does not own: who may do what on a document (the access checks above this layer), the
//! routes (the transport layer), or what a login's end does to a Planner (the planner table).
//!
//! Imports only the runtime seams, the store and the settings.

pub mod admission;
pub mod crypto;
pub mod device_flow;
pub mod github;
pub mod sign_ins;
pub mod tokens;
pub mod web_flow;
