//! The driver's entry points as another library calls them: looked up in `libcuda.so.1` by the tests
//! themselves, nothing of the crate's between, for the tests that play a library other than ours and
//! for the benchmark's bare calls (`benches/scope.rs` includes this file).

use std::{
    ffi::{c_char, c_int, c_uint, c_void, CStr},
    sync::OnceLock,
};

pub type CuResult = c_int;
pub type CUstream = *mut c_void;
pub type CUevent = *mut c_void;
pub type CUcontext = *mut c_void;
pub type CUdevice = c_int;
pub type CUdeviceptr = u64;
pub type CUgraph = *mut c_void;
/// `CU_STREAM_CAPTURE_MODE_RELAXED`.
pub const CU_STREAM_CAPTURE_MODE_RELAXED: c_int = 2;
pub const SUCCESS: CuResult = 0;
pub const CU_STREAM_NON_BLOCKING: c_uint = 1;
pub const CU_EVENT_DISABLE_TIMING: c_uint = 2;

macro_rules! entry_points {
    ($($name:ident($($arg:ident: $t:ty),*);)*) => {
        #[allow(non_snake_case)]
        struct Api {
            $($name: unsafe extern "C" fn($($t),*) -> CuResult,)*
            _lib: libloading::Library,
        }

        fn api() -> &'static Api {
            static API: OnceLock<Api> = OnceLock::new();
            // SAFETY: the NVIDIA driver's library, whose initializers are safe to run; each symbol has
            // the signature cuda.h declares for it (cudaTypedefs.h's PFN_ of its version); the library
            // stays loaded with the table.
            API.get_or_init(|| unsafe {
                let lib = libloading::Library::new("libcuda.so.1").expect("this needs the NVIDIA driver");
                Api {
                    $($name: *lib.get(concat!(stringify!($name), "\0").as_bytes()).expect(stringify!($name)),)*
                    _lib: lib,
                }
            })
        }

        $(
            /// The driver's entry point of this name.
            ///
            /// # Safety
            /// As the driver's documentation says for it.
            #[allow(non_snake_case)]
            pub unsafe fn $name($($arg: $t),*) -> CuResult {
                // SAFETY: as the caller promises.
                unsafe { (api().$name)($($arg),*) }
            }
        )*
    };
}

entry_points! {
    cuGetErrorName(error: CuResult, name: *mut *const c_char);
    cuDeviceGet(device: *mut CUdevice, ordinal: c_int);
    cuCtxCreate_v2(ctx: *mut CUcontext, flags: c_uint, device: CUdevice);
    cuCtxDestroy_v2(ctx: CUcontext);
    cuCtxPopCurrent_v2(ctx: *mut CUcontext);
    cuStreamCreate(stream: *mut CUstream, flags: c_uint);
    cuStreamSynchronize(stream: CUstream);
    cuStreamDestroy_v2(stream: CUstream);
    cuMemAlloc_v2(ptr: *mut CUdeviceptr, bytes: usize);
    cuMemFree_v2(ptr: CUdeviceptr);
    cuMemcpyHtoD_v2(dst: CUdeviceptr, src: *const c_void, bytes: usize);
    cuMemcpyHtoDAsync_v2(dst: CUdeviceptr, src: *const c_void, bytes: usize, stream: CUstream);
    cuMemcpyDtoHAsync_v2(dst: *mut c_void, src: CUdeviceptr, bytes: usize, stream: CUstream);
    cuStreamBeginCapture_v2(stream: CUstream, mode: c_int);
    cuCtxGetCurrent(ctx: *mut CUcontext);
    cuStreamWaitEvent(stream: CUstream, event: CUevent, flags: c_uint);
    cuMemsetD32Async(dst: CUdeviceptr, value: c_uint, n: usize, stream: CUstream);
    cuEventCreate(event: *mut CUevent, flags: c_uint);
    cuEventRecord(event: CUevent, stream: CUstream);
    cuEventDestroy_v2(event: CUevent);
    cuStreamEndCapture(stream: CUstream, graph: *mut CUgraph);
    cuGraphDestroy(graph: CUgraph);
}

/// The driver's name for a result code.
pub fn error_name(code: CuResult) -> String {
    let mut name = std::ptr::null();
    // SAFETY: a valid out-pointer; the driver points it at a static C string, or fails.
    match unsafe { cuGetErrorName(code, &mut name) } {
        SUCCESS if !name.is_null() => unsafe { CStr::from_ptr(name) }.to_string_lossy().into_owned(),
        _ => format!("CUDA error {code}"),
    }
}
