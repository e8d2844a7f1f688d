//! Batches of copies: many copies queued by one call (`cuMemcpyBatchAsync`, CUDA 12.8), which the
//! scope treats as one operation that touches many ranges.
//!
//! ```no_run
//! # fn main() -> cuda_scope::Result<()> {
//! # use cuda_scope::SrcOrder;
//! # let gpu = cuda_scope::Gpu::init()?;
//! # let streams = gpu.streams(1)?;
//! let tensors: Vec<Vec<f32>> = (0..100).map(|i| vec![i as f32; 1024]).collect(); // 100 small buffers
//! let mut back: Vec<Vec<f32>> = vec![vec![0.0; 1024]; 100];
//! let mut d = gpu.alloc::<f32>(100 * 1024)?;
//! gpu.scope(&streams, |s| {
//!     let (d, st) = (s.device(&mut d), s.stream(0));
//!     let dsts: Vec<_> = (0..100).map(|i| d.slice(i * 1024..(i + 1) * 1024)).collect();
//!     let srcs: Vec<&[f32]> = tensors.iter().map(|t| &t[..]).collect();
//!     st.htod_batch(&srcs, &dsts, SrcOrder::Any)?;                 // one call for 100 copies
//!     st.dtoh_batch(&dsts, back.iter_mut().map(|b| &mut b[..]))   // and one back
//! })?;
//! # Ok(()) }
//! ```
//!
//! The borrow rules are a single copy's, for every buffer of the batch: each host source is borrowed
//! (`&[T]`) and each host destination borrowed mutably (`&mut [T]`) until the scope has synchronized;
//! the device ranges are views of the scope, each ordered against the other streams' work on its bytes
//! and recorded for the work after it. Two copies of one batch run in no particular order, so a batch
//! that writes overlapping device bytes twice is refused (two host destinations cannot overlap: each is
//! a `&mut` of its own).
//!
//! An upload may let the driver read its sources out of stream order ([`SrcOrder`]): that is sound here
//! because a source borrowed by the scope cannot be written by anything, host or GPU, until the scope
//! ends. A download's sources are device memory that earlier work on the stream may still be writing,
//! so downloads read them in stream order, always.

use std::cell::Cell;

use serde::Serialize;

use crate::{
    error::{refused, Refusal, Unsupported},
    ffi::{self, CUmemcpyAttributes},
    memory::Element,
    order::{Op, OpInfo},
    scope::ScopeStream,
    view::{Dev, DevRead},
};

/// How the copies of an upload batch may read their host sources (`CUmemcpySrcAccessOrder`).
///
/// ```no_run
/// # fn main() -> cuda_scope::Result<()> {
/// # let gpu = cuda_scope::Gpu::init()?;
/// # let (streams, mut d) = (gpu.streams(1)?, gpu.alloc::<f32>(4096)?);
/// let pieces: Vec<Vec<f32>> = (0..4).map(|i| vec![i as f32; 1024]).collect(); // pageable: a Vec each
/// let srcs: Vec<&[f32]> = pieces.iter().map(|p| &p[..]).collect();
/// gpu.scope(&streams, |s| {
///     let d = s.device(&mut d);
///     let dsts: Vec<_> = (0..4).map(|i| d.slice(i * 1024..(i + 1) * 1024)).collect();
///     s.stream(0).htod_batch(&srcs, &dsts, cuda_scope::SrcOrder::Any) // the driver may read them any time
/// })?;
/// # Ok(()) }
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
pub enum SrcOrder {
    /// In stream order, after the work queued before the batch (`CU_MEMCPY_SRC_ACCESS_ORDER_STREAM`).
    StreamOrder,
    /// Out of stream order, and all of it before the call returns
    /// (`CU_MEMCPY_SRC_ACCESS_ORDER_DURING_API_CALL`): the driver may take the sources during the call.
    DuringCall,
    /// Out of stream order, also after the call returns (`CU_MEMCPY_SRC_ACCESS_ORDER_ANY`): meant for
    /// memory allocated outside CUDA (`malloc`, a `Vec`).
    Any,
}

impl SrcOrder {
    /// The three, in the order cuda.h lists them.
    pub const ALL: [SrcOrder; 3] = [SrcOrder::StreamOrder, SrcOrder::DuringCall, SrcOrder::Any];

    fn raw(self) -> i32 {
        match self {
            SrcOrder::StreamOrder => ffi::CU_MEMCPY_SRC_ACCESS_ORDER_STREAM,
            SrcOrder::DuringCall => ffi::CU_MEMCPY_SRC_ACCESS_ORDER_DURING_API_CALL,
            SrcOrder::Any => ffi::CU_MEMCPY_SRC_ACCESS_ORDER_ANY,
        }
    }

    /// In a few words: `stream order`, `during the call`, `any order`.
    ///
    /// ```
    /// for order in cuda_scope::SrcOrder::ALL {
    ///     println!("sources read in {}", order.describe()); // stream order, during the call, any order
    /// }
    /// ```
    pub fn describe(self) -> &'static str {
        match self {
            SrcOrder::StreamOrder => "stream order",
            SrcOrder::DuringCall => "during the call",
            SrcOrder::Any => "any order",
        }
    }
}

/// Whether this driver has `cuMemcpyBatchAsync` (CUDA 12.8, driver 570, or newer); if not, why not,
/// in one line. The batch calls refuse with the same line.
///
/// ```
/// match cuda_scope::batch_support() {
///     Ok(()) => println!("one cuMemcpyBatchAsync for many copies"),
///     Err(why) => println!("copies one call each: {why}"),
/// }
/// ```
pub fn batch_support() -> crate::Result<()> {
    ffi::memcpy_batch().map(|_| ()).map_err(|why| Unsupported { what: "cuMemcpyBatchAsync".into(), why }.into())
}

/// One copy of a batch: destination, source, bytes.
type Entry = (u64, u64, usize);

/// Which way a batch copies: where its sources and destinations lie, as hints to the driver (which uses
/// them only for managed and system memory), on the scope's device.
#[derive(Clone, Copy)]
enum Way {
    Up,
    Down,
}

/// The one set of attributes a batch's copies share.
fn attributes(way: Way, order: SrcOrder, device: i32) -> CUmemcpyAttributes {
    let host = ffi::CUmemLocation { type_: ffi::CU_MEM_LOCATION_TYPE_HOST, id: 0 };
    let gpu = ffi::CUmemLocation { type_: ffi::CU_MEM_LOCATION_TYPE_DEVICE, id: device };
    let (src, dst) = match way {
        Way::Up => (host, gpu),
        Way::Down => (gpu, host),
    };
    CUmemcpyAttributes { srcAccessOrder: order.raw(), srcLocHint: src, dstLocHint: dst, flags: 0 }
}

/// Queues `entries` with one `cuMemcpyBatchAsync` on `stream`, all with attributes `attrs`; notes the
/// index of a copy the driver reports as failed in `failed`.
///
/// # Safety
/// Every entry's source and destination are live ranges of its bytes that nothing reads or writes while
/// the copy may run (the GPU's own work on them ordered by the stream), no two destinations overlap, and
/// a source read out of stream order holds what it will hold when the stream reaches the batch.
unsafe fn queue(
    batch: ffi::PFN_cuMemcpyBatchAsync_v12080,
    entries: &[Entry],
    attrs: CUmemcpyAttributes,
    failed: &Cell<Option<usize>>,
    stream: ffi::CUstream,
) -> ffi::CuResult {
    if entries.is_empty() {
        return ffi::SUCCESS; // the driver refuses an empty batch; there is nothing to copy
    }
    let mut dsts: Vec<u64> = entries.iter().map(|e| e.0).collect();
    let mut srcs: Vec<u64> = entries.iter().map(|e| e.1).collect();
    let mut sizes: Vec<usize> = entries.iter().map(|e| e.2).collect();
    let mut attrs = [attrs];
    let mut attrs_idxs = [0usize];
    let mut fail = usize::MAX;
    // SAFETY: three arrays of `entries.len()` elements and one attribute that applies from copy 0, as
    // the call documents, and a valid out-pointer; the caller guarantees each copy's ranges.
    let code = unsafe {
        batch(
            dsts.as_mut_ptr(),
            srcs.as_mut_ptr(),
            sizes.as_mut_ptr(),
            entries.len(),
            attrs.as_mut_ptr(),
            attrs_idxs.as_mut_ptr(),
            1,
            &mut fail,
            stream,
        )
    };
    failed.set((fail < entries.len()).then_some(fail));
    code
}

impl<'scope> ScopeStream<'scope, '_> {
    /// `cuMemcpyBatchAsync`: copy `i` uploads `srcs[i]` into `dsts[i]`, all queued by one call on
    /// this stream, in no particular order among themselves. `order` says whether the driver may read the
    /// sources out of stream order (sound for any source: the scope keeps every source unwritten until
    /// it ends). Refused before anything is queued where the lists differ in length, a copy's source and
    /// destination differ in length, two destinations overlap, or the driver has no batched copy
    /// ([`batch_support`]). From pageable memory too.
    ///
    /// ```no_run
    /// # fn main() -> cuda_scope::Result<()> {
    /// # let gpu = cuda_scope::Gpu::init()?;
    /// # let (streams, mut d) = (gpu.streams(1)?, gpu.alloc::<u8>(100 * 4096)?);
    /// let tiles: Vec<Vec<u8>> = (0..100).map(|i| vec![i as u8; 4096]).collect();
    /// let srcs: Vec<&[u8]> = tiles.iter().map(|t| &t[..]).collect();
    /// gpu.scope(&streams, |s| {
    ///     let d = s.device(&mut d);
    ///     let dsts: Vec<_> = (0..100).map(|i| d.slice(i * 4096..(i + 1) * 4096)).collect();
    ///     s.stream(0).htod_batch(&srcs, &dsts, cuda_scope::SrcOrder::StreamOrder) // 100 copies, one call
    /// })?;
    /// # Ok(()) }
    /// ```
    pub fn htod_batch<T: Element>(
        self,
        srcs: &[&'scope [T]],
        dsts: &[Dev<'scope, T>],
        order: SrcOrder,
    ) -> crate::Result<()> {
        if srcs.len() != dsts.len() {
            return refused("htod_batch", Refusal::Counts { sources: srcs.len(), destinations: dsts.len() });
        }
        if let Some((i, (s, d))) = srcs.iter().zip(dsts).enumerate().find(|(_, (s, d))| s.len() != d.len()) {
            let why = Box::new(Refusal::Lengths { source: s.len(), destination: d.len() });
            return refused("htod_batch", Refusal::InBatch { index: i, why });
        }
        let batch = ffi::memcpy_batch().map_err(|why| Unsupported { what: "htod_batch".into(), why })?;
        let entries: Vec<Entry> = srcs
            .iter()
            .zip(dsts)
            .filter(|(s, _)| !s.is_empty())
            .map(|(s, d)| (d.ptr(), s.as_ptr() as u64, std::mem::size_of_val(*s)))
            .collect();
        let accesses: Vec<_> = dsts.iter().map(|d| d.access(true)).collect();
        let bytes = entries.iter().map(|e| e.2).sum();
        let failed = Cell::new(None);
        let info = OpInfo::copy(&Op { kind: "H2D", what: "memcpy batch HtoD" }, bytes);
        let attrs = attributes(Way::Up, order, self.scope().env.ctx.device());
        let queued = self.scope().enqueue(self.index(), &accesses, false, info, |s| {
            // SAFETY: each source is borrowed for the whole scope, which synchronizes before the borrow
            // ends, and nothing can write it meanwhile (a GPU write into host memory needs a mutable
            // borrow), so it may be read in or out of stream order; each destination is a live device
            // range of the source's length (checked above) that this scope orders, and no two overlap
            // (enqueue refuses them).
            unsafe { queue(batch, &entries, attrs, &failed, s) }
        });
        with_failed_copy(queued, failed.get())
    }

    /// `cuMemcpyBatchAsync` the other way: copy `i` downloads `srcs[i]` into the `i`th destination, all
    /// queued by one call on this stream, reading the device in stream order. Refused before anything is
    /// queued where the lists differ in length, a copy's source and destination differ in length, or the
    /// driver has no batched copy ([`batch_support`]). Into pageable memory too.
    ///
    /// ```no_run
    /// # fn main() -> cuda_scope::Result<()> {
    /// # let gpu = cuda_scope::Gpu::init()?;
    /// # let (streams, mut d) = (gpu.streams(1)?, gpu.alloc::<u8>(100 * 4096)?);
    /// let mut tiles: Vec<Vec<u8>> = vec![vec![0; 4096]; 100];
    /// gpu.scope(&streams, |s| {
    ///     let d = s.device(&mut d);
    ///     let srcs: Vec<_> = (0..100).map(|i| d.slice(i * 4096..(i + 1) * 4096)).collect();
    ///     s.stream(0).dtoh_batch(&srcs, tiles.iter_mut().map(|t| &mut t[..])) // each Vec lent until the end
    /// })?;
    /// # Ok(()) }
    /// ```
    pub fn dtoh_batch<T: Element, D: Copy + Into<DevRead<'scope, T>>>(
        self,
        srcs: &[D],
        dsts: impl IntoIterator<Item = &'scope mut [T]>,
    ) -> crate::Result<()> {
        let dsts: Vec<&'scope mut [T]> = dsts.into_iter().collect();
        let srcs: Vec<Dev<'scope, T>> = srcs.iter().map(|s| *(*s).into().view()).collect();
        if srcs.len() != dsts.len() {
            return refused("dtoh_batch", Refusal::Counts { sources: srcs.len(), destinations: dsts.len() });
        }
        if let Some((i, (s, d))) = srcs.iter().zip(&dsts).enumerate().find(|(_, (s, d))| s.len() != d.len()) {
            let why = Box::new(Refusal::Lengths { source: s.len(), destination: d.len() });
            return refused("dtoh_batch", Refusal::InBatch { index: i, why });
        }
        let batch = ffi::memcpy_batch().map_err(|why| Unsupported { what: "dtoh_batch".into(), why })?;
        let entries: Vec<Entry> = srcs
            .iter()
            .zip(dsts)
            .filter(|(s, _)| !s.is_empty())
            .map(|(s, d)| (d.as_mut_ptr() as u64, s.ptr(), std::mem::size_of_val(d)))
            .collect();
        let accesses: Vec<_> = srcs.iter().map(|s| s.access(false)).collect();
        let bytes = entries.iter().map(|e| e.2).sum();
        let failed = Cell::new(None);
        let info = OpInfo::copy(&Op { kind: "D2H", what: "memcpy batch DtoH" }, bytes);
        let attrs = attributes(Way::Down, SrcOrder::StreamOrder, self.scope().env.ctx.device());
        let queued = self.scope().enqueue(self.index(), &accesses, false, info, |s| {
            // SAFETY: each destination is borrowed mutably for the whole scope, which synchronizes before
            // the borrow ends, so nothing else reads or writes it, and no two alias (each is a `&mut` of
            // its own); each source is a live device range of the destination's length that this scope
            // orders, read in stream order; T is an Element, so whatever bits arrive are a valid T.
            unsafe { queue(batch, &entries, attrs, &failed, s) }
        });
        with_failed_copy(queued, failed.get())
    }
}

/// The error of a batch, with the copy the driver said failed, where it said.
fn with_failed_copy(queued: crate::Result<()>, failed: Option<usize>) -> crate::Result<()> {
    match (queued, failed) {
        (Err(e), Some(i)) => {
            Err(e.doing_also(format!("copy {i} of the batch (among those with bytes to copy) failed")))
        }
        (r, _) => r,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_batch_says_which_way_it_copies_and_how_it_may_read() {
        let up = attributes(Way::Up, SrcOrder::Any, 3);
        assert_eq!(up.srcAccessOrder, ffi::CU_MEMCPY_SRC_ACCESS_ORDER_ANY);
        assert_eq!((up.srcLocHint.type_, up.dstLocHint.type_, up.dstLocHint.id), (2, 1, 3));
        let down = attributes(Way::Down, SrcOrder::StreamOrder, 0);
        assert_eq!(down.srcAccessOrder, ffi::CU_MEMCPY_SRC_ACCESS_ORDER_STREAM);
        assert_eq!((down.srcLocHint.type_, down.dstLocHint.type_, down.flags), (1, 2, 0));
    }
}
