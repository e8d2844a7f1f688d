//! Views of the buffers lent to a scope: what copies and launches address, tied to their scope.

use std::{marker::PhantomData, ops::Range};

/// Invariant in `'scope`, like `std::thread::Scope`: a handle of one scope never fits another.
pub(crate) type Invariant<'scope> = PhantomData<fn(&'scope ()) -> &'scope ()>;

/// A device buffer (or mapped host buffer, or managed buffer) lent to a scope, or a sub-range of one,
/// that operations may read and write. Copy it freely; [`Dev::read_only`] makes a view that may only
/// be read.
///
/// ```no_run
/// # fn main() -> cuda_scope::Result<()> {
/// # let gpu = cuda_scope::Gpu::init()?;
/// # let streams = gpu.streams(2)?;
/// # let (host, mut back) = (gpu.pinned_from_fn(1024, |i| i as f32)?, gpu.pinned::<f32>(512)?);
/// let mut d = gpu.alloc::<f32>(1024)?;
/// gpu.scope(&streams, |s| {
///     let d = s.device(&mut d); // a view of the whole buffer, the scope's until it ends
///     s.stream(0).htod(&host, d)?;
///     s.stream(1).dtoh(d.slice(512..1024), &mut back) // ordered after the upload by the scope
/// })?;
/// # Ok(()) }
/// ```
pub struct Dev<'scope, T> {
    pub(crate) scope: u64,
    pub(crate) buffer: usize,
    /// Device address of element 0 of the whole buffer.
    pub(crate) base: u64,
    pub(crate) offset: usize,
    pub(crate) len: usize,
    pub(crate) _marker: PhantomData<(Invariant<'scope>, *const T)>,
}

impl<T> Clone for Dev<'_, T> {
    fn clone(&self) -> Self {
        *self
    }
}
impl<T> Copy for Dev<'_, T> {}

impl<'scope, T> Dev<'scope, T> {
    /// Elements in this view.
    ///
    /// ```no_run
    /// # fn main() -> cuda_scope::Result<()> {
    /// # let gpu = cuda_scope::Gpu::init()?;
    /// # let streams = gpu.streams(1)?;
    /// let mut d = gpu.alloc::<f32>(1024)?;
    /// gpu.scope(&streams, |s| -> cuda_scope::Result<()> {
    ///     let d = s.device(&mut d);
    ///     assert_eq!((d.len(), d.slice(0..100).len()), (1024, 100));
    ///     Ok(())
    /// })?;
    /// # Ok(()) }
    /// ```
    pub fn len(&self) -> usize {
        self.len
    }

    /// Whether the view has no elements.
    ///
    /// ```no_run
    /// # fn main() -> cuda_scope::Result<()> {
    /// # let gpu = cuda_scope::Gpu::init()?;
    /// # let streams = gpu.streams(1)?;
    /// let mut d = gpu.alloc::<f32>(1024)?;
    /// gpu.scope(&streams, |s| -> cuda_scope::Result<()> {
    ///     let d = s.device(&mut d);
    ///     assert!(!d.is_empty() && d.slice(5..5).is_empty());
    ///     Ok(())
    /// })?;
    /// # Ok(()) }
    /// ```
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// The same elements, as a view that operations may only read: a kernel's input, a copy's source.
    ///
    /// ```no_run
    /// # fn main() -> cuda_scope::Result<()> {
    /// # let gpu = cuda_scope::Gpu::init()?;
    /// # let streams = gpu.streams(1)?;
    /// # let mut back = vec![0f32; 1024];
    /// let mut d = gpu.alloc::<f32>(1024)?;
    /// gpu.scope(&streams, |s| {
    ///     let input = s.device(&mut d).read_only(); // copies out of it, launches that read it: nothing writes it
    ///     s.stream(0).dtoh(input, &mut back)
    /// })?;
    /// # Ok(()) }
    /// ```
    pub fn read_only(self) -> DevRead<'scope, T> {
        DevRead(self)
    }

    /// Elements `range` of this view, like `&v[range]` (and, like it, panics when out of bounds).
    ///
    /// ```no_run
    /// # fn main() -> cuda_scope::Result<()> {
    /// # let gpu = cuda_scope::Gpu::init()?;
    /// # let streams = gpu.streams(2)?;
    /// # let host = gpu.pinned_from_fn(1024, |i| i as f32)?;
    /// let mut d = gpu.alloc::<f32>(1024)?;
    /// gpu.scope(&streams, |s| {
    ///     let d = s.device(&mut d);
    ///     let (low, high) = (d.slice(0..512), d.slice(512..1024)); // disjoint: the streams need not wait
    ///     s.stream(0).htod(&host[..512], low)?;
    ///     s.stream(1).htod(&host[512..], high)
    /// })?;
    /// # Ok(()) }
    /// ```
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

    /// This view, read (`write == false`) or written by an operation.
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

/// A view that operations may only read ([`Dev::read_only`]): a copy's source, a kernel argument
/// declared with [`crate::LaunchBuilder::read`]. Nothing that writes accepts one.
///
/// ```no_run
/// # fn main() -> cuda_scope::Result<()> {
/// # let gpu = cuda_scope::Gpu::init()?;
/// # let streams = gpu.streams(1)?;
/// let (mut d, mut copy) = (gpu.alloc::<f32>(1024)?, gpu.alloc::<f32>(1024)?);
/// gpu.scope(&streams, |s| {
///     let src: cuda_scope::DevRead<f32> = s.device(&mut d).read_only();
///     s.stream(0).dtod(src, s.device(&mut copy)) // a source; nothing that writes accepts it
/// })?;
/// # Ok(()) }
/// ```
pub struct DevRead<'scope, T>(Dev<'scope, T>);

impl<T> Clone for DevRead<'_, T> {
    fn clone(&self) -> Self {
        *self
    }
}
impl<T> Copy for DevRead<'_, T> {}

impl<'scope, T> From<Dev<'scope, T>> for DevRead<'scope, T> {
    fn from(d: Dev<'scope, T>) -> Self {
        DevRead(d)
    }
}

impl<'scope, T> DevRead<'scope, T> {
    /// Elements in this view.
    ///
    /// ```no_run
    /// # fn main() -> cuda_scope::Result<()> {
    /// # let gpu = cuda_scope::Gpu::init()?;
    /// # let streams = gpu.streams(1)?;
    /// let mut d = gpu.alloc::<f32>(1024)?;
    /// gpu.scope(&streams, |s| -> cuda_scope::Result<()> {
    ///     assert_eq!(s.device(&mut d).read_only().len(), 1024);
    ///     Ok(())
    /// })?;
    /// # Ok(()) }
    /// ```
    pub fn len(&self) -> usize {
        self.0.len
    }

    /// Whether the view has no elements.
    ///
    /// ```no_run
    /// # fn main() -> cuda_scope::Result<()> {
    /// # let gpu = cuda_scope::Gpu::init()?;
    /// # let streams = gpu.streams(1)?;
    /// let mut d = gpu.alloc::<f32>(1024)?;
    /// gpu.scope(&streams, |s| -> cuda_scope::Result<()> {
    ///     let r = s.device(&mut d).read_only();
    ///     assert!(!r.is_empty() && r.slice(0..0).is_empty());
    ///     Ok(())
    /// })?;
    /// # Ok(()) }
    /// ```
    pub fn is_empty(&self) -> bool {
        self.0.len == 0
    }

    /// Elements `range` of this view, like `&v[range]` (and, like it, panics when out of bounds).
    ///
    /// ```no_run
    /// # fn main() -> cuda_scope::Result<()> {
    /// # let gpu = cuda_scope::Gpu::init()?;
    /// # let streams = gpu.streams(1)?;
    /// # let mut head = vec![0f32; 16];
    /// let mut d = gpu.alloc::<f32>(1024)?;
    /// gpu.scope(&streams, |s| {
    ///     let r = s.device(&mut d).read_only();
    ///     s.stream(0).dtoh(r.slice(0..16), &mut head) // the first 16 elements back
    /// })?;
    /// # Ok(()) }
    /// ```
    pub fn slice(self, range: Range<usize>) -> Self {
        DevRead(self.0.slice(range))
    }

    pub(crate) fn view(&self) -> &Dev<'scope, T> {
        &self.0
    }
}

/// One buffer range an operation reads or writes.
#[derive(Clone, Debug)]
pub(crate) struct DevAccess {
    pub scope: u64,
    pub buffer: usize,
    pub bytes: Range<usize>,
    pub write: bool,
}
