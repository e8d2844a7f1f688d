//! README.md's figures, made from `results/<machine>/figures.json` (`cargo xtask results`): the
//! headline comparisons, each against its reference measured in the same call, and the lessons' table
//! with the figure each prints. A tidy test holds README.md to what this makes from the committed file.

use crate::results::{range, FigureResult, MachineResults};

/// What a lesson shows, in a line, and which of its figures the table quotes, by name.
struct Row {
    lesson: &'static str,
    shows: &'static str,
    /// The figures quoted, each by its exact name.
    quote: &'static [&'static str],
    /// Whether to quote a rate (GB/s, over the bytes the figure moved) rather than a time.
    rate: bool,
}

const fn row(lesson: &'static str, shows: &'static str, quote: &'static [&'static str], rate: bool) -> Row {
    Row { lesson, shows, quote, rate }
}

/// Every lesson, in the order a reader meets them.
#[rustfmt::skip]
const ROWS: [Row; 15] = [
    row("pinned_memory", "pageable against pinned (and write-combined, pinned in place) memory, both ways, over sizes; each fitted as t = α + n/β",
        &["pageable H2D 64 MiB", "pinned H2D 64 MiB"], true),
    row("async_memcpy", "cudaMemcpy against cudaMemcpyAsync: the same GPU time, the host free meanwhile",
        &["synchronous: host in the calls", "asynchronous: host in the calls"], false),
    row("overlap", "one stream against K streams of upload, kernel, download, each against a bound measured on the same data",
        &["one stream", "4 streams"], false),
    row("overlap_sweep", "the overlap loop over 1-32 streams and 4-128 chunks, each against its bound",
        &["16 chunks / 1 streams", "16 chunks / 4 streams"], false),
    row("vector_add_streams", "a copy-bound pipeline (C = A + B): what overlap can give here, from its bound",
        &["one stream", "4 streams"], false),
    row("zero_copy", "kernels on mapped host memory against copy in, compute, copy out",
        &["zero-copy, one pass, 64 MiB", "copy+kernel+copy, one pass, 64 MiB"], false),
    row("double_buffering", "two device buffers used in turn, ordered by the program's own events",
        &["1 buffer", "2 buffers, 3 streams"], false),
    row("staged_copy", "a pageable Vec at near-pinned speed through a ring of pinned buffers",
        &["pageable H2D 64 MiB", "staged from pageable H2D 64 MiB", "pinned H2D 64 MiB"], true),
    row("bidirectional", "both directions at once against each alone",
        &["H2D alone 1 GiB", "both at once 1 GiB"], true),
    row("managed_memory", "managed memory on demand, prefetched, and pinned with copies",
        &["64 MiB / on demand / gpu", "64 MiB / prefetched / gpu", "64 MiB / explicit copies / gpu"], false),
    row("every_gpu", "every GPU alone, then all at once",
        &["GPU 0 alone: H2D", "GPU 0 alone: both"], true),
    row("latency", "one small copy each way, and one read of mapped and device memory",
        &["pinned H2D 4 B / gpu", "pinned H2D 4 B / caller waits"], false),
    row("planner", "the best chunk and stream counts for a kernel, predicted by a model and run",
        &[], false),
    row("small_copies", "many small buffers every way there is: a copy each (and the same loop coalesced by the scope), batched, packed, a graph, zero-copy",
        &["1000 x 4 KiB / memcpy each / wall", "1000 x 4 KiB / packed + scatter kernel / wall"], false),
    row("your_kernel", "a kernel of your own through the scope, checked against the CPU: the program to copy",
        &[], false),
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
        let figures = match r.lessons.get(row.lesson) {
            None => "not run".to_string(),
            Some(l) if !l.errors.is_empty() => format!("failed: {}", l.errors[0]),
            Some(l) => {
                let quoted: Vec<String> = picks(&l.figures, row).iter().map(|f| quote(f, row.rate)).collect();
                match quoted.is_empty() {
                    true => "(its result checked against the CPU; see its page)".to_string(),
                    false => quoted.join("; "),
                }
            }
        };
        s += &format!("| `{}` | {} | {} |\n", row.lesson, row.shows, figures);
    }
    s
}

/// The figures a row quotes, in its order; the first figure where it names none.
fn picks<'a>(figures: &'a [FigureResult], row: &Row) -> Vec<&'a FigureResult> {
    if row.quote.is_empty() {
        return figures.first().filter(|_| row.lesson == "planner").into_iter().collect();
    }
    row.quote.iter().filter_map(|name| figures.iter().find(|f| f.name == *name)).collect()
}

/// `pinned H2D 64 MiB: 54.6 GB/s (54.5-54.7)`, or a time with the runs' range; a bound where it was
/// held against one.
fn quote(f: &FigureResult, rate: bool) -> String {
    let (lo, hi) = f.range_ms();
    let bound = f.bound_ms.map_or(String::new(), |b| format!(", bound {}", ms(b)));
    match f.bytes.filter(|_| rate) {
        Some(b) => {
            let g = |ms: f64| b as f64 / (ms * 1e-3) / 1e9;
            format!("{}: {:.2} GB/s ({:.2}-{:.2}{bound})", f.name, g(f.median_ms), g(hi), g(lo))
        }
        None => format!("{}: {} ({}-{}{bound})", f.name, ms(f.median_ms), ms(lo), ms(hi)),
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
                quote(f, true)
            ));
        }
    }
    for (case, what) in [
        ("memset: scope, one stream", "one operation on one stream"),
        ("memset: scope, 4 streams, one range", "an operation the scope must order after another stream's"),
        ("memcpy each: 1000 x 4 KiB, scope, 1 stream", "a copy a buffer, 1000 buffers of 4 KiB up and back"),
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
    if let Some(l) = r.lessons.get("small_copies") {
        let find = |way: &str| l.figures.iter().find(|f| f.name == format!("1000 x 4 KiB / {way} / wall"));
        if let (Some(each), Some(packed)) = (find("memcpy each"), find("packed + scatter kernel")) {
            out.push(format!(
                "- Many small copies, 1000 buffers of 4 KiB up and back, wall time: a copy a buffer {}, packed \
                 {}: {:.1}x faster, in the same run (`small_copies`).",
                ms(each.median_ms),
                ms(packed.median_ms),
                each.median_ms / packed.median_ms
            ));
        }
    }
    if let Some(l) = r.lessons.get("overlap") {
        let find = |name: &str| l.figures.iter().find(|f| f.name == name);
        if let (Some(one), Some(four)) = (find("one stream"), find("4 streams")) {
            if let Some(bound) = four.bound_ms {
                out.push(format!(
                    "- Copies overlapped with kernels on 4 streams: {} against {} on one, and {:.2} of the bound \
                     the same run measured ({}; `overlap`).",
                    ms(four.median_ms),
                    ms(one.median_ms),
                    four.median_ms / bound,
                    ms(bound)
                ));
            }
        }
    }
    out
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
    fn a_row_quotes_its_figures_by_name() {
        let f = |name: &str, bytes, ms| FigureResult {
            name: name.into(),
            clock: figures::Clock::Gpu,
            memory: None,
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
        let picked = picks(&figures, &ROWS[0]);
        let names: Vec<&str> = picked.iter().map(|f| f.name.as_str()).collect();
        assert_eq!(names, ["pageable H2D 64 MiB", "pinned H2D 64 MiB"]);
        assert!(quote(picked[1], true).starts_with("pinned H2D 64 MiB: 53.69 GB/s"), "{}", quote(picked[1], true));
        assert!(quote(picked[1], false).starts_with("pinned H2D 64 MiB: 1.25 ms"), "{}", quote(picked[1], false));
    }
}
