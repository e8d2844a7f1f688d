//! CUDA graphs of a scope's work: copies and launches captured once (stream capture), then replayed as
//! one operation, as often as wanted, inside the scope that lent their buffers.
//!
//! ```no_run
//! # fn main() -> cuda_scope::Result<()> {
//! # let gpu = cuda_scope::Gpu::init()?;
//! # let streams = gpu.streams(1)?;
//! let inputs: Vec<Vec<f32>> = (0..100).map(|i| vec![i as f32; 256]).collect();
//! let mut outputs: Vec<Vec<f32>> = vec![vec![0.0; 256]; 100];
//! let mut d = gpu.alloc::<f32>(100 * 256)?;
//! gpu.scope(&streams, |s| -> cuda_scope::Result<()> {
//!     let d = s.device(&mut d);
//!     let graph = s.graph(|g| -> cuda_scope::Result<()> {                               // cudaStreamBeginCapture
//!         for (i, (input, output)) in inputs.iter().zip(outputs.iter_mut()).enumerate() {
//!             let part = d.slice(i * 256..(i + 1) * 256);
//!             g.htod(input, part)?;                              // captured, not run
//!             g.dtoh(part, output)?;
//!         }
//!         Ok(())
//!     })?;                                                       // cudaStreamEndCapture, cudaGraphInstantiate
//!     for _ in 0..10 {
//!         s.stream(0).replay(&graph)?;                           // cudaGraphLaunch: 200 copies, one call
//!     }
//!     Ok(())
//! })?;                                                           // every stream synchronized: outputs ready
//! # Ok(()) }
//! ```
//!
//! What makes replaying safe: a [`Graph`] names its scope's buffers, so it is tied to the scope the
//! way its views are (`Graph<'scope>`, invariant, and the scope's id, checked at each launch). It cannot
//! leave the scope, so every host buffer it names stays borrowed (sources `&[T]`, destinations
//! `&mut [T]`) for as long as the graph may run, and the scope synchronizes before those borrows end; it
//! cannot be launched in another scope, whose buffers and ordering are not the ones it was built with.
//! Its parts run one after another (captured on one stream), and each launch is one operation of the
//! scope over every device range the graph touches: ordered after other streams' work on those bytes,
//! and recorded for the work after it. The driver runs launches of one graph one at a time. A graph and
//! the modules of its kernels stay alive until every scope that launched it has synchronized.

use std::{
    cell::{Cell, RefCell},
    marker::PhantomData,
    rc::Rc,
    sync::Arc,
};

use crate::{
    context::Context,
    error::check,
    error::{refused, Error, Foreign, LaunchRefusal, LaunchRefused, Refusal},
    ffi,
    launch::{sealed::QueueSealed, Checked, Enqueue, LaunchBuilder, LaunchConfig, Queue},
    memory::Element,
    module::{Kernel, Loaded},
    order::{normalize, Op, OpInfo},
    scope::{Scope, ScopeStream},
    stream::Stream,
    view::{Dev, DevAccess, DevRead, Invariant},
};

/// An executable graph (`CUgraphExec`), destroyed when the last holder is gone.
struct Exec {
    raw: ffi::CUgraphExec,
    ctx: Arc<Context>,
}

impl Drop for Exec {
    fn drop(&mut self) {
        // SAFETY: instantiated once, destroyed once, in its own context; every scope that launched it
        // held it until its streams were synchronized (and the driver defers the release of a graph
        // still running until it ends).
        self.ctx.with_current(|| unsafe { ffi::cuGraphExecDestroy(self.raw) });
    }
}

/// Work captured once and replayed by [`ScopeStream::replay`], inside the scope that built it
/// ([`Scope::graph`]). See the module docs.
///
/// ```no_run
/// # fn main() -> cuda_scope::Result<()> {
/// # let gpu = cuda_scope::Gpu::init()?;
/// # let (streams, mut d) = (gpu.streams(1)?, gpu.alloc::<f32>(1024)?);
/// # let (input, mut output) = (vec![1f32; 1024], vec![0f32; 1024]);
/// gpu.scope(&streams, |s| {
///     let d = s.device(&mut d);
///     let round_trip = s.graph(|g| {
///         g.htod(&input, d)?; // captured, not run
///         g.dtoh(d, &mut output)
///     })?;
///     (0..100).try_for_each(|_| s.stream(0).replay(&round_trip)) // two copies a call
/// })?;
/// # Ok(()) }
/// ```
pub struct Graph<'scope> {
    exec: Rc<Exec>,
    scope: u64,
    /// Every device range the graph touches, merged.
    accesses: Vec<DevAccess>,
    modules: Vec<Arc<Loaded>>,
    nodes: usize,
    bytes: usize,
    _scope: Invariant<'scope>,
}

impl Graph<'_> {
    /// The copies and launches captured.
    ///
    /// ```no_run
    /// # fn main() -> cuda_scope::Result<()> {
    /// # let gpu = cuda_scope::Gpu::init()?;
    /// # let (streams, mut d) = (gpu.streams(1)?, gpu.alloc::<f32>(1024)?);
    /// # let (input, mut output) = (vec![1f32; 1024], vec![0f32; 1024]);
    /// gpu.scope(&streams, |s| -> cuda_scope::Result<()> {
    ///     let d = s.device(&mut d);
    ///     let graph = s.graph(|g| {
    ///         g.htod(&input, d)?;
    ///         g.dtoh(d, &mut output)
    ///     })?;
    ///     assert_eq!(graph.nodes(), 2);
    ///     Ok(())
    /// })?;
    /// # Ok(()) }
    /// ```
    pub fn nodes(&self) -> usize {
        self.nodes
    }

    /// The bytes its copies move, each time it runs.
    ///
    /// ```no_run
    /// # fn main() -> cuda_scope::Result<()> {
    /// # let gpu = cuda_scope::Gpu::init()?;
    /// # let (streams, mut d) = (gpu.streams(1)?, gpu.alloc::<f32>(1024)?);
    /// # let (input, mut output) = (vec![1f32; 1024], vec![0f32; 1024]);
    /// gpu.scope(&streams, |s| -> cuda_scope::Result<()> {
    ///     let graph = s.graph(|g| g.htod(&input, s.device(&mut d)))?;
    ///     for _ in 0..10 {
    ///         s.stream(0).replay(&graph)?;
    ///     }
    ///     println!("{} moved", cuda_scope::Bytes(10 * graph.bytes())); // 4 KiB a replay
    ///     Ok(())
    /// })?;
    /// # Ok(()) }
    /// ```
    pub fn bytes(&self) -> usize {
        self.bytes
    }
}

/// What [`Scope::graph`] hands the closure that builds a graph: copies and launches queued on it are
/// captured, in order, and run only when the graph is launched.
///
/// ```no_run
/// # fn main() -> cuda_scope::Result<()> {
/// # let gpu = cuda_scope::Gpu::init()?;
/// # let (streams, mut d) = (gpu.streams(1)?, gpu.alloc::<f32>(1024)?);
/// # let (input, mut output) = (vec![1f32; 1024], vec![0f32; 1024]);
/// gpu.scope(&streams, |s| {
///     let d = s.device(&mut d);
///     let graph = s.graph(|g: &cuda_scope::GraphBuilder| {
///         g.htod(&input, d)?; // queued on the builder: captured in order, run by replay
///         g.dtoh(d, &mut output)
///     })?;
///     s.stream(0).replay(&graph)
/// })?;
/// # Ok(()) }
/// ```
pub struct GraphBuilder<'s, 'scope, 'env> {
    scope: &'s Scope<'scope, 'env>,
    stream: &'s Stream,
    accesses: RefCell<Vec<DevAccess>>,
    modules: RefCell<Vec<Arc<Loaded>>>,
    nodes: Cell<usize>,
    bytes: Cell<usize>,
}

impl<'scope> GraphBuilder<'_, 'scope, '_> {
    /// Captures `cudaMemcpyAsync(dst, src, ..., H2D)`. `src` stays borrowed until the scope ends.
    ///
    /// ```no_run
    /// # fn main() -> cuda_scope::Result<()> {
    /// # let gpu = cuda_scope::Gpu::init()?;
    /// # let (streams, mut d) = (gpu.streams(1)?, gpu.alloc::<f32>(1024)?);
    /// # let (input, mut output) = (vec![1f32; 1024], vec![0f32; 1024]);
    /// gpu.scope(&streams, |s| {
    ///     let d = s.device(&mut d);
    ///     let upload = s.graph(|g| g.htod(&input, d))?; // input stays borrowed until the scope ends
    ///     s.stream(0).replay(&upload)
    /// })?;
    /// # Ok(()) }
    /// ```
    pub fn htod<T: Element>(&self, src: &'scope [T], dst: Dev<'scope, T>) -> crate::Result<()> {
        if src.len() != dst.len() {
            return refused("graph htod", Refusal::Lengths { source: src.len(), destination: dst.len() });
        }
        let access = self.checked(dst.access(true), "graph htod")?;
        self.current()?;
        let bytes = std::mem::size_of_val(src);
        // SAFETY: the stream is capturing, so nothing runs now: the copy becomes a node of the graph,
        // which runs only through ScopeStream::replay in this scope, ordered by the range recorded here;
        // `src` is borrowed for the whole scope, which synchronizes before the borrow ends; `dst` is a
        // live device range of `bytes` bytes (checked above).
        let code = unsafe { ffi::cuMemcpyHtoDAsync_v2(dst.ptr(), src.as_ptr().cast(), bytes, self.stream.raw()) };
        check(code, || "graph htod: capturing the copy".into())?;
        self.captured(vec![access], bytes);
        Ok(())
    }

    /// Captures `cudaMemcpyAsync(dst, src, ..., D2H)`. `dst` stays borrowed mutably until the scope ends:
    /// every launch of the graph writes it.
    ///
    /// ```no_run
    /// # fn main() -> cuda_scope::Result<()> {
    /// # let gpu = cuda_scope::Gpu::init()?;
    /// # let (streams, mut d) = (gpu.streams(1)?, gpu.alloc::<f32>(1024)?);
    /// # let (input, mut output) = (vec![1f32; 1024], vec![0f32; 1024]);
    /// gpu.scope(&streams, |s| {
    ///     let d = s.device(&mut d);
    ///     let download = s.graph(|g| g.dtoh(d, &mut output))?; // every replay writes output
    ///     s.stream(0).replay(&download)
    /// })?; // output is the host's again
    /// # Ok(()) }
    /// ```
    pub fn dtoh<T: Element>(&self, src: impl Into<DevRead<'scope, T>>, dst: &'scope mut [T]) -> crate::Result<()> {
        let src = *src.into().view();
        if src.len() != dst.len() {
            return refused("graph dtoh", Refusal::Lengths { source: src.len(), destination: dst.len() });
        }
        let access = self.checked(src.access(false), "graph dtoh")?;
        self.current()?;
        let bytes = std::mem::size_of_val(dst);
        // SAFETY: captured, not run (see htod); `dst` is borrowed mutably for the whole scope, so nothing
        // else touches it while a launch of the graph may write it; `src` is a live device range of
        // `bytes`; T is an Element, so whatever bits arrive are a valid T.
        let code = unsafe { ffi::cuMemcpyDtoHAsync_v2(dst.as_mut_ptr().cast(), src.ptr(), bytes, self.stream.raw()) };
        check(code, || "graph dtoh: capturing the copy".into())?;
        self.captured(vec![access], bytes);
        Ok(())
    }

    /// Captures a kernel launch (see [`ScopeStream::kernel`]): declare its arguments, then
    /// [`LaunchBuilder::launch`]. Refused where its arguments do not match the kernel's parameters,
    /// where it reads and writes overlapping bytes, or where its module is of another context.
    ///
    /// ```no_run
    /// # fn main() -> cuda_scope::Result<()> {
    /// # let gpu = cuda_scope::Gpu::init()?;
    /// # use cuda_scope::LaunchConfig;
    /// # let saxpy = gpu.load_ptx(include_str!("../tests/ptx/kernels.ptx"))?.kernel("saxpy")?;
    /// # let (streams, mut x, mut y) = (gpu.streams(1)?, gpu.alloc::<f32>(1024)?, gpu.alloc::<f32>(1024)?);
    /// gpu.scope(&streams, |s| {
    ///     let (x, y) = (s.device(&mut x), s.device(&mut y));
    ///     let graph = s.graph(|g| {
    ///         let launch = g.kernel(&saxpy, LaunchConfig::for_elements(1024, 256));
    ///         // SAFETY: saxpy reads x[0..n) and writes y[0..n), nothing else.
    ///         unsafe { launch.read(x).write(y).value(2f32).value(1024u64).launch() }
    ///     })?;
    ///     s.stream(0).replay(&graph) // y = 2x + y, once a replay
    /// })?;
    /// # Ok(()) }
    /// ```
    pub fn kernel<'q>(&'q self, kernel: &'q Kernel, config: LaunchConfig) -> LaunchBuilder<'q, 'scope> {
        LaunchBuilder::new((self, 0), kernel, config)
    }

    /// `access`, if it is of this scope and of a buffer of the scope's context.
    fn checked(&self, access: DevAccess, what: &str) -> crate::Result<DevAccess> {
        if access.scope != self.scope.id {
            return refused(what, Refusal::Foreign(Foreign::Scope));
        }
        if self.scope.is_foreign(access.buffer) {
            return refused(what, Refusal::Foreign(Foreign::Context));
        }
        Ok(access)
    }

    /// Makes the scope's context current for the capture that follows, once per capture: the closure may
    /// have left another current (another library's).
    fn current(&self) -> crate::Result<()> {
        self.scope.env.ctx.ensure_current()
    }

    fn captured(&self, accesses: Vec<DevAccess>, bytes: usize) {
        self.accesses.borrow_mut().extend(accesses);
        self.nodes.set(self.nodes.get() + 1);
        self.bytes.set(self.bytes.get() + bytes);
    }
}

impl<'scope> Enqueue<'scope> for GraphBuilder<'_, 'scope, '_> {
    fn scope_id(&self) -> u64 {
        self.scope.id
    }

    fn launch(&self, Checked { kernel, accesses, queue, .. }: Checked<'_>) -> crate::Result<()> {
        let name = &kernel.name;
        let refuse = |why| Error::from(LaunchRefused { kernel: name.to_string(), why });
        if !kernel.module.ctx.is(self.scope.env.ctx) {
            return Err(refuse(LaunchRefusal::Foreign(Foreign::Context)));
        }
        normalize(accesses, false, &mut Vec::new()).map_err(|why| refuse(LaunchRefusal::Overlap(why)))?;
        let accesses =
            accesses.iter().map(|a| self.checked(a.clone(), "graph launch")).collect::<crate::Result<Vec<_>>>()?;
        self.current()?;
        // Captured, not run: the launch becomes a node, which runs only through ScopeStream::replay.
        check(queue(self.stream.raw()), || format!("graph: capturing kernel {name}"))?;
        self.modules.borrow_mut().push(kernel.module.clone());
        self.captured(accesses, 0);
        Ok(())
    }
}

impl QueueSealed for &GraphBuilder<'_, '_, '_> {}

impl<'scope> Queue<'scope> for &GraphBuilder<'_, 'scope, '_> {
    fn kernel<'q>(&'q self, kernel: &'q Kernel, config: LaunchConfig) -> LaunchBuilder<'q, 'scope> {
        GraphBuilder::kernel(self, kernel, config)
    }
}

/// A stream capturing, ended (and what it captured destroyed) however the building ends, a panic
/// included.
struct Capture {
    stream: Stream,
    ended: bool,
}

impl Capture {
    fn begin(ctx: &Arc<Context>) -> crate::Result<Capture> {
        let stream = Stream::new(ctx, false)?;
        // SAFETY: a live stream of this context, and the driver's own mode.
        check(unsafe { ffi::cuStreamBeginCapture_v2(stream.raw(), ffi::CU_STREAM_CAPTURE_MODE_RELAXED) }, || {
            "starting a stream capture".into()
        })?;
        Ok(Capture { stream, ended: false })
    }

    /// Ends the capture: the graph captured, or why there is none.
    fn end(&mut self) -> crate::Result<ffi::CUgraph> {
        self.ended = true;
        let mut graph = std::ptr::null_mut();
        // SAFETY: the stream is capturing (begun above, ended once) and the out-pointer is valid.
        check(unsafe { ffi::cuStreamEndCapture(self.stream.raw(), &mut graph) }, || {
            "ending the stream capture".into()
        })?;
        Ok(graph)
    }
}

impl Drop for Capture {
    fn drop(&mut self) {
        if !self.ended {
            if let Ok(graph) = self.end() {
                // SAFETY: the graph the capture just returned, never instantiated, destroyed once.
                unsafe { ffi::cuGraphDestroy(graph) };
            }
        }
    }
}

impl<'scope, 'env> Scope<'scope, 'env> {
    /// Builds a CUDA graph from what `build` queues on the builder it is handed (stream capture, on a
    /// stream of the graph's own that nothing else knows of, in relaxed mode: `cudaStreamBeginCapture`,
    /// the copies and launches, then `cudaStreamEndCapture` and `cudaGraphInstantiate`). Nothing runs
    /// until [`ScopeStream::replay`]; work `build` queues on the scope itself runs as usual.
    ///
    /// ```no_run
    /// # fn main() -> cuda_scope::Result<()> {
    /// # let gpu = cuda_scope::Gpu::init()?;
    /// # let (streams, mut d) = (gpu.streams(1)?, gpu.alloc::<f32>(1024)?);
    /// # let (input, mut output) = (vec![1f32; 1024], vec![0f32; 1024]);
    /// gpu.scope(&streams, |s| -> cuda_scope::Result<()> {
    ///     let d = s.device(&mut d);
    ///     let graph = s.graph(|g| -> cuda_scope::Result<()> {
    ///         g.htod(&input, d)?;
    ///         g.dtoh(d, &mut output)?;
    ///         Ok(())
    ///     })?; // nothing has run yet
    ///     s.stream(0).replay(&graph)
    /// })?;
    /// # Ok(()) }
    /// ```
    pub fn graph<E: From<Error>>(
        &self,
        build: impl for<'s> FnOnce(&'s GraphBuilder<'s, 'scope, 'env>) -> Result<(), E>,
    ) -> Result<Graph<'scope>, E> {
        self.flush()?; // the copies held go out before a capture begins
        self.env.ctx.ensure_current()?;
        let ctx = self.streams[0].context().clone();
        let mut capture = Capture::begin(&ctx)?;
        let builder = GraphBuilder {
            scope: self,
            stream: &capture.stream,
            accesses: RefCell::new(Vec::new()),
            modules: RefCell::new(Vec::new()),
            nodes: Cell::new(0),
            bytes: Cell::new(0),
        };
        let built = build(&builder);
        let GraphBuilder { accesses, modules, nodes, bytes, .. } = builder;
        // `build` may have left another context current (another library's): ending and instantiating
        // need this one. Where that fails, so do they, and say so.
        let _ = self.env.ctx.ensure_current();
        let graph = capture.end();
        if let (Err(_), Ok(captured)) = (&built, &graph) {
            // SAFETY: the graph just captured, never instantiated, destroyed once.
            unsafe { ffi::cuGraphDestroy(*captured) };
        }
        built?;
        let graph = graph?;
        let mut raw = std::ptr::null_mut();
        // SAFETY: a graph just captured, and a valid out-pointer; no flags.
        let made =
            check(unsafe { ffi::cuGraphInstantiateWithFlags(&mut raw, graph, 0) }, || "instantiating a graph".into());
        // SAFETY: the graph captured above, destroyed once; the executable graph is independent of it.
        unsafe { ffi::cuGraphDestroy(graph) };
        made?;
        let exec = Rc::new(Exec { raw, ctx }); // destroyed on every way out from here
        let mut normalized = Vec::new();
        if let Err(why) = normalize(&accesses.into_inner(), true, &mut normalized) {
            return Ok(refused("graph", Refusal::Overlap(why))?);
        }
        let accesses = normalized;
        Ok(Graph {
            exec,
            scope: self.id,
            accesses,
            modules: modules.into_inner(),
            nodes: nodes.get(),
            bytes: bytes.get(),
            _scope: PhantomData,
        })
    }
}

impl<'scope> ScopeStream<'scope, '_> {
    /// `cudaGraphLaunch(graph, stream)`: runs every copy and launch of `graph`, in the order they were
    /// captured, as one operation on this stream, ordered against the other streams' work on the device
    /// ranges it touches. Refused for a graph of another scope.
    ///
    /// ```no_run
    /// # fn main() -> cuda_scope::Result<()> {
    /// # let gpu = cuda_scope::Gpu::init()?;
    /// # let (streams, mut d) = (gpu.streams(1)?, gpu.alloc::<f32>(1024)?);
    /// # let (input, mut output) = (vec![1f32; 1024], vec![0f32; 1024]);
    /// let streams = gpu.streams(2)?;
    /// gpu.scope(&streams, |s| {
    ///     let d = s.device(&mut d);
    ///     let graph = s.graph(|g| g.htod(&input, d))?;
    ///     s.stream(0).replay(&graph)?;
    ///     s.stream(1).dtoh(d, &mut output) // waits for the replay on stream 0: it writes d
    /// })?;
    /// # Ok(()) }
    /// ```
    pub fn replay(self, graph: &Graph<'scope>) -> crate::Result<()> {
        let scope = self.scope();
        if graph.scope != scope.id {
            return refused("replay", Refusal::Foreign(Foreign::Scope));
        }
        let info = OpInfo { op: &Op { kind: "graph", what: "graph launch" }, kernel: None, bytes: graph.bytes };
        // Held before anything is queued, so that no path out of `enqueue` can free it under its run.
        scope.hold(Box::new((graph.exec.clone(), graph.modules.clone())));
        scope.enqueue(self.index(), &graph.accesses, true, info, |s| {
            // SAFETY: a graph instantiated in this scope's context, whose every host buffer is borrowed
            // for the scope and whose device ranges this call orders; it and its modules stay alive until
            // the scope has synchronized (held above).
            unsafe { ffi::cuGraphLaunch(graph.exec.raw, s) }
        })
    }
}
