//! A user's program on the core crate alone: a vector to the GPU and back through a stream scope, and a
//! kernel of its own (the core's test kernel, `saxpy`), checked against the CPU. Its errors are its
//! own type; the core's convert into it with `?`, inside the scope too, and it tells them apart by
//! their variants, never by their words.

use std::{fmt, process::ExitCode};

use cuda_scope::{Error, Gpu, LaunchConfig};

const PTX: &str = include_str!("../../common/tests/ptx/kernels.ptx");

/// What can go wrong here: the GPU's side, or a result that differs from the CPU's.
#[derive(Debug)]
enum AppError {
    Gpu(Error),
    TooMany(usize),
    Wrong { wrong: usize, n: usize },
}

impl From<Error> for AppError {
    fn from(e: Error) -> Self {
        AppError::Gpu(e)
    }
}

impl fmt::Display for AppError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            AppError::Gpu(e) => e.fmt(f),
            AppError::TooMany(n) => write!(f, "{n} elements are more than this kernel counts"),
            AppError::Wrong { wrong, n } => write!(f, "{wrong} of {n} elements differ from the CPU's"),
        }
    }
}

fn main() -> ExitCode {
    let result = Gpu::init().map_err(AppError::from).and_then(|gpu| round_trip(&gpu, 1 << 20));
    match result {
        Ok(line) => {
            println!("{line}");
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("error: {e}");
            ExitCode::from(exit_code(&e))
        }
    }
}

/// The exit code of each kind of failure, from the variants alone.
fn exit_code(e: &AppError) -> u8 {
    match e {
        AppError::Gpu(Error::NoDriver(_) | Error::NoGpu(_)) => 3,
        AppError::Gpu(Error::TooLarge(_)) => 2,
        AppError::Gpu(Error::LaunchRefused(_)) => 5,
        AppError::Gpu(Error::Driver(_)) => 4,
        AppError::Gpu(_) | AppError::TooMany(_) | AppError::Wrong { .. } => 1,
    }
}

/// `y = 2x + y` on the GPU, with x and y uploaded on two streams.
fn round_trip(gpu: &Gpu, n: usize) -> Result<String, AppError> {
    let saxpy = gpu.load_ptx(PTX)?.kernel("saxpy")?;
    let (x, y) = (gpu.pinned_from_fn(n, |i| i as f32)?, gpu.pinned_from_fn(n, |_| 1.0f32)?);
    let mut out = vec![0f32; n];
    let (mut dx, mut dy) = (gpu.alloc::<f32>(n)?, gpu.alloc::<f32>(n)?);
    let streams = gpu.streams(2)?;
    gpu.scope(&streams, |s| -> Result<(), AppError> {
        let (dx, dy) = (s.device(&mut dx), s.device(&mut dy));
        s.stream(0).htod(&x, dx)?; // the core's error, into ours
        s.stream(1).htod(&y, dy)?;
        let count = u64::try_from(n).map_err(|_| AppError::TooMany(n))?; // our own
        let cfg = LaunchConfig::for_elements(n, 256);
        // SAFETY: saxpy reads x[0..n) and writes y[0..n).
        unsafe { s.stream(1).kernel(&saxpy, cfg).read(dx).write(dy).value(2.0f32).value(count).launch()? };
        s.stream(1).dtoh(dy, &mut out)?;
        Ok(())
    })?;
    let wrong = out.iter().enumerate().filter(|(i, v)| **v != 2.0 * *i as f32 + 1.0).count();
    if wrong > 0 {
        return Err(AppError::Wrong { wrong, n });
    }
    Ok(format!("{n} elements through {}: all match the CPU", gpu.info.name))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Without a driver (CI), the variant that says so and one clear line; with a GPU, the round trip,
    /// and each refusal as its variant.
    #[test]
    fn a_round_trip_or_no_gpu() {
        match Gpu::init() {
            Ok(gpu) => {
                println!("{}", round_trip(&gpu, 4099).unwrap());
                let too_big = gpu.alloc::<f32>(usize::MAX / 8).unwrap_err();
                assert!(matches!(too_big, Error::TooLarge(ref t) if t.memory == cuda_scope::Memory::Device), "{too_big}");
                assert_eq!(exit_code(&too_big.into()), 2);
                let saxpy = gpu.load_ptx(PTX).unwrap().kernel("saxpy").unwrap();
                let (streams, mut d) = (gpu.streams(1).unwrap(), gpu.alloc::<f32>(16).unwrap());
                let refused = gpu
                    .scope(&streams, |s| -> Result<(), AppError> {
                        let d = s.device(&mut d);
                        // SAFETY: refused before it is queued: three arguments of four.
                        unsafe { s.stream(0).kernel(&saxpy, LaunchConfig::linear(1, 16)).read(d).value(1.0f32).value(16u64).launch()? };
                        Ok(())
                    })
                    .unwrap_err();
                assert!(matches!(refused, AppError::Gpu(Error::LaunchRefused(_))), "{refused}");
            }
            Err(e) => {
                assert!(matches!(e, Error::NoDriver(_) | Error::NoGpu(_)), "{e:?}");
                assert_eq!(exit_code(&e.clone().into()), 3);
                let line = e.to_string();
                assert!(!line.contains('\n') && line.starts_with("no "), "{line}");
            }
        }
    }

    #[test]
    fn what_the_core_offers_without_a_gpu() {
        assert_eq!(cuda_scope::Bytes(3 << 20).to_string(), "3 MiB");
        assert_eq!(cuda_scope::LaunchConfig::for_elements(1000, 256).grid, (4, 1, 1));
        let sig = cuda_scope::module::signature(super::PTX, "saxpy").unwrap().unwrap();
        assert_eq!(sig, [".u64", ".u64", ".f32", ".u64"]);
    }
}
