//! One error type for the lessons' `main`: printed as a single line, `what: why: detail`.

use std::fmt;

use cust::sys::{cuGetErrorName, CUresult};

/// What a lesson's `main` returns. Any error converts into it with `?`; printing it gives one line
/// (the whole chain of context joined by `: `), never a backtrace.
pub struct Error(anyhow::Error);

pub type Result<T, E = Error> = std::result::Result<T, E>;

impl<E: Into<anyhow::Error>> From<E> for Error {
    fn from(e: E) -> Self {
        Error(e.into())
    }
}

impl fmt::Debug for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{:#}", self.0)
    }
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{:#}", self.0)
    }
}

/// `bail!` for a lesson's `main`: returns a [`Error`] made from a format string.
#[macro_export]
macro_rules! bail {
    ($($arg:tt)*) => { return Err($crate::error::Error::from($crate::anyhow::anyhow!($($arg)*))) };
}

/// The driver's name for a result code (`CUDA_ERROR_OUT_OF_MEMORY`), or its number.
pub fn cuda_error_name(code: CUresult) -> String {
    let mut name = std::ptr::null();
    // SAFETY: cuGetErrorName writes a pointer to a static NUL-terminated string, or fails.
    let ok = unsafe { cuGetErrorName(code, &mut name) } == CUresult::CUDA_SUCCESS;
    if ok && !name.is_null() {
        // SAFETY: the driver returned a valid static C string.
        unsafe { std::ffi::CStr::from_ptr(name) }.to_string_lossy().into_owned()
    } else {
        format!("CUDA error {}", code as u32)
    }
}

/// Turns a raw driver result into an error that says what was being done.
pub fn check(code: CUresult, what: impl FnOnce() -> String) -> anyhow::Result<()> {
    if code == CUresult::CUDA_SUCCESS {
        Ok(())
    } else {
        Err(anyhow::anyhow!("{}: {}", what(), cuda_error_name(code)))
    }
}
