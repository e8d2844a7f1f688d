//! Checking GPU results against a CPU reference, on every core.

use anyhow::bail;
use serde::Serialize;

use crate::report::fmt_count;

/// The outcome of comparing results with the CPU reference.
#[derive(Clone, Debug, Serialize)]
pub struct Check {
    /// Elements compared; fewer than `total` when only a sample was checked.
    pub checked: usize,
    /// Which elements, in words, when not all.
    pub sample: Option<String>,
    pub total: usize,
    pub mismatches: usize,
    /// (index, got, expected) of the first mismatch.
    pub first: Option<(usize, f32, f32)>,
    pub max_abs_err: f64,
    /// 0 for bit-exact comparison.
    pub tolerance: f64,
    /// Why nothing was compared, where nothing could be (a kernel without a CPU twin).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub not_checked: Option<String>,
}

impl Check {
    /// Nothing compared, and why: for results no CPU reference exists for.
    pub fn unchecked(total: usize, why: &str) -> Check {
        Check { not_checked: Some(why.into()), ..Check::none_yet(total, None, 0.0) }
    }

    /// A comparison of `total` elements before any is compared.
    fn none_yet(total: usize, sample: Option<String>, tolerance: f64) -> Check {
        Check { checked: 0, sample, total, mismatches: 0, first: None, max_abs_err: 0.0, tolerance, not_checked: None }
    }

    pub fn passed(&self) -> bool {
        self.mismatches == 0 && self.checked > 0
    }

    /// One line for the lesson's output.
    pub fn summary(&self) -> String {
        if let Some(why) = &self.not_checked {
            return format!("not verified: {why}");
        }
        let what = match &self.sample {
            _ if self.checked == self.total => format!("all {} elements", fmt_count(self.total)),
            Some(which) => format!("{} of {} elements ({which})", fmt_count(self.checked), fmt_count(self.total)),
            None => format!(
                "{} of {} elements (every {}th)",
                fmt_count(self.checked),
                fmt_count(self.total),
                self.total.div_ceil(self.checked.max(1))
            ),
        };
        let how = if self.tolerance == 0.0 {
            "exactly".to_string()
        } else {
            format!("within {:e} (max error {:.1e})", self.tolerance, self.max_abs_err)
        };
        match self.first {
            None if self.checked > 0 => format!("verified: {what} match the CPU reference {how}"),
            None => "verification checked nothing".into(),
            Some((i, got, want)) => format!(
                "FAILED: {} of {what} differ from the CPU reference; first at [{i}]: got {got}, expected {want}",
                fmt_count(self.mismatches)
            ),
        }
    }

    /// An error (with the summary) unless every checked element matched.
    pub fn ensure(&self) -> anyhow::Result<()> {
        if !self.passed() && self.not_checked.is_none() {
            bail!("{}", self.summary());
        }
        Ok(())
    }
}

/// Compares `got[i]` with `expected(i)` bit for bit (NaN never matches).
pub fn exact(got: &[f32], expected: impl Fn(usize) -> f32 + Sync) -> Check {
    compare(got, (0..got.len()).collect(), None, 0.0, expected)
}

/// Compares within an absolute tolerance, every `stride`-th element (1 = all): for references too
/// slow to compute in full, or kernels whose math library differs from the CPU's.
pub fn within(got: &[f32], stride: usize, tolerance: f64, expected: impl Fn(usize) -> f32 + Sync) -> Check {
    compare(got, (0..got.len()).step_by(stride.max(1)).collect(), None, tolerance, expected)
}

/// Compares every chunk of `chunking` where a chunking mistake would show (its first and last elements)
/// and at `spread` more places spread evenly across it: a check whose cost does not grow with the data,
/// for references that cost the CPU far more than the GPU. `tolerance` 0 means bit for bit.
pub fn chunks(
    got: &[f32],
    chunking: &crate::Chunking,
    spread: usize,
    tolerance: f64,
    expected: impl Fn(usize) -> f32 + Sync,
) -> Check {
    assert_eq!(got.len(), chunking.elements, "the results do not match the plan");
    let mut indices = Vec::with_capacity(chunking.chunks * (spread + 2));
    for c in chunking.iter() {
        let (first, last) = (c.offset, c.offset + c.len - 1);
        indices.push(first);
        indices.extend((1..=spread).map(|k| first + k * (c.len - 1) / (spread + 1)));
        indices.push(last);
    }
    indices.dedup();
    let per_chunk = format!("the first, the last and {spread} spread between, of each of {} chunks", chunking.chunks);
    compare(got, indices, Some(per_chunk), tolerance, expected)
}

fn compare(
    got: &[f32],
    indices: Vec<usize>,
    sample: Option<String>,
    tolerance: f64,
    expected: impl Fn(usize) -> f32 + Sync,
) -> Check {
    let threads = std::thread::available_parallelism().map_or(1, |n| n.get()).min(64);
    let part = indices.len().div_ceil(threads).max(1);
    let partials: Vec<Check> = std::thread::scope(|s| {
        let handles: Vec<_> = indices
            .chunks(part)
            .map(|idx| {
                let expected = &expected;
                s.spawn(move || {
                    let mut c = Check::none_yet(got.len(), None, tolerance);
                    for &i in idx {
                        let (g, e) = (got[i], expected(i));
                        let err = (g as f64 - e as f64).abs();
                        let ok =
                            if tolerance == 0.0 { g.to_bits() == e.to_bits() && !g.is_nan() } else { err <= tolerance };
                        if !err.is_nan() {
                            c.max_abs_err = c.max_abs_err.max(err);
                        }
                        c.checked += 1;
                        if !ok {
                            c.mismatches += 1;
                            c.first.get_or_insert((i, g, e));
                        }
                    }
                    c
                })
            })
            .collect();
        handles.into_iter().map(|h| h.join().expect("verification thread")).collect()
    });
    partials.into_iter().fold(Check::none_yet(got.len(), sample, tolerance), |mut acc, c| {
        acc.checked += c.checked;
        acc.mismatches += c.mismatches;
        acc.first = acc.first.or(c.first);
        acc.max_abs_err = acc.max_abs_err.max(c.max_abs_err);
        acc
    })
}

/// A sum of every element's bits, reading as fast as the CPU can (independent lanes, no float-add
/// latency chain): for timing how fast the CPU reads a kind of memory, and comparing two copies.
pub fn checksum(data: &[f32]) -> u32 {
    data.chunks(16)
        .fold([0u32; 16], |mut acc, c| {
            c.iter().zip(acc.iter_mut()).for_each(|(x, a)| *a = a.wrapping_add(x.to_bits()));
            acc
        })
        .iter()
        .fold(0, |s, a| s.wrapping_add(*a))
}

/// Deterministic input data: distinct-looking, never zero, in (0, 1). Lessons never time on zeros.
pub fn input(i: usize) -> f32 {
    let h = (i as u64).wrapping_mul(2_654_435_761) % 16_777_213;
    (h + 1) as f32 / 16_777_216.0
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn exact_match_and_first_mismatch() {
        let v: Vec<f32> = (0..10_000).map(|i| i as f32).collect();
        assert!(exact(&v, |i| i as f32).passed());
        let c = exact(&v, |i| if i == 7777 || i == 9000 { -1.0 } else { i as f32 });
        assert_eq!((c.mismatches, c.first), (2, Some((7777, 7777.0, -1.0))));
        assert!(c.ensure().unwrap_err().to_string().contains("first at [7777]"));
    }

    #[test]
    fn nan_never_matches() {
        assert!(!exact(&[f32::NAN], |_| f32::NAN).passed());
    }

    #[test]
    fn tolerance_and_sampling() {
        let v = vec![1.0f32; 1000];
        let c = within(&v, 10, 1e-3, |_| 1.0005);
        assert!(c.passed());
        assert_eq!(c.checked, 100);
        assert!(c.summary().contains("every 10th"));
        assert!(!within(&v, 1, 1e-4, |_| 1.0005).passed());
    }

    #[test]
    fn chunk_checks_see_every_chunks_edges() {
        let chunking = crate::Chunking::new(1_000_003, 7, 3).unwrap();
        let good: Vec<f32> = (0..chunking.elements).map(|i| i as f32).collect();
        let c = chunks(&good, &chunking, 10, 0.0, |i| i as f32);
        assert!(c.passed() && c.checked <= 7 * 12 && c.checked >= 7 * 2, "{c:?}");
        assert!(c.summary().contains("of each of 7 chunks"), "{}", c.summary());
        for edge in [0, 142_857, 142_858, 571_431, 571_432, 1_000_002] {
            let mut bad = good.clone();
            bad[edge] = -1.0;
            assert!(!chunks(&bad, &chunking, 10, 0.0, |i| i as f32).passed(), "a wrong element at {edge} is missed");
        }
    }

    #[test]
    fn empty_input_is_not_a_pass() {
        assert!(!exact(&[], |_| 0.0).passed());
    }

    #[test]
    fn input_is_never_zero_and_varies() {
        let v: Vec<f32> = (0..100_000).map(input).collect();
        assert!(v.iter().all(|&x| x > 0.0 && x < 1.0));
        assert!(v.windows(2).filter(|w| w[0] != w[1]).count() > 99_000);
    }
}
