//! The harness contract suite: checks any harness adapter must pass, as a library and a CLI.
//!
//! Owns: the checks and their report. Does not own: adapters (they live in `chopin-server`).
//! The harness layer does not exist yet, so this crate holds no checks yet.
