//! The driver calls `common` makes, declared here rather than taken from cust's bindings. Those were
//! generated from CUDA 11.4 headers and type every result as a Rust enum; a CUDA 13 driver returns
//! codes that enum lacks (`CUDA_ERROR_CONTAINED`, 226, among them), and receiving a value an enum does
//! not declare is undefined behaviour. Results here are plain integers. Handles, attribute enums
//! (which we only pass in) and flag constants still come from `cust::sys`.
//!
//! Not part of the API: public only for this crate's tests and benchmarks.

#![allow(non_snake_case)]

use std::ffi::{c_char, c_int, c_uint, c_void};

use cust::sys::{CUcontext, CUdevice, CUdevice_attribute, CUdeviceptr, CUevent, CUfunction, CUmodule, CUstream};

/// A driver result: 0 is success, anything else an error code (`CUDA_ERROR_*`).
pub type CuResult = c_int;

pub const SUCCESS: CuResult = 0;
pub const ERROR_STUB_LIBRARY: CuResult = 34;
pub const ERROR_NO_DEVICE: CuResult = 100;
pub const ERROR_INVALID_CONTEXT: CuResult = 201;
pub const ERROR_NOT_READY: CuResult = 600;
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

#[link(name = "cuda")]
extern "C" {
    pub fn cuInit(flags: c_uint) -> CuResult;
    pub fn cuGetErrorName(error: CuResult, name: *mut *const c_char) -> CuResult;
    pub fn cuDriverGetVersion(version: *mut c_int) -> CuResult;
    pub fn cuDeviceGetCount(count: *mut c_int) -> CuResult;
    pub fn cuDeviceGet(device: *mut CUdevice, ordinal: c_int) -> CuResult;
    pub fn cuDeviceGetName(name: *mut c_char, len: c_int, device: CUdevice) -> CuResult;
    pub fn cuDeviceGetAttribute(value: *mut c_int, attribute: CUdevice_attribute, device: CUdevice) -> CuResult;
    pub fn cuDeviceTotalMem_v2(bytes: *mut usize, device: CUdevice) -> CuResult;
    pub fn cuDeviceGetPCIBusId(id: *mut c_char, len: c_int, device: CUdevice) -> CuResult;
    pub fn cuDevicePrimaryCtxRetain(ctx: *mut CUcontext, device: CUdevice) -> CuResult;
    pub fn cuDevicePrimaryCtxRelease_v2(device: CUdevice) -> CuResult;
    pub fn cuCtxCreate_v2(ctx: *mut CUcontext, flags: c_uint, device: CUdevice) -> CuResult;
    pub fn cuCtxDestroy_v2(ctx: CUcontext) -> CuResult;
    pub fn cuCtxSetCurrent(ctx: CUcontext) -> CuResult;
    pub fn cuCtxGetCurrent(ctx: *mut CUcontext) -> CuResult;
    pub fn cuCtxPushCurrent_v2(ctx: CUcontext) -> CuResult;
    pub fn cuCtxPopCurrent_v2(ctx: *mut CUcontext) -> CuResult;
    pub fn cuCtxSynchronize() -> CuResult;
    pub fn cuMemGetInfo_v2(free: *mut usize, total: *mut usize) -> CuResult;
    pub fn cuMemAlloc_v2(ptr: *mut CUdeviceptr, bytes: usize) -> CuResult;
    pub fn cuMemFree_v2(ptr: CUdeviceptr) -> CuResult;
    pub fn cuMemAllocManaged(ptr: *mut CUdeviceptr, bytes: usize, flags: c_uint) -> CuResult;
    /// The CUDA 8 entry point (`PFN_cuMemPrefetchAsync_v8000` in CUDA 13's `cudaTypedefs.h`), which the
    /// 580 driver still exports: CUDA 13's `cuda.h` maps the name to `cuMemPrefetchAsync_v2`, which takes
    /// a `CUmemLocation` and flags instead of a device. This one is in the libcuda stub (cust_raw's
    /// bindings declare it); `_v2` is not. `device` is a GPU's handle, or [`DEVICE_CPU`].
    pub fn cuMemPrefetchAsync(ptr: CUdeviceptr, bytes: usize, device: CUdevice, stream: CUstream) -> CuResult;
    pub fn cuMemsetD8_v2(dst: CUdeviceptr, value: u8, n: usize) -> CuResult;
    pub fn cuMemsetD32Async(dst: CUdeviceptr, value: c_uint, n: usize, stream: CUstream) -> CuResult;
    pub fn cuMemHostAlloc(ptr: *mut *mut c_void, bytes: usize, flags: c_uint) -> CuResult;
    pub fn cuMemFreeHost(ptr: *mut c_void) -> CuResult;
    pub fn cuMemHostGetDevicePointer_v2(device: *mut CUdeviceptr, host: *mut c_void, flags: c_uint) -> CuResult;
    pub fn cuMemHostRegister_v2(ptr: *mut c_void, bytes: usize, flags: c_uint) -> CuResult;
    pub fn cuMemHostUnregister(ptr: *mut c_void) -> CuResult;
    pub fn cuMemcpyHtoD_v2(dst: CUdeviceptr, src: *const c_void, bytes: usize) -> CuResult;
    pub fn cuMemcpyHtoDAsync_v2(dst: CUdeviceptr, src: *const c_void, bytes: usize, stream: CUstream) -> CuResult;
    pub fn cuMemcpyDtoHAsync_v2(dst: *mut c_void, src: CUdeviceptr, bytes: usize, stream: CUstream) -> CuResult;
    pub fn cuMemcpyDtoDAsync_v2(dst: CUdeviceptr, src: CUdeviceptr, bytes: usize, stream: CUstream) -> CuResult;
    pub fn cuStreamCreate(stream: *mut CUstream, flags: c_uint) -> CuResult;
    pub fn cuStreamDestroy_v2(stream: CUstream) -> CuResult;
    pub fn cuStreamSynchronize(stream: CUstream) -> CuResult;
    pub fn cuStreamQuery(stream: CUstream) -> CuResult;
    pub fn cuStreamGetFlags(stream: CUstream, flags: *mut c_uint) -> CuResult;
    pub fn cuStreamWaitEvent(stream: CUstream, event: CUevent, flags: c_uint) -> CuResult;
    pub fn cuEventCreate(event: *mut CUevent, flags: c_uint) -> CuResult;
    pub fn cuEventDestroy_v2(event: CUevent) -> CuResult;
    pub fn cuEventRecord(event: CUevent, stream: CUstream) -> CuResult;
    pub fn cuEventSynchronize(event: CUevent) -> CuResult;
    pub fn cuEventElapsedTime(ms: *mut f32, start: CUevent, end: CUevent) -> CuResult;
    pub fn cuModuleLoadData(module: *mut CUmodule, image: *const c_void) -> CuResult;
    pub fn cuModuleUnload(module: CUmodule) -> CuResult;
    pub fn cuModuleGetFunction(function: *mut CUfunction, module: CUmodule, name: *const c_char) -> CuResult;
    #[allow(clippy::too_many_arguments)]
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
}

/// The driver's name for a result code (`CUDA_ERROR_OUT_OF_MEMORY`), or its number.
pub fn error_name(code: CuResult) -> String {
    let mut name = std::ptr::null();
    // SAFETY: cuGetErrorName writes a pointer to a static NUL-terminated string, or fails (unknown code).
    let ok = unsafe { cuGetErrorName(code, &mut name) } == SUCCESS;
    if ok && !name.is_null() {
        // SAFETY: the driver returned a valid static C string.
        unsafe { std::ffi::CStr::from_ptr(name) }.to_string_lossy().into_owned()
    } else {
        format!("CUDA error {code}")
    }
}

/// Turns a driver result into an error that says what was being done.
pub fn check(code: CuResult, what: impl FnOnce() -> String) -> anyhow::Result<()> {
    if code == SUCCESS {
        Ok(())
    } else {
        Err(anyhow::anyhow!("{}: {}", what(), error_name(code)))
    }
}
