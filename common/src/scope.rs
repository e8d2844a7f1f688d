//! Stream scopes: async copies and kernel launches that borrow their buffers until the GPU is done.
//!
//! ```ignore
//! gpu.scope(&streams, |s| {
//!     let d = s.device(&mut d_data);                 // d_data is the scope's until it ends
//!     s.htod(&streams[0], &h_in, d)?;                // cudaMemcpyAsync(d, h_in, ..., H2D, streams[0])
//!     s.launch(&streams[1], gpu.kernels.process(d, 100))?; // waits for the copy: it reads what the copy wrote
//!     s.dtoh(&streams[1], d, &mut h_out)?;
//!     Ok(())
//! })?;                                               // every stream synchronized: h_out is ready
//! ```
//!
//! What makes this safe without `unsafe` in the lessons:
//! - Host memory handed to an async copy is borrowed (`&[T]` to read, `&mut [T]` to write) for the whole
//!   scope, and the scope synchronizes every stream before it returns, also on error or panic. So no host
//!   buffer can be freed, moved, read or written while a copy into or out of it may be in flight.
//! - Device buffers (and mapped host buffers) are borrowed mutably for the scope and addressed through
//!   [`Dev`] handles. Like cudarc, the scope records an event after each operation and remembers, per
//!   buffer and byte range, the last write and the reads since. An operation on another stream that
//!   touches an overlapping range first waits for the events it conflicts with (read after write, write
//!   after read or write). Operations on one stream are ordered by the stream and need no wait.
//! - Handles are tied to their scope's lifetime (invariant, as in `std::thread::scope`) and carry the
//!   scope's id, so they cannot leak out of the scope or be used in another one.

use std::{
    cell::RefCell,
    marker::PhantomData,
    ops::Range,
    sync::atomic::{AtomicU64, Ordering},
};

use anyhow::{bail, Context as _};
use cust::{
    memory::{DeviceBuffer, DeviceCopy},
    stream::Stream,
    sys::{self, CUresult},
};

use crate::{
    error::check,
    host::{Element, PinnedBuffer},
    kernels::Launch,
    timeline::Record,
    timing::Event,
    Gpu,
};

static NEXT_SCOPE: AtomicU64 = AtomicU64::new(1);

/// A device buffer (or mapped host buffer) lent to a scope, or a sub-range of one. Copy it freely.
pub struct Dev<'scope, T> {
    pub(crate) scope: u64,
    pub(crate) buffer: usize,
    /// Device address of element 0 of the whole buffer.
    pub(crate) base: u64,
    pub(crate) offset: usize,
    pub(crate) len: usize,
    _marker: PhantomData<(fn(&'scope ()) -> &'scope (), *const T)>,
}

impl<T> Clone for Dev<'_, T> {
    fn clone(&self) -> Self {
        *self
    }
}
impl<T> Copy for Dev<'_, T> {}

impl<'scope, T> Dev<'scope, T> {
    pub fn len(&self) -> usize {
        self.len
    }

    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Elements `range` of this view, like `&v[range]` (and, like it, panics when out of bounds).
    pub fn slice(self, range: Range<usize>) -> Self {
        assert!(
            range.start <= range.end && range.end <= self.len,
            "device range {range:?} out of bounds for length {}",
            self.len
        );
        Dev { offset: self.offset + range.start, len: range.end - range.start, ..self }
    }

    /// The device address of the first element of this view.
    pub(crate) fn ptr(&self) -> u64 {
        self.base + (self.offset * std::mem::size_of::<T>()) as u64
    }

    pub(crate) fn access(&self, write: bool) -> DevAccess {
        let size = std::mem::size_of::<T>();
        DevAccess {
            scope: self.scope,
            buffer: self.buffer,
            bytes: self.offset * size..(self.offset + self.len) * size,
            write,
        }
    }
}

/// One buffer range an operation reads or writes.
#[derive(Clone, Debug)]
pub(crate) struct DevAccess {
    scope: u64,
    buffer: usize,
    bytes: Range<usize>,
    write: bool,
}

/// Per buffer: the operations whose completion later operations on other streams may have to wait for.
#[derive(Default, Debug)]
pub(crate) struct Tracker {
    accesses: Vec<Access>,
}

#[derive(Clone, Debug, PartialEq)]
pub(crate) struct Access {
    pub stream: usize,
    pub write: bool,
    pub bytes: Range<usize>,
    pub event: usize,
}

fn overlaps(a: &Range<usize>, b: &Range<usize>) -> bool {
    a.start < b.end && b.start < a.end
}

fn covers(outer: &Range<usize>, inner: &Range<usize>) -> bool {
    outer.start <= inner.start && inner.end <= outer.end
}

impl Tracker {
    /// The events an access on `stream` must wait for: conflicting accesses (at least one of the two a
    /// write, overlapping bytes) made on other streams.
    pub fn waits(&self, stream: usize, write: bool, bytes: &Range<usize>) -> Vec<usize> {
        self.accesses
            .iter()
            .filter(|a| a.stream != stream && (write || a.write) && overlaps(&a.bytes, bytes))
            .map(|a| a.event)
            .collect()
    }

    /// Remembers a completed access, forgetting those it makes redundant: a write orders everything it
    /// covers before it; a read orders earlier reads of the same stream that it covers.
    pub fn record(&mut self, access: Access) {
        self.accesses.retain(|a| {
            let covered = covers(&access.bytes, &a.bytes);
            !(covered && (access.write || (!a.write && a.stream == access.stream)))
        });
        self.accesses.push(access);
    }
}

/// The work queued on a set of streams, with the buffers it borrows. See the module docs.
pub struct Scope<'scope, 'env: 'scope> {
    gpu: &'env Gpu,
    streams: &'env [Stream],
    id: u64,
    state: RefCell<State>,
    _scope: PhantomData<&'scope mut &'scope ()>,
    _env: PhantomData<&'env mut &'env ()>,
}

#[derive(Default)]
struct State {
    trackers: Vec<Tracker>,
    events: Vec<Event>,
    waits: usize,
    /// Operations to put on the built-in timeline once the scope has synchronized.
    pending: Vec<Pending>,
}

/// What an operation is, for the built-in timeline: (kind, name, bytes moved).
type OpInfo = (&'static str, &'static str, usize);

struct Pending {
    start: usize,
    end: usize,
    stream: usize,
    op: OpInfo,
    phase: String,
}

impl<'scope, 'env> Scope<'scope, 'env> {
    /// Lends a device buffer to this scope.
    pub fn device<T: DeviceCopy>(&self, buf: &'scope mut DeviceBuffer<T>) -> Dev<'scope, T> {
        self.handle(buf.as_device_ptr().as_raw(), buf.len())
    }

    /// Lends several device buffers to this scope, one handle each.
    pub fn devices<T: DeviceCopy>(&self, bufs: &'scope mut [DeviceBuffer<T>]) -> Vec<Dev<'scope, T>> {
        bufs.iter_mut().map(|b| self.device(b)).collect()
    }

    /// Lends mapped pinned memory ([`crate::HostAlloc::MAPPED`]) to this scope, for kernels to read and
    /// write across the bus. The host cannot touch it until the scope ends.
    pub fn mapped<T: Element>(&self, buf: &'scope mut PinnedBuffer<T>) -> anyhow::Result<Dev<'scope, T>> {
        Ok(self.handle(buf.device_ptr()?, buf.len()))
    }

    fn handle<T>(&self, base: u64, len: usize) -> Dev<'scope, T> {
        let mut st = self.state.borrow_mut();
        st.trackers.push(Tracker::default());
        Dev { scope: self.id, buffer: st.trackers.len() - 1, base, offset: 0, len, _marker: PhantomData }
    }

    /// `cudaMemcpyAsync(dst, src, ..., cudaMemcpyHostToDevice, stream)`. From pageable memory the driver
    /// stages the data and returns only when it has; from pinned memory it returns at once.
    pub fn htod<T: DeviceCopy>(&self, stream: &Stream, src: &'scope [T], dst: Dev<'scope, T>) -> anyhow::Result<()> {
        if src.len() != dst.len {
            bail!("htod: source has {} elements, destination {}", src.len(), dst.len);
        }
        let bytes = std::mem::size_of_val(src);
        self.enqueue(
            stream,
            &[dst.access(true)],
            ("H2D", "memcpy HtoD", bytes),
            || format!("copying {bytes} bytes host to device"),
            |s| {
                // SAFETY: `src` is borrowed for the whole scope, which synchronizes before the borrow ends;
                // `dst` is a live device range of `bytes` bytes (checked above) that this scope orders.
                unsafe { sys::cuMemcpyHtoDAsync_v2(dst.ptr(), src.as_ptr().cast(), bytes, s) }
            },
        )
    }

    /// `cudaMemcpyAsync(dst, src, ..., cudaMemcpyDeviceToHost, stream)`.
    pub fn dtoh<T: DeviceCopy>(
        &self,
        stream: &Stream,
        src: Dev<'scope, T>,
        dst: &'scope mut [T],
    ) -> anyhow::Result<()> {
        if src.len != dst.len() {
            bail!("dtoh: source has {} elements, destination {}", src.len, dst.len());
        }
        let bytes = std::mem::size_of_val(dst);
        self.enqueue(
            stream,
            &[src.access(false)],
            ("D2H", "memcpy DtoH", bytes),
            || format!("copying {bytes} bytes device to host"),
            |s| {
                // SAFETY: `dst` is borrowed mutably for the whole scope, which synchronizes before the borrow
                // ends, so nothing else reads or writes it meanwhile; `src` is a live device range of `bytes`.
                unsafe { sys::cuMemcpyDtoHAsync_v2(dst.as_mut_ptr().cast(), src.ptr(), bytes, s) }
            },
        )
    }

    /// `cudaMemcpyAsync(dst, src, ..., cudaMemcpyDeviceToDevice, stream)`: reads and writes device memory.
    pub fn dtod<T: DeviceCopy>(&self, stream: &Stream, src: Dev<'scope, T>, dst: Dev<'scope, T>) -> anyhow::Result<()> {
        if src.len != dst.len {
            bail!("dtod: source has {} elements, destination {}", src.len, dst.len);
        }
        let bytes = src.len * std::mem::size_of::<T>();
        self.enqueue(
            stream,
            &[src.access(false), dst.access(true)],
            ("DtoD", "memcpy DtoD", bytes),
            || format!("copying {bytes} bytes device to device"),
            |s| {
                // SAFETY: two live device ranges of `bytes` bytes that this scope orders.
                unsafe { sys::cuMemcpyDtoDAsync_v2(dst.ptr(), src.ptr(), bytes, s) }
            },
        )
    }

    /// `cudaMemsetD32Async`: sets every element to `value` (to poison outputs before a run, say).
    pub fn fill(&self, stream: &Stream, dst: Dev<'scope, f32>, value: f32) -> anyhow::Result<()> {
        self.enqueue(
            stream,
            &[dst.access(true)],
            ("memset", "memset", dst.len * 4),
            || "filling device memory".into(),
            |s| {
                // SAFETY: `dst` is a live device range of `len` 4-byte words that this scope orders.
                unsafe { sys::cuMemsetD32Async(dst.ptr(), value.to_bits(), dst.len, s) }
            },
        )
    }

    /// Launches a kernel; the [`Launch`] (from [`crate::kernels::Kernels`]) says what it reads and writes.
    pub fn launch(&self, stream: &Stream, mut launch: Launch<'scope>) -> anyhow::Result<()> {
        if let Some(e) = launch.invalid.take() {
            bail!("kernel {}: {e}", launch.name);
        }
        let name = launch.name;
        let accesses = launch.accesses.clone();
        self.enqueue(
            stream,
            &accesses,
            ("kernel", name, 0),
            || format!("launching kernel {name}"),
            |s| launch.enqueue(s),
        )
    }

    /// Blocks until every stream of the scope is idle (`cudaDeviceSynchronize` for these streams).
    pub fn synchronize(&self) -> anyhow::Result<()> {
        for s in self.streams {
            // SAFETY: a live stream of this context.
            check(unsafe { sys::cuStreamSynchronize(s.as_inner()) }, || "waiting for a stream".into())?;
        }
        Ok(())
    }

    /// Whether every stream has finished its work, without blocking (`cudaStreamQuery`).
    pub fn is_idle(&self) -> anyhow::Result<bool> {
        for s in self.streams {
            // SAFETY: a live stream of this context.
            match unsafe { sys::cuStreamQuery(s.as_inner()) } {
                CUresult::CUDA_SUCCESS => {}
                CUresult::CUDA_ERROR_NOT_READY => return Ok(false),
                e => check(e, || "querying a stream".into())?,
            }
        }
        Ok(true)
    }

    /// How many cross-stream waits the scope has inserted so far.
    pub fn waits_inserted(&self) -> usize {
        self.state.borrow().waits
    }

    fn stream_index(&self, stream: &Stream) -> anyhow::Result<usize> {
        self.streams
            .iter()
            .position(|s| s.as_inner() == stream.as_inner())
            .context("this stream is not one of the scope's streams")
    }

    fn enqueue(
        &self,
        stream: &Stream,
        accesses: &[DevAccess],
        info: OpInfo,
        what: impl Fn() -> String,
        op: impl FnOnce(sys::CUstream) -> CUresult,
    ) -> anyhow::Result<()> {
        let si = self.stream_index(stream)?;
        let mut st = self.state.borrow_mut();
        let mut waits = Vec::new();
        for a in accesses {
            if a.scope != self.id {
                bail!("{}: a device handle from another scope", what());
            }
            waits.extend(st.trackers[a.buffer].waits(si, a.write, &a.bytes));
        }
        waits.sort_unstable();
        waits.dedup();
        for &e in &waits {
            // SAFETY: both handles are live; the event was recorded earlier in this scope.
            check(unsafe { sys::cuStreamWaitEvent(stream.as_inner(), st.events[e].as_inner(), 0) }, || {
                format!("{}: waiting for another stream", what())
            })?;
        }
        st.waits += waits.len();
        let start = if self.gpu.recorder.borrow().is_some() {
            let e = self.gpu.take_event()?;
            e.record(stream)?;
            st.events.push(e);
            Some(st.events.len() - 1)
        } else {
            None
        };
        check(op(stream.as_inner()), &what)?;
        let event = self.gpu.take_event()?;
        event.record(stream)?;
        st.events.push(event);
        let event = st.events.len() - 1;
        if let Some(start) = start {
            let phase = crate::timeline::current_phase();
            st.pending.push(Pending { start, end: event, stream: stream.as_inner() as usize, op: info, phase });
        }
        for a in accesses {
            st.trackers[a.buffer].record(Access { stream: si, write: a.write, bytes: a.bytes.clone(), event });
        }
        Ok(())
    }
}

/// Runs `f` in a scope over `streams`; see [`Gpu::scope`] and [`Gpu::timed`].
fn run<'env, R>(
    gpu: &'env Gpu,
    streams: &'env [Stream],
    timed: bool,
    f: impl for<'scope> FnOnce(&'scope Scope<'scope, 'env>) -> anyhow::Result<R>,
) -> anyhow::Result<(R, Option<f64>)> {
    let Some(first) = streams.first() else { bail!("a scope needs at least one stream") };
    let scope = Scope {
        gpu,
        streams,
        id: NEXT_SCOPE.fetch_add(1, Ordering::Relaxed),
        state: RefCell::new(State::default()),
        _scope: PhantomData,
        _env: PhantomData,
    };
    // Whatever happens below, the streams are synchronized before the borrows end: once on the way out
    // (`synced` says how that went), or here if an early return or a panic skipped it.
    struct Finish<'a, 'env> {
        scope: &'a Scope<'a, 'env>,
        synced: Option<bool>,
    }
    impl Drop for Finish<'_, '_> {
        fn drop(&mut self) {
            let synced = self.synced.unwrap_or_else(|| self.scope.synchronize().is_ok());
            let mut st = self.scope.state.borrow_mut();
            let pending = std::mem::take(&mut st.pending);
            if let (true, Some(rec)) = (synced, self.scope.gpu.recorder.borrow_mut().as_mut()) {
                for p in pending {
                    let (Ok(start_ms), Ok(end_ms)) =
                        (st.events[p.start].elapsed_ms(&rec.origin), st.events[p.end].elapsed_ms(&rec.origin))
                    else {
                        continue;
                    };
                    let stream = rec.stream_id(p.stream);
                    let (kind, name, bytes) = p.op;
                    let (start_ms, end_ms) = (rec.origin_ms + start_ms, rec.origin_ms + end_ms);
                    rec.records.push(Record {
                        device: rec.device,
                        phase: p.phase,
                        stream,
                        kind,
                        name: name.to_string(),
                        bytes,
                        start_ms,
                        end_ms,
                    });
                }
            }
            let events = std::mem::take(&mut st.events);
            self.scope.gpu.give_events(events);
        }
    }
    let mut finish = Finish { scope: &scope, synced: None };
    // Timing: `start` on the first stream and every other stream waits for it (fork); at the end the
    // first stream waits for every other stream and records `stop` (join), so stop - start spans all.
    let start = if timed { Some(fork_join_event(gpu, first, &streams[1..])?) } else { None };
    let result = f(&scope);
    let stop = match start {
        Some(_) if result.is_ok() => {
            let stop = gpu.take_event()?;
            for s in &streams[1..] {
                let e = gpu.take_event()?;
                e.record(s)?;
                // SAFETY: live stream and event handles of this context.
                check(unsafe { sys::cuStreamWaitEvent(first.as_inner(), e.as_inner(), 0) }, || {
                    "joining streams".into()
                })?;
                scope.state.borrow_mut().events.push(e);
            }
            stop.record(first)?;
            Some(stop)
        }
        _ => None,
    };
    let synced = scope.synchronize();
    finish.synced = Some(synced.is_ok());
    let elapsed = match (start, stop) {
        (Some(start), Some(stop)) if synced.is_ok() => {
            let ms = stop.elapsed_ms(&start)?;
            gpu.give_events([start, stop]);
            Some(ms)
        }
        _ => None,
    };
    drop(finish);
    let r = result?;
    synced.context("running the queued GPU work")?;
    Ok((r, elapsed))
}

fn fork_join_event(gpu: &Gpu, first: &Stream, others: &[Stream]) -> anyhow::Result<Event> {
    let start = gpu.take_event()?;
    start.record(first)?;
    for s in others {
        // SAFETY: live stream and event handles of this context.
        check(unsafe { sys::cuStreamWaitEvent(s.as_inner(), start.as_inner(), 0) }, || "forking streams".into())?;
    }
    Ok(start)
}

impl Gpu {
    /// Runs `f`, which queues work on `streams`, then synchronizes them all (also on error or panic).
    pub fn scope<'env, R>(
        &'env self,
        streams: &'env [Stream],
        f: impl for<'scope> FnOnce(&'scope Scope<'scope, 'env>) -> anyhow::Result<R>,
    ) -> anyhow::Result<R> {
        run(self, streams, false, f).map(|(r, _)| r)
    }

    /// Like [`Gpu::scope`], and returns the GPU time in milliseconds from before the first operation to
    /// after the last, on any stream (CUDA events: fork on the first stream, join back to it).
    pub fn timed<'env>(
        &'env self,
        streams: &'env [Stream],
        f: impl for<'scope> FnOnce(&'scope Scope<'scope, 'env>) -> anyhow::Result<()>,
    ) -> anyhow::Result<f64> {
        run(self, streams, true, f).map(|(_, t)| t.expect("timed scopes measure"))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn acc(stream: usize, write: bool, bytes: Range<usize>, event: usize) -> Access {
        Access { stream, write, bytes, event }
    }

    #[test]
    fn same_stream_never_waits() {
        let mut t = Tracker::default();
        t.record(acc(0, true, 0..100, 0));
        assert!(t.waits(0, false, &(0..100)).is_empty());
        assert!(t.waits(0, true, &(0..100)).is_empty());
    }

    #[test]
    fn read_after_write_on_another_stream_waits() {
        let mut t = Tracker::default();
        t.record(acc(0, true, 0..100, 7));
        assert_eq!(t.waits(1, false, &(50..60)), vec![7]);
        assert_eq!(t.waits(1, true, &(99..200)), vec![7]);
        assert!(t.waits(1, false, &(100..200)).is_empty(), "disjoint ranges are independent");
    }

    #[test]
    fn reads_do_not_wait_for_reads() {
        let mut t = Tracker::default();
        t.record(acc(0, false, 0..100, 1));
        assert!(t.waits(1, false, &(0..100)).is_empty());
        assert_eq!(t.waits(1, true, &(0..10)), vec![1], "write after read waits");
    }

    #[test]
    fn a_covering_write_replaces_what_it_covers() {
        let mut t = Tracker::default();
        t.record(acc(0, true, 0..50, 1));
        t.record(acc(1, false, 0..50, 2));
        t.record(acc(2, true, 0..100, 3));
        assert_eq!(t.accesses, vec![acc(2, true, 0..100, 3)]);
        assert_eq!(t.waits(0, false, &(10..20)), vec![3]);
    }

    #[test]
    fn double_buffer_reuse_orders_the_next_upload_after_the_download() {
        // copy-in on stream 0, kernel on 1, copy-out on 2; then the next upload into the same buffer.
        let mut t = Tracker::default();
        let b = 0..1024;
        assert!(t.waits(0, true, &b).is_empty());
        t.record(acc(0, true, b.clone(), 0));
        assert_eq!(t.waits(1, true, &b), vec![0]);
        t.record(acc(1, true, b.clone(), 1));
        assert_eq!(t.waits(2, false, &b), vec![1]);
        t.record(acc(2, false, b.clone(), 2));
        let mut w = t.waits(0, true, &b);
        w.sort();
        assert_eq!(w, vec![1, 2], "the upload waits for the kernel and the download");
    }

    #[test]
    fn a_read_keeps_an_earlier_write_of_its_own_stream() {
        let mut t = Tracker::default();
        t.record(acc(0, true, 0..100, 1));
        t.record(acc(0, false, 0..100, 2));
        assert_eq!(t.waits(1, false, &(0..100)), vec![1], "a reader elsewhere still waits for the write");
    }

    #[test]
    fn dev_slices_compute_addresses_and_byte_ranges() {
        let d: Dev<'_, f32> = Dev { scope: 1, buffer: 0, base: 0x1000, offset: 0, len: 100, _marker: PhantomData };
        let s = d.slice(10..30).slice(5..10);
        assert_eq!((s.offset, s.len), (15, 5));
        assert_eq!(s.ptr(), 0x1000 + 60);
        assert_eq!(s.access(true).bytes, 60..80);
    }

    #[test]
    #[should_panic(expected = "out of bounds")]
    fn dev_slice_out_of_bounds_panics_like_a_slice() {
        let d: Dev<'_, f32> = Dev { scope: 1, buffer: 0, base: 0, offset: 0, len: 10, _marker: PhantomData };
        let _ = d.slice(5..11);
    }
}
