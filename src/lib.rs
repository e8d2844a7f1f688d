//! GPU transfer lessons. The lessons are the examples (`cargo run --example NAME`); the safe core they
//! use is the `cuda-scope` crate (folder `common/`), their kernels the `kernels` crate, and their measuring rig the
//! `measure` crate, re-exported here for the benchmarks and tests.

pub use cuda_scope;
pub use kernels;
pub use measure;
