//! The crate's one error type, [`Error`]: an enum whose variants carry what went wrong as data, for a
//! caller to match, and whose `Display` is one line for a person.
//!
//! ```no_run
//! use cuda_scope::{Error, Gpu};
//!
//! match Gpu::init() {
//!     Ok(gpu) => println!("{}", gpu.info.name),
//!     // No driver, or a driver that sees no GPU: a machine to skip, not a failure.
//!     Err(Error::NoDriver(_) | Error::NoGpu(_)) => println!("no GPU here"),
//!     Err(e) => eprintln!("error: {e}"),
//! }
//! ```
//!
//! The closures of [`crate::Gpu::scope`], [`crate::Gpu::timed`] and [`crate::Scope::graph`] return an
//! error type of yours, any `E: From<Error>`, so `?` works on this crate's calls and on your own inside
//! them; with `anyhow` that is `anyhow::Error`, with nothing else it is [`Error`] itself.

use std::{fmt, ops::Range, path::PathBuf};

/// What a fallible call of this crate returns.
///
/// ```
/// /// Free device memory, or why it cannot be read.
/// fn free_memory(gpu: &cuda_scope::Gpu) -> cuda_scope::Result<usize> {
///     let (free, _total) = gpu.memory()?;
///     Ok(free)
/// }
/// ```
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// The error enum, its `Display` (each variant's own, one line) and a `From` of each variant's type (and
/// `std::error::Error` for it), from one list of the variants.
macro_rules! error_enum {
    ($(#[$meta:meta])* $vis:vis enum Error { $($(#[$doc:meta])* $variant:ident($t:ident),)* }) => {
        $(#[$meta])*
        $vis enum Error {
            $($(#[$doc])* $variant($t),)*
        }

        impl fmt::Display for Error {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                match self {
                    $(Error::$variant(e) => e.fmt(f),)*
                }
            }
        }

        $(
            impl From<$t> for Error {
                fn from(e: $t) -> Error {
                    Error::$variant(e)
                }
            }

            impl std::error::Error for $t {}
        )*
    };
}

error_enum! {
    /// What went wrong. `Display` gives one line; each variant's data says the rest.
    ///
    /// ```no_run
    /// # fn main() -> cuda_scope::Result<()> {
    /// use cuda_scope::Error;
    /// match cuda_scope::Gpu::init().and_then(|gpu| gpu.alloc::<f32>(1 << 40).map(drop)) {
    ///     Err(Error::TooLarge(t)) => println!("{t} ({} bytes needed)", t.needed),
    ///     Err(e) if e.is_no_gpu() => println!("skipped: {e}"),
    ///     other => other?,
    /// }
    /// # Ok(()) }
    /// ```
    #[derive(Debug, Clone, PartialEq)]
    #[non_exhaustive]
    pub enum Error {
        /// No NVIDIA driver could be used: `libcuda.so.1` is missing or lacks an entry point, the CUDA
        /// toolkit's stub stands in its place, or the driver library and kernel module differ.
        NoDriver(NoDriver),
        /// The driver runs but there is no GPU to use: none at all, or not the one asked for.
        NoGpu(NoGpu),
        /// A driver call returned an error (`CUDA_ERROR_*`).
        Driver(DriverError),
        /// More memory than this machine can give: what was needed, and what there is.
        TooLarge(TooLarge),
        /// A kernel launch refused before anything was queued.
        LaunchRefused(LaunchRefused),
        /// An operation refused before anything was queued.
        Refused(Refused),
        /// Something this GPU, driver or host cannot do (managed memory, batched copies, more threads).
        Unsupported(Unsupported),
        /// PTX, or the cubin the driver made of it, that cannot be loaded or read.
        Module(ModuleError),
        /// A file that could not be read, or a setting ([`crate::Gpu::init`]'s `CUDA_DEVICE`) that cannot
        /// be used.
        Input(InputError),
    }
}

impl Error {
    /// A driver's error with `after` added to what was being done (`memcpy HtoD: queued, but ...`);
    /// any other error as it is.
    pub(crate) fn doing_also(self, after: impl std::fmt::Display) -> Error {
        match self {
            Error::Driver(mut e) => {
                e.doing = format!("{}: {after}", e.doing);
                Error::Driver(e)
            }
            other => other,
        }
    }

    /// Whether this says that the machine has no usable GPU ([`Error::NoDriver`], [`Error::NoGpu`]),
    /// rather than that a GPU or a call failed.
    ///
    /// ```
    /// let e = cuda_scope::Error::from(cuda_scope::NoGpu { asked: 0, count: 0 });
    /// assert!(e.is_no_gpu()); // a machine to skip, not a failure
    /// ```
    pub fn is_no_gpu(&self) -> bool {
        matches!(self, Error::NoDriver(_) | Error::NoGpu(_))
    }
}

impl std::error::Error for Error {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        None
    }
}

/// Why no NVIDIA driver could be used ([`Error::NoDriver`]).
///
/// ```
/// let e = cuda_scope::NoDriver::Stub;
/// assert!(e.to_string().starts_with("no NVIDIA driver"));
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum NoDriver {
    /// The library could not be opened: its name and the loader's message.
    Library {
        /// The file asked for: `libcuda.so.1`.
        library: String,
        /// What the dynamic loader said.
        loader: String,
    },
    /// The library lacks an entry point this crate calls (a driver too old): its symbol.
    EntryPoint {
        /// The library opened.
        library: String,
        /// The symbol not found: `cuMemAlloc_v2`.
        symbol: String,
    },
    /// The library opened is the CUDA toolkit's link-only stub (`CUDA_ERROR_STUB_LIBRARY`), not a driver.
    Stub,
    /// The driver library and the kernel module are of different versions
    /// (`CUDA_ERROR_SYSTEM_DRIVER_MISMATCH`).
    VersionMismatch,
    /// `cuInit` failed with another result: its code.
    Start {
        /// The driver's result code.
        code: i32,
    },
}

impl fmt::Display for NoDriver {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            NoDriver::Library { library, loader } => write!(
                f,
                "no NVIDIA driver: {library} could not be loaded ({loader}); run this on a machine with an NVIDIA \
                 GPU and its driver"
            ),
            NoDriver::EntryPoint { library, symbol } => {
                write!(f, "no NVIDIA driver: {library} has no {symbol}; this driver is too old, update it")
            }
            NoDriver::Stub => write!(
                f,
                "no NVIDIA driver: this program loaded the CUDA toolkit's link-only libcuda stub, not a driver; \
                 run it on a machine with an NVIDIA GPU and its driver"
            ),
            NoDriver::VersionMismatch => write!(
                f,
                "no NVIDIA driver: the NVIDIA kernel module and driver library versions differ; reboot or \
                 reinstall the driver"
            ),
            NoDriver::Start { code } => {
                write!(f, "no NVIDIA driver: the NVIDIA driver failed to start: {}", crate::ffi::error_name(*code))
            }
        }
    }
}

/// No GPU to use ([`Error::NoGpu`]): the device asked for, and how many this machine has (after
/// `CUDA_VISIBLE_DEVICES`).
///
/// ```
/// let e = cuda_scope::NoGpu { asked: 2, count: 1 };
/// assert_eq!(e.to_string(), "CUDA device 2 does not exist: this machine has 1 (set CUDA_DEVICE to 0..1)");
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct NoGpu {
    /// The device ordinal asked for.
    pub asked: u32,
    /// How many devices the driver sees.
    pub count: u32,
}

impl fmt::Display for NoGpu {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.count {
            0 => write!(
                f,
                "no CUDA GPU found: the NVIDIA driver is installed but sees no device (check nvidia-smi and \
                 CUDA_VISIBLE_DEVICES)"
            ),
            n => {
                write!(f, "CUDA device {} does not exist: this machine has {n} (set CUDA_DEVICE to 0..{n})", self.asked)
            }
        }
    }
}

/// An error the CUDA driver returned ([`Error::Driver`]): its result code, and the call, in words.
///
/// ```
/// let e = cuda_scope::DriverError { code: 2, doing: "allocating 1 GiB of device memory".into() };
/// assert_eq!(e.code, 2); // CUDA_ERROR_OUT_OF_MEMORY
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DriverError {
    /// The driver's result code (`CUresult`).
    pub code: i32,
    /// The call that returned it, in words: `memcpy HtoD on stream 1`.
    pub doing: String,
}

impl DriverError {
    /// The driver's name for the code: `CUDA_ERROR_OUT_OF_MEMORY` (or `CUDA error N` where the driver
    /// cannot be asked).
    ///
    /// ```
    /// let e = cuda_scope::DriverError { code: 2, doing: "allocating 1 GiB of device memory".into() };
    /// println!("{}", e.name()); // CUDA_ERROR_OUT_OF_MEMORY where there is a driver to ask, else `CUDA error 2`
    /// ```
    pub fn name(&self) -> String {
        crate::ffi::error_name(self.code)
    }
}

impl fmt::Display for DriverError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {}", self.doing, self.name())
    }
}

/// Which memory is short ([`TooLarge`]).
///
/// ```
/// use cuda_scope::{Error, Memory};
/// let e = cuda_scope::pageable::<u8>(usize::MAX / 2, |_| 0).unwrap_err();
/// assert!(matches!(e, Error::TooLarge(t) if t.memory == Memory::Host));
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum Memory {
    /// The GPU's memory.
    Device,
    /// Managed memory, which may come to the GPU.
    Managed,
    /// Pinned (page-locked) host memory.
    Pinned,
    /// Ordinary (pageable) host memory.
    Host,
    /// More bytes than an address can count (`len * size_of::<T>()` overflows).
    Addressable,
}

/// More memory than this machine can give ([`Error::TooLarge`]): which memory, how much was needed,
/// and how much there is where that is known.
///
/// ```
/// use cuda_scope::{Memory, TooLarge};
/// let e = TooLarge::new(Memory::Device, 1 << 40, Some(80 << 30), "needs 1 TiB of device memory, but the GPU has only 80 GiB free");
/// assert_eq!((e.memory, e.needed, e.available), (Memory::Device, 1 << 40, Some(80 << 30)));
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TooLarge {
    /// Which memory is short.
    pub memory: Memory,
    /// Bytes needed.
    pub needed: u64,
    /// Bytes there are to use, where known.
    pub available: Option<u64>,
    line: String,
}

impl TooLarge {
    /// A shortage of `memory`, said in `line` (without the advice to choose a smaller size, which
    /// `Display` adds).
    ///
    /// ```
    /// use cuda_scope::{Memory, TooLarge};
    /// let e = TooLarge::new(Memory::Pinned, 1 << 40, None, "the host refused to pin 1 TiB");
    /// assert_eq!(e.to_string(), "the host refused to pin 1 TiB: choose a smaller size");
    /// ```
    pub fn new(memory: Memory, needed: u64, available: Option<u64>, line: impl Into<String>) -> TooLarge {
        TooLarge { memory, needed, available, line: line.into() }
    }
}

impl fmt::Display for TooLarge {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: choose a smaller size", self.line)
    }
}

/// A launch refused before anything was queued ([`Error::LaunchRefused`]): the kernel, and why.
///
/// ```
/// use cuda_scope::{LaunchRefused, LaunchRefusal};
/// let e = LaunchRefused { kernel: "saxpy".into(), why: LaunchRefusal::Count { takes: 4, given: 3 } };
/// assert_eq!(e.to_string(), "kernel saxpy: takes 4 arguments and was given 3");
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LaunchRefused {
    /// The kernel's name.
    pub kernel: String,
    /// Why.
    pub why: LaunchRefusal,
}

/// Why a launch was refused ([`LaunchRefused`]).
///
/// ```
/// use cuda_scope::{LaunchRefusal, LaunchRefused};
/// let why = LaunchRefusal::Argument { index: 3, given: "u32".into(), takes: ".u64".into(), by_prototype: false };
/// let e = LaunchRefused { kernel: "saxpy".into(), why };
/// assert_eq!(e.to_string(), "kernel saxpy: argument 3 is u32, but the PTX declares it .u64");
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum LaunchRefusal {
    /// Another number of arguments than the kernel takes.
    Count {
        /// Parameters the kernel has.
        takes: usize,
        /// Arguments given.
        given: usize,
    },
    /// An argument that does not fit its parameter.
    Argument {
        /// The argument's index, from 0.
        index: usize,
        /// What was given: `u32`, `a device view`.
        given: String,
        /// The parameter as the kernel declares it: `.u64 .ptr`, `.f32`.
        takes: String,
        /// Whether the kernel's C prototype (rather than its PTX) is what says so.
        by_prototype: bool,
    },
    /// A grid or block no GPU runs.
    Config {
        /// Blocks in x, y, z.
        grid: (u32, u32, u32),
        /// Threads per block in x, y, z.
        block: (u32, u32, u32),
    },
    /// Views whose bytes overlap, one of them written.
    Overlap(Overlap),
    /// A view of another scope, or of a buffer of another GPU's context, or the kernel's module of
    /// another context.
    Foreign(Foreign),
    /// Refused by the launcher that built it ([`crate::LaunchBuilder::refuse`]), in its words.
    ByLauncher(String),
}

impl fmt::Display for LaunchRefused {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "kernel {}: ", self.kernel)?;
        match &self.why {
            LaunchRefusal::Count { takes, given } => write!(f, "takes {takes} arguments and was given {given}"),
            LaunchRefusal::Argument { index, given, takes, by_prototype: false } => {
                write!(f, "argument {index} is {given}, but the PTX declares it {takes}")
            }
            LaunchRefusal::Argument { index, given, takes, by_prototype: true } => {
                write!(f, "argument {index} is {given}, but the kernel's prototype declares it {takes}")
            }
            LaunchRefusal::Config { block, .. } if block.0 == 0 || block.1 == 0 || block.2 == 0 => {
                write!(f, "a block of no threads")
            }
            LaunchRefusal::Config { grid, .. } => {
                write!(f, "a grid of {grid:?} blocks is more than a GPU runs (x up to 2^31-1, y and z up to 65535)")
            }
            LaunchRefusal::Overlap(o) => o.fmt(f),
            LaunchRefusal::Foreign(why) => why.fmt(f),
            LaunchRefusal::ByLauncher(why) => f.write_str(why),
        }
    }
}

/// Two byte ranges of one buffer that one operation touches, one of them written.
///
/// ```
/// let o = cuda_scope::Overlap { buffer: 0, ranges: (0..8, 4..12), both_written: false };
/// assert!(o.to_string().starts_with("reads and writes overlapping bytes of one buffer (0..8 and 4..12)"));
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Overlap {
    /// The buffer's index among those lent to the scope.
    pub buffer: usize,
    /// The two ranges, in bytes from the buffer's start.
    pub ranges: (Range<usize>, Range<usize>),
    /// Whether both are written (else one is read and the other written).
    pub both_written: bool,
}

impl fmt::Display for Overlap {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let what = match self.both_written {
            true => "writes overlapping bytes of one buffer twice",
            false => "reads and writes overlapping bytes of one buffer",
        };
        let (x, y) = &self.ranges;
        write!(f, "{what} ({}..{} and {}..{}), so its result would race", x.start, x.end, y.start, y.end)
    }
}

/// What belongs elsewhere ([`LaunchRefusal::Foreign`], [`Refusal::Foreign`]).
///
/// ```
/// use cuda_scope::{Foreign, Refusal, Refused};
/// let e = Refused { op: "replay".into(), why: Refusal::Foreign(Foreign::Scope) };
/// assert_eq!(e.to_string(), "replay: a handle from another scope");
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum Foreign {
    /// A view, event or graph of another scope.
    Scope,
    /// A buffer, stream or module of another GPU's context.
    Context,
    /// Memory of another device than the GPU's.
    Device,
}

impl fmt::Display for Foreign {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Foreign::Scope => f.write_str("a handle from another scope"),
            Foreign::Context => f.write_str("a handle of another GPU's context"),
            Foreign::Device => f.write_str("memory of another device than the GPU's"),
        }
    }
}

/// An operation refused before anything was queued ([`Error::Refused`]): which, and why.
///
/// ```
/// use cuda_scope::{Refusal, Refused};
/// let e = Refused { op: "memcpy HtoD".into(), why: Refusal::Lengths { source: 10, destination: 8 } };
/// assert_eq!(e.to_string(), "memcpy HtoD: source has 10 elements, destination 8");
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Refused {
    /// The operation: `memcpy HtoD`, `htod_batch`, `replay`.
    pub op: String,
    /// Why.
    pub why: Refusal,
}

/// Why an operation was refused ([`Refused`]).
///
/// ```
/// use cuda_scope::{Error, Refusal, Refused};
/// fn lengths_differ(e: &Error) -> bool {
///     matches!(e, Error::Refused(Refused { why: Refusal::Lengths { .. }, .. }))
/// }
/// let e = Error::from(Refused { op: "memcpy HtoD".into(), why: Refusal::Lengths { source: 3, destination: 4 } });
/// assert!(lengths_differ(&e));
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum Refusal {
    /// A copy whose source and destination have different lengths, in elements.
    Lengths {
        /// The source's length.
        source: usize,
        /// The destination's length.
        destination: usize,
    },
    /// A batch whose lists of sources and destinations have different lengths.
    Counts {
        /// Sources.
        sources: usize,
        /// Destinations.
        destinations: usize,
    },
    /// Copy `index` of a batch refused.
    InBatch {
        /// The copy's index in the batch.
        index: usize,
        /// Why.
        why: Box<Refusal>,
    },
    /// Ranges of one operation that overlap, one written.
    Overlap(Overlap),
    /// A handle of another scope or context.
    Foreign(Foreign),
    /// Nothing to work on: a buffer, a scope's streams, a stager's threads.
    Empty,
    /// A range that runs past the end of what it is taken from.
    OutOfBounds {
        /// The range asked for.
        range: Range<usize>,
        /// The length it must fit in.
        len: usize,
    },
    /// A range list (a [`crate::PartedSlice`]'s ends) not in ascending order up to the length.
    Unordered {
        /// The length the last end must equal.
        len: usize,
    },
    /// Memory of another kind than the operation needs: only managed memory prefetches, only mapped
    /// pinned memory can be addressed by kernels.
    Kind {
        /// The kind needed: `managed`, `mapped`.
        needed: &'static str,
    },
    /// An event recorded for ordering only, asked for a time.
    Untimed,
    /// A null pointer or handle where another library's memory or stream was to be borrowed.
    Null,
    /// A default stream's handle (null, `CU_STREAM_LEGACY`, `CU_STREAM_PER_THREAD`), which names a
    /// stream of whichever context is current rather than a stream of its own.
    DefaultStream,
    /// An address not aligned for the element type.
    Misaligned {
        /// The alignment needed, in bytes.
        align: usize,
    },
    /// An address the driver knows no memory at (not allocated by CUDA, or freed).
    UnknownMemory,
    /// Memory that is not device memory (host memory, pinned, mapped or managed).
    NotDeviceMemory,
    /// A borrowed stream where only one of the crate's own will do ([`crate::probe::bare_round_trip`]).
    BorrowedStream,
    /// A borrowed stream its owner is capturing into a graph.
    Capturing,
    /// A timed scope in which nothing was measured.
    NothingTimed,
}

impl fmt::Display for Refused {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {}", self.op, self.why)
    }
}

impl fmt::Display for Refusal {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Refusal::Lengths { source, destination } => {
                write!(f, "source has {source} elements, destination {destination}")
            }
            Refusal::Counts { sources, destinations } => write!(f, "{sources} sources but {destinations} destinations"),
            Refusal::InBatch { index, why } => write!(f, "copy {index}: {why}"),
            Refusal::Overlap(o) => o.fmt(f),
            Refusal::Foreign(why) => why.fmt(f),
            Refusal::Empty => f.write_str("nothing to work on (no elements, streams or threads)"),
            Refusal::OutOfBounds { range, len } => {
                write!(f, "{}..{} is out of bounds of {len} elements", range.start, range.end)
            }
            Refusal::Unordered { len } => {
                write!(f, "ends must be in ascending order, the last at the length ({len})")
            }
            Refusal::Kind { needed: "managed" } => {
                f.write_str("only managed memory (Gpu::managed) prefetches, and this view is device or mapped memory")
            }
            Refusal::Kind { needed: "mapped" } => {
                f.write_str("this pinned buffer was not allocated with HostAlloc::MAPPED, so kernels cannot address it")
            }
            Refusal::Kind { needed } => write!(f, "this needs {needed} memory"),
            Refusal::Untimed => f.write_str("an event recorded for ordering only has no time to read"),
            Refusal::Null => f.write_str("a null pointer"),
            Refusal::DefaultStream => f.write_str(
                "a default stream's handle names the default stream of whichever context is current, not a \
                 stream of its own: borrow a stream made for the purpose (cudarc: new_stream())",
            ),
            Refusal::Misaligned { align } => {
                write!(f, "the pointer is not aligned for the element type ({align} bytes)")
            }
            Refusal::UnknownMemory => {
                f.write_str("the driver knows no memory at that address (not allocated by CUDA, or freed)")
            }
            Refusal::NotDeviceMemory => {
                f.write_str("not device memory (host memory, pinned, mapped or managed, is refused)")
            }
            Refusal::BorrowedStream => {
                f.write_str("a borrowed stream, which its owner may use meanwhile: this needs a stream of the crate's")
            }
            Refusal::Capturing => f.write_str("a borrowed stream its owner is capturing into a graph"),
            Refusal::NothingTimed => f.write_str("the timed scope measured nothing"),
        }
    }
}

/// Something this GPU, driver or host cannot do ([`Error::Unsupported`]): what, and why not.
///
/// ```
/// match cuda_scope::batch_support() {
///     Ok(()) => println!("batched copies: one call for many"),
///     Err(cuda_scope::Error::Unsupported(u)) => println!("{}: {}", u.what, u.why), // a driver too old
///     Err(e) => println!("{e}"),
/// }
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Unsupported {
    /// What was asked: `cuMemcpyBatchAsync`, `managed memory`.
    pub what: String,
    /// Why it cannot be had here.
    pub why: String,
}

impl fmt::Display for Unsupported {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {}", self.what, self.why)
    }
}

/// PTX, or the cubin the driver made of it, that cannot be loaded or read ([`Error::Module`]).
///
/// ```no_run
/// # fn main() -> cuda_scope::Result<()> {
/// # let gpu = cuda_scope::Gpu::init()?;
/// if let Err(cuda_scope::Error::Module(m)) = gpu.load_ptx(".version 8.0\n.target sm_90\nnot PTX") {
///     eprintln!("{} cannot be loaded: {}", m.what, m.why); // the driver's JIT log among it
/// }
/// # Ok(()) }
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ModuleError {
    /// The module (`the PTX`, a file's path) or kernel (`kernel saxpy`).
    pub what: String,
    /// What is wrong with it, or the driver's JIT log.
    pub why: String,
    /// The driver's result, where a driver call failed.
    pub code: Option<i32>,
}

impl fmt::Display for ModuleError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {}", self.what, self.why)?;
        if let Some(code) = self.code {
            write!(f, " ({})", crate::ffi::error_name(code))?;
        }
        Ok(())
    }
}

/// A file that could not be read, or a setting that cannot be used ([`Error::Input`]).
///
/// ```
/// use cuda_scope::{Error, InputError};
/// std::env::set_var("CUDA_DEVICE", "first");
/// let Err(e) = cuda_scope::Gpu::init() else { panic!("refused before the driver is asked anything") };
/// assert!(matches!(e, Error::Input(InputError::Variable { name: "CUDA_DEVICE", .. })));
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum InputError {
    /// A file that could not be read.
    File {
        /// Its path.
        path: PathBuf,
        /// The system's error, in words.
        why: String,
    },
    /// An environment variable whose value cannot be used.
    Variable {
        /// Its name: `CUDA_DEVICE`.
        name: &'static str,
        /// Its value.
        value: String,
    },
}

impl fmt::Display for InputError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            InputError::File { path, why } => write!(f, "reading {}: {why}", path.display()),
            InputError::Variable { name, value } => write!(f, "{name}={value} is not a device number"),
        }
    }
}

/// A driver result as a [`Result`]: [`Error::Driver`] saying what was being done, made (out of line)
/// only where the call failed.
#[inline]
pub(crate) fn check(code: crate::ffi::CuResult, what: impl FnOnce() -> String) -> Result<()> {
    if code == crate::ffi::SUCCESS {
        Ok(())
    } else {
        Err(driver_error(code, what))
    }
}

#[cold]
#[inline(never)]
pub(crate) fn driver_error(code: crate::ffi::CuResult, what: impl FnOnce() -> String) -> Error {
    Error::Driver(DriverError { code, doing: what() })
}

/// [`Error::Refused`] of operation `op`.
pub(crate) fn refusal(op: impl Into<String>, why: Refusal) -> Error {
    Error::Refused(Refused { op: op.into(), why })
}

/// `Err(Error::Refused)` of operation `op`.
pub(crate) fn refused<T>(op: impl Into<String>, why: Refusal) -> Result<T> {
    Err(refusal(op, why))
}

/// `Err(Error::TooLarge)`.
pub(crate) fn too_large<T>(memory: Memory, needed: usize, available: Option<usize>, line: String) -> Result<T> {
    Err(Error::TooLarge(TooLarge::new(memory, needed as u64, available.map(|a| a as u64), line)))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn is_send_sync_static<T: Send + Sync + 'static + std::error::Error>() {}

    #[test]
    fn the_error_is_send_sync_and_an_error() {
        is_send_sync_static::<Error>();
    }

    #[test]
    fn each_variant_says_one_line() {
        let errors = [
            Error::NoDriver(NoDriver::Library { library: "libcuda.so.1".into(), loader: "not found".into() }),
            Error::NoGpu(NoGpu { asked: 0, count: 0 }),
            Error::Driver(DriverError { code: 999_999, doing: "x".into() }),
            Error::TooLarge(TooLarge::new(Memory::Device, 10, Some(5), "needs 10 B")),
            Error::LaunchRefused(LaunchRefused {
                kernel: "k".into(),
                why: LaunchRefusal::Argument {
                    index: 1,
                    given: "u32".into(),
                    takes: ".f32".into(),
                    by_prototype: false,
                },
            }),
            Error::Refused(Refused { op: "memcpy HtoD".into(), why: Refusal::Foreign(Foreign::Scope) }),
        ];
        for e in &errors {
            let line = e.to_string();
            assert!(!line.contains('\n') && !line.is_empty(), "{line}");
        }
        assert!(errors[0].is_no_gpu() && errors[1].is_no_gpu() && !errors[2].is_no_gpu());
        assert_eq!(errors[4].to_string(), "kernel k: argument 1 is u32, but the PTX declares it .f32");
        assert_eq!(errors[3].to_string(), "needs 10 B: choose a smaller size");
    }
}
