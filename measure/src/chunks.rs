//! How N elements are split into chunks, and chunks dealt round-robin to streams.

use std::ops::Range;

use serde::Serialize;

use crate::error::bad_args;

/// `bail!` with a [`crate::error::BadArgs`]: a chunking is made from the flags, so what is wrong with it is theirs.
macro_rules! bad {
    ($($arg:tt)*) => { return Err(bad_args(format!($($arg)*))) };
}

/// `elements` split into `chunks` nearly equal, never empty chunks (the first `elements % chunks` are
/// one longer), chunk `i` on stream `i % streams`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
pub struct Chunking {
    pub elements: usize,
    pub chunks: usize,
    pub streams: usize,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Chunk {
    pub index: usize,
    pub offset: usize,
    pub len: usize,
    pub stream: usize,
}

impl Chunk {
    pub fn range(&self) -> Range<usize> {
        self.offset..self.offset + self.len
    }
}

impl Chunking {
    pub fn new(elements: usize, chunks: usize, streams: usize) -> anyhow::Result<Chunking> {
        if elements == 0 {
            bad!("the size must be at least one element");
        }
        if chunks == 0 {
            bad!("--chunks must be at least 1");
        }
        if streams == 0 {
            bad!("--streams must be at least 1");
        }
        if chunks > elements {
            bad!("--chunks {chunks} is more than the {elements} elements: a chunk would be empty");
        }
        if streams > chunks {
            bad!("--streams {streams} is more than --chunks {chunks}: some streams would have nothing to do");
        }
        Ok(Chunking { elements, chunks, streams })
    }

    pub fn chunk(&self, index: usize) -> Chunk {
        assert!(index < self.chunks, "chunk {index} of {}", self.chunks);
        let (base, extra) = (self.elements / self.chunks, self.elements % self.chunks);
        let offset = index * base + index.min(extra);
        let len = base + usize::from(index < extra);
        Chunk { index, offset, len, stream: index % self.streams }
    }

    pub fn iter(&self) -> impl Iterator<Item = Chunk> + '_ {
        (0..self.chunks).map(|i| self.chunk(i))
    }

    /// The longest chunk: what a per-stream device buffer must hold.
    pub fn max_chunk(&self) -> usize {
        self.elements.div_ceil(self.chunks)
    }

    /// `data` cut into the chunking's chunks, for async reads.
    pub fn split<'a, T>(&self, data: &'a [T]) -> Vec<&'a [T]> {
        assert_eq!(data.len(), self.elements, "the data does not match the plan");
        self.iter().map(|c| &data[c.range()]).collect()
    }

    /// `data` cut into disjoint mutable chunks, so async copies into different chunks can run at once.
    pub fn split_mut<'a, T>(&self, mut data: &'a mut [T]) -> Vec<&'a mut [T]> {
        assert_eq!(data.len(), self.elements, "the data does not match the plan");
        self.iter()
            .map(|c| {
                let (head, tail) = std::mem::take(&mut data).split_at_mut(c.len);
                data = tail;
                head
            })
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn chunks_cover_every_element_once_even_for_a_prime() {
        let n = 1_000_003; // prime: divides by nothing
        for chunks in [1, 2, 3, 7, 64, 1000] {
            let p = Chunking::new(n, chunks, 1).unwrap();
            let mut next = 0;
            for c in p.iter() {
                assert_eq!(c.offset, next);
                assert!(c.len > 0 && c.len <= p.max_chunk());
                next += c.len;
            }
            assert_eq!(next, n);
            let lens: Vec<_> = p.iter().map(|c| c.len).collect();
            assert!(lens.iter().max().unwrap() - lens.iter().min().unwrap() <= 1);
        }
    }

    #[test]
    fn streams_round_robin() {
        let p = Chunking::new(100, 10, 4).unwrap();
        let s: Vec<_> = p.iter().map(|c| c.stream).collect();
        assert_eq!(s, [0, 1, 2, 3, 0, 1, 2, 3, 0, 1]);
    }

    #[test]
    fn bad_plans_say_why() {
        let err = |e, c, s| Chunking::new(e, c, s).unwrap_err().to_string();
        assert!(err(0, 1, 1).contains("at least one element"));
        assert!(err(10, 0, 1).contains("--chunks"));
        assert!(err(10, 1, 0).contains("--streams"));
        assert!(err(10, 11, 1).contains("empty"));
        assert!(err(10, 4, 5).contains("more than --chunks"));
        assert!(Chunking::new(10, 10, 10).is_ok());
        let e = Chunking::new(10, 0, 1).unwrap_err();
        assert_eq!(crate::error::ErrorKind::of(&e), crate::error::ErrorKind::BadArguments);
    }

    #[test]
    fn split_mut_gives_disjoint_chunks() {
        let p = Chunking::new(10, 3, 2).unwrap();
        let mut v: Vec<usize> = vec![0; 10];
        for (c, part) in p.iter().zip(p.split_mut(&mut v)) {
            part.fill(c.index + 1);
        }
        assert_eq!(v, [1, 1, 1, 1, 2, 2, 2, 3, 3, 3]);
        assert_eq!(p.split(&v)[1], &[2, 2, 2]);
    }
}
