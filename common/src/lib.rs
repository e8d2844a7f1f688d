//! The shared plumbing of the lessons, so that each lesson holds only its own idea.
//!
//! | module | what it holds |
//! | --- | --- |
//! | [`device`] | GPU start-up with clear errors, the device report |
//! | [`host`] | host buffer kinds: pinned (with `cuMemHostAlloc` flags) and pinned in place |
//! | [`scope`] | stream scopes: async copies and launches that borrow their buffers until the GPU is done |
//! | [`staging`] | pageable memory at near-pinned speed through a ring of pinned buffers |
//! | [`kernels`] | typed launchers for `kernels/*.cu` and their CPU twins |
//! | [`timing`] | CUDA-event timing statistics, bandwidth |
//! | [`timeline`] | phases (NVTX ranges) and the built-in CUDA-event timeline |
//! | [`chunks`] | how N elements are split into chunks and streams |
//! | [`pipeline`] | the ideal time of a copy-compute-copy pipeline |
//! | [`verify`] | checking results against a CPU reference |
//! | [`report`] | tables, verdicts and JSON |
//! | [`args`] | the flags every lesson shares |

pub mod args;
pub mod chunks;
pub mod device;
pub mod error;
pub mod host;
pub mod kernels;
pub mod pipeline;
pub mod report;
pub mod scope;
pub mod staging;
pub mod timeline;
pub mod timing;
pub mod verify;

pub use anyhow;
pub use chunks::{Chunk, ChunkPlan};
pub use cust::{memory::DeviceBuffer, stream::Stream};
pub use device::Gpu;
pub use error::Result;
pub use host::{pageable, HostAlloc, PinnedBuffer, Registered};
pub use scope::{Dev, Scope};
pub use timing::Stats;
