//! The driver calls `common` makes, declared here as `cuda.h` declares them, with plain integers for
//! results. Bindings generated from older headers (cust's, from CUDA 11.4) type every result as a Rust
//! enum; a CUDA 13 driver returns codes such an enum lacks (`CUDA_ERROR_CONTAINED`, 226, among them),
//! and receiving a value an enum does not declare is undefined behaviour. Declaring the few calls we
//! make also keeps the crate free of any binding's build script: it builds wherever Rust does.
//!
//! A private module: the crate's own types are the API; these declarations serve them.
//!
//! # Loaded at run time
//!
//! Nothing links against `libcuda`: the driver's library, `libcuda.so.1`, is opened with `dlopen` on
//! the first driver call (or [`load`]), and every entry point declared in `entry_points!` is looked
//! up then by its exact symbol (`cuMemAlloc_v2`), all at once, into a table of function pointers that
//! lives as long as the process. So a program starts on a machine without the driver, and says so in
//! one line ([`Gpu::init`](crate::Gpu::init), through [`load`]'s [`LoadError`]), rather than dying in
//! the dynamic loader; and a driver that lacks one of the entry points is reported at start-up, naming
//! it. Each entry point is an `unsafe fn` of the declared name and signature that calls through the
//! table (one acquire load and an indirect call); where the library could not be loaded it returns
//! [`ERROR_STUB_LIBRARY`], as NVIDIA's link-only stub does, which the crate takes as "no GPU".
//!
//! # Checked against CUDA 13's headers
//!
//! `cargo xtask check-ffi`, part of `cargo xtask test`, compiles every declaration here against CUDA
//! 13.0's `cuda.h` and `cudaTypedefs.h` with the C compiler and `-Werror`: a parameter, result, field or
//! value that differs from the driver's fails it, in a line that names the declaration. So that each is
//! checkable (`xtask/src/check_ffi.rs` has the details):
//! - Every entry point is declared in the one `entry_points! { extern "C" { ... } }`, as an item of an
//!   `extern "C"` block (`pub fn name(args) -> CuResult;`, docs and lints only), never in an `extern`
//!   block of its own: that would link it, and a program linked to `libcuda` does not start without
//!   the driver. The symbol looked up is the name (`#[link_name]` is refused).
//! - Every entry point names the `cudaTypedefs.h` typedef of the version it looks up in a line of its
//!   doc: `/// cudaTypedefs.h: PFN_cuMemAlloc_v3020`. Not cuda.h's prototype: cuda.h maps names to newer
//!   versions (`cuMemPrefetchAsync` and `cuEventElapsedTime` to their `_v2`), and declares some of the
//!   versions looked up here (`cuCtxCreate_v2`) only for the driver's own build. The line must agree
//!   with the rule for symbols: the header has a typedef for every version of a call, and the k-th,
//!   counted from the oldest, is the symbol `name` for k = 1 and `name_vk` after (`cuMemAlloc_v2` is
//!   `PFN_cuMemAlloc_v3020`, after `_v2000`). The check says which line a declaration without one needs.
//! - A type C names has its cuda.h name here (`CUdeviceptr`, `CUstreamCaptureMode`), as an alias; a C
//!   enum is a `c_int` alias of the enum's name (C passes an enum as an int of its size). An alias of
//!   another name names its C type in its doc, `/// cuda.h: CUresult`, and a function pointer type
//!   without its version in its name its typedef, `/// cudaTypedefs.h: PFN_name_vN`.
//! - A `#[repr(C)]` struct has the cuda.h struct's name and fields (`type_` for `type`).
//! - A `pub const` has cuda.h's name for the value, or that name without its `CU_`, `CUDA_` or
//!   `CUDA_ERROR_` (`ERROR_INVALID_VALUE`), or names it in a `/// cuda.h: NAME` line; its value is a
//!   literal (a pointer, for cuda.h's `(void*)` macros: `1 as *mut c_void`). An array's doc names each
//!   element with its value, in order (`ILLEGAL_ADDRESS (700)`); a CUDA version names the typedef of that
//!   version (`BATCH_VERSION`).
//! - A type or constant of a CUDA newer than the headers checked (`cuFuncGetParamCount`'s, CUDA 13.2)
//!   says so in a `/// newer than these headers: CUDA 13.2` line: the check names it as not checked.
//!   Entry points cannot: each is looked up when the driver is loaded, and must be in the headers.
//! - Attributes other than docs and lints (`cfg`), and any form the check cannot read, fail it.

#![allow(non_snake_case, non_camel_case_types, missing_docs)]

use std::ffi::{c_char, c_int, c_uint, c_void};

/// `CUdevice`: a device ordinal's handle.
pub type CUdevice = c_int;
/// `CUdeviceptr`: an address in the unified address space.
pub type CUdeviceptr = u64;
/// `CUdevice_attribute`: which attribute `cuDeviceGetAttribute` reads.
pub type CUdevice_attribute = c_int;
/// `CUstreamCaptureMode`: which calls a stream capture prohibits.
pub type CUstreamCaptureMode = c_int;
/// `CUdriverProcAddressQueryResult`: whether `cuGetProcAddress` found the symbol.
pub type CUdriverProcAddressQueryResult = c_int;
/// `CUmemLocationType`: what kind of place a `CUmemLocation` is.
pub type CUmemLocationType = c_int;
/// `CUmemcpySrcAccessOrder`: when a batch's copies may read their sources.
pub type CUmemcpySrcAccessOrder = c_int;
macro_rules! opaque {
    ($($handle:ident => $st:ident),*) => {$(
        #[repr(C)]
        pub struct $st {
            _private: [u8; 0],
        }
        pub type $handle = *mut $st;
    )*};
}
opaque!(CUcontext => CUctx_st, CUstream => CUstream_st, CUevent => CUevent_st, CUmodule => CUmod_st,
        CUfunction => CUfunc_st, CUgraph => CUgraph_st, CUgraphExec => CUgraphExec_st,
        CUlinkState => CUlinkState_st);
/// `CUjit_option`: an option of the JIT compiler and linker.
pub type CUjit_option = c_int;
/// `CUpointer_attribute`: which attribute `cuPointerGetAttribute` reads.
pub type CUpointer_attribute = c_int;
/// `CUmemorytype`: where memory is (host, device, array, unified).
pub type CUmemorytype = c_int;
/// `CUjitInputType`: what an input of the JIT linker is.
pub type CUjitInputType = c_int;

// The values of cuda.h's enums and flags that we pass in.
pub const CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT: CUdevice_attribute = 16;
pub const CU_DEVICE_ATTRIBUTE_CAN_MAP_HOST_MEMORY: CUdevice_attribute = 19;
pub const CU_DEVICE_ATTRIBUTE_MEMORY_CLOCK_RATE: CUdevice_attribute = 36;
pub const CU_DEVICE_ATTRIBUTE_GLOBAL_MEMORY_BUS_WIDTH: CUdevice_attribute = 37;
pub const CU_DEVICE_ATTRIBUTE_ASYNC_ENGINE_COUNT: CUdevice_attribute = 40;
pub const CU_DEVICE_ATTRIBUTE_UNIFIED_ADDRESSING: CUdevice_attribute = 41;
pub const CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR: CUdevice_attribute = 75;
pub const CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR: CUdevice_attribute = 76;
pub const CU_DEVICE_ATTRIBUTE_MANAGED_MEMORY: CUdevice_attribute = 83;
pub const CU_DEVICE_ATTRIBUTE_CONCURRENT_MANAGED_ACCESS: CUdevice_attribute = 89;
pub const CU_MEMHOSTALLOC_PORTABLE: c_uint = 1;
pub const CU_MEMHOSTALLOC_DEVICEMAP: c_uint = 2;
pub const CU_MEMHOSTALLOC_WRITECOMBINED: c_uint = 4;
pub const CU_STREAM_DEFAULT: c_uint = 0;
pub const CU_STREAM_NON_BLOCKING: c_uint = 1;
/// `CU_EVENT_DISABLE_TIMING`: an event that records no time, cheaper to record and wait on.
pub const CU_EVENT_DISABLE_TIMING: c_uint = 2;
/// `CU_LAUNCH_PARAM_END`, `CU_LAUNCH_PARAM_BUFFER_POINTER` and `CU_LAUNCH_PARAM_BUFFER_SIZE`: the
/// markers of `cuLaunchKernel`'s `extra` list, which passes the arguments as one buffer (cuda.h defines
/// them as the pointers 0, 1 and 2).
pub const CU_LAUNCH_PARAM_END: *mut c_void = std::ptr::null_mut();
pub const CU_LAUNCH_PARAM_BUFFER_POINTER: *mut c_void = std::ptr::without_provenance_mut(1);
pub const CU_LAUNCH_PARAM_BUFFER_SIZE: *mut c_void = std::ptr::without_provenance_mut(2);
/// `CUstreamCaptureStatus`: whether a stream is capturing.
pub type CUstreamCaptureStatus = c_int;
/// `CU_STREAM_CAPTURE_STATUS_NONE`: the stream is not capturing.
pub const CU_STREAM_CAPTURE_STATUS_NONE: CUstreamCaptureStatus = 0;
/// `CU_STREAM_CAPTURE_MODE_RELAXED`: a capture that prohibits no call on any thread (the stream it
/// captures is one nothing else knows of).
pub const CU_STREAM_CAPTURE_MODE_RELAXED: CUstreamCaptureMode = 2;
/// `CUmemcpySrcAccessOrder`: the source is read in stream order.
pub const CU_MEMCPY_SRC_ACCESS_ORDER_STREAM: CUmemcpySrcAccessOrder = 1;
/// The source may be read out of stream order, and all of it before the call returns.
pub const CU_MEMCPY_SRC_ACCESS_ORDER_DURING_API_CALL: CUmemcpySrcAccessOrder = 2;
/// The source may be read out of stream order, also after the call returns.
pub const CU_MEMCPY_SRC_ACCESS_ORDER_ANY: CUmemcpySrcAccessOrder = 3;
/// `CU_MEM_LOCATION_TYPE_DEVICE` and `_HOST`: where a batch's copies may expect their ends (hints).
pub const CU_MEM_LOCATION_TYPE_DEVICE: CUmemLocationType = 1;
pub const CU_MEM_LOCATION_TYPE_HOST: CUmemLocationType = 2;
/// `CU_JIT_ERROR_LOG_BUFFER`: a `char*` buffer for the JIT's error messages.
pub const CU_JIT_ERROR_LOG_BUFFER: CUjit_option = 5;
/// `CU_JIT_ERROR_LOG_BUFFER_SIZE_BYTES`: that buffer's size (an `unsigned int` passed in the pointer's
/// place; the driver writes back how much it filled).
pub const CU_JIT_ERROR_LOG_BUFFER_SIZE_BYTES: CUjit_option = 6;
/// `CU_JIT_INPUT_PTX`: PTX source, NUL-terminated.
pub const CU_JIT_INPUT_PTX: CUjitInputType = 1;
/// `CU_POINTER_ATTRIBUTE_CONTEXT`: the context the memory was allocated in (a `CUcontext`); null for
/// memory no context owns (stream-ordered pools, `cuMemMap`).
pub const CU_POINTER_ATTRIBUTE_CONTEXT: CUpointer_attribute = 1;
/// `CU_POINTER_ATTRIBUTE_IS_MANAGED`: whether the memory is managed (an `unsigned int`, 0 or 1).
pub const CU_POINTER_ATTRIBUTE_IS_MANAGED: CUpointer_attribute = 8;
/// `CU_POINTER_ATTRIBUTE_MEMORY_TYPE`: a `CUmemorytype` (an `unsigned int`).
pub const CU_POINTER_ATTRIBUTE_MEMORY_TYPE: CUpointer_attribute = 2;
/// `CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL`: the device the memory was allocated on (an `int`).
pub const CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL: CUpointer_attribute = 9;
/// `CU_MEMORYTYPE_DEVICE`: device memory.
pub const CU_MEMORYTYPE_DEVICE: CUmemorytype = 2;
/// `CU_GET_PROC_ADDRESS_DEFAULT` for [`cuGetProcAddress_v2`].
pub const CU_GET_PROC_ADDRESS_DEFAULT: u64 = 0;
/// `CU_GET_PROC_ADDRESS_SUCCESS`: the symbol was found for the version asked.
pub const CU_GET_PROC_ADDRESS_SUCCESS: CUdriverProcAddressQueryResult = 0;

/// `CUmemLocation`: where memory is (`type` 0, invalid, where no hint is given).
#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
pub struct CUmemLocation {
    pub type_: CUmemLocationType,
    pub id: c_int,
}

/// `CUmemcpyAttributes` (`_v1`, CUDA 12.8): how the copies of a batch that it applies to may access
/// their sources, location hints (for managed and system memory only), and flags.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
pub struct CUmemcpyAttributes {
    pub srcAccessOrder: CUmemcpySrcAccessOrder,
    pub srcLocHint: CUmemLocation,
    pub dstLocHint: CUmemLocation,
    pub flags: c_uint,
}

/// `PFN_cuMemcpyBatchAsync_v12080` (CUDA 13's `cudaTypedefs.h`): the batched copy as CUDA 12.8
/// introduced it (drivers from 570 on), with `failIdx`, the index of the copy that failed. CUDA 13's
/// `cuda.h` maps the name `cuMemcpyBatchAsync` to `cuMemcpyBatchAsync_v2`
/// (`PFN_cuMemcpyBatchAsync_v13000`, drivers from 580 on), which drops `failIdx`. Neither is linked: a
/// driver without the symbol would not even load a program that named it, so [`memcpy_batch`] asks
/// the driver at run time (`cuGetProcAddress` for CUDA 12.8, which returns this form on every driver
/// that has the call).
pub type PFN_cuMemcpyBatchAsync_v12080 = unsafe extern "C" fn(
    dsts: *mut CUdeviceptr,
    srcs: *mut CUdeviceptr,
    sizes: *mut usize,
    count: usize,
    attrs: *mut CUmemcpyAttributes,
    attrs_idxs: *mut usize,
    num_attrs: usize,
    fail_idx: *mut usize,
    stream: CUstream,
) -> CuResult;

/// `PFN_cuFuncGetParamCount_v13020` (CUDA 13.2's `cudaTypedefs.h`; CUDA 13.0's headers lack it): how many
/// parameters a kernel takes.
/// newer than these headers: CUDA 13.2 Not linked, like [`PFN_cuMemcpyBatchAsync_v12080`]: [`func_param_count`]
/// asks the driver at run time.
pub type PFN_cuFuncGetParamCount_v13020 = unsafe extern "C" fn(func: CUfunction, param_count: *mut usize) -> CuResult;

/// A driver result: 0 is success, anything else an error code (`CUDA_ERROR_*`). An integer, not cuda.h's
/// enum: a driver may return codes these declarations do not name.
/// cuda.h: CUresult
pub type CuResult = c_int;

pub const SUCCESS: CuResult = 0;
pub const ERROR_INVALID_VALUE: CuResult = 1;
pub const ERROR_STUB_LIBRARY: CuResult = 34;
pub const ERROR_NO_DEVICE: CuResult = 100;
pub const ERROR_INVALID_CONTEXT: CuResult = 201;
pub const ERROR_INVALID_HANDLE: CuResult = 400;
pub const ERROR_NOT_READY: CuResult = 600;
pub const ERROR_CONTEXT_IS_DESTROYED: CuResult = 709;
pub const ERROR_SYSTEM_DRIVER_MISMATCH: CuResult = 803;

/// `CU_DEVICE_CPU`: the host, as a destination of [`cuMemPrefetchAsync`].
pub const DEVICE_CPU: CUdevice = -1;
/// `CU_MEM_ATTACH_GLOBAL`: managed memory any stream of any device may access.
pub const MEM_ATTACH_GLOBAL: c_uint = 1;

/// Errors after which the driver documents the context as unusable: its work is stopped, and every
/// later call in it returns the same error. ECC_UNCORRECTABLE (214), CONTAINED (226, Hopper's error
/// containment), ILLEGAL_ADDRESS (700), LAUNCH_TIMEOUT (702), ASSERT (710), HARDWARE_STACK_ERROR (714),
/// ILLEGAL_INSTRUCTION (715), MISALIGNED_ADDRESS (716), INVALID_ADDRESS_SPACE (717), INVALID_PC (718),
/// LAUNCH_FAILED (719).
pub const CONTEXT_KILLED: [CuResult; 11] = [214, 226, 700, 702, 710, 714, 715, 716, 717, 718, 719];

/// The library of the NVIDIA driver, by its soname: what `dlopen` is asked for. Not `libcuda.so`, the name
/// only to link by, which a CUDA toolkit's `lib64/stubs` also gives a link-only stub.
const LIBRARY: &str = "libcuda.so.1";

/// Why the driver's library or one of its entry points could not be loaded: [`load`]'s error.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LoadError {
    /// The library asked for: `libcuda.so.1`.
    pub library: &'static str,
    /// The entry point it lacks, where the library was loaded; `None` where the library itself was not.
    pub symbol: Option<&'static str>,
    /// What the dynamic loader said (`dlerror`).
    pub message: String,
}

impl std::fmt::Display for LoadError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self.symbol {
            None => write!(f, "cannot load {} ({})", self.library, self.message),
            Some(symbol) => write!(
                f,
                "{} has no entry point {symbol}, which this program calls (a driver older than it needs?): {}",
                self.library, self.message
            ),
        }
    }
}

impl std::error::Error for LoadError {}

/// The address of `symbol` (NUL-terminated) in `library`, not null; or why there is none.
fn entry_point(
    library: &libloading::Library,
    name: &'static str,
    symbol: &'static str,
) -> Result<*mut c_void, LoadError> {
    let missing = |message: String| LoadError { library: name, symbol: Some(symbol.trim_end_matches('\0')), message };
    // SAFETY: the symbol is read as a plain address, which is what dlsym returns; nothing is called.
    match unsafe { library.get::<*mut c_void>(symbol.as_bytes()) } {
        Ok(address) if !address.is_null() => Ok(*address),
        Ok(_) => Err(missing("its address is null".into())),
        Err(e) => Err(missing(e.to_string())),
    }
}

/// Declares the driver's entry points from the items of an `extern "C"` block, without linking any:
/// `Driver`, a table of a function pointer for each, filled by [`Driver::open`] from the library,
/// every symbol looked up by the entry point's name; and for each an `unsafe fn` of the declared name,
/// docs and signature that calls through the table, loaded once ([`driver`]), or returns
/// [`ERROR_STUB_LIBRARY`] where the library could not be loaded. `xtask/src/decls.rs` reads the
/// invocation's body as the `extern "C"` block it is, and checks that this macro looks each entry
/// point up by its name and keeps its signature.
macro_rules! entry_points {
    (extern "C" {
        $(
            $(#[$attr:meta])*
            pub fn $name:ident($($arg:ident: $ty:ty),* $(,)?) -> CuResult;
        )*
    }) => {
        /// The driver's entry points, looked up in its library, which is held open as long as they are.
        struct Driver {
            $($name: unsafe extern "C" fn($($ty),*) -> CuResult,)*
            _library: libloading::Library,
        }

        impl Driver {
            /// Opens `name` and looks up every entry point in it: the first one missing is the error.
            fn open(name: &'static str) -> Result<Driver, LoadError> {
                // SAFETY: opening a library runs its initializers; the driver's library is made to be
                // opened so (it is how the CUDA runtime loads it), and any other is one a test names. What
                // the dynamic loader resolves `libcuda.so.1` to (LD_LIBRARY_PATH decides) is trusted to be
                // NVIDIA's driver or ABI-compatible with it: the same trust as linking against it.
                let library = unsafe { libloading::Library::new(name) }
                    .map_err(|e| LoadError { library: name, symbol: None, message: e.to_string() })?;
                Ok(Driver {
                    $($name: {
                        let address = entry_point(&library, name, concat!(stringify!($name), "\0"))?;
                        // SAFETY: the library's own symbol of this name, not null, whose C type is the
                        // declaration's (check-ffi holds it against cudaTypedefs.h's typedef); the
                        // table holds the library open as long as the pointer.
                        unsafe {
                            std::mem::transmute::<*mut c_void, unsafe extern "C" fn($($ty),*) -> CuResult>(address)
                        }
                    },)*
                    _library: library,
                })
            }
        }

        $(
            $(#[$attr])*
            ///
            /// # Safety
            ///
            /// As the driver documents the call: valid handles and pointers, of the sizes it reads and writes.
            #[inline]
            pub unsafe fn $name($($arg: $ty),*) -> CuResult {
                match driver() {
                    // SAFETY: the driver's entry point of this name and signature; the caller keeps the
                    // call's contract.
                    Ok(table) => unsafe { (table.$name)($($arg),*) },
                    Err(_) => ERROR_STUB_LIBRARY,
                }
            }
        )*
    };
}

/// The table of the driver's entry points, loaded on the first call (by whichever thread makes it),
/// or why it could not be: later calls cost one acquire load.
#[inline]
fn driver() -> Result<&'static Driver, &'static LoadError> {
    static DRIVER: std::sync::OnceLock<Result<Driver, LoadError>> = std::sync::OnceLock::new();
    DRIVER.get_or_init(|| Driver::open(LIBRARY)).as_ref()
}

/// Loads the NVIDIA driver's library (`libcuda.so.1`) and every entry point this crate calls, once: the
/// first call does it, and every later one returns its result. Where it fails, every entry point
/// returns [`ERROR_STUB_LIBRARY`].
pub fn load() -> Result<(), LoadError> {
    driver().map(drop).map_err(Clone::clone)
}

entry_points! {
    extern "C" {
        /// cudaTypedefs.h: PFN_cuInit_v2000
        pub fn cuInit(flags: c_uint) -> CuResult;
        /// cudaTypedefs.h: PFN_cuGetErrorName_v6000
        pub fn cuGetErrorName(error: CuResult, name: *mut *const c_char) -> CuResult;
        /// cudaTypedefs.h: PFN_cuDriverGetVersion_v2020
        pub fn cuDriverGetVersion(version: *mut c_int) -> CuResult;
        /// CUDA 12.0's entry point (with `symbolStatus`), the one CUDA 13's `cuda.h` names `cuGetProcAddress`.
        /// cudaTypedefs.h: PFN_cuGetProcAddress_v12000
        pub fn cuGetProcAddress_v2(
            symbol: *const c_char,
            pfn: *mut *mut c_void,
            cuda_version: c_int,
            flags: u64,
            symbol_status: *mut CUdriverProcAddressQueryResult,
        ) -> CuResult;
        /// cudaTypedefs.h: PFN_cuDeviceGetCount_v2000
        pub fn cuDeviceGetCount(count: *mut c_int) -> CuResult;
        /// cudaTypedefs.h: PFN_cuDeviceGet_v2000
        pub fn cuDeviceGet(device: *mut CUdevice, ordinal: c_int) -> CuResult;
        /// cudaTypedefs.h: PFN_cuDeviceGetName_v2000
        pub fn cuDeviceGetName(name: *mut c_char, len: c_int, device: CUdevice) -> CuResult;
        /// cudaTypedefs.h: PFN_cuDeviceGetAttribute_v2000
        pub fn cuDeviceGetAttribute(value: *mut c_int, attribute: CUdevice_attribute, device: CUdevice) -> CuResult;
        /// cudaTypedefs.h: PFN_cuDeviceTotalMem_v3020
        pub fn cuDeviceTotalMem_v2(bytes: *mut usize, device: CUdevice) -> CuResult;
        /// cudaTypedefs.h: PFN_cuDeviceGetPCIBusId_v4010
        pub fn cuDeviceGetPCIBusId(id: *mut c_char, len: c_int, device: CUdevice) -> CuResult;
        /// cudaTypedefs.h: PFN_cuDevicePrimaryCtxRetain_v7000
        pub fn cuDevicePrimaryCtxRetain(ctx: *mut CUcontext, device: CUdevice) -> CuResult;
        /// cudaTypedefs.h: PFN_cuDevicePrimaryCtxRelease_v11000
        pub fn cuDevicePrimaryCtxRelease_v2(device: CUdevice) -> CuResult;
        /// cudaTypedefs.h: PFN_cuCtxCreate_v3020
        pub fn cuCtxCreate_v2(ctx: *mut CUcontext, flags: c_uint, device: CUdevice) -> CuResult;
        /// cudaTypedefs.h: PFN_cuCtxDestroy_v4000
        pub fn cuCtxDestroy_v2(ctx: CUcontext) -> CuResult;
        /// cudaTypedefs.h: PFN_cuCtxSetCurrent_v4000
        pub fn cuCtxSetCurrent(ctx: CUcontext) -> CuResult;
        /// cudaTypedefs.h: PFN_cuCtxGetCurrent_v4000
        pub fn cuCtxGetCurrent(ctx: *mut CUcontext) -> CuResult;
        /// cudaTypedefs.h: PFN_cuCtxPushCurrent_v4000
        pub fn cuCtxPushCurrent_v2(ctx: CUcontext) -> CuResult;
        /// cudaTypedefs.h: PFN_cuCtxPopCurrent_v4000
        pub fn cuCtxPopCurrent_v2(ctx: *mut CUcontext) -> CuResult;
        /// cudaTypedefs.h: PFN_cuCtxSynchronize_v2000
        pub fn cuCtxSynchronize() -> CuResult;
        /// cudaTypedefs.h: PFN_cuMemGetInfo_v3020
        pub fn cuMemGetInfo_v2(free: *mut usize, total: *mut usize) -> CuResult;
        /// cudaTypedefs.h: PFN_cuMemAlloc_v3020
        pub fn cuMemAlloc_v2(ptr: *mut CUdeviceptr, bytes: usize) -> CuResult;
        /// cudaTypedefs.h: PFN_cuMemFree_v3020
        pub fn cuMemFree_v2(ptr: CUdeviceptr) -> CuResult;
        /// cudaTypedefs.h: PFN_cuMemAllocManaged_v6000
        pub fn cuMemAllocManaged(ptr: *mut CUdeviceptr, bytes: usize, flags: c_uint) -> CuResult;
        /// The CUDA 8 entry point, which the 580 driver still exports: CUDA 13's `cuda.h` maps the name to
        /// `cuMemPrefetchAsync_v2`, which takes a `CUmemLocation` and flags instead of a device. `device` is a
        /// GPU's handle, or [`DEVICE_CPU`].
        /// cudaTypedefs.h: PFN_cuMemPrefetchAsync_v8000
        pub fn cuMemPrefetchAsync(ptr: CUdeviceptr, bytes: usize, device: CUdevice, stream: CUstream) -> CuResult;
        /// cudaTypedefs.h: PFN_cuMemsetD8_v3020
        pub fn cuMemsetD8_v2(dst: CUdeviceptr, value: u8, n: usize) -> CuResult;
        /// cudaTypedefs.h: PFN_cuMemsetD32Async_v3020
        pub fn cuMemsetD32Async(dst: CUdeviceptr, value: c_uint, n: usize, stream: CUstream) -> CuResult;
        /// cudaTypedefs.h: PFN_cuMemHostAlloc_v2020
        pub fn cuMemHostAlloc(ptr: *mut *mut c_void, bytes: usize, flags: c_uint) -> CuResult;
        /// cudaTypedefs.h: PFN_cuMemFreeHost_v2000
        pub fn cuMemFreeHost(ptr: *mut c_void) -> CuResult;
        /// cudaTypedefs.h: PFN_cuMemHostGetDevicePointer_v3020
        pub fn cuMemHostGetDevicePointer_v2(device: *mut CUdeviceptr, host: *mut c_void, flags: c_uint) -> CuResult;
        /// cudaTypedefs.h: PFN_cuMemHostRegister_v6050
        pub fn cuMemHostRegister_v2(ptr: *mut c_void, bytes: usize, flags: c_uint) -> CuResult;
        /// cudaTypedefs.h: PFN_cuMemHostUnregister_v4000
        pub fn cuMemHostUnregister(ptr: *mut c_void) -> CuResult;
        /// cudaTypedefs.h: PFN_cuMemcpyHtoD_v3020
        pub fn cuMemcpyHtoD_v2(dst: CUdeviceptr, src: *const c_void, bytes: usize) -> CuResult;
        /// cudaTypedefs.h: PFN_cuMemcpyHtoDAsync_v3020
        pub fn cuMemcpyHtoDAsync_v2(dst: CUdeviceptr, src: *const c_void, bytes: usize, stream: CUstream) -> CuResult;
        /// cudaTypedefs.h: PFN_cuMemcpyDtoHAsync_v3020
        pub fn cuMemcpyDtoHAsync_v2(dst: *mut c_void, src: CUdeviceptr, bytes: usize, stream: CUstream) -> CuResult;
        /// cudaTypedefs.h: PFN_cuMemcpyDtoDAsync_v3020
        pub fn cuMemcpyDtoDAsync_v2(dst: CUdeviceptr, src: CUdeviceptr, bytes: usize, stream: CUstream) -> CuResult;
        /// cudaTypedefs.h: PFN_cuStreamCreate_v2000
        pub fn cuStreamCreate(stream: *mut CUstream, flags: c_uint) -> CuResult;
        /// cudaTypedefs.h: PFN_cuStreamDestroy_v4000
        pub fn cuStreamDestroy_v2(stream: CUstream) -> CuResult;
        /// cudaTypedefs.h: PFN_cuStreamSynchronize_v2000
        pub fn cuStreamSynchronize(stream: CUstream) -> CuResult;
        /// cudaTypedefs.h: PFN_cuStreamQuery_v2000
        pub fn cuStreamQuery(stream: CUstream) -> CuResult;
        /// cudaTypedefs.h: PFN_cuStreamGetFlags_v5050
        pub fn cuStreamGetFlags(stream: CUstream, flags: *mut c_uint) -> CuResult;
        /// cudaTypedefs.h: PFN_cuStreamWaitEvent_v3020
        pub fn cuStreamWaitEvent(stream: CUstream, event: CUevent, flags: c_uint) -> CuResult;
        /// CUDA 10.1's entry point, which CUDA 13's `cuda.h` names `cuStreamBeginCapture`.
        /// cudaTypedefs.h: PFN_cuStreamBeginCapture_v10010
        pub fn cuStreamBeginCapture_v2(stream: CUstream, mode: CUstreamCaptureMode) -> CuResult;
        /// cudaTypedefs.h: PFN_cuStreamEndCapture_v10000
        pub fn cuStreamEndCapture(stream: CUstream, graph: *mut CUgraph) -> CuResult;
        /// What CUDA 13's `cuda.h` names `cuGraphInstantiate`.
        /// cudaTypedefs.h: PFN_cuGraphInstantiateWithFlags_v11040
        pub fn cuGraphInstantiateWithFlags(exec: *mut CUgraphExec, graph: CUgraph, flags: u64) -> CuResult;
        /// cudaTypedefs.h: PFN_cuGraphLaunch_v10000
        pub fn cuGraphLaunch(exec: CUgraphExec, stream: CUstream) -> CuResult;
        /// cudaTypedefs.h: PFN_cuGraphExecDestroy_v10000
        pub fn cuGraphExecDestroy(exec: CUgraphExec) -> CuResult;
        /// cudaTypedefs.h: PFN_cuGraphDestroy_v10000
        pub fn cuGraphDestroy(graph: CUgraph) -> CuResult;
        /// cudaTypedefs.h: PFN_cuEventCreate_v2000
        pub fn cuEventCreate(event: *mut CUevent, flags: c_uint) -> CuResult;
        /// cudaTypedefs.h: PFN_cuEventDestroy_v4000
        pub fn cuEventDestroy_v2(event: CUevent) -> CuResult;
        /// cudaTypedefs.h: PFN_cuEventRecord_v2000
        pub fn cuEventRecord(event: CUevent, stream: CUstream) -> CuResult;
        /// cudaTypedefs.h: PFN_cuEventSynchronize_v2000
        pub fn cuEventSynchronize(event: CUevent) -> CuResult;
        /// cudaTypedefs.h: PFN_cuEventElapsedTime_v2000
        pub fn cuEventElapsedTime(ms: *mut f32, start: CUevent, end: CUevent) -> CuResult;
        /// cudaTypedefs.h: PFN_cuModuleLoadDataEx_v2010
        pub fn cuModuleLoadDataEx(
            module: *mut CUmodule,
            image: *const c_void,
            num_options: c_uint,
            options: *mut CUjit_option,
            option_values: *mut *mut c_void,
        ) -> CuResult;
        /// CUDA 6.5's entry point, which CUDA 13's `cuda.h` names `cuLinkCreate`.
        /// cudaTypedefs.h: PFN_cuLinkCreate_v6050
        pub fn cuLinkCreate_v2(
            num_options: c_uint,
            options: *mut CUjit_option,
            option_values: *mut *mut c_void,
            state: *mut CUlinkState,
        ) -> CuResult;
        /// CUDA 6.5's entry point, which CUDA 13's `cuda.h` names `cuLinkAddData`.
        /// cudaTypedefs.h: PFN_cuLinkAddData_v6050
        #[allow(clippy::too_many_arguments)]
        pub fn cuLinkAddData_v2(
            state: CUlinkState,
            input_type: CUjitInputType,
            data: *mut c_void,
            size: usize,
            name: *const c_char,
            num_options: c_uint,
            options: *mut CUjit_option,
            option_values: *mut *mut c_void,
        ) -> CuResult;
        /// cudaTypedefs.h: PFN_cuLinkComplete_v5050
        pub fn cuLinkComplete(state: CUlinkState, cubin: *mut *mut c_void, size: *mut usize) -> CuResult;
        /// cudaTypedefs.h: PFN_cuLinkDestroy_v5050
        pub fn cuLinkDestroy(state: CUlinkState) -> CuResult;
        /// cudaTypedefs.h: PFN_cuModuleUnload_v2000
        pub fn cuModuleUnload(module: CUmodule) -> CuResult;
        /// cudaTypedefs.h: PFN_cuModuleGetFunction_v2000
        pub fn cuModuleGetFunction(function: *mut CUfunction, module: CUmodule, name: *const c_char) -> CuResult;
        /// CUDA 12.4 and later: the offset and size of a kernel's parameter `index`, or
        /// CUDA_ERROR_INVALID_VALUE past the last.
        /// cudaTypedefs.h: PFN_cuFuncGetParamInfo_v12040
        pub fn cuFuncGetParamInfo(function: CUfunction, index: usize, offset: *mut usize, size: *mut usize) -> CuResult;
        #[allow(clippy::too_many_arguments)]
        /// cudaTypedefs.h: PFN_cuLaunchKernel_v4000
        pub fn cuLaunchKernel(
            function: CUfunction,
            grid_x: c_uint,
            grid_y: c_uint,
            grid_z: c_uint,
            block_x: c_uint,
            block_y: c_uint,
            block_z: c_uint,
            shared_bytes: c_uint,
            stream: CUstream,
            params: *mut *mut c_void,
            extra: *mut *mut c_void,
        ) -> CuResult;
        /// The context a stream belongs to (CUDA 9.2's entry point, which CUDA 13's `cuda.h` maps to
        /// `cuStreamGetCtx_v2`, with green contexts).
        /// cudaTypedefs.h: PFN_cuStreamGetCtx_v9020
        pub fn cuStreamGetCtx(stream: CUstream, ctx: *mut CUcontext) -> CuResult;
        /// Whether a stream is capturing (CUDA 10.0's entry point).
        /// cudaTypedefs.h: PFN_cuStreamIsCapturing_v10000
        pub fn cuStreamIsCapturing(stream: CUstream, status: *mut CUstreamCaptureStatus) -> CuResult;
        /// One attribute of the memory at `ptr`: `data` points to the attribute's type.
        /// cudaTypedefs.h: PFN_cuPointerGetAttribute_v4000
        pub fn cuPointerGetAttribute(data: *mut c_void, attribute: CUpointer_attribute, ptr: CUdeviceptr) -> CuResult;
        /// The base and size of the allocation that holds `ptr`.
        /// cudaTypedefs.h: PFN_cuMemGetAddressRange_v3020
        pub fn cuMemGetAddressRange_v2(base: *mut CUdeviceptr, size: *mut usize, ptr: CUdeviceptr) -> CuResult;
    }
}

/// The CUDA version the driver supports, as `cuDriverGetVersion` gives it: 13000 for 13.0.
pub fn driver_version() -> Result<c_int, String> {
    let mut v = 0;
    // SAFETY: one valid out-pointer.
    match unsafe { cuDriverGetVersion(&mut v) } {
        SUCCESS => Ok(v),
        code => Err(format!("reading the driver's version: {}", error_name(code))),
    }
}

/// The CUDA version `cuMemcpyBatchAsync` came with: 12.8.
/// cudaTypedefs.h: PFN_cuMemcpyBatchAsync_v12080
pub const BATCH_VERSION: c_int = 12080;

/// The driver's `cuMemcpyBatchAsync` (the CUDA 12.8 form: [`PFN_cuMemcpyBatchAsync_v12080`]), looked
/// up once; or why this driver has none, in one line.
pub fn memcpy_batch() -> Result<PFN_cuMemcpyBatchAsync_v12080, String> {
    static FOUND: std::sync::OnceLock<Result<PFN_cuMemcpyBatchAsync_v12080, String>> = std::sync::OnceLock::new();
    let found = FOUND.get_or_init(|| {
        let version = driver_version()?;
        if version < BATCH_VERSION {
            return Err(format!(
                "this driver supports CUDA {}.{}, and cuMemcpyBatchAsync needs CUDA 12.8 (driver 570) or newer",
                version / 1000,
                version % 1000 / 10
            ));
        }
        let (mut pfn, mut status) = (std::ptr::null_mut(), -1);
        // SAFETY: a NUL-terminated name, two valid out-pointers, the driver's own flag, and a version the
        // driver supports (checked above).
        let code = unsafe {
            cuGetProcAddress_v2(
                c"cuMemcpyBatchAsync".as_ptr(),
                &mut pfn,
                BATCH_VERSION,
                CU_GET_PROC_ADDRESS_DEFAULT,
                &mut status,
            )
        };
        match (code, status) {
            // SAFETY: the driver returned this address for `cuMemcpyBatchAsync` at CUDA 12.8, whose
            // signature is PFN_cuMemcpyBatchAsync_v12080; it is not null.
            (SUCCESS, CU_GET_PROC_ADDRESS_SUCCESS) if !pfn.is_null() => {
                Ok(unsafe { std::mem::transmute::<*mut c_void, PFN_cuMemcpyBatchAsync_v12080>(pfn) })
            }
            (SUCCESS, _) => Err(format!(
                "this driver (CUDA {}.{}) has no cuMemcpyBatchAsync for CUDA 12.8 (cuGetProcAddress status {status})",
                version / 1000,
                version % 1000 / 10
            )),
            (code, _) => Err(format!("looking up cuMemcpyBatchAsync: {}", error_name(code))),
        }
    });
    found.clone()
}

/// The CUDA version `cuFuncGetParamCount` came with: 13.2.
/// newer than these headers: CUDA 13.2
pub const PARAM_COUNT_VERSION: c_int = 13020;

/// The driver's `cuFuncGetParamCount` ([`PFN_cuFuncGetParamCount_v13020`]), looked up once; or why this
/// driver has none (older than CUDA 13.2), in one line. Never asked of a driver that is too old, so that
/// no failing call is made.
pub fn func_param_count() -> Result<PFN_cuFuncGetParamCount_v13020, String> {
    static FOUND: std::sync::OnceLock<Result<PFN_cuFuncGetParamCount_v13020, String>> = std::sync::OnceLock::new();
    let found = FOUND.get_or_init(|| {
        let version = driver_version()?;
        if version < PARAM_COUNT_VERSION {
            return Err(format!(
                "this driver supports CUDA {}.{}, and cuFuncGetParamCount needs CUDA 13.2",
                version / 1000,
                version % 1000 / 10
            ));
        }
        let (mut pfn, mut status) = (std::ptr::null_mut(), -1);
        // SAFETY: a NUL-terminated name, two valid out-pointers, the driver's own flag, and a version the
        // driver supports (checked above).
        let code = unsafe {
            cuGetProcAddress_v2(
                c"cuFuncGetParamCount".as_ptr(),
                &mut pfn,
                PARAM_COUNT_VERSION,
                CU_GET_PROC_ADDRESS_DEFAULT,
                &mut status,
            )
        };
        match (code, status) {
            // SAFETY: the driver returned this address for `cuFuncGetParamCount` at CUDA 13.2, whose
            // signature is PFN_cuFuncGetParamCount_v13020; it is not null.
            (SUCCESS, CU_GET_PROC_ADDRESS_SUCCESS) if !pfn.is_null() => {
                Ok(unsafe { std::mem::transmute::<*mut c_void, PFN_cuFuncGetParamCount_v13020>(pfn) })
            }
            (SUCCESS, _) => Err(format!("this driver has no cuFuncGetParamCount (cuGetProcAddress status {status})")),
            (code, _) => Err(format!("looking up cuFuncGetParamCount: {}", error_name(code))),
        }
    });
    found.clone()
}

/// The driver's name for a result code (`CUDA_ERROR_OUT_OF_MEMORY`), or its number.
pub fn error_name(code: CuResult) -> String {
    let mut name = std::ptr::null();
    // SAFETY: cuGetErrorName writes a pointer to a static NUL-terminated string, or fails (unknown code).
    let ok = unsafe { cuGetErrorName(code, &mut name) } == SUCCESS;
    if ok && !name.is_null() {
        // SAFETY: the driver returned a valid static C string.
        unsafe { std::ffi::CStr::from_ptr(name) }.to_string_lossy().into_owned()
    } else if code == ERROR_STUB_LIBRARY {
        // What every entry point returns where the driver could not be loaded, cuGetErrorName among them.
        "CUDA_ERROR_STUB_LIBRARY".into()
    } else {
        format!("CUDA error {code}")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `CUmemcpyAttributes` as cuda.h lays it out: an enum, two `CUmemLocation`s, flags; 24 bytes.
    #[test]
    fn the_batch_attributes_are_laid_out_as_in_cuda_h() {
        assert_eq!(std::mem::size_of::<CUmemLocation>(), 8);
        assert_eq!(std::mem::size_of::<CUmemcpyAttributes>(), 24);
        assert_eq!(std::mem::offset_of!(CUmemcpyAttributes, srcLocHint), 4);
        assert_eq!(std::mem::offset_of!(CUmemcpyAttributes, dstLocHint), 12);
        assert_eq!(std::mem::offset_of!(CUmemcpyAttributes, flags), 20);
    }

    #[test]
    fn a_library_that_cannot_be_loaded_is_an_error_naming_it() {
        let Err(e) = Driver::open("libdoes-not-exist.so.1") else { panic!("a library that does not exist loaded") };
        assert_eq!((e.library, e.symbol), ("libdoes-not-exist.so.1", None));
        assert!(e.message.contains("libdoes-not-exist.so.1"), "the loader's message: {e:?}");
        let said = e.to_string();
        assert!(said.starts_with("cannot load libdoes-not-exist.so.1 (") && !said.contains('\n'), "{said}");
    }

    /// The C library loads, and has none of the driver's entry points: the first looked up is named.
    #[test]
    fn a_library_without_an_entry_point_is_an_error_naming_the_symbol() {
        let Err(e) = Driver::open("libc.so.6") else { panic!("the C library has the driver's entry points") };
        assert_eq!((e.library, e.symbol), ("libc.so.6", Some("cuInit")));
        assert!(e.message.contains("cuInit"), "the loader's message: {e:?}");
        assert!(e.to_string().starts_with("libc.so.6 has no entry point cuInit, "), "{e}");
    }

    /// Where the driver cannot be loaded, every entry point returns CUDA_ERROR_STUB_LIBRARY, which
    /// [`error_name`] names without the driver.
    #[test]
    fn without_the_driver_every_entry_point_returns_stub_library() {
        let Err(e) = load() else { return }; // a machine with the driver
        assert_eq!(e.library, LIBRARY);
        let mut version = 0;
        // SAFETY: one valid out-pointer.
        assert_eq!(unsafe { cuDriverGetVersion(&mut version) }, ERROR_STUB_LIBRARY);
        assert_eq!(error_name(ERROR_STUB_LIBRARY), "CUDA_ERROR_STUB_LIBRARY");
    }
}
