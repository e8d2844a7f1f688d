//! A library that turns an Nsight Systems run of a CUDA program, or the lessons' built-in CUDA-event
//! timeline, into a report: per NVTX range (per segment, cut at host synchronizations, where a program
//! has none) how busy each engine was, how much copying ran under kernels, how much both directions ran
//! at once, how long the GPU sat idle, and what limits it; the checks that matter for transfers; nsys's
//! own expert-system findings; and SVG timelines.
//!
//! It reads what nsys wrote and never runs a program itself: `cargo xtask profile` decides what to run,
//! finds and runs nsys, and hands the library the text of its exports (see [`nsys::read`]) and the
//! output of `nsys analyze` (see [`analyze::outcome`]); [`report`] then writes the pictures and the
//! report's sections.
//!
//! The modules, each using only modules above it in this table:
//!
//! | module | what it holds |
//! |---|---|
//! | [`table`] | the rows of a CSV export of `nsys stats`, found by column name |
//! | [`trace`] | GPU operations and NVTX phases ([`trace::Trace`]), read from nsys's GPU trace and NVTX exports; operations by phase |
//! | [`metrics`] | interval arithmetic, a stretch's [`metrics::Summary`] (engine busy, overlap, idle), how far two summaries agree |
//! | [`builtin`] | the lessons' built-in timeline (Chrome-trace JSON) and its engine correction |
//! | [`svg`] | the timeline picture: a row per stream and per engine, the phases on top |
//! | [`api`] | CUDA API calls from nsys's API trace, what each does, and the call that made each GPU operation |
//! | [`checks`] | the transfer checks: pageable memory in async copies, synchronous calls on the legacy stream, streams never together |
//! | [`limits`] | what limits a stretch of work, the overlap model, speedups between stretches doing the same work |
//! | [`segments`] | a run without NVTX ranges, cut into segments at host synchronizations |
//! | [`nsys`] | what nsys recorded of one run, read from its `nsys stats` exports |
//! | [`analyze`] | `nsys analyze`'s expert-system rules: their output parsed, condensed to a line each |
//! | [`report`] | the report on a lesson or a program: tables, checks, rules and notes, with its SVG files |

#![warn(missing_docs)]

pub mod analyze;
pub mod api;
pub mod builtin;
pub mod checks;
pub mod limits;
pub mod metrics;
pub mod nsys;
pub mod report;
pub mod segments;
pub mod svg;
pub mod table;
pub mod trace;
