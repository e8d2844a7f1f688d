//! Views of the buffers lent to a scope: what copies and launches address, tied to their scope.

use std::{marker::PhantomData, ops::Range};

/// Invariant in `'scope`, like `std::thread::Scope`: a handle of one scope never fits another.
pub(crate) type Invariant<'scope> = PhantomData<fn(&'scope ()) -> &'scope ()>;

/// A device buffer (or mapped host buffer, or managed buffer) lent to a scope, or a sub-range of one,
/// that operations may read and write. Copy it freely; [`Dev::read_only`] makes a view that may only
/// be read.
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
    pub fn len(&self) -> usize {
        self.len
    }

    /// Whether the view has no elements.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// The same elements, as a view that operations may only read: a kernel's input, a copy's source.
    pub fn read_only(self) -> DevRead<'scope, T> {
        DevRead(self)
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
    pub fn len(&self) -> usize {
        self.0.len
    }

    /// Whether the view has no elements.
    pub fn is_empty(&self) -> bool {
        self.0.len == 0
    }

    /// Elements `range` of this view, like `&v[range]` (and, like it, panics when out of bounds).
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
