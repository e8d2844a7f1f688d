//! zero_copy's rig: the exercise after the program. It owns the GPU, the lessons' kernels, the sweep's
//! sizes and the repeats; refuses at once a `--max` whose buffers do not fit ([`footprint`]); times, at
//! every size, a kernel over mapped host memory against copy in, compute, copy out, with one pass and
//! two, every result checked against the CPU; prints which wins where; and writes the JSON
//! ([`ZeroCopyResults`]).

use cuda_scope::{Dev, DeviceBuffer, DeviceInfo, Footprint, Gpu, HostAlloc, PinnedBuffer, ScopeStream, Stream};
use kernels::Kernels;
use measure::{
    report::{fmt_bytes, fmt_ms, Figure, MemoryKind, Output, Table},
    timeline::phase,
    timing::{gbps, measure, Repeats, Stats},
    verify::{self, input},
};
use serde::Serialize;

use crate::Args;

/// What day43_ZeroCopyExample.cu printed: the first result, read by the host with no copy.
#[derive(Clone, Copy, Debug, Serialize)]
pub struct Original {
    pub h_out_0: f32,
}

/// One size's four runs: each way, with one pass of the kernel and with two.
#[derive(Serialize)]
struct Row {
    bytes: usize,
    zero_copy: Stats,
    copies: Stats,
    zero_copy_2_passes: Stats,
    copies_2_passes: Stats,
}

/// What zero_copy writes with `--json`.
#[derive(Serialize)]
struct ZeroCopyResults<'a> {
    device: &'a DeviceInfo,
    repeats: Repeats,
    rows: Vec<Row>,
    original: Original,
}

/// What the lesson holds at once, at most, for sizes up to `max` bytes: first the program's two mapped
/// buffers of 1M floats; then two mapped buffers of `max`, two pinned and two on the device.
pub fn footprint(max: usize) -> Footprint {
    let program = Footprint::default().pinned::<f32>(2 << 20);
    let n = max / 4;
    program.max(Footprint::default().pinned::<f32>(2 * n).pinned::<f32>(2 * n).device::<f32>(2 * n))
}

/// The GPU, the lessons' kernels, the sweep's sizes and the repeats.
pub struct ZeroCopyRig {
    pub gpu: Gpu,
    pub kernels: Kernels,
    sizes: Vec<usize>,
    repeats: Repeats,
}

impl ZeroCopyRig {
    /// Checks the sizes, starts the GPU that `CUDA_DEVICE` names (its report printed), refuses at once
    /// sizes whose buffers do not fit it or the host, loads the lessons' kernels, and checks that the
    /// GPU can map host memory.
    pub fn start(out: &Output, args: &Args) -> anyhow::Result<ZeroCopyRig> {
        let sizes = args.sizes.sizes(64 << 10, 64 << 20)?;
        let gpu = measure::lesson::gpu(out, &footprint(sizes[sizes.len() - 1]))?;
        let kernels = Kernels::load(&gpu)?; // the lessons' kernels: cuModuleLoadData, cuModuleGetFunction
        if !gpu.info.can_map_host_memory {
            anyhow::bail!("{} cannot map host memory, so zero-copy is not available on it", gpu.info.name);
        }
        Ok(ZeroCopyRig { gpu, kernels, sizes, repeats: args.run.repeats() })
    }

    /// The exercise: a sweep of sizes, one pass and two, against copy in, compute, copy out; the table,
    /// and where each way wins. `original`: what the program printed.
    pub fn sweep(&self, out: &Output, original: Original) -> anyhow::Result<()> {
        let mut buffers = Buffers::new(&self.gpu, self.sizes[self.sizes.len() - 1] / 4)?;
        let mut rows = Vec::new();
        for &bytes in &self.sizes {
            out.progress(fmt_bytes(bytes));
            let [zero_copy, copies] = self.both_ways(out, &mut buffers, bytes, 1)?;
            let [zero_copy_2_passes, copies_2_passes] = self.both_ways(out, &mut buffers, bytes, 2)?;
            rows.push(Row { bytes, zero_copy, copies, zero_copy_2_passes, copies_2_passes });
        }
        out.say("GPU time, median of runs after warm-up (CUDA events); bus GB/s counts bytes read plus written");
        out.table(&table(&rows));
        out.say(wins(&rows));
        out.say("verified: every result of both approaches, at every size, matches the CPU reference exactly");
        out.finish(&ZeroCopyResults { device: &self.gpu.info, repeats: self.repeats, rows, original })
    }

    /// Both ways (zero-copy, and copies) over `bytes` with `passes` passes of the kernel, timed, checked
    /// against the CPU and named (`zero-copy, one pass, 1 MiB`) for `cargo xtask compare`.
    fn both_ways(
        &self,
        out: &Output,
        buffers: &mut Buffers,
        bytes: usize,
        passes: usize,
    ) -> anyhow::Result<[Stats; 2]> {
        let (len, plural) = (bytes / 4, if passes == 1 { "" } else { "es" });
        let _p = phase(&format!("{passes} pass{plural} over {}", fmt_bytes(bytes)));
        let zero = measure(self.repeats, || buffers.zero_copy(self, len, passes))?;
        let copy = measure(self.repeats, || buffers.copies(self, len, passes))?;
        let expected = |i| if passes == 1 { input(i) * 2.0 } else { input(i) * 2.0 + input(i) };
        for got in [&buffers.mapped_out[..len], &buffers.h_out[..len]] {
            verify::exact(got, expected).ensure()?;
        }
        let pass = if passes == 1 { "one pass" } else { "two passes" };
        out.add(Figure::new(format!("zero-copy, {pass}, {}", fmt_bytes(bytes)), &zero).memory(MemoryKind::Mapped));
        out.figure(format!("copy+kernel+copy, {pass}, {}", fmt_bytes(bytes)), &copy);
        Ok([zero, copy])
    }
}

/// Each size's times, each way against the other.
fn table(rows: &[Row]) -> Table {
    let mut t = Table::new(&[
        "size",
        "zero-copy",
        "GB/s",
        "copy+kernel+copy",
        "faster",
        "zero-copy 2 passes",
        "copies 2 passes",
        "faster",
    ]);
    let faster = |z: &Stats, c: &Stats| {
        if z.median_ms < c.median_ms {
            format!("zero-copy {:.2}x", c.median_ms / z.median_ms)
        } else {
            format!("copies {:.2}x", z.median_ms / c.median_ms)
        }
    };
    for row in rows {
        t.row(vec![
            fmt_bytes(row.bytes),
            fmt_ms(row.zero_copy.median_ms),
            format!("{:.1}", gbps(2 * row.bytes, row.zero_copy.median_ms)),
            fmt_ms(row.copies.median_ms),
            faster(&row.zero_copy, &row.copies),
            fmt_ms(row.zero_copy_2_passes.median_ms),
            fmt_ms(row.copies_2_passes.median_ms),
            faster(&row.zero_copy_2_passes, &row.copies_2_passes),
        ]);
    }
    t
}

/// Where zero-copy wins, with one pass and with two, and why.
fn wins(rows: &[Row]) -> String {
    let wins = |pick: fn(&Row) -> (&Stats, &Stats)| {
        let won = |r: &&Row| pick(r).0.median_ms < pick(r).1.median_ms;
        rows.iter().filter(won).map(|r| fmt_bytes(r.bytes)).collect::<Vec<_>>()
    };
    let (one, two) = (wins(|r| (&r.zero_copy, &r.copies)), wins(|r| (&r.zero_copy_2_passes, &r.copies_2_passes)));
    format!(
        "\nzero-copy wins one pass at {} of {} sizes ({}) and two passes at {} ({}). One pass streams each byte \
         across the bus once, reading and writing at the same time, with no copy steps; a second pass pays the bus \
         again, while the copying version rereads fast device memory.",
        one.len(),
        rows.len(),
        if one.is_empty() { "none".into() } else { one.join(", ") },
        two.len(),
        if two.is_empty() { "none".into() } else { two.join(", ") }
    )
}

/// The buffers of both ways, of the largest size: mapped pinned memory, which kernels address directly; and
/// pinned host memory copied to and from device memory, the usual way.
struct Buffers {
    mapped_in: PinnedBuffer<f32>,
    mapped_out: PinnedBuffer<f32>,
    h_in: PinnedBuffer<f32>,
    h_out: PinnedBuffer<f32>,
    d_in: DeviceBuffer<f32>,
    d_out: DeviceBuffer<f32>,
    streams: Vec<Stream>,
}

impl Buffers {
    fn new(gpu: &Gpu, n: usize) -> anyhow::Result<Buffers> {
        let mut mapped_in = gpu.pinned_with::<f32>(n, HostAlloc::MAPPED)?;
        cuda_scope::host::fill(&mut mapped_in, input);
        let mapped_out = gpu.pinned_with::<f32>(n, HostAlloc::MAPPED)?;
        let (h_in, h_out) = (gpu.pinned_from_fn(n, input)?, gpu.pinned::<f32>(n)?);
        let (d_in, d_out) = (gpu.alloc::<f32>(n)?, gpu.alloc::<f32>(n)?);
        Ok(Buffers { mapped_in, mapped_out, h_in, h_out, d_in, d_out, streams: gpu.streams(1)? })
    }

    /// The kernel reads and writes host memory across the bus (the first `len` elements); the scope keeps
    /// the host off it meanwhile. GPU time, ms.
    fn zero_copy(&mut self, rig: &ZeroCopyRig, len: usize, passes: usize) -> anyhow::Result<f64> {
        let Buffers { mapped_in, mapped_out, streams, .. } = self;
        Ok(rig.gpu.timed(streams, |s| {
            let (i, o) = (s.mapped(mapped_in)?.slice(0..len), s.mapped(mapped_out)?.slice(0..len));
            kernel_passes(&rig.kernels, s.stream(0), i, o, passes) // zeroCopyKernel<<<..>>>(d_in, d_out, N)
        })?)
    }

    /// Copy in, compute in device memory, copy out (the first `len` elements). GPU time, ms.
    fn copies(&mut self, rig: &ZeroCopyRig, len: usize, passes: usize) -> anyhow::Result<f64> {
        let Buffers { h_in, h_out, d_in, d_out, streams, .. } = self;
        Ok(rig.gpu.timed(streams, |s| {
            let (i, o) = (s.device(d_in).slice(0..len), s.device(d_out).slice(0..len));
            s.stream(0).htod(&h_in[..len], i)?;
            kernel_passes(&rig.kernels, s.stream(0), i, o, passes)?;
            s.stream(0).dtoh(o, &mut h_out[..len])
        })?)
    }
}

/// out = 2 in; with two passes, then out += in, which reads `input` again (across the bus, where it is
/// mapped host memory).
fn kernel_passes<'s>(
    kernels: &Kernels,
    stream: ScopeStream<'s, '_>,
    input: Dev<'s, f32>,
    out: Dev<'s, f32>,
    passes: usize,
) -> cuda_scope::Result<()> {
    kernels.scale(stream, input, out, 2.0)?;
    if passes == 2 {
        kernels.accumulate(stream, input, out)?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    const MIB: usize = 1 << 20;

    #[test]
    fn the_default_sweep_needs_four_pinned_buffers_and_two_on_the_device_of_64_mib() {
        assert_eq!(footprint(64 * MIB), Footprint { device: 128 * MIB, pinned: 256 * MIB, pageable: 0 });
        // --max 64KiB: the program's two mapped buffers of 4 MiB rule the pinned memory.
        assert_eq!(footprint(64 << 10), Footprint { device: 128 << 10, pinned: 8 * MIB, pageable: 0 });
    }

    #[test]
    fn a_huge_max_saturates_past_any_machine() {
        let need = footprint(usize::MAX & !3);
        assert_eq!((need.device, need.pinned), (usize::MAX, usize::MAX));
        let tib = footprint(1024 << 30); // --max 1024GiB: 2 TiB on the device, 4 TiB pinned
        assert!(tib.device > 141_000_000_000 && tib.pinned > 2_000_000_000_000, "{tib:?}");
    }
}
