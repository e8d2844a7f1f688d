//! The lessons' measuring rig, beside the safe core (`common`) that the lessons' programs use:
//! what turns a program into a lesson with honest numbers.
//!
//! | module | what it holds |
//! | --- | --- |
//! | [`lesson`] | the part of the rig every lesson's `main` is: flags, the GPU and its report, output, errors and exit codes |
//! | [`args`] | the flags every lesson shares, checked before the GPU starts |
//! | [`error`] | one error line, its kind and exit code |
//! | [`report`] | tables, figures in words, and JSON output |
//! | [`timing`] | timing statistics over repeated runs, and bandwidth |
//! | [`verify`] | results checked against a CPU reference |
//! | [`timeline`] | phases (NVTX ranges) and the built-in CUDA-event timeline, an observer of the scope |
//! | [`machine`] | what the machine says of the GPU's link, clocks and NUMA node, and what limits a copy |
//! | [`fit`] | a copy's cost over sizes: per-copy time and asymptotic rate |
//! | [`chunks`] | how N elements are split into chunks and streams |
//! | [`work`] | what each chunk of a pipeline does (its H2D copies, its kernel, its D2H copy), and its CPU check |
//! | [`pipeline`] | the one pipeline loop, the data it runs on, and the copy times and kernel calibration it is measured with |
//! | [`bound`] | a lower bound on a pipeline's time, measured in the same run, and what limits it |
//! | [`rig`] | the pipeline lessons' rig: the GPU, the setup, one stream against many, each run against its bound, the report |

pub mod args;
pub mod bound;
pub mod chunks;
pub mod error;
pub mod fit;
pub mod lesson;
pub mod machine;
pub mod pipeline;
pub mod report;
pub mod rig;
pub mod timeline;
pub mod timing;
pub mod verify;
pub mod work;

pub use anyhow;
pub use chunks::{Chunk, Chunking};
pub use error::LessonResult;
pub use timing::Stats;
