//! The shared plumbing of the lessons, so that each lesson holds only its own idea.
//!
//! | module | what it holds |
//! | --- | --- |
//! | [`device`] | the GPU ([`Gpu`]): start-up with clear errors, the device report, everything made on it |
//! | [`memory`] | device buffers, managed memory and the room for it, and the element types copies may fill |
//! | [`host`] | host buffer kinds: pinned (with `cuMemHostAlloc` flags), mapped, pinned in place |
//! | [`stream`] | streams (non-blocking by default) |
//! | [`scope`] | stream scopes: async copies, launches and events that borrow their buffers until the GPU is done |
//! | [`kernels`] | typed launchers for `kernels/*.cu` and their CPU twins |
//! | [`staging`] | pageable memory at near-pinned speed through a ring of pinned buffers |
//! | [`timing`] | timing statistics, bandwidth |
//! | [`fit`] | a copy's cost over sizes: per-copy time and asymptotic rate |
//! | [`machine`] | what the machine says of the GPU's link, clocks and NUMA node, and what limits a copy |
//! | [`timeline`] | phases (NVTX ranges) and the built-in CUDA-event timeline |
//! | [`chunks`] | how N elements are split into chunks and streams |
//! | [`bound`] | a lower bound on a copy-compute-copy pipeline's time, measured in the same run, and what limits it |
//! | [`pipeline`] | the pipeline itself: stage times, one loop for benchmarks and every-GPU runs |
//! | [`planner`] | the best chunk and stream counts for a pipeline, from costs measured in the same run (a model) |
//! | [`verify`] | checking results against a CPU reference |
//! | [`report`] | tables, verdicts and JSON |
//! | [`args`] | the flags every lesson shares, checked before the GPU starts |
//! | [`lesson`] | the harness every lesson's `main` is: flags, the GPU, output, errors and exit codes |
//!
//! Every type here that holds a GPU resource keeps its context alive, and no public method can queue
//! GPU work except through a [`Scope`], which borrows what the work touches until it is done.

pub mod args;
pub mod bound;
pub mod chunks;
mod context;
pub mod device;
pub mod error;
#[doc(hidden)]
pub mod ffi;
pub mod fit;
pub mod host;
pub mod kernels;
pub mod lesson;
pub mod machine;
pub mod memory;
pub mod pipeline;
pub mod planner;
pub mod report;
pub mod scope;
pub mod staging;
pub mod stream;
pub mod timeline;
pub mod timing;
pub mod verify;

pub use anyhow;
pub use chunks::{Chunk, ChunkPlan};
pub use device::Gpu;
pub use error::Result;
pub use host::{pageable, HostAlloc, PinnedBuffer, Registered};
pub use memory::{DeviceBuffer, Element, ManagedBuffer, Room};
pub use scope::{Dev, Ordering, Scope, ScopeEvent, To};
pub use stream::Stream;
pub use timing::Stats;
