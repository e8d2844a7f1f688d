//! GPU transfer lessons. The lessons are the examples (`cargo run --example NAME`); the plumbing they
//! share is the `common` crate, re-exported here for the benchmarks and tests.

pub use common::*;
