//! The C-ABI layer, in one room: what the hot paths (`spawn_run`, `firing_key`,
//! `claim_firing`, `complete_firing`, the HRW functions over a passed host array) use instead of
//! pgrx's `#[pg_extern]` wrappers. Their C symbols (`rendezvous_spawn_run`, …) are named by the
//! released install scripts (0.2.0 and 0.3.0), which a database still runs until its
//! `ALTER EXTENSION … UPDATE`, so they are written by hand, not generated.
//!
//! - [`c_function`]: arguments read as datums, one composite result, the version-1 info record;
//! - [`kept_plan`]: statements prepared once per backend (pgrx's kept statements) run with
//!   the datums a C function was called with;
//! - [`call_cache`]: a per-call-site cache in `fn_extra`, keyed by argument bytes.
//!
//! Every `unsafe` block in the extension says why it is sound in a `// SAFETY:` comment (the
//! workspace denies `clippy::undocumented_unsafe_blocks`), and every `unsafe fn` says what its
//! caller must uphold under `# Safety`. The C functions themselves stay beside their concept
//! (admission.rs, firing.rs, hrw.rs) and reach PostgreSQL only through this layer and pgrx.
pub(crate) mod c_function;
pub(crate) mod call_cache;
pub(crate) mod kept_plan;
