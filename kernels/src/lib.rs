//! The lessons' kernels: `*.cu` beside this crate, compiled to PTX by its build script and embedded,
//! each with a typed launcher that goes through `common`'s launch builder, exactly as a kernel of your
//! own does, and its CPU twin in [`cpu`] for checking results.
//!
//! A launcher queues its kernel on a stream of a scope (or a graph being captured), declaring which
//! device ranges it reads and writes, so that the scope orders it against the copies on other streams
//! and holds its arguments against the kernel's parameters: `kernels.process(stream, data, iters)?`.
//! Adding a kernel: its `.cu`, one launcher below, and its CPU twin.

use cuda_scope::{Dev, DevRead, Gpu, Kernel, LaunchBuilder, LaunchConfig, Module, Queue};

const PIPELINE_PTX: &str = include_str!(concat!(env!("OUT_DIR"), "/pipeline.ptx"));
const VECTOR_ADD_PTX: &str = include_str!(concat!(env!("OUT_DIR"), "/vector_add.ptx"));
const ZERO_COPY_PTX: &str = include_str!(concat!(env!("OUT_DIR"), "/zero_copy.ptx"));
const SMALL_COPIES_PTX: &str = include_str!(concat!(env!("OUT_DIR"), "/small_copies.ptx"));

/// Threads per block of every launcher.
pub const BLOCK: u32 = 256;

/// The rounds of sin * cos that overlap_pattern.cu's kernel ([`Kernels::overlap_pattern_process`]) makes,
/// a constant in its loop.
pub const OVERLAP_PATTERN_ROUNDS: u32 = 500;

/// The lessons' kernels, loaded on one GPU.
pub struct Kernels {
    process: Kernel,
    process_sincos: Kernel,
    overlap_pattern_process: Kernel,
    heavy_sqrt: Kernel,
    vector_add: Kernel,
    scale: Kernel,
    accumulate: Kernel,
    chase: Kernel,
    copy_by_table: Kernel,
    /// A kernel of the user's, `NAME(float* data, unsigned long long n)` ([`Kernels::adopt_user`]).
    user: Option<Kernel>,
    sms: u32,
}

/// The one place this crate promises what `common` cannot check: queues the launch.
fn ours(launch: LaunchBuilder<'_, '_>) -> cuda_scope::Result<()> {
    // SAFETY: every kernel of this crate's .cu files touches only the views its launcher declares, in
    // the declared way: each indexes element i < n of views of n elements (grid-stride or one thread
    // per element, n passed from the views' lengths), chase bounds every link it reads by the chain's
    // length, and copy_by_table skips every table entry that does not fit inside both buffers (whose
    // lengths are passed from the views'), reading only the table's first 3 * count elements (count
    // passed from the table view's length, the column it reads first masked to 0 or 1). Their CPU twins and the GPU tests hold them to that.
    unsafe { launch.launch() }
}

impl Kernels {
    /// Loads the four modules on `gpu` (the driver compiles the PTX for it).
    pub fn load(gpu: &Gpu) -> anyhow::Result<Kernels> {
        use anyhow::Context as _;
        let load = |ptx, name| gpu.load_ptx(ptx).with_context(|| format!("loading {name}.ptx (PTX JIT)"));
        let (pipeline, vector_add, zero_copy): (Module, Module, Module) =
            (load(PIPELINE_PTX, "pipeline")?, load(VECTOR_ADD_PTX, "vector_add")?, load(ZERO_COPY_PTX, "zero_copy")?);
        let small_copies = load(SMALL_COPIES_PTX, "small_copies")?;
        Ok(Kernels {
            process: pipeline.kernel("process")?,
            process_sincos: pipeline.kernel("process_sincos")?,
            overlap_pattern_process: pipeline.kernel("overlap_pattern_process")?,
            heavy_sqrt: pipeline.kernel("heavy_sqrt")?,
            vector_add: vector_add.kernel("vector_add")?,
            scale: zero_copy.kernel("scale")?,
            accumulate: zero_copy.kernel("accumulate")?,
            chase: zero_copy.kernel("chase")?,
            copy_by_table: small_copies.kernel("copy_by_table")?,
            user: None,
            sms: gpu.info.sms,
        })
    }

    /// Grid-stride launches: one thread per element, at most 64 blocks per SM.
    fn grid(&self, n: usize) -> LaunchConfig {
        LaunchConfig::linear(n.div_ceil(BLOCK as usize).clamp(1, 64 * self.sms as usize) as u32, BLOCK)
    }

    /// `process<<<..>>>(data, n, iters)`: `iters` rounds of `x = x * A + B` in place ([`cpu::process`]).
    pub fn process<'s>(&self, on: impl Queue<'s>, data: Dev<'s, f32>, iters: u32) -> cuda_scope::Result<()> {
        ours(on.kernel(&self.process, self.grid(data.len())).write(data).value(data.len() as u64).value(iters))
    }

    /// `process_sincos<<<..>>>(data, n, iters)`: `iters` rounds of `sinf(x) * cosf(x) + 1` in place
    /// ([`cpu::process_sincos`]), one thread per element, `(n + 255) / 256` blocks of 256 as
    /// overlap_pattern.cu launches its kernel.
    pub fn process_sincos<'s>(&self, on: impl Queue<'s>, data: Dev<'s, f32>, iters: u32) -> cuda_scope::Result<()> {
        let config = LaunchConfig::for_elements(data.len(), BLOCK);
        ours(on.kernel(&self.process_sincos, config).write(data).value(data.len() as u64).value(iters))
    }

    /// overlap_pattern.cu's own kernel, `process<<<(n + 255) / 256, 256>>>(data, n)`:
    /// [`OVERLAP_PATTERN_ROUNDS`] rounds of `sinf(x) * cosf(x) + 1` in place, the count fixed in the kernel
    /// ([`cpu::overlap_pattern_process`]). Its count of elements is an `int`: a view of more is refused.
    pub fn overlap_pattern_process<'s>(&self, on: impl Queue<'s>, data: Dev<'s, f32>) -> cuda_scope::Result<()> {
        let config = LaunchConfig::for_elements(data.len(), BLOCK);
        let n = i32::try_from(data.len());
        let launch = on.kernel(&self.overlap_pattern_process, config).write(data).value(n.unwrap_or(i32::MAX));
        ours(match n {
            Ok(_) => launch,
            Err(_) => {
                launch.refuse(format!("overlap_pattern.cu's kernel takes an int count, and {} is more", data.len()))
            }
        })
    }

    /// The kernel of async_memcpy.cu: `iters` rounds of `x = sqrt(x * x + 1)`, in place.
    pub fn heavy_sqrt<'s>(&self, on: impl Queue<'s>, data: Dev<'s, f32>, iters: u32) -> cuda_scope::Result<()> {
        ours(on.kernel(&self.heavy_sqrt, self.grid(data.len())).write(data).value(data.len() as u64).value(iters))
    }

    /// `c = a + b`.
    pub fn vector_add<'s>(
        &self,
        on: impl Queue<'s>,
        a: Dev<'s, f32>,
        b: Dev<'s, f32>,
        c: Dev<'s, f32>,
    ) -> cuda_scope::Result<()> {
        let launch = on.kernel(&self.vector_add, self.grid(c.len())).read(a).read(b).write(c).value(c.len() as u64);
        ours(match a.len() == c.len() && b.len() == c.len() {
            true => launch,
            false => launch.refuse(format!("lengths differ: a {}, b {}, c {}", a.len(), b.len(), c.len())),
        })
    }

    /// `out = input * a` (zero-copy's kernel).
    pub fn scale<'s>(
        &self,
        on: impl Queue<'s>,
        input: Dev<'s, f32>,
        out: Dev<'s, f32>,
        a: f32,
    ) -> cuda_scope::Result<()> {
        let launch =
            on.kernel(&self.scale, self.grid(out.len())).read(input).write(out).value(out.len() as u64).value(a);
        ours(same_length(launch, input.len(), out.len()))
    }

    /// `out += input`: a second pass over the same input.
    pub fn accumulate<'s>(&self, on: impl Queue<'s>, input: Dev<'s, f32>, out: Dev<'s, f32>) -> cuda_scope::Result<()> {
        let launch = on.kernel(&self.accumulate, self.grid(out.len())).read(input).write(out).value(out.len() as u64);
        ours(same_length(launch, input.len(), out.len()))
    }

    /// `chase<<<1, 1>>>(next, n, start, accesses, out)`: one thread follows `accesses` links of the chain
    /// in `next` (device or mapped host memory; see [`cpu::chain`]) from link `start`, and writes where
    /// it ends to `out[0]` ([`cpu::chase`]). The kernel bounds every link it reads by the chain's length,
    /// so whatever `next` holds, it reads only `next`.
    pub fn chase<'s>(
        &self,
        on: impl Queue<'s>,
        next: Dev<'s, u32>,
        start: u32,
        accesses: u32,
        out: Dev<'s, u32>,
    ) -> cuda_scope::Result<()> {
        let len = u32::try_from(next.len());
        let launch = on.kernel(&self.chase, LaunchConfig::linear(1, 1)).read(next).value(len.unwrap_or(u32::MAX));
        let launch = launch.value(start).value(accesses).write(out);
        ours(match (next.len(), out.len()) {
            (0, _) | (_, 0) => launch.refuse("an empty chain or output"),
            (n, _) if len.is_err() => launch.refuse(format!("{n} links do not fit 32-bit indices")),
            _ => launch,
        })
    }

    /// `copy_by_table<<<..>>>(from, table, to)`: each buffer of `table` (`(offset in packed, offset in
    /// arena, bytes)`, three numbers a buffer) from its place in `from` to its place in `to`, all in one
    /// launch ([`cpu::copy_by_table`]): [`TableCopy::Scatter`] from the packed buffer into the arena,
    /// [`TableCopy::Gather`] from the arena back into the packed buffer. The packed side may be device
    /// memory or mapped host memory (zero-copy). `largest`, the largest buffer's bytes, only spreads the
    /// work: entries that do not fit in both buffers are skipped, whatever the table holds.
    pub fn copy_by_table<'s>(
        &self,
        on: impl Queue<'s>,
        way: TableCopy,
        from: DevRead<'s, u8>,
        table: DevRead<'s, u64>,
        to: Dev<'s, u8>,
        largest: usize,
    ) -> cuda_scope::Result<()> {
        let (config, count) = (entries_grid(table.len() / 3, largest), (table.len() / 3) as u32);
        let launch = on.kernel(&self.copy_by_table, config).read(from).value(from.len() as u64).read(table);
        let launch = launch.value(count).value(way as u32).write(to).value(to.len() as u64);
        ours(table_fits(launch, table.len()))
    }

    /// Takes a kernel of the user's, declared `extern "C" __global__ void NAME(float* data, unsigned
    /// long long n)`, for [`Kernels::user`]: launched in place over a view, one thread per element.
    ///
    /// # Safety
    /// The kernel is code nothing here can check: it must touch only `data[0..n)`. A kernel that writes
    /// elsewhere corrupts whatever memory the GPU can reach in this process (with unified addressing,
    /// pinned host memory; with HMM, any of it). The planner runs it in a child process of its own,
    /// which holds nothing else.
    pub unsafe fn adopt_user(&mut self, kernel: Kernel) {
        self.user = Some(kernel);
    }

    /// The user's kernel on `data`, in place; refused where none was adopted.
    pub fn user<'s>(&self, on: impl Queue<'s>, data: Dev<'s, f32>) -> cuda_scope::Result<()> {
        let config = LaunchConfig::for_elements(data.len(), BLOCK);
        match &self.user {
            // SAFETY: the caller of adopt_user promised the kernel touches only data[0..n).
            Some(k) => unsafe { on.kernel(k, config).write(data).value(data.len() as u64).launch() },
            None => Err(cuda_scope::LaunchRefused {
                kernel: "of yours".into(),
                why: cuda_scope::LaunchRefusal::ByLauncher("none was adopted (Kernels::adopt_user)".into()),
            }
            .into()),
        }
    }
}

/// Which way [`Kernels::copy_by_table`] reads its table of `(offset in packed, offset in arena, bytes)`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum TableCopy {
    /// From each entry's first offset (the packed buffer, or mapped host memory) to its second (the arena).
    Scatter = 0,
    /// Back: from each entry's second offset (the arena) to its first.
    Gather = 1,
}

/// The grid of [`Kernels::copy_by_table`]: a row of blocks per buffer (up to 65535 rows, striding
/// beyond), with as many blocks in the row as a buffer of `largest` bytes keeps busy at 16 KiB a block
/// (1 to 64).
fn entries_grid(count: usize, largest: usize) -> LaunchConfig {
    let across = largest.div_ceil(16 << 10).clamp(1, 64) as u32;
    LaunchConfig { grid: (across, count.clamp(1, 65535) as u32, 1), block: (BLOCK, 1, 1), shared_bytes: 0 }
}

/// A table of whole `(offset, offset, bytes)` triples, whose count fits the kernels' 32-bit count.
fn table_fits<'q, 's>(launch: LaunchBuilder<'q, 's>, len: usize) -> LaunchBuilder<'q, 's> {
    match (len % 3, u32::try_from(len / 3)) {
        (0, Ok(_)) => launch,
        (0, Err(_)) => launch.refuse(format!("{} buffers are more than a 32-bit count", len / 3)),
        _ => launch.refuse(format!("a table of {len} numbers is not whole (offset, offset, bytes) triples")),
    }
}

fn same_length<'q, 's>(launch: LaunchBuilder<'q, 's>, input: usize, out: usize) -> LaunchBuilder<'q, 's> {
    match input == out {
        true => launch,
        false => launch.refuse(format!("lengths differ: input {input}, out {out}")),
    }
}

/// The CPU twins of the kernels, operation for operation, so results can be compared bit for bit.
pub mod cpu {
    use super::TableCopy;

    pub const PROCESS_A: f32 = 1.0 - 1.0 / 16384.0;
    pub const PROCESS_B: f32 = 1.0 / 16384.0;

    pub fn process(mut x: f32, iters: u32) -> f32 {
        for _ in 0..iters {
            x = x * PROCESS_A + PROCESS_B;
        }
        x
    }

    pub fn process_sincos(mut x: f32, iters: u32) -> f32 {
        for _ in 0..iters {
            x = x.sin() * x.cos() + 1.0;
        }
        x
    }

    /// The twin of overlap_pattern.cu's kernel: [`process_sincos`] with its fixed count of rounds.
    pub fn overlap_pattern_process(x: f32) -> f32 {
        process_sincos(x, super::OVERLAP_PATTERN_ROUNDS)
    }

    /// Link `i` of a chain of `n` points `stride` links on: a read every `stride * 4` bytes, round and round.
    pub fn chain(i: usize, n: usize, stride: usize) -> u32 {
        ((i + stride) % n) as u32
    }

    /// Where [`super::Kernels::chase`] ends, starting at link `start`, on a [`chain`] of `n` links.
    pub fn chase(n: usize, stride: usize, start: u32, accesses: u32) -> u32 {
        let start = if (start as usize) < n { start as usize } else { 0 };
        ((start + (accesses as usize % n) * stride % n) % n) as u32
    }

    /// Whether `bytes` at `offset` lie inside a buffer of `len` bytes.
    fn fits(offset: u64, bytes: u64, len: usize) -> bool {
        bytes <= len as u64 && offset <= len as u64 - bytes
    }

    /// What [`super::Kernels::copy_by_table`] does: each `(packed, arena, bytes)` of `table` copies
    /// `from[packed..packed + bytes]` to `to[arena..arena + bytes]` ([`TableCopy::Scatter`]), or
    /// `from[arena..arena + bytes]` to `to[packed..packed + bytes]` ([`TableCopy::Gather`]), where both fit.
    pub fn copy_by_table(way: TableCopy, from: &[u8], table: &[u64], to: &mut [u8]) {
        for e in table.chunks_exact(3) {
            let (src, dst, bytes) = match way {
                TableCopy::Scatter => (e[0], e[1], e[2]),
                TableCopy::Gather => (e[1], e[0], e[2]),
            };
            if fits(src, bytes, from.len()) && fits(dst, bytes, to.len()) {
                let (src, dst, bytes) = (src as usize, dst as usize, bytes as usize);
                to[dst..dst + bytes].copy_from_slice(&from[src..src + bytes]);
            }
        }
    }

    pub fn heavy_sqrt(mut x: f32, iters: u32) -> f32 {
        for _ in 0..iters {
            x = (x * x + 1.0).sqrt();
        }
        x
    }
}

#[cfg(test)]
mod tests {
    use super::{cpu, TableCopy};

    #[test]
    fn the_ptx_targets_the_driver_we_ship_for() {
        for ptx in [super::PIPELINE_PTX, super::VECTOR_ADD_PTX, super::ZERO_COPY_PTX, super::SMALL_COPIES_PTX] {
            assert!(ptx.contains(".target sm_75"), "PTX must be built for compute_75");
            assert!(ptx.contains(".version 9.0"), "nvcc 13.0 (PTX ISA 9.0) matches the 580 driver");
        }
        assert!(super::PIPELINE_PTX.contains(".entry process("));
    }
    #[test]
    fn process_contracts_towards_one_and_keeps_the_input() {
        let (a, b) = (cpu::process(0.25, 1000), cpu::process(0.75, 1000));
        assert!(a < b && b < 1.0 && a > 0.25);
        assert_eq!(cpu::process(0.5, 0), 0.5);
    }

    #[test]
    fn the_chase_twin_follows_the_chain() {
        let (n, stride) = (1000, 32);
        for accesses in [0, 1, 7, 31, 32, 999, 4096] {
            let mut p = 0usize;
            for _ in 0..accesses {
                p = cpu::chain(p, n, stride) as usize;
            }
            assert_eq!(cpu::chase(n, stride, 0, accesses), p as u32, "{accesses} accesses");
            let mut q = 123usize;
            for _ in 0..accesses {
                q = cpu::chain(q, n, stride) as usize;
            }
            assert_eq!(cpu::chase(n, stride, 123, accesses), q as u32, "{accesses} accesses from 123");
        }
    }

    #[test]
    fn the_copy_by_table_twin_scatters_and_gathers_every_buffer_and_skips_what_does_not_fit() {
        let packed: Vec<u8> = (0..64).collect();
        // Buffers of 3, 16 and 5 bytes; the last entry reaches past the arena and is skipped.
        let table = [0, 32, 3, 3, 0, 16, 19, 100, 5, 60, 40, 10];
        let mut arena = vec![0u8; 48];
        cpu::copy_by_table(TableCopy::Scatter, &packed, &table, &mut arena);
        assert_eq!(&arena[32..35], &[0, 1, 2]);
        assert_eq!(&arena[0..16], &packed[3..19]);
        assert_eq!(&arena[40..48], &[0; 8], "the entry that does not fit moved nothing");
        let mut back = vec![0u8; 64];
        cpu::copy_by_table(TableCopy::Gather, &arena, &table, &mut back);
        assert_eq!(&back[..19], &packed[..19]);
        assert_eq!(back[19..].iter().filter(|b| **b != 0).count(), 0);
        let huge = [u64::MAX, 0, 2, 0, u64::MAX - 1, 2];
        cpu::copy_by_table(TableCopy::Scatter, &packed, &huge, &mut arena); // offsets that would overflow fit nowhere
    }

    #[test]
    fn heavy_sqrt_is_sqrt_of_x2_plus_n() {
        // sqrt(x^2 + n) in exact arithmetic; float rounding stays tiny.
        let got = cpu::heavy_sqrt(1.0, 100);
        assert!((got - 101f32.sqrt()).abs() < 1e-4, "{got}");
    }
}
