//! A user's program on `common` alone: a vector to the GPU and back through a stream scope, and a
//! kernel of its own (common's test kernel, `saxpy`), checked against the CPU.

use cuda_scope::{Gpu, LaunchConfig};

const PTX: &str = include_str!("../../common/tests/ptx/kernels.ptx");

fn main() -> anyhow::Result<()> {
    let gpu = Gpu::init()?;
    println!("{}", round_trip(&gpu, 1 << 20)?);
    Ok(())
}

/// `y = 2x + y` on the GPU, with x and y uploaded on two streams; says how many elements are wrong.
fn round_trip(gpu: &Gpu, n: usize) -> anyhow::Result<String> {
    let saxpy = gpu.load_ptx(PTX)?.kernel("saxpy")?;
    let (x, y) = (gpu.pinned_from_fn(n, |i| i as f32)?, gpu.pinned_from_fn(n, |_| 1.0f32)?);
    let mut out = vec![0f32; n];
    let (mut dx, mut dy) = (gpu.alloc::<f32>(n)?, gpu.alloc::<f32>(n)?);
    let streams = gpu.streams(2)?;
    gpu.scope(&streams, |s| {
        let (dx, dy) = (s.device(&mut dx), s.device(&mut dy));
        s.stream(0).htod(&x, dx)?;
        s.stream(1).htod(&y, dy)?;
        let cfg = LaunchConfig::for_elements(n, 256);
        // SAFETY: saxpy reads x[0..n) and writes y[0..n).
        unsafe { s.stream(1).kernel(&saxpy, cfg).read(dx).write(dy).value(2.0f32).value(n as u64).launch()? };
        s.stream(1).dtoh(dy, &mut out)
    })?;
    let wrong = out.iter().enumerate().filter(|(i, v)| **v != 2.0 * *i as f32 + 1.0).count();
    anyhow::ensure!(wrong == 0, "{wrong} of {n} elements differ from the CPU's");
    Ok(format!("{n} elements through {}: all match the CPU", gpu.info.name))
}

#[cfg(test)]
mod tests {
    /// Without a driver (CI), one clear line; with a GPU, the round trip.
    #[test]
    fn a_round_trip_or_one_clear_line() {
        match cuda_scope::Gpu::init() {
            Ok(gpu) => println!("{}", super::round_trip(&gpu, 4099).unwrap()),
            Err(e) => {
                let msg = format!("{e:#}");
                assert!(msg.starts_with("no NVIDIA driver") || msg.starts_with("no CUDA GPU"), "{msg}");
                assert!(!msg.contains('\n'));
            }
        }
    }

    #[test]
    fn what_common_offers_without_a_gpu() {
        assert_eq!(cuda_scope::Bytes(3 << 20).to_string(), "3 MiB");
        assert_eq!(cuda_scope::LaunchConfig::for_elements(1000, 256).grid, (4, 1, 1));
        let sig = cuda_scope::module::signature(super::PTX, "saxpy").unwrap().unwrap();
        assert_eq!(sig, [".u64", ".u64", ".f32", ".u64"]);
    }
}
