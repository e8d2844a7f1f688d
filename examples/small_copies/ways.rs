//! The ways to move many small buffers ([`TransferWay`]), and one round trip of each on the rig: one
//! `cudaMemcpyAsync` per buffer, one batched call each way, the packed way (in `packing.rs`), a CUDA
//! graph of every copy replayed, and zero-copy.

use std::time::Instant;

use anyhow::{bail, Context as _};
use serde::Serialize;

use cuda_scope::{Coalescing, DeviceBuffer, PinnedBuffer, Scope, SrcOrder};
use kernels::TableCopy;
use measure::timing::{measure_parts_within, Repeats, Stats};

use crate::{
    buffers::BufferPlacement,
    packing::packed_round_trip,
    results::ByteCheck,
    rig::{ms, DeviceBuffers, GpuSide, HostBuffers, PageableCopies, SmallCopiesRig, BUDGET_MS},
};

/// One way to move the buffers.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
pub enum TransferWay {
    /// One `cudaMemcpyAsync` per buffer each way, dealt round-robin to `streams` streams; from and into
    /// `Vec`s where `pageable`, else pinned memory. The same loop either way; `coalesced`: the scope holds
    /// the copies and issues each stream's as a group, the way its model chooses (`cuda_scope::coalesce`),
    /// else it issues each as it is queued (`Coalescing::Off`), as C++ does.
    Each { streams: usize, pageable: bool, coalesced: bool },
    /// One `cuMemcpyBatchAsync` up, its sources read in `order`, and one back.
    Batch { order: SrcOrder, pageable: bool },
    /// Packed by the CPU into one pinned buffer, one copy, a kernel that scatters the buffers into the
    /// arena; and back: the kernel gathers them, one copy, unpacked by the CPU.
    Packed,
    /// A CUDA graph of every copy both ways, built once, replayed.
    Graph,
    /// A kernel that reads every buffer from mapped host memory into the arena, and one that writes them
    /// back.
    ZeroCopy,
}

impl TransferWay {
    /// Every way, with one memcpy per buffer spread over `streams`, and the batched ones where the driver
    /// has them.
    pub fn all(streams: usize, batch: bool, zero_copy: bool) -> Vec<TransferWay> {
        let mut v = vec![TransferWay::Each { streams: 1, pageable: false, coalesced: false }];
        if streams > 1 {
            v.push(TransferWay::Each { streams, pageable: false, coalesced: false });
        }
        v.push(TransferWay::Each { streams: 1, pageable: true, coalesced: false });
        // The same loops, coalesced by the scope: from pinned and pageable memory, on one stream and on all.
        for pageable in [false, true] {
            v.extend([1, streams].into_iter().take(1 + (streams > 1) as usize).map(|streams| TransferWay::Each {
                streams,
                pageable,
                coalesced: true,
            }));
        }
        if batch {
            v.extend(SrcOrder::ALL.map(|order| TransferWay::Batch { order, pageable: false }));
            // From pageable memory, the order meant for it: the driver stages the sources through pinned
            // memory of its own whatever the order, and the three measured alike in this project's runs
            // (1000 x 4 KiB: 21.0, 21.6 and 21.0 ms on the H200) at a fifth of the lesson's time.
            v.push(TransferWay::Batch { order: SrcOrder::Any, pageable: true });
        }
        v.extend([TransferWay::Packed, TransferWay::Graph]);
        if zero_copy {
            v.push(TransferWay::ZeroCopy);
        }
        v
    }

    /// `memcpy each, 4 streams`, `batch, any order, pageable`.
    pub fn name(&self) -> String {
        let from = |pageable: bool| if pageable { ", pageable" } else { "" };
        let how = |coalesced: bool| if coalesced { ", coalesced" } else { "" };
        match self {
            TransferWay::Each { streams: 1, pageable, coalesced } => {
                format!("memcpy each{}{}", from(*pageable), how(*coalesced))
            }
            TransferWay::Each { streams, pageable, coalesced } => {
                format!("memcpy each, {streams} streams{}{}", from(*pageable), how(*coalesced))
            }
            TransferWay::Batch { order, pageable } => format!("batch, {}{}", order.describe(), from(*pageable)),
            TransferWay::Packed => "packed + scatter kernel".into(),
            TransferWay::Graph => "graph, replayed".into(),
            TransferWay::ZeroCopy => "zero-copy kernel".into(),
        }
    }

    /// Whether the scope coalesces its copies.
    pub fn coalesced(&self) -> bool {
        matches!(self, TransferWay::Each { coalesced: true, .. })
    }

    /// Whether it moves the buffers from and into `Vec`s (pageable memory).
    pub fn pageable(&self) -> bool {
        matches!(self, TransferWay::Each { pageable: true, .. } | TransferWay::Batch { pageable: true, .. })
    }

    /// Whether one copy of all the bytes each way is a bound for this way: no run of it can beat it
    /// beyond timing noise, since it moves the same bytes through the same copies with at least one
    /// copy's fixed cost each way. Copies from pageable memory (which the driver may write inline for
    /// small copies), the batched call and the graph's copies (other paths to the copy engines) and
    /// zero-copy (no copy engine at all, nor has the scope's coalesced copies' kernel) can; for them it
    /// is a reference.
    pub fn bounded(&self) -> bool {
        matches!(self, TransferWay::Each { pageable: false, coalesced: false, .. } | TransferWay::Packed)
    }
}

/// The buffers one round trip moves: each buffer's source, and the host buffer it comes back into.
pub struct RoundTripBuffers<'a> {
    pub srcs: Vec<&'a [u8]>,
    pub outs: Vec<&'a mut [u8]>,
}

impl<'a> RoundTripBuffers<'a> {
    /// The set's buffers in the host arenas.
    pub fn pinned(places: &BufferPlacement, h_in: &'a [u8], h_out: &'a mut [u8]) -> Self {
        RoundTripBuffers { srcs: places.host_slices(h_in), outs: places.host_slices_mut(h_out) }
    }

    /// The set's buffers as `Vec`s of their own.
    pub fn pageable(copies: &'a mut PageableCopies) -> Self {
        let srcs = copies.ins.iter().map(|v| &v[..]).collect();
        RoundTripBuffers { srcs, outs: copies.outs.iter_mut().map(|v| &mut v[..]).collect() }
    }
}

impl SmallCopiesRig {
    /// One round trip of `way` (not the graph): [wall, GPU, host] ms.
    pub fn once(
        &mut self,
        way: TransferWay,
        places: &BufferPlacement,
        pageable: &mut PageableCopies,
    ) -> anyhow::Result<[f64; 3]> {
        let on = GpuSide { gpu: &self.gpu, kernels: &self.kernels, streams: &self.streams };
        let HostBuffers { h_in, h_out, packed_htod, packed_dtoh } = &mut self.host;
        let device = &mut self.device;
        let data = match way.pageable() {
            true => RoundTripBuffers::pageable(pageable),
            false => RoundTripBuffers::pinned(places, h_in, h_out),
        };
        let t0 = Instant::now();
        let (gpu_ms, host_ms) = match way {
            TransferWay::Each { streams, coalesced, .. } => {
                memcpy_each(on.first(streams), places, data, &mut device.arena, coalesced)?
            }
            TransferWay::Batch { order, .. } => batched(on.first(1), places, data, &mut device.arena, order)?,
            TransferWay::Packed => {
                (packed_round_trip(on.first(2), places, data, (packed_htod, packed_dtoh), device)?, 0.0)
            }
            TransferWay::ZeroCopy => {
                drop(data); // the kernels reach the host arenas themselves
                zero_copy(on.first(1), places, (h_in, h_out), device)?
            }
            TransferWay::Graph => bail!("the graph is replayed inside one scope: SmallCopiesRig::graph"),
        };
        let wall = ms(t0);
        // The packed way's host is busy from the first byte packed to the last unpacked.
        Ok([wall, gpu_ms, if way == TransferWay::Packed { wall } else { host_ms }])
    }

    /// The graph of every copy both ways: built, checked over one launch (the outputs poisoned first),
    /// then built again and replayed, each replay timed inside the scope (a graph cannot outlive the
    /// scope whose buffers it names). [wall, GPU, host] stats, the check, and the build's ms.
    pub fn graph(&mut self, places: &BufferPlacement) -> anyhow::Result<([Stats; 3], ByteCheck, Option<f64>)> {
        let mut none = PageableCopies { ins: vec![], outs: vec![] };
        self.poison(places, &mut none)?;
        self.graph_scope(places, None)?;
        let check = self.check(places, TransferWay::Graph, &none);
        let (stats, build_ms) = self.graph_scope(places, Some(self.repeats))?;
        Ok((stats.context("the graph's replays were not timed")?, check, Some(build_ms)))
    }

    /// One scope: the graph built (its build timed), then launched once, or replayed and timed as
    /// `repeats` says.
    fn graph_scope(
        &mut self,
        places: &BufferPlacement,
        repeats: Option<Repeats>,
    ) -> anyhow::Result<(Option<[Stats; 3]>, f64)> {
        let n = places.count();
        let (h_in, s0) = (&self.host.h_in[..], &self.streams[..1]);
        let outs = places.host_slices_mut(&mut self.host.h_out);
        let arena = &mut self.device.arena;
        self.gpu.scope(s0, |s| {
            let arena = s.device(arena);
            let t = Instant::now();
            let graph = s.graph(|g| {
                for i in 0..n {
                    g.htod(&h_in[places.host_range(i)], arena.slice(places.device_range(i)))?;
                    // captured, not run
                }
                for (i, out) in outs.into_iter().enumerate() {
                    g.dtoh(arena.slice(places.device_range(i)), out)?;
                }
                Ok::<_, anyhow::Error>(())
            })?; //                                                                cudaGraphInstantiate
            let build_ms = ms(t);
            let replay = || -> anyhow::Result<[f64; 3]> {
                let (start, t) = (s.stream(0).record_event()?, Instant::now());
                s.stream(0).replay(&graph)?; //                                        cudaGraphLaunch
                let (host, stop) = (ms(t), s.stream(0).record_event()?);
                s.synchronize()?;
                Ok([ms(t), s.elapsed_ms(start, stop)?, host])
            };
            let stats = match repeats {
                None => replay().map(|_| None)?,
                Some(r) => Some(measure_parts_within(r, BUDGET_MS, replay)?),
            };
            Ok((stats, build_ms))
        })
    }
}

/// One `cudaMemcpyAsync` per buffer each way, dealt round-robin over the streams of `on`, with a
/// barrier between the way up and the way back where there are several: (GPU, host in the calls) ms.
/// `coalesced`: the same loop, the scope holding the copies and issuing each stream's together.
fn memcpy_each(
    on: GpuSide,
    places: &BufferPlacement,
    data: RoundTripBuffers,
    arena: &mut DeviceBuffer<u8>,
    coalesced: bool,
) -> anyhow::Result<(f64, f64)> {
    let k = on.streams.len();
    on.timed_calls(|s| {
        s.set_coalescing(if coalesced { Coalescing::On } else { Coalescing::Off })?;
        let arena = s.device(arena);
        for (i, src) in data.srcs.iter().enumerate() {
            s.stream(i % k).htod(src, arena.slice(places.device_range(i)))?; //       cudaMemcpyAsync, H2D
        }
        if k > 1 {
            barrier(s)?;
        }
        for (i, dst) in data.outs.into_iter().enumerate() {
            s.stream(i % k).dtoh(arena.slice(places.device_range(i)), dst)?; //      cudaMemcpyAsync, D2H
        }
        Ok(())
    })
}

/// One `cuMemcpyBatchAsync` up, its sources read in `order`, and one back: (GPU, host in the calls) ms.
fn batched(
    on: GpuSide,
    places: &BufferPlacement,
    data: RoundTripBuffers,
    arena: &mut DeviceBuffer<u8>,
    order: SrcOrder,
) -> anyhow::Result<(f64, f64)> {
    on.timed_calls(|s| {
        let arena = s.device(arena);
        let dsts: Vec<_> = (0..places.count()).map(|i| arena.slice(places.device_range(i))).collect();
        s.stream(0).htod_batch(&data.srcs, &dsts, order)?; // cuMemcpyBatchAsync, every buffer up
        Ok(s.stream(0).dtoh_batch(&dsts, data.outs)?) //          and back
    })
}

/// The copy kernel reads every buffer straight from the mapped host arena into the device arena, then
/// writes every buffer back into the other host arena: (GPU, host in the calls) ms.
fn zero_copy(
    on: GpuSide,
    places: &BufferPlacement,
    (h_in, h_out): (&mut PinnedBuffer<u8>, &mut PinnedBuffer<u8>),
    device: &mut DeviceBuffers,
) -> anyhow::Result<(f64, f64)> {
    let (n, largest, kernels) = (places.count(), places.largest(), on.kernels);
    on.timed_calls(|s| {
        let (from, to, arena) = (s.mapped(h_in)?, s.mapped(h_out)?, s.device(&mut device.arena));
        // The host arena's table: the kernel reads and writes the host's buffers across the link itself.
        let table = s.device(&mut device.tables).slice(3 * n..6 * n).read_only();
        kernels.copy_by_table(s.stream(0), TableCopy::Scatter, from.read_only(), table, arena, largest)?;
        Ok(kernels.copy_by_table(s.stream(0), TableCopy::Gather, arena.read_only(), table, to, largest)?)
    })
}

/// Makes every stream of `s` wait for the work queued so far on every other one: the end of the way
/// up, before the way back.
fn barrier<'s>(s: &'s Scope<'s, '_>) -> cuda_scope::Result<()> {
    let events = s.streams().map(|st| st.record_event()).collect::<cuda_scope::Result<Vec<_>>>()?;
    for st in s.streams() {
        for (k, e) in events.iter().enumerate() {
            if st.index() != k {
                st.wait_event(*e)?;
            }
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ways_name_themselves_and_know_what_bounds_them() {
        let all = TransferWay::all(4, true, true);
        assert_eq!(all.len(), 14);
        let names: Vec<String> = all.iter().map(TransferWay::name).collect();
        assert!(names.contains(&"memcpy each, 4 streams".to_string()));
        assert!(names.contains(&"batch, during the call".to_string()));
        assert!(names.contains(&"batch, any order, pageable".to_string()), "pageable: the order meant for it");
        assert!(!names.contains(&"batch, during the call, pageable".to_string()));
        assert!(names.contains(&"memcpy each, 4 streams, pageable, coalesced".to_string()));
        assert_eq!(TransferWay::all(1, false, false).len(), 6, "no batches where the driver has none");
        let each_pageable = TransferWay::Each { streams: 1, pageable: true, coalesced: false };
        let coalesced = TransferWay::Each { streams: 1, pageable: false, coalesced: true };
        assert!(!coalesced.bounded(), "the kernel of coalesced copies has no copy engine's fixed cost");
        assert!(TransferWay::Packed.bounded() && !TransferWay::ZeroCopy.bounded() && !each_pageable.bounded());
        assert!(each_pageable.pageable() && !TransferWay::Graph.pageable());
    }
}
