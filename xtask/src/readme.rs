//! README.md's figures, made from `results/<machine>/figures.json` (`cargo xtask results`): the
//! headline comparisons, each against its reference measured in the same call, and the lessons' table
//! with the figure each prints. A tidy test holds README.md to what this makes from the committed file.

use crate::results::{FigureResult, MachineResults};

/// What a lesson shows, in a line, and which of its figures the table quotes.
struct Row {
    lesson: &'static str,
    shows: &'static str,
    /// The first figure whose name contains every one of these words (the largest such copy, where
    /// `largest`), else none.
    pick: &'static [&'static str],
    largest: bool,
}

const fn row(lesson: &'static str, shows: &'static str, pick: &'static [&'static str], largest: bool) -> Row {
    Row { lesson, shows, pick, largest }
}

/// Every lesson, in the order a reader meets them.
#[rustfmt::skip]
const ROWS: [Row; 15] = [
    row("pinned_memory", "pageable against pinned (and write-combined, pinned in place) memory, both ways, over sizes; each fitted as t = α + n/β", &["pinned H2D"], true),
    row("async_memcpy", "cudaMemcpy against cudaMemcpyAsync: the same GPU time, the host free meanwhile", &["async", "GPU time"], false),
    row("overlap", "one stream against K streams of upload, kernel, download; each held against a bound measured on the same data", &["streams"], false),
    row("overlap_sweep", "the overlap loop over 1-32 streams and 4-128 chunks, each against its bound", &["chunks"], false),
    row("vector_add_streams", "a copy-bound pipeline (C = A + B): why overlap gives about 1.4x here, from its bound", &["streams"], false),
    row("zero_copy", "kernels on mapped host memory against copy in, compute, copy out", &["zero-copy"], true),
    row("double_buffering", "two device buffers used in turn, ordered by the program's own events", &["buffers"], false),
    row("staged_copy", "a pageable Vec at near-pinned speed through a ring of pinned buffers", &["staged"], true),
    row("bidirectional", "both directions at once against each alone", &["both"], true),
    row("managed_memory", "managed memory on demand, prefetched, and pinned with copies", &["prefetched"], false),
    row("every_gpu", "every GPU alone, then all at once", &["GPU 0"], false),
    row("latency", "one small copy each way, and one read of mapped and device memory", &["pinned", "gpu"], false),
    row("planner", "the best chunk and stream counts for a kernel, predicted (a model) and run", &[], false),
    row("small_copies", "many small buffers every way there is: a copy each, batched, packed, a graph, zero-copy", &["1000 x 4 KiB", "packed", "wall"], false),
    row("your_kernel", "a kernel of your own through the scope, checked against the CPU: the program to copy", &[], false),
];

/// The block README.md holds between its markers.
pub fn block(r: &MachineResults) -> String {
    let mut s = format!(
        "Measured on {} (x{}, driver {}) by `cargo xtask results`: each figure the median over {} runs, round \
         after round, with the runs' range in brackets; the whole record, with the commit it ran, is \
         [results/{}/](results/{}/README.md).\n\n",
        r.gpu,
        r.gpus,
        r.driver.as_deref().unwrap_or("unknown"),
        r.runs,
        r.machine_id,
        r.machine_id
    );
    let headlines = headlines(r);
    if !headlines.is_empty() {
        s += &headlines.join("\n");
        s += "\n\n";
    }
    s += "| lesson | what it shows | a figure it printed |\n| --- | --- | --- |\n";
    for row in &ROWS {
        let figure = r.lessons.get(row.lesson).and_then(|l| pick(&l.figures, row)).map_or_else(
            || match r.lessons.get(row.lesson) {
                Some(l) if !l.errors.is_empty() => format!("failed: {}", l.errors[0]),
                Some(_) => "(checks its result; times nothing it names)".to_string(),
                None => "not run".to_string(),
            },
            quote,
        );
        s += &format!("| `{}` | {} | {} |\n", row.lesson, row.shows, figure);
    }
    s
}

/// The figure a row quotes.
fn pick<'a>(figures: &'a [FigureResult], row: &Row) -> Option<&'a FigureResult> {
    if row.pick.is_empty() {
        return None;
    }
    let matching = figures.iter().filter(|f| row.pick.iter().all(|w| f.name.contains(w)));
    if row.largest {
        matching.max_by_key(|f| f.bytes.unwrap_or(0))
    } else {
        matching.into_iter().next()
    }
}

/// `pinned H2D 64 MiB: 54.6 GB/s (54.5-54.7)`, or in ms where no bytes are given.
fn quote(f: &FigureResult) -> String {
    let (lo, hi) = f.range_ms();
    match f.bytes {
        Some(b) => {
            let g = |ms: f64| b as f64 / (ms * 1e-3) / 1e9;
            format!("{}: {:.2} GB/s ({:.2}-{:.2})", f.name, g(f.median_ms), g(hi), g(lo))
        }
        None => format!("{}: {} ({}-{})", f.name, ms(f.median_ms), ms(lo), ms(hi)),
    }
}

fn ms(x: f64) -> String {
    if x < 1.0 {
        format!("{:.1} µs", x * 1e3)
    } else {
        format!("{x:.2} ms")
    }
}

/// The headline comparisons, each against its reference from the same call, where both are there.
fn headlines(r: &MachineResults) -> Vec<String> {
    let mut out = Vec::new();
    let pinned = r.lessons.get("pinned_memory").map(|l| &l.figures[..]).unwrap_or(&[]);
    let largest = |dir: &str| {
        pinned
            .iter()
            .filter(|f| f.name.starts_with(&format!("pinned {dir} ")) && f.bytes.is_some())
            .max_by_key(|f| f.bytes)
    };
    let nvb = r.references.iter().find(|x| x.label.starts_with("nvbandwidth"));
    for (dir, test) in [("H2D", "host_to_device_memcpy_ce"), ("D2H", "device_to_host_memcpy_ce")] {
        if let (Some(f), Some(v)) = (largest(dir), nvb.and_then(|n| n.values.get(test))) {
            let (lo, hi) = range(v);
            out.push(format!(
                "- Pinned copies {dir}: {} against NVIDIA's nvbandwidth ({test}) {lo:.2}-{hi:.2} GB/s in the same call.",
                quote(f)
            ));
        }
    }
    for (case, what) in [
        ("memset / scope, one stream", "one operation on one stream"),
        ("memset / scope, 4 streams, one range", "an operation the scope must order after another stream's"),
    ] {
        if let Some(c) = r.scope_price.iter().find(|c| c.case == case) {
            if let Some(ratio) = c.ratio {
                let (lo, hi) = range(&c.ratios);
                out.push(format!(
                    "- The scope's price, {what}: {ratio:.3}x the bare driver calls made in the same run \
                     (processes {lo:.3}-{hi:.3}; `benches/scope`)."
                ));
            }
        }
    }
    out
}

fn range(v: &[f64]) -> (f64, f64) {
    (v.iter().copied().fold(f64::INFINITY, f64::min), v.iter().copied().fold(f64::NEG_INFINITY, f64::max))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_lesson_has_a_row() {
        let mut rows: Vec<&str> = ROWS.iter().map(|r| r.lesson).collect();
        let mut lessons: Vec<&str> = crate::lessons::LESSONS.iter().map(|l| l.name).collect();
        rows.sort_unstable();
        lessons.sort_unstable();
        assert_eq!(rows, lessons);
    }

    #[test]
    fn a_row_quotes_the_largest_matching_copy() {
        let f = |name: &str, bytes, ms| FigureResult {
            name: name.into(),
            clock: "gpu".into(),
            bytes: Some(bytes),
            median_ms: ms,
            runs_ms: vec![ms],
            bound_ms: None,
        };
        let figures = [
            f("pinned H2D 4 KiB", 4096, 0.01),
            f("pinned H2D 64 MiB", 64 << 20, 1.25),
            f("pageable H2D 64 MiB", 64 << 20, 9.0),
        ];
        let picked = pick(&figures, &ROWS[0]).unwrap();
        assert_eq!(picked.name, "pinned H2D 64 MiB");
        assert!(quote(picked).starts_with("pinned H2D 64 MiB: 53.69 GB/s"), "{}", quote(picked));
    }
}
