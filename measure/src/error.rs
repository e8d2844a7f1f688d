//! One error type for the lessons' `main`: printed as a single line, `what: why: detail`, with an
//! exit code that tells the kinds of failure apart:
//!
//! | exit | kind (`--json`) | what failed |
//! | --- | --- | --- |
//! | 0 | | nothing |
//! | 1 | `other` | anything else: a result that failed its check, a file that could not be written |
//! | 2 | `bad_arguments` | the command line (checked before the GPU is touched) |
//! | 3 | `no_gpu` | no usable GPU: no NVIDIA driver, no device, or a driver that cannot start |
//! | 4 | `gpu_error` | the GPU or its driver reported an error (`CUDA_ERROR_*`) |
//!
//! A lesson ends `main` with [`finish`]: one line on stderr, or with `--json` on the command line one
//! JSON object on stdout, `{"error": "...", "kind": "..."}`.

use std::{fmt, process::ExitCode};

use serde::Serialize;

/// What a lesson's `main` returns. Any error converts into it with `?`; printing it gives one line
/// (the whole chain of context joined by `: `), never a backtrace.
pub struct LessonError(anyhow::Error);

pub type LessonResult<T, E = LessonError> = std::result::Result<T, E>;

impl<E: Into<anyhow::Error>> From<E> for LessonError {
    fn from(e: E) -> Self {
        LessonError(e.into())
    }
}

impl fmt::Debug for LessonError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{:#}", self.0)
    }
}

impl fmt::Display for LessonError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{:#}", self.0)
    }
}

impl LessonError {
    /// What kind of failure this is (see the module's table).
    pub fn kind(&self) -> ErrorKind {
        ErrorKind::of(&self.0)
    }
}

/// The kinds of failure a lesson tells apart, by exit code and by `kind` in a JSON error.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum ErrorKind {
    BadArguments,
    NoGpu,
    GpuError,
    Other,
}

impl ErrorKind {
    pub fn exit_code(self) -> u8 {
        match self {
            ErrorKind::Other => 1,
            ErrorKind::BadArguments => 2,
            ErrorKind::NoGpu => 3,
            ErrorKind::GpuError => 4,
        }
    }

    /// The name in a JSON error: `bad_arguments`, `no_gpu`, `gpu_error`, `other`.
    pub fn name(self) -> &'static str {
        match self {
            ErrorKind::BadArguments => "bad_arguments",
            ErrorKind::NoGpu => "no_gpu",
            ErrorKind::GpuError => "gpu_error",
            ErrorKind::Other => "other",
        }
    }

    /// The kind of an error, from its chain: a [`BadArgs`] anywhere is bad arguments; otherwise the first
    /// [`cuda_scope::Error`] in it decides by its variant (no driver or no GPU: no GPU; a size this machine
    /// cannot hold, or a `CUDA_DEVICE` that names none: bad arguments; the driver's error: a GPU error);
    /// anything else is other.
    pub fn of(e: &anyhow::Error) -> ErrorKind {
        if e.chain().any(|c| c.is::<BadArgs>()) {
            return ErrorKind::BadArguments;
        }
        let Some(core) = e.chain().find_map(|c| c.downcast_ref::<cuda_scope::Error>()) else { return ErrorKind::Other };
        match core {
            cuda_scope::Error::NoDriver(_) | cuda_scope::Error::NoGpu(_) => ErrorKind::NoGpu,
            cuda_scope::Error::TooLarge(_) | cuda_scope::Error::Input(cuda_scope::InputError::Variable { .. }) => {
                ErrorKind::BadArguments
            }
            cuda_scope::Error::Driver(_) => ErrorKind::GpuError,
            cuda_scope::Error::Module(m) if m.code.is_some() => ErrorKind::GpuError,
            _ => ErrorKind::Other,
        }
    }
}

/// An error in the command line: exit code 2, `"kind": "bad_arguments"`. Checks of flags that clap's
/// value parsers cannot make (one flag against another) return it.
#[derive(Debug)]
pub struct BadArgs(pub String);

impl fmt::Display for BadArgs {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for BadArgs {}

/// A [`BadArgs`] error, for `?` in code that returns `anyhow::Result`.
pub fn bad_args(message: impl Into<String>) -> anyhow::Error {
    anyhow::Error::new(BadArgs(message.into()))
}

/// The end of a lesson's `main`: `fn main() -> ExitCode { cuda_scope::error::finish(run()) }`. On an error it
/// prints one line on stderr (`error: ...`), or with `--json` on the command line one JSON object on
/// stdout, and returns the exit code of the error's kind.
pub fn finish(result: LessonResult<()>) -> ExitCode {
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            let kind = e.kind();
            report(&e.to_string(), kind, json_requested(std::env::args_os()));
            ExitCode::from(kind.exit_code())
        }
    }
}

/// Prints a failure the way [`finish`] does.
pub fn report(message: &str, kind: ErrorKind, json: bool) {
    if json {
        println!("{}", error_json(message, kind));
    } else {
        eprintln!("error: {message}");
    }
}

/// `{"error": "...", "kind": "..."}`.
pub fn error_json(message: &str, kind: ErrorKind) -> String {
    serde_json::json!({ "error": message, "kind": kind.name() }).to_string()
}

/// Whether a command line asks for JSON: `--json` among its flags (before any `--`).
pub fn json_requested(args: impl IntoIterator<Item = std::ffi::OsString>) -> bool {
    args.into_iter().skip(1).take_while(|a| a != "--").any(|a| a == "--json")
}

/// `bail!` for a lesson's `main`: returns a [`LessonError`] made from a format string.
#[macro_export]
macro_rules! bail {
    ($($arg:tt)*) => { return Err($crate::error::LessonError::from($crate::anyhow::anyhow!($($arg)*))) };
}

#[cfg(test)]
mod tests {
    use super::*;

    fn kind(e: anyhow::Error) -> ErrorKind {
        LessonError::from(e).kind()
    }

    #[test]
    fn kinds_from_the_error_chain() {
        use cuda_scope::{DriverError, Memory, NoDriver, NoGpu, TooLarge};
        assert_eq!(kind(bad_args("-n 5 is fewer elements than chunks")), ErrorKind::BadArguments);
        assert_eq!(kind(bad_args("x").context("planning")), ErrorKind::BadArguments);
        let core = |e: cuda_scope::Error| anyhow::Error::new(e);
        assert_eq!(kind(core(NoDriver::Stub.into()).context("starting the GPU")), ErrorKind::NoGpu);
        assert_eq!(kind(core(NoGpu { asked: 0, count: 0 }.into())), ErrorKind::NoGpu);
        assert_eq!(kind(core(NoDriver::Start { code: 999 }.into())), ErrorKind::NoGpu);
        let driver = |code| core(DriverError { code, doing: "launching process".into() }.into());
        assert_eq!(kind(driver(719).context("in a scope")), ErrorKind::GpuError, "CUDA_ERROR_LAUNCH_FAILED");
        assert_eq!(
            kind(anyhow::anyhow!("copying 4 MiB: CUDA_ERROR_ILLEGAL_ADDRESS")),
            ErrorKind::Other,
            "words decide nothing"
        );
        assert_eq!(kind(anyhow::anyhow!("no NVIDIA driver: words decide nothing")), ErrorKind::Other);
        assert_eq!(kind(anyhow::anyhow!("verification failed: 3 of 1024 elements differ")), ErrorKind::Other);
        let big = core(TooLarge::new(Memory::Device, 150 << 30, None, "needs 150 GiB of device memory").into());
        assert_eq!(kind(big.context("allocating")), ErrorKind::BadArguments, "a size the machine cannot hold");
    }

    #[test]
    fn exit_codes_tell_the_kinds_apart() {
        let kinds = [ErrorKind::Other, ErrorKind::BadArguments, ErrorKind::NoGpu, ErrorKind::GpuError];
        let codes: Vec<u8> = kinds.iter().map(|k| k.exit_code()).collect();
        assert_eq!(codes, [1, 2, 3, 4]);
    }

    #[test]
    fn finish_returns_the_exit_code_of_the_kind() {
        assert_eq!(finish(Ok(())), ExitCode::SUCCESS);
        assert_eq!(finish(Err(bad_args("--min 1 GiB is more than --max 4 KiB").into())), ExitCode::from(2));
        assert_eq!(finish(Err(cuda_scope::Error::from(cuda_scope::NoDriver::Stub).into())), ExitCode::from(3));
        let launch = cuda_scope::DriverError { code: 719, doing: "launching".into() };
        assert_eq!(finish(Err(cuda_scope::Error::from(launch).into())), ExitCode::from(4));
        assert_eq!(finish(Err(anyhow::anyhow!("3 elements differ").into())), ExitCode::from(1));
    }

    #[test]
    fn json_errors_are_one_object() {
        let line = error_json("no NVIDIA driver: \"quoted\"", ErrorKind::NoGpu);
        assert!(!line.contains('\n'));
        let v: serde_json::Value = serde_json::from_str(&line).unwrap();
        assert_eq!(v, serde_json::json!({ "error": "no NVIDIA driver: \"quoted\"", "kind": "no_gpu" }));
    }

    #[test]
    fn json_is_asked_for_by_the_flag_only() {
        let args = |a: &[&str]| a.iter().map(std::ffi::OsString::from).collect::<Vec<_>>();
        assert!(json_requested(args(&["overlap", "-n", "5", "--json"])));
        assert!(!json_requested(args(&["overlap", "--jsonx"])));
        assert!(!json_requested(args(&["overlap", "--", "--json"])));
        assert!(!json_requested(args(&["--json"])), "the program's own name is not a flag");
    }
}
