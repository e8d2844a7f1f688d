//! The safe core of CUDA host-device transfers: a GPU, its memory (device, pinned, mapped, managed,
//! pinned in place), streams, and a **stream scope** in which async copies and kernel launches borrow
//! what they touch until the GPU is done with it, as `std::thread::scope` does for threads. Your own
//! kernels launch through the same scope, from PTX.
//!
//! # A first program
//!
//! ```no_run
//! use cuda_scope::{Gpu, LaunchConfig};
//!
//! // extern "C" __global__ void saxpy(const float* x, float* y, float a, unsigned long long n)
//! // Your kernel's PTX (nvcc -ptx kernels.cu) and its source, whose prototypes say which parameters
//! // are pointers, so that a count passed for a buffer is refused.
//! const PTX: &str = include_str!("../tests/ptx/kernels.ptx");
//! const CU: &str = include_str!("../tests/kernels.cu");
//!
//! fn main() -> cuda_scope::Result<()> {
//!     let gpu = Gpu::init()?;                                  // Error::NoDriver or Error::NoGpu without one
//!     let saxpy = gpu.load_ptx_with_prototypes(PTX, CU)?.kernel("saxpy")?; // as the driver compiled it
//!     let n = 1 << 20;
//!     let x = gpu.pinned_from_fn(n, |i| i as f32)?;            // cudaMallocHost, filled on every core
//!     let y = gpu.pinned_from_fn(n, |_| 1.0f32)?;
//!     let mut out = gpu.pinned::<f32>(n)?;                     // where the result comes back
//!     let (mut d_x, mut d_y) = (gpu.alloc::<f32>(n)?, gpu.alloc::<f32>(n)?); // cudaMalloc, zeroed
//!     let streams = gpu.streams(2)?;                           // cudaStreamNonBlocking
//!     gpu.scope(&streams, |s| {
//!         let (dx, dy) = (s.device(&mut d_x), s.device(&mut d_y)); // lent to the scope until it ends
//!         let (copy, work) = (s.stream(0), s.stream(1));      // the scope's streams
//!         copy.htod(&x, dx)?;                                  // cudaMemcpyAsync on stream 0
//!         work.htod(&y, dy)?;                                  // ... and on stream 1
//!         let cfg = LaunchConfig::for_elements(n, 256);
//!         // SAFETY: saxpy reads x[0..n) and writes y[0..n), nothing else.
//!         unsafe { work.kernel(&saxpy, cfg).read(dx).write(dy).value(2.0f32).value(n as u64).launch()? };
//!         work.dtoh(dy, &mut out)                              // waits for stream 0's copy of x by itself
//!     })?;                                                     // every stream synchronized: out is ready
//!     assert!(out.iter().enumerate().all(|(i, v)| *v == 2.0 * i as f32 + 1.0));
//!     Ok(())
//! }
//! ```
//!
//! Every fallible call returns [`Result`], whose [`Error`] is one enum with data in its variants
//! (`match` on [`Error::NoGpu`], [`Error::TooLarge`], [`Error::LaunchRefused`], [`Error::Driver`]...);
//! the closures of [`Gpu::scope`], [`Gpu::timed`] and [`Scope::graph`] return your own error type,
//! any `E: From<Error>`.
//!
//! # Words
//!
//! Each word below names one thing, wherever the API and these docs use it.
//!
//! - **scope**: the closure [`Gpu::scope`] runs ([`Scope`]), in which work is queued on the streams it
//!   was given; when it ends, every stream is synchronized, also on error or panic.
//! - **lent**: a device, managed or mapped buffer handed to a scope by `&mut` ([`Scope::device`]) is
//!   lent to it: the host cannot touch, free or lend it again until the scope ends.
//! - **borrowed**: host memory an async copy reads or writes is borrowed (`&[T]` or `&mut [T]`) until
//!   the scope ends. A stream or device memory of another library taken by `borrow_raw` is borrowed
//!   too: used as ours, never destroyed or freed by us.
//! - **view**: what copies and launches address, a buffer lent to a scope or a range of one: [`Dev`]
//!   to read and write, [`DevRead`] to read only. A view cannot leave its scope.
//! - **bound**: tied to one scope by its lifetime and the scope's id, as views, [`ScopeStream`]s,
//!   [`ScopeEvent`]s, [`Graph`]s and launch builders are: it cannot be used after the scope or in another.
//! - **operation**: one thing queued on a stream of a scope: a copy, fill, prefetch, launch, batch of
//!   copies, or replay of a graph.
//! - **fence**: an event without timing that the scope records after an operation whose bytes another
//!   stream touches, so that work on that stream can wait for it (`cuStreamWaitEvent`). The x86
//!   `sfence` that [`staging::stream_copy`] and [`staging::stream_gather`] end with is another thing, and
//!   always called a *store fence*.
//! - **wait added**: a wait for a fence that the scope queued itself, because two operations on
//!   different streams touch the same bytes, one of them writing, and nothing the program did ordered
//!   them; [`Scope::waits`] counts them ([`Waits`]) beside the program's own waits
//!   ([`ScopeStream::wait_event`]).
//! - **held**: a small copy the scope keeps to coalesce with others on its stream instead of issuing it
//!   as it is queued; **flushed**: issued, with the copies held beside it ([`coalesce`]).
//! - **pending download**: a download queued by [`ScopeStream::dtoh_pending`] ([`PendingDownload`]),
//!   whose destination [`PendingDownload::wait`] hands back to the host before the scope ends, once
//!   its copy has finished.
//!
//! # What the types guarantee, with no `unsafe` in your code but the launch's promise
//!
//! - Host memory handed to an async copy is borrowed until the scope has synchronized every stream,
//!   also on error or panic: it cannot be read, written, freed or moved while a copy may run. If a
//!   stream fails and the driver cannot show that the GPU has stopped, the process aborts rather than
//!   release that memory.
//! - Device buffers are lent to the scope (`&mut`) and addressed by views ([`Dev`], [`DevRead`]) that
//!   cannot leave it. Work on another stream that touches the same bytes is ordered after the earlier
//!   work: by your own [`ScopeStream::record_event`]/[`ScopeStream::wait_event`] pairs (recognized
//!   transitively), or else by a wait the scope adds and reports ([`Scope::waits`]). One operation
//!   whose input and output overlap is refused. The events this takes are recorded only where another
//!   stream touches the same bytes, so ordering costs nothing where nothing needs ordering.
//! - Work goes on the scope's own streams ([`Scope::stream`]): no other stream can be named.
//! - A kernel of your own is launched with its arguments declared as views read, views written, or
//!   values, held against its parameters as the driver compiled them (count and sizes from the cubin
//!   it made of the PTX, kinds from the PTX text, pointer or value from its C prototype where given: see
//!   [`module`]); [`LaunchBuilder::launch`] is the one `unsafe` call, where you promise the kernel stays
//!   inside what it was given.
//! - Every buffer, stream, module and pinned allocation keeps its GPU context alive, so they may be
//!   dropped in any order. Streams, buffers and kernels of another context are refused.
//! - Only plain numbers ([`Element`]) can be copied back from the GPU, which can write any bits.
//! - A batch of copies ([`ScopeStream::htod_batch`]) borrows every buffer as one copy would, and is one
//!   operation over all its ranges; a [`Graph`] of a scope's work is replayed only inside that scope,
//!   so nothing it names can be freed or touched while it may run.
//!
//! # Handles from other libraries
//!
//! A stream or device memory that another library made (cudarc, a C library, a framework) can be
//! handed to a scope without a copy: [`Stream::borrow_raw`] and [`DeviceBuffer::borrow_raw`] borrow
//! them, `unsafe`, on the promise in their `# Safety` sections that the owner keeps them alive and leaves
//! them alone while a scope has them. The scope then orders and synchronizes them as its own; dropping
//! them destroys and frees nothing. What the driver can tell is checked and refused rather than
//! trusted: another context, a default stream, memory that is not device memory or a range past its
//! allocation. Both libraries must use one context: [`Gpu::init`] retains the GPU's primary context, as
//! the CUDA runtime and cudarc's `CudaContext::new` do (`examples/cudarc_interop.rs` shows cudarc's).
//!
//! ```no_run
//! # fn main() -> cuda_scope::Result<()> {
//! # let theirs: *mut std::ffi::c_void = std::ptr::null_mut(); // cudaStream_t, or cudarc's cu_stream()
//! let gpu = cuda_scope::Gpu::init()?;
//! // SAFETY: `theirs` is a live stream of the GPU's primary context; its owner keeps it alive while
//! // `streams` lives and queues nothing on it while a scope has it.
//! let streams = [unsafe { cuda_scope::Stream::borrow_raw(&gpu, theirs)? }];
//! gpu.scope(&streams, |s| s.stream(0).synchronize())?; // synchronized at the end, as our own are
//! drop(streams); // not destroyed: still its owner's
//! # Ok(()) }
//! ```
//!
//! ```no_run
//! # fn main() -> cuda_scope::Result<()> {
//! # let (theirs, n): (u64, usize) = (0, 1 << 20); // cudaMalloc's pointer, or cudarc's device_ptr()
//! let gpu = cuda_scope::Gpu::init()?;
//! // SAFETY: `theirs` holds `n` f32s of device memory of the GPU's primary context; its owner keeps
//! // it allocated while `d` lives and touches none of it while a scope has it.
//! let mut d = unsafe { cuda_scope::DeviceBuffer::<f32>::borrow_raw(&gpu, theirs, n)? };
//! let (host, streams) = (gpu.pinned_from_fn(n, |i| i as f32)?, gpu.streams(1)?);
//! gpu.scope(&streams, |s| s.stream(0).htod(&host, s.device(&mut d)))?;
//! drop(d); // not freed: still its owner's, now holding 0, 1, 2, ...
//! # Ok(()) }
//! ```
//!
//! | module | what it holds |
//! | --- | --- |
//! | [`device`] | [`Gpu`]: start-up with clear errors, what the GPU is, everything made on it |
//! | [`memory`] | device and managed buffers, the room for managed memory, the element types |
//! | [`host`] | pinned host memory (`cuMemHostAlloc` flags: write-combined, mapped, portable), pinned in place |
//! | [`stream`] | streams (non-blocking by default) |
//! | [`view`] | views of the buffers lent to a scope ([`Dev`], [`DevRead`]) |
//! | [`scope`] | stream scopes and their streams: copies, prefetches and events that borrow their buffers |
//! | [`launch`] | launches of any kernel: arguments held against its parameters, one `unsafe` call |
//! | [`batch`] | batches of copies in one call (`cuMemcpyBatchAsync`), each buffer borrowed as a single copy's is |
//! | [`coalesce`] | small copies a scope holds and issues together, one launch for many, chosen by a model fitted on the machine |
//! | [`graph`] | CUDA graphs of a scope's copies and launches, captured once and replayed inside the scope |
//! | [`module`] | PTX modules and their kernels |
//! | [`staging`] | pageable memory at near-pinned speed through pinned buffers; packing on several threads |
//!
//! The crate links against nothing of CUDA and has no build script: it loads the NVIDIA driver's
//! library, `libcuda.so.1`, when a program first calls the driver, so that programs build anywhere and
//! start anywhere, and say in one line at run time ([`Gpu::init`]) that there is no driver. It looks up
//! every entry point it calls at once, by its versioned symbol, so it needs a driver of CUDA 12.4 or
//! newer (driver 550 on Linux); an older one is [`Error::NoDriver`] naming the entry point it lacks.
//! The batched copy (`cuMemcpyBatchAsync`, CUDA 12.8) is looked up apart, where it is used
//! ([`batch_support`]). Kernels come as PTX, which the driver compiles: PTX of a newer ISA than the
//! driver knows is refused when it is loaded ([`Error::Module`]).

#![deny(missing_docs)]

pub mod batch;
pub mod coalesce;
mod context;
mod cubin;
pub mod device;
pub mod error;
// Some declarations are used by the tests alone; every one is checked against CUDA's headers.
#[allow(dead_code)]
mod ffi;
pub mod graph;
pub mod host;
pub mod launch;
pub mod memory;
pub mod module;
mod order;
pub mod probe;
mod prototype;
mod ptx;
#[cfg(test)]
mod ptx_differential;
pub mod scope;
pub mod staging;
pub mod stream;
pub mod view;

pub use batch::{batch_support, SrcOrder};
pub use coalesce::{Coalescing, CopyCounts, CopyModel, CopyWay};
pub use device::{DeviceInfo, Gpu};
pub use error::{
    DriverError, Error, Foreign, InputError, LaunchRefusal, LaunchRefused, Memory, ModuleError, NoDriver, NoGpu,
    Overlap, Refusal, Refused, Result, TooLarge, Unsupported,
};
pub use graph::{Graph, GraphBuilder};
pub use host::{pageable, HostAlloc, PinnedBuffer, Registered};
pub use launch::{LaunchBuilder, LaunchConfig, Queue, Value};
pub use memory::{Bytes, DeviceBuffer, DeviceRoom, Element, Footprint, ManagedBuffer};
pub use module::{Kernel, Module};
pub use scope::{Destination, Observer, PendingDownload, Scope, ScopeEvent, ScopeStream, TimedOp, Waits};
pub use staging::{PartedSlice, Stager};
pub use stream::Stream;
pub use view::{Dev, DevRead};

/// The crate's README (`common/README.md`), whose example is compiled as a doctest.
#[cfg(doctest)]
#[doc = include_str!("../README.md")]
struct ReadmeDoctests;
