//! The buffers the lesson moves: sets of them by their sizes ([`BufferSet`]), the grid of sets the flags
//! ask for, and where each buffer of a set lies in host, device and packed memory ([`BufferPlacement`]).
//!
//! Every way does the same round trip: every buffer up into its place in one device arena, then every
//! buffer back into its own host buffer, as a server does for a request (inputs up, results back).
//! The host buffers lie apart (in a scrambled order, 64-byte aligned) as separate tensors would; the
//! arena holds them in order, 256-byte aligned, as `cudaMalloc` would each.

use std::ops::Range;

use anyhow::bail;
use serde::Serialize;

use measure::{
    args::{parse_bytes, parse_count},
    report::fmt_bytes,
};

/// The most buffers a set may have (each size of `--plan`, and every count of `--counts`).
pub const MOST_BUFFERS: usize = 1_000_000;

/// A set of buffers, by their sizes in bytes, in the order a program names them.
#[derive(Clone, Debug, Serialize)]
pub struct BufferSet {
    pub name: String,
    pub sizes: Vec<usize>,
    /// (count, size) where every buffer is as large as the others.
    pub uniform: Option<(usize, usize)>,
}

impl BufferSet {
    /// `count` buffers of `size` bytes.
    pub fn uniform(count: usize, size: usize) -> BufferSet {
        let name = format!("{count} x {}", fmt_bytes(size));
        BufferSet { name, sizes: vec![size; count], uniform: Some((count, size)) }
    }

    /// Shaped like a model's tensors, a few large and many small, layer after layer: in each of four
    /// layers a 2 MiB weight, four of 192 KiB, sixteen of 12 KiB, forty of 1.5 KiB (norms, biases) and
    /// twenty-five scalars of 4 bytes: 344 buffers, 12 MiB.
    pub fn model() -> BufferSet {
        let layer = [(1, 2 << 20), (4, 192 << 10), (16, 12 << 10), (40, 1536), (25, 4)];
        let sizes = (0..4).flat_map(|_| layer.iter().flat_map(|&(n, s)| std::iter::repeat_n(s, n))).collect();
        BufferSet { name: "model-like".into(), sizes, uniform: None }
    }

    /// `1MiB*4,16KiB*64,256B*200` (a size, and how many of it), or `model` ([`BufferSet::model`]).
    pub fn parse(spec: &str) -> anyhow::Result<BufferSet> {
        if spec.trim() == "model" {
            return Ok(BufferSet::model());
        }
        let mut sizes = Vec::new();
        for item in spec.split(',').map(str::trim) {
            let (size, count) = item.split_once('*').unwrap_or((item, "1"));
            let size = parse_bytes(size).map_err(|e| anyhow::anyhow!("'{item}': {e}"))?;
            let count = parse_count(count).map_err(|e| anyhow::anyhow!("'{item}': the count {e}"))?;
            if size == 0 {
                bail!("'{item}': a buffer of 0 bytes");
            }
            if count > MOST_BUFFERS {
                bail!("'{item}': at most 1,000,000 buffers of a size");
            }
            sizes.extend(std::iter::repeat_n(size, count));
        }
        if sizes.len() > MOST_BUFFERS {
            bail!("at most 1,000,000 buffers in all");
        }
        let name = format!("{} buffers, {} to {}", sizes.len(), fmt_bytes(min(&sizes)), fmt_bytes(max(&sizes)));
        Ok(BufferSet { name, sizes, uniform: None })
    }

    pub fn count(&self) -> usize {
        self.sizes.len()
    }

    /// All the buffers' bytes (saturating: a set past `usize` is past any machine).
    pub fn bytes(&self) -> usize {
        total(&self.sizes)
    }

    /// `100 x 4 KiB (400 KiB)`, `model-like (344 buffers, 12.0 MiB)`.
    pub fn describe(&self) -> String {
        match self.uniform {
            Some(_) => format!("{} ({} in all)", self.name, fmt_bytes(self.bytes())),
            None => format!("{} ({} buffers, {} in all)", self.name, self.count(), fmt_bytes(self.bytes())),
        }
    }
}

/// The sets the flags ask for: every count with every size, but those whose buffers add up to more than
/// `max_total` each way (left out, and named), then [`BufferSet::model`] where asked.
pub struct SetGrid {
    pub sets: Vec<BufferSet>,
    pub left_out: Vec<String>,
    pub max_total: usize,
}

impl SetGrid {
    pub fn new(counts: &[usize], sizes: &[usize], max_total: usize, model: bool) -> SetGrid {
        let (mut sets, mut left_out) = (Vec::new(), Vec::new());
        for &count in counts {
            for &size in sizes {
                match count.checked_mul(size) {
                    Some(total) if total <= max_total => sets.push(BufferSet::uniform(count, size)),
                    _ => left_out.push(format!("{count} x {}", fmt_bytes(size))),
                }
            }
        }
        if model {
            sets.push(BufferSet::model());
        }
        SetGrid { sets, left_out, max_total }
    }

    /// Where the buffers of every set lie: what a rig for the grid holds.
    pub fn placements(&self) -> Vec<BufferPlacement> {
        self.sets.iter().map(BufferPlacement::new).collect()
    }
}

fn min(v: &[usize]) -> usize {
    v.iter().copied().min().unwrap_or(0)
}

fn max(v: &[usize]) -> usize {
    v.iter().copied().max().unwrap_or(0)
}

fn total(v: &[usize]) -> usize {
    v.iter().fold(0usize, |sum, s| sum.saturating_add(*s))
}

/// Byte `j` of buffer `i`: what every way must bring back.
pub fn byte(i: usize, j: usize) -> u8 {
    (i.wrapping_mul(131).wrapping_add(j.wrapping_mul(7)).wrapping_add(j >> 8) % 251) as u8 + 1
}

/// What the outputs are filled with before a checked run, so that a copy that did not happen shows.
pub const POISON: u8 = 0xA5;

/// `x` rounded up to a multiple of `to`, saturating.
fn align(x: usize, to: usize) -> usize {
    x.div_ceil(to).saturating_mul(to)
}

/// Where each buffer of a set lies: in the host arenas (scrambled, 64-byte aligned), in the device
/// arena (in order, 256-byte aligned) and in the packed staging buffers (in order, 16-byte aligned).
/// Lengths saturate: a set past `usize` needs more than any machine has, and says so.
#[derive(Clone, Debug)]
pub struct BufferPlacement {
    pub sizes: Vec<usize>,
    pub host: Vec<usize>,
    pub host_len: usize,
    pub device: Vec<usize>,
    pub device_len: usize,
    pub packed: Vec<usize>,
    pub packed_len: usize,
}

impl BufferPlacement {
    pub fn new(set: &BufferSet) -> BufferPlacement {
        let sizes = set.sizes.clone();
        let place = |order: &mut dyn Iterator<Item = usize>, to: usize| {
            let mut at = vec![0; sizes.len()];
            let mut end = 0usize;
            for i in order {
                at[i] = end;
                end = align(end.saturating_add(sizes[i]), to);
            }
            (at, end.max(1))
        };
        let mut scrambled: Vec<usize> = (0..sizes.len()).collect();
        scrambled.sort_by_key(|&i| (i as u64).wrapping_mul(0x9E37_79B9_7F4A_7C15).rotate_left(17));
        let (host, host_len) = place(&mut scrambled.into_iter(), 64);
        let (device, device_len) = place(&mut (0..sizes.len()), 256);
        let (packed, packed_len) = place(&mut (0..sizes.len()), 16);
        BufferPlacement { sizes, host, host_len, device, device_len, packed, packed_len }
    }

    pub fn count(&self) -> usize {
        self.sizes.len()
    }

    pub fn bytes(&self) -> usize {
        total(&self.sizes)
    }

    pub fn largest(&self) -> usize {
        max(&self.sizes)
    }

    pub fn host_range(&self, i: usize) -> Range<usize> {
        self.host[i]..self.host[i] + self.sizes[i]
    }

    pub fn device_range(&self, i: usize) -> Range<usize> {
        self.device[i]..self.device[i] + self.sizes[i]
    }

    pub fn packed_range(&self, i: usize) -> Range<usize> {
        self.packed[i]..self.packed[i] + self.sizes[i]
    }

    /// The table of the copy kernel (`kernels.copy_by_table`): (offset in the packed buffer, in the
    /// arena, bytes) of each buffer.
    pub fn packed_table(&self) -> Vec<u64> {
        self.table(&self.packed)
    }

    /// The same with the host arena in place of the packed buffer: zero-copy's table.
    pub fn host_table(&self) -> Vec<u64> {
        self.table(&self.host)
    }

    fn table(&self, from: &[usize]) -> Vec<u64> {
        (0..self.count()).flat_map(|i| [from[i] as u64, self.device[i] as u64, self.sizes[i] as u64]).collect()
    }

    /// The host buffers of the set in `arena` (a host arena), in the set's order.
    pub fn host_slices<'a>(&self, arena: &'a [u8]) -> Vec<&'a [u8]> {
        (0..self.count()).map(|i| &arena[self.host_range(i)]).collect()
    }

    /// The same, to write into.
    pub fn host_slices_mut<'a>(&self, arena: &'a mut [u8]) -> Vec<&'a mut [u8]> {
        slices_mut(arena, (0..self.count()).map(|i| self.host_range(i)))
    }
}

/// `buf`'s disjoint `ranges` as slices of their own, in the order given.
pub fn slices_mut<'a>(buf: &'a mut [u8], ranges: impl Iterator<Item = Range<usize>>) -> Vec<&'a mut [u8]> {
    let ranges: Vec<Range<usize>> = ranges.collect();
    let mut order: Vec<usize> = (0..ranges.len()).collect();
    order.sort_by_key(|&i| ranges[i].start);
    let mut out: Vec<Option<&'a mut [u8]>> = (0..ranges.len()).map(|_| None).collect();
    let (mut rest, mut at) = (buf, 0);
    for i in order {
        let r = &ranges[i];
        assert!(r.start >= at, "slices_mut: ranges overlap");
        let (_, tail) = std::mem::take(&mut rest).split_at_mut(r.start - at);
        let (mine, tail) = tail.split_at_mut(r.len());
        out[i] = Some(mine);
        (rest, at) = (tail, r.end);
    }
    out.into_iter().map(|s| s.expect("every range")).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sets_parse_and_describe_themselves() {
        let s = BufferSet::parse("1MiB*4, 16KiB*64,256").unwrap();
        assert_eq!(s.count(), 69);
        assert_eq!(s.bytes(), 4 * (1 << 20) + 64 * 16384 + 256);
        assert_eq!(s.name, "69 buffers, 256 B to 1 MiB");
        assert_eq!(BufferSet::parse("model").unwrap().count(), 344);
        assert!(BufferSet::parse("0*4").unwrap_err().to_string().contains("0 bytes"));
        let count = BufferSet::parse("4KiB*x").unwrap_err().to_string();
        assert_eq!(count, "'4KiB*x': the count 'x' is not a whole number");
        assert!(BufferSet::parse("4TiB*2").unwrap_err().to_string().contains("unknown unit"));
        let m = BufferSet::model();
        assert!(m.bytes() > 11 << 20 && m.bytes() < 13 << 20, "{}", m.bytes());
        assert_eq!(BufferSet::uniform(100, 4096).describe(), "100 x 4 KiB (400 KiB in all)");
    }

    #[test]
    fn the_grid_leaves_out_what_is_too_large_and_ends_with_the_model() {
        let grid = SetGrid::new(&[10, 1000], &[256, 1 << 20], 32 << 20, true);
        let names: Vec<&str> = grid.sets.iter().map(|s| s.name.as_str()).collect();
        assert_eq!(names, ["10 x 256 B", "10 x 1 MiB", "1000 x 256 B", "model-like"]);
        assert_eq!(grid.left_out, ["1000 x 1 MiB"]);
        let overflows = SetGrid::new(&[usize::MAX], &[2], usize::MAX, false);
        assert_eq!(overflows.left_out.len(), 1, "a total that overflows is left out");
        assert!(SetGrid::new(&[1], &[1], 1, false).sets.iter().all(|s| s.uniform.is_some()));
    }

    #[test]
    fn placements_keep_buffers_apart_and_aligned() {
        let p = BufferPlacement::new(&BufferSet::model());
        let n = p.count();
        for (place, align_to) in [(&p.host, 64), (&p.device, 256), (&p.packed, 16)] {
            let mut spans: Vec<(usize, usize)> = (0..n).map(|i| (place[i], place[i] + p.sizes[i])).collect();
            assert!(spans.iter().all(|s| s.0 % align_to == 0));
            spans.sort();
            assert!(spans.windows(2).all(|w| w[0].1 <= w[1].0), "overlapping buffers");
        }
        assert!(p.device.windows(2).all(|w| w[0] < w[1]), "the arena holds them in order");
        assert!(p.packed.windows(2).all(|w| w[0] < w[1]), "so does the packed buffer (the packed way counts on it)");
        assert!(!p.host.windows(2).all(|w| w[0] < w[1]), "the host buffers lie scrambled");
        assert!(p.packed_len <= p.bytes() + 16 * n && p.device_len >= p.bytes());
        let table = p.packed_table();
        assert_eq!(table.len(), 3 * n);
        assert_eq!(&table[3..6], &[p.packed[1] as u64, p.device[1] as u64, p.sizes[1] as u64]);
    }

    #[test]
    fn a_set_past_usize_saturates_its_placement() {
        let huge = BufferSet::parse("17179869183GiB*2").unwrap();
        assert_eq!(huge.bytes(), usize::MAX);
        let p = BufferPlacement::new(&huge);
        assert_eq!((p.host_len, p.device_len, p.packed_len), (usize::MAX, usize::MAX, usize::MAX));
    }

    #[test]
    fn slices_come_back_in_the_order_asked() {
        let mut buf: Vec<u8> = (0..10).collect();
        let s = slices_mut(&mut buf, [6..8, 0..2, 3..3].into_iter());
        assert_eq!((&*s[0], &*s[1], s[2].len()), (&[6u8, 7][..], &[0u8, 1][..], 0));
    }
}
