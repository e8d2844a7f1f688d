//! compare on synthetic runs shaped as the lessons write them, with times and spreads like this project's runs.

use serde_json::json;

use super::*;
use crate::drift::{DriftTable, Scale};

/// A `Stats` object: `median` ms, runs spread by `spread` (relative) around it: the fastest
/// `spread` below, the third quartile half of it above.
fn stats(median: f64, spread: f64) -> Value {
    json!({
        "median_ms": median, "min_ms": median * (1.0 - spread), "q3_ms": median * (1.0 + spread / 2.0),
        "max_ms": median * (1.0 + spread), "runs": 10, "cv": spread / 2.0,
    })
}

fn figure(name: &str, median: f64, spread: f64) -> Value {
    json!({ "name": name, "stats": stats(median, spread), "clock": "gpu" })
}

fn doc(result: Value, figures: Vec<Value>) -> Value {
    json!({ "schema_version": 2, "machine": {}, "result": result, "figures": figures })
}

/// The provisional table: what these tests hold changes against, whatever the shipped table becomes.
fn table() -> DriftTable {
    DriftTable::provisional()
}

/// Every kind at `drift`.
fn uniform(drift: f64) -> DriftTable {
    let mut t = DriftTable::provisional();
    t.rows.iter_mut().for_each(|r| r.drift = drift);
    t
}

fn verdicts(c: &Comparison) -> Vec<(&str, Verdict)> {
    c.changes.iter().filter(|c| c.verdict != Verdict::Same).map(|c| (c.name.as_str(), c.verdict)).collect()
}

/// pinned_memory's 64 figures: four kinds, both ways, 4 KiB to 64 MiB, with times like this project's
/// runs (a pinned copy 5.9 µs + n / 55 GB/s; pageable 9 µs + n / 10 GB/s) and their spreads;
/// `wobble(kind, dir, bytes)` is B's time over A's.
fn pinned_sweep(wobble: impl Fn(&str, &str, usize) -> f64) -> [Value; 2] {
    let mut figures = [Vec::new(), Vec::new()];
    for p in 0..8 {
        let bytes = 4096 * 4usize.pow(p);
        for (kind, alpha_us, gbps, spread) in [
            ("pageable", 9.0, 10.0, 0.06),
            ("pinned", 5.9, 55.0, 0.02),
            ("write-combined", 6.0, 54.0, 0.02),
            ("pinned in place", 6.1, 54.5, 0.02),
        ] {
            for dir in ["H2D", "D2H"] {
                let ms = alpha_us * 1e-3 + bytes as f64 / (gbps * 1e9) * 1e3;
                let spread = if ms < 0.05 { 2.0 * spread } else { spread / 4.0 };
                let name = format!("{kind} {dir} {}", fmt_bytes(bytes));
                let memory = match kind {
                    "pageable" => "pageable",
                    "pinned" => "pinned",
                    "write-combined" => "write-combined",
                    _ => "registered",
                };
                let f = |ms: f64| json!({ "name": name, "stats": stats(ms, spread), "clock": "gpu", "memory": memory, "transfer_bytes": bytes });
                figures[0].push(f(ms));
                figures[1].push(f(ms * wobble(kind, dir, bytes)));
            }
        }
    }
    let [a, b] = figures;
    [doc(json!({ "sizes": [4096] }), a), doc(json!({ "sizes": [4096] }), b)]
}

/// A deterministic number in [-1, 1] for a name.
fn jiggle(name: &str) -> f64 {
    let h = name.bytes().fold(0u64, |h, b| h.wrapping_mul(31).wrapping_add(b as u64));
    ((h % 1000) as f64 / 999.0) * 2.0 - 1.0
}

/// How two quiet runs of pinned_memory moved in this project's runs: large pinned copies by about a percent,
/// microsecond copies by up to 30% (one of two times), pageable copies by up to 35% (D2H at 64 MiB).
fn quiet(kind: &str, dir: &str, bytes: usize) -> f64 {
    let name = format!("{kind}{dir}{bytes}");
    match (kind, bytes) {
        ("pageable", b) if dir == "D2H" && b == 64 << 20 => 0.65,
        ("pageable", b) if dir == "D2H" && b == 4 << 20 => 0.76,
        ("pageable", _) => 1.0 + 0.3 * jiggle(&name),
        (_, b) if b < (16 << 20) => 1.0 + 0.3 * jiggle(&name),
        _ => 1.0 + 0.015 * jiggle(&name),
    }
}

/// small_copies' JSON for `sets` (count, size): every way's wall, GPU and host times, as the lesson
/// wrote it before it named its figures (`sets[i].ways[j]`); `time(set, way, what, ms)` gives B's.
fn small_result(sets: &[(usize, usize)], time: impl Fn(&str, &str, &str, f64) -> f64) -> Value {
    let ways = [
        "memcpy each",
        "memcpy each, 4 streams",
        "batch, any order",
        "batch, any order, pageable",
        "packed + scatter kernel",
    ];
    let sets: Vec<Value> = sets
        .iter()
        .map(|&(count, size)| {
            let set = format!("{count} x {}", fmt_bytes(size));
            let ways: Vec<Value> = ways
                .iter()
                .map(|way| {
                    let per = if way.contains("pageable") { 0.020 } else { 0.007 };
                    let ms = count as f64 * per + 2.0 * (count * size) as f64 / 55e6;
                    let t = |what: &str, ms: f64| stats(time(&set, way, what, ms), 0.01);
                    json!({ "name": way, "wall": t("wall", ms), "gpu": t("gpu", 0.9 * ms), "host": t("host", 0.7 * ms), "gbps": 1.0 })
                })
                .collect();
            json!({ "set": set, "count": count, "bytes": count * size, "uniform": [count, size], "one_copy_ms": 0.1, "ways": ways })
        })
        .collect();
    json!({ "repeats": { "warmup": 2, "repeats": 10 }, "streams": 4, "sets": sets })
}

/// The same run as this version writes it: its figures named `SET / WAY / what`, as
/// `SetRun::figures` (examples/small_copies/results.rs) names them.
fn small_named(result: Value) -> Value {
    let mut figures = Vec::new();
    for run in result["sets"].as_array().unwrap() {
        let (set, each) =
            (run["set"].as_str().unwrap(), run["bytes"].as_u64().unwrap() / run["count"].as_u64().unwrap());
        for w in run["ways"].as_array().unwrap() {
            let way = w["name"].as_str().unwrap();
            let memory = if way.ends_with("pageable") { "pageable" } else { "pinned" };
            for (what, clock) in [("wall", "host"), ("gpu", "gpu"), ("host", "host")] {
                let name = format!("{set} / {way} / {what}");
                figures.push(
                    json!({ "name": name, "stats": w[what], "clock": clock, "memory": memory, "transfer_bytes": each }),
                );
            }
        }
    }
    doc(result, figures)
}

const SETS: [(usize, usize); 4] = [(10, 4096), (100, 4096), (1000, 4096), (10, 1 << 20)];

#[test]
fn two_quiet_runs_stay_quiet() {
    let [a, b] = pinned_sweep(quiet);
    let c = compare(&a, &b, &table());
    assert_eq!((c.matched, c.changes.len()), (Matched::Names, 64));
    assert_eq!(verdicts(&c), [], "{}", report(&c, true));
    assert_eq!(summary(&c), "0 of 64 figures changed; 0 ambiguous");
    assert_eq!(report(&c, false), "", "a quiet pair lists nothing");
    // small_copies, as two quiet runs showed it: one memcpy per buffer held the host 5.4 ms then 8.6, a batch
    // from pageable memory took 19.5 ms then 48.8, the rest moved by up to 20%.
    let a = small_named(small_result(&SETS, |_, _, _, ms| ms));
    let b = small_named(small_result(&SETS, |set, way, what, ms| {
        if way == "memcpy each" && what == "host" {
            ms * 8.6 / 5.4
        } else if way.ends_with("pageable") && set.ends_with("KiB") {
            ms * 48.8 / 19.5
        } else if way.ends_with("pageable") {
            ms * 1.35
        } else if what == "gpu" && set.ends_with("MiB") {
            ms * (1.0 + 0.03 * jiggle(&format!("{set}{way}{what}")))
        } else {
            ms * (1.0 + 0.2 * jiggle(&format!("{set}{way}{what}")))
        }
    }));
    let c = compare(&a, &b, &table());
    assert_eq!(c.changes.len(), 60);
    assert_eq!(verdicts(&c), [], "{}", report(&c, true));
    assert_eq!(summary(&c), "0 of 60 figures changed; 0 ambiguous");
}

#[test]
fn a_thirty_percent_slowdown_of_a_large_pinned_copy_is_found() {
    let [a, b] =
        pinned_sweep(
            |kind, dir, bytes| {
                if kind == "pinned" && dir == "H2D" && bytes == 64 << 20 {
                    1.3
                } else {
                    quiet(kind, dir, bytes)
                }
            },
        );
    let c = compare(&a, &b, &table());
    assert_eq!(verdicts(&c), [("pinned H2D 64 MiB", Verdict::Slower)], "{}", report(&c, false));
    let slow = c.changes.iter().find(|c| c.verdict == Verdict::Slower).unwrap();
    assert_eq!(slow.kind.to_string(), "gpu, pinned, large, 0.1-2 ms");
    let text = report(&c, false);
    let lines: Vec<&str> = text.lines().collect();
    assert!(lines[0].starts_with("figure") && lines[0].ends_with("change   drift  verdict"), "{text}");
    assert!(
        lines[1]
            == "pinned H2D 64 MiB  gpu, pinned, large, 0.1-2 ms  1.226 ms  1.594 ms  +30.0%  ±10.0%  slower, past its \
                     drift and A's runs (q3 +0.2%)",
        "{text}"
    );
    assert_eq!(summary(&c), "1 of 64 figures changed: 1 slower (a regression), 0 faster; 0 ambiguous");
    // The same 30% on a 7 µs copy is within what microsecond copies move from one process to the next.
    let [a, b] = pinned_sweep(|kind, dir, bytes| if bytes == 4096 { 1.3 } else { quiet(kind, dir, bytes) });
    assert_eq!(verdicts(&compare(&a, &b, &table())), []);
    // ... and three times as long is found.
    let [a, b] =
        pinned_sweep(|kind, dir, bytes| if kind == "pinned" && bytes == 4096 { 3.0 } else { quiet(kind, dir, bytes) });
    let c = compare(&a, &b, &table());
    assert_eq!(verdicts(&c), [("pinned H2D 4 KiB", Verdict::Slower), ("pinned D2H 4 KiB", Verdict::Slower)]);
}

#[test]
fn a_host_bound_figure_moving_fifty_percent_is_within_its_drift() {
    for (ratio, verdict) in [(1.5, Verdict::Same), (1.0 / 1.5, Verdict::Same), (2.5, Verdict::Slower)] {
        let a = small_named(small_result(&SETS, |_, _, _, ms| ms));
        let b = small_named(small_result(&SETS, |set, way, what, ms| {
            if set == "1000 x 4 KiB" && way == "memcpy each" && what == "host" {
                ms * ratio
            } else {
                ms
            }
        }));
        let c = compare(&a, &b, &table());
        let host = c.changes.iter().find(|c| c.name == "1000 x 4 KiB / memcpy each / host").unwrap();
        assert_eq!(host.kind.to_string(), "host, pinned, small, >=2 ms");
        assert_eq!(host.verdict, verdict, "{ratio}: {host:?}");
    }
    // The same 50% on a GPU-bound figure of the same time is a regression.
    let a = doc(json!({}), vec![figure("one stream", 7.0, 0.01)]);
    let b = doc(json!({}), vec![figure("one stream", 10.5, 0.01)]);
    assert_eq!(verdicts(&compare(&a, &b, &table())), [("one stream", Verdict::Slower)]);
}

#[test]
fn a_change_within_the_runs_own_spread_is_ambiguous() {
    // 4 streams: 10 ms, its runs up to 11.5 ms (q3); B 11 ms. Past its drift (5%), not past A's runs.
    let wide = |median: f64| json!({ "name": "4 streams", "stats": { "median_ms": median, "min_ms": 8.4, "q3_ms": 11.5, "max_ms": 14.0, "runs": 10, "cv": 0.1 }, "clock": "gpu" });
    let a = doc(json!({}), vec![wide(10.0), figure("one stream", 20.0, 0.002)]);
    let b = doc(json!({}), vec![figure("4 streams", 11.0, 0.002), figure("one stream", 20.1, 0.002)]);
    let c = compare(&a, &b, &table());
    assert_eq!(verdicts(&c), [("4 streams", Verdict::Ambiguous)]);
    assert!(
        c.changes[0].why().starts_with("ambiguous: past its drift, not A's runs with it (q3 +15.0%)"),
        "{}",
        c.changes[0].why()
    );
    assert_eq!(summary(&c), "0 of 2 figures changed; 1 ambiguous");
    // Faster than its drift allows, but A's fastest run was as fast: ambiguous; faster than that: faster.
    let b = doc(json!({}), vec![figure("4 streams", 9.0, 0.002)]);
    assert_eq!(verdicts(&compare(&a, &b, &table())), [("4 streams", Verdict::Ambiguous)]);
    let b = doc(json!({}), vec![figure("4 streams", 7.5, 0.002)]);
    let c = compare(&a, &b, &table());
    assert_eq!(verdicts(&c), [("4 streams", Verdict::Faster)]);
    assert_eq!(summary(&c), "1 of 1 figures changed: 0 slower, 1 faster; 0 ambiguous");
    // Beyond A's slowest quartile and its drift: slower, whatever B's own spread.
    let b = doc(json!({}), vec![wide(12.5)]);
    assert_eq!(verdicts(&compare(&a, &b, &table())), [("4 streams", Verdict::Slower)]);
    // A run made before the quartile was recorded: median + 0.675 cv, at most its slowest run.
    let old = json!({ "median_ms": 10.0, "min_ms": 9.0, "max_ms": 10.4, "runs": 10, "cv": 0.1 });
    let r = Reading::of("x".into(), &old, Clock::Gpu, MemoryKind::Pinned).unwrap();
    assert_eq!((r.lo_ms, r.hi_ms), (9.0, 10.4));
    let r =
        Reading::of("x".into(), &json!({ "median_ms": 10.0, "runs": 1, "cv": 0.0 }), Clock::Gpu, MemoryKind::Pinned)
            .unwrap();
    assert_eq!((r.lo_ms, r.hi_ms), (10.0, 10.0));
}

/// Files in a fresh folder under the system's temporary one.
fn folder(name: &str, files: &[(&str, &Value)]) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("xtask-compare-{}-{name}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    for (file, v) in files {
        std::fs::write(dir.join(file), v.to_string()).unwrap();
    }
    dir
}

fn flags(a: &Path, b: &Path, drift: &Path) -> CompareFlags {
    CompareFlags {
        a: Some(a.into()),
        b: Some(b.into()),
        baseline: vec![],
        all: false,
        drift: Some(drift.into()),
        calibrate: None,
        out: None,
        interleave: Default::default(),
    }
}

#[test]
fn the_exit_code_says_whether_a_figure_is_slower() {
    let [a, quiet_b] = pinned_sweep(quiet);
    let [_, slow_b] = pinned_sweep(|kind, dir, bytes| if bytes == 64 << 20 { 1.85 } else { quiet(kind, dir, bytes) });
    let [_, fast_b] = pinned_sweep(|kind, dir, bytes| if bytes == 64 << 20 { 0.5 } else { quiet(kind, dir, bytes) });
    let provisional = table().to_json();
    let dir =
        folder("exit", &[("a.json", &a), ("quiet.json", &quiet_b), ("slow.json", &slow_b), ("fast.json", &fast_b)]);
    let drift = dir.join("drift.table");
    std::fs::write(&drift, provisional).unwrap();
    let code = |b: &str| run(flags(&dir.join("a.json"), &dir.join(b), &drift)).unwrap();
    assert_eq!((code("quiet.json"), code("slow.json"), code("fast.json")), (0, 1, 0));
    // Files that cannot be compared are an error (exit 2 from `main`).
    assert!(run(flags(&dir.join("a.json"), &dir.join("missing.json"), &drift)).is_err());
    let other = folder("exit-other", &[("b.json", &json!({ "schema_version": 3, "result": {} }))]);
    assert!(run(flags(&dir.join("a.json"), &other.join("b.json"), &drift)).unwrap_err().to_string().contains("schema"));
    // Two folders: their files of the same name, a line each; slower in one is slower in all.
    let before = folder("before", &[("pinned_memory.json", &a), ("latency.json", &a)]);
    let after = folder("after", &[("pinned_memory.json", &slow_b), ("latency.json", &quiet_b), ("extra.json", &a)]);
    assert_eq!(run(flags(&before, &after, &drift)).unwrap(), 1);
    let after = folder("after-quiet", &[("pinned_memory.json", &quiet_b), ("latency.json", &quiet_b)]);
    assert_eq!(run(flags(&before, &after, &drift)).unwrap(), 0);
    assert_eq!(pairs(&before, &after).unwrap().len(), 2);
    assert!(pairs(&before, &dir.join("a.json")).is_err(), "a folder against a file");
    for d in [dir, other, before, after] {
        let _ = std::fs::remove_dir_all(d);
    }
    let _ = std::fs::remove_dir_all(std::env::temp_dir().join(format!("xtask-compare-{}-after", std::process::id())));
}

#[test]
fn runs_made_before_small_copies_and_latency_named_their_figures_are_matched_by_meaning() {
    let old = json!({ "schema_version": 1, "result": small_result(&SETS, |_, _, _, ms| ms) });
    let new = small_named(small_result(&SETS, |set, way, what, ms| {
        if set == "10 x 1 MiB" && way == "batch, any order" && what == "gpu" {
            ms * 1.5
        } else {
            ms
        }
    }));
    let c = compare(&old, &new, &table());
    assert_eq!((c.matched, c.changes.len()), (Matched::Learned("A"), 60));
    assert!(c.only_in_a.is_empty() && c.only_in_b.is_empty(), "{:?} {:?}", c.only_in_a, c.only_in_b);
    assert_eq!(verdicts(&c), [("10 x 1 MiB / batch, any order / gpu", Verdict::Slower)]);
    assert!(report(&c, false).contains("note: A named no figures (made before its lesson named them)"));
    let kinds: BTreeSet<String> = c.changes.iter().map(|c| c.kind.to_string()).collect();
    assert!(
        kinds.contains("host, pageable, small, 0.1-2 ms") && kinds.contains("gpu, pinned, large, 0.1-2 ms"),
        "{kinds:?}"
    );
    // Both old: named the same way.
    assert_eq!(compare(&old, &old, &table()).matched, Matched::Learned("A and B"));
    // --plan's run.
    let plan = json!({ "result": { "plan": { "run": small_result(&[(4, 2 << 20)], |_, _, _, ms| ms)["sets"][0] } } });
    let names: Vec<String> = learned(&plan["result"]).into_iter().map(|r| r.name).collect();
    assert_eq!(names[..2], ["4 x 2 MiB / memcpy each / wall", "4 x 2 MiB / memcpy each / gpu"]);

    // latency: one copy each way from pinned and pageable memory, and two chases.
    let copy = |memory: &str, direction: &str, gpu: f64, host: f64| json!({ "memory": memory, "direction": direction, "bytes": 4, "gpu": stats(gpu, 0.05), "host": stats(host, 0.05) });
    let read = |memory: &str, ms: f64| json!({ "memory": memory, "accesses": 4096, "launch": stats(ms, 0.01), "half_launch": stats(ms / 2.0, 0.01), "ns_per_read": 1199.0 });
    let old = json!({ "result": {
        "copies": [copy("pinned", "H2D", 0.0063, 0.0088), copy("pageable", "D2H", 0.0109, 0.0147)],
        "reads": [read("mapped host", 4.9), read("device", 1.4)],
    } });
    let names: Vec<String> = learned(&old["result"]).into_iter().map(|r| r.name).collect();
    assert_eq!(
        names,
        [
            "pinned H2D 4 B / gpu",
            "pinned H2D 4 B / caller waits",
            "pageable D2H 4 B / gpu",
            "pageable D2H 4 B / caller waits",
            "mapped host memory, chase of 4096 reads / gpu",
            "mapped host memory, chase of 2048 reads / gpu",
            "device memory, chase of 4096 reads / gpu",
            "device memory, chase of 2048 reads / gpu",
        ]
    );
    let named: Vec<Value> = learned(&old["result"])
        .iter()
        .map(|r| {
            let clock = if r.name.ends_with("caller waits") { "host" } else { "gpu" };
            let ms = if r.name.starts_with("device memory, chase of 4096") { r.ms * 1.3 } else { r.ms };
            json!({ "name": r.name, "stats": stats(ms, 0.01), "clock": clock })
        })
        .collect();
    let c = compare(&old, &doc(old["result"].clone(), named), &table());
    assert_eq!(c.matched, Matched::Learned("A"));
    assert_eq!(verdicts(&c), [("device memory, chase of 4096 reads / gpu", Verdict::Slower)]);
    let kind = |name: &str| c.changes.iter().find(|c| c.name == name).unwrap().kind.to_string();
    assert_eq!(kind("pinned H2D 4 B / caller waits"), "host, pinned, small, <0.1 ms");
    assert_eq!(kind("pageable D2H 4 B / gpu"), "gpu, pageable, small, <0.1 ms");
    assert_eq!(kind("mapped host memory, chase of 4096 reads / gpu"), "gpu, pinned, large, >=2 ms");
}

#[test]
fn kinds_come_from_the_run_never_from_the_name() {
    let kind = |r: &Reading| Change::new("x".into(), "lesson", Measure::Time, r, r, &table()).unwrap().kind.to_string();
    // A name that says pageable, host and 4 KiB says nothing: the figure's fields decide.
    let mut r = reading("pageable H2D 4 KiB / host", 0.006);
    assert_eq!(kind(&r), "gpu, pinned, large, <0.1 ms");
    (r.clock, r.memory, r.transfer_bytes) = (Clock::Host, MemoryKind::Pageable, Some(4096));
    assert_eq!(kind(&r), "host, pageable, small, <0.1 ms");
    r.memory = MemoryKind::Managed;
    assert_eq!(kind(&r), "host, pageable, small, <0.1 ms", "managed memory is paged on the CPU's side too");
    (r.memory, r.transfer_bytes) = (MemoryKind::Mapped, Some(64 << 20));
    assert_eq!(kind(&r), "host, pinned, large, <0.1 ms");
    assert_eq!(Scale::of(0.1), Scale::Mid);
    assert_eq!(
        (fmt_bytes(4), fmt_bytes(4096), fmt_bytes(1536 << 20)),
        ("4 B".into(), "4 KiB".into(), "1.5 GiB".into())
    );
    // As a document says them, and schema 1's `cpu_paged` read as pageable.
    let f = |v: u32, extra: Value| {
        let mut f = json!({ "name": "pageable D2H 64 MiB", "stats": stats(6.7, 0.01), "clock": "gpu" });
        f.as_object_mut().unwrap().extend(extra.as_object().unwrap().clone());
        json!({ "schema_version": v, "machine": {}, "result": {}, "figures": [f] })
    };
    let kind_in = |d: &Value| compare(d, d, &table()).changes[0].kind.to_string();
    assert_eq!(kind_in(&f(2, json!({}))), "gpu, pinned, large, >=2 ms", "a figure that says no memory is pinned");
    assert_eq!(kind_in(&f(2, json!({ "memory": "pageable" }))), "gpu, pageable, large, >=2 ms");
    assert_eq!(kind_in(&f(1, json!({ "cpu_paged": true }))), "gpu, pageable, large, >=2 ms");
    assert_eq!(kind_in(&f(1, json!({ "cpu_paged": true, "transfer_bytes": 4096 }))), "gpu, pageable, small, >=2 ms");
}

fn reading(name: &str, ms: f64) -> Reading {
    Reading::of(name.into(), &stats(ms, 0.01), Clock::Gpu, MemoryKind::Pinned).unwrap()
}

/// A loop of large copies both ways on the same GPU, beside a run: it slows what shares the copy
/// engines and the link with it.
#[test]
fn a_copy_loop_beside_a_run_is_found_on_the_figures_it_slows() {
    let [a, b] = pinned_sweep(|kind, dir, bytes| match bytes {
        b if b >= 64 << 20 && kind == "pageable" => 1.9,
        b if b >= 64 << 20 => 1.85,
        _ => quiet(kind, dir, bytes),
    });
    let c = compare(&a, &b, &table());
    let found = verdicts(&c);
    assert_eq!(found.len(), 8, "{}", report(&c, false));
    assert!(found.iter().all(|(name, v)| name.ends_with("64 MiB") && *v == Verdict::Slower), "{found:?}");
    // overlap, its kernel calibrated anew in each run: its runs over their own bounds, and the copies.
    let slow = overlap(1172, (15.4, 15.38), (6.9, 5.58), 0.210, 0.147, 6.9);
    let c = compare(&overlap(1198, (15.7, 15.68), (5.96, 5.65), 0.153, 0.150, 5.6), &slow, &table());
    assert_eq!(
        verdicts(&c),
        [
            ("4 streams", Verdict::Slower),
            ("one chunk's H2D, best", Verdict::Slower),
            ("bound part: copies both ways, best", Verdict::Slower)
        ],
        "{}",
        report(&c, true)
    );
}

/// An overlap run's figures as `measure::report::Output::pipeline` names them.
fn overlap(iters: u32, one: (f64, f64), four: (f64, f64), upload: f64, kernel: f64, copies: f64) -> Value {
    let run = |name: &str, (ms, bound): (f64, f64)| json!({ "name": name, "stats": stats(ms, 0.008), "clock": "gpu", "bound_ms": bound, "depends_on": ["plan", "work"], "calibrated": ["work"] });
    let part = |name: &str, ms: f64, work: bool| {
        let mut f = json!({ "name": name, "stats": { "median_ms": ms, "min_ms": ms, "q3_ms": ms, "max_ms": ms, "runs": 1, "cv": 0.0 }, "clock": "gpu", "best": true, "depends_on": ["plan"] });
        if work {
            f["depends_on"] = json!(["plan", "work"]);
            f["calibrated"] = json!(["work"]);
        }
        f
    };
    doc(
        json!({ "plan": { "chunks": 32, "streams": 4 }, "work": { "Process": iters }, "repeats": { "warmup": 2, "repeats": 10 } }),
        vec![
            run("one stream", one),
            run("4 streams", four),
            part("one chunk's H2D, best", upload, false),
            part("one chunk's kernel, best", kernel, true),
            part("bound part: copies both ways, best", copies, false),
        ],
    )
}

#[test]
fn overlap_runs_with_different_calibrations_are_compared_on_what_does_not_depend_on_it() {
    let a = overlap(1198, (15.7, 15.68), (5.96, 5.65), 0.153, 0.150, 5.6);
    let b = overlap(1172, (15.4, 15.38), (5.90, 5.58), 0.154, 0.147, 5.62);
    let c = compare(&a, &b, &table());
    assert_eq!(c.calibrated, ["work"]);
    let how: Vec<(&str, Measure, String)> =
        c.changes.iter().map(|c| (c.name.as_str(), c.measure, c.kind.to_string())).collect();
    assert_eq!(
        how,
        [
            ("one stream", Measure::OverBound, "over its bound".into()),
            ("4 streams", Measure::OverBound, "over its bound".into()),
            ("one chunk's H2D, best", Measure::Time, "gpu, pinned, large, 0.1-2 ms".into()),
            ("bound part: copies both ways, best", Measure::Time, "gpu, pinned, large, >=2 ms".into()),
        ]
    );
    assert_eq!(c.left_out.len(), 1, "the kernel's own time measures different work: {:?}", c.left_out);
    assert_eq!(verdicts(&c), []);
    let text = report(&c, false);
    assert!(text.contains("work is {\"Process\":1198} in A and {\"Process\":1172} in B"), "{text}");
    assert!(text.contains("work was calibrated anew in each run"), "{text}");
    assert!(text.contains("2 pipeline runs are\n      compared by their time over their own bound"), "{text}");
    assert_eq!(summary(&c), "0 of 4 figures changed; 0 ambiguous; 1 left out");
    // A run that came 10% further from its bound is found, whatever its kernel.
    let slow = overlap(1172, (15.4, 15.38), (6.50, 5.58), 0.154, 0.147, 5.62);
    let c = compare(&a, &slow, &table());
    assert_eq!(c.changes[1].verdict, Verdict::Slower);
    assert!(c.changes[1].why().starts_with("slower: further from its bound, past its drift"), "{}", c.changes[1].why());
    // The same --iters in both: times are compared.
    let c = compare(&a, &overlap(1198, (15.8, 15.7), (5.97, 5.66), 0.153, 0.150, 5.6), &table());
    assert!(c.changes.iter().all(|c| c.measure == Measure::Time) && c.changes.len() == 5);
    // A different plan is different work, for every figure.
    let mut other = overlap(1198, (15.7, 15.68), (5.96, 5.65), 0.153, 0.150, 5.6);
    other["result"]["plan"]["chunks"] = json!(16);
    let c = compare(&a, &other, &table());
    assert!(c.changes.is_empty() && c.left_out.len() == 5, "{:?}", c.left_out);
    assert!(c.left_out[0].1.contains("different work (plan"), "{:?}", c.left_out);
}

#[test]
fn old_overlap_files_with_different_calibrations_compare_their_runs_over_their_bounds() {
    let result = |iters: u32, ms: f64, bound: f64| {
        json!({ "work": { "Process": iters }, "report": { "runs": [
            { "name": "4 streams", "judged": { "measured": stats(ms, 0.004), "bound": { "ms": bound }, "efficiency": bound / ms } },
        ], "copies": { "htod": stats(0.15, 0.01) } } })
    };
    let c = compare(
        &json!({ "result": result(1198, 5.96, 5.65) }),
        &json!({ "result": result(1172, 5.90, 5.58) }),
        &table(),
    );
    assert_eq!(c.matched, Matched::Places);
    assert_eq!(c.changes.len(), 1);
    assert_eq!(
        (c.changes[0].name.as_str(), c.changes[0].measure),
        ("report.runs[4 streams].judged.measured", Measure::OverBound)
    );
    assert_eq!(c.left_out.len(), 1, "a figure of the work itself: {:?}", c.left_out);
    assert!(report(&c, false).contains("matched by their places"));
}

#[test]
fn figures_are_matched_by_name() {
    let a = doc(json!({}), vec![figure("pinned H2D 4 KiB", 0.007, 0.02), figure("pinned H2D 64 MiB", 1.22, 0.001)]);
    let b = doc(
        json!({}),
        vec![
            figure("pinned H2D 64 MiB", 1.5, 0.001),
            figure("pinned H2D 1 GiB", 19.6, 0.001),
            figure("pinned H2D 4 KiB", 0.007, 0.02),
        ],
    );
    let c = compare(&a, &b, &table());
    assert_eq!(c.changes.len(), 2);
    assert_eq!(
        (c.changes[1].name.as_str(), c.changes[1].a.center, c.changes[1].b.center),
        ("pinned H2D 64 MiB", 1.22, 1.5)
    );
    assert_eq!((c.only_in_a.len(), c.only_in_b.clone()), (0, vec!["pinned H2D 1 GiB".to_string()]));
    let text = report(&c, false);
    assert!(text.contains("note: 1 figures only in B: pinned H2D 1 GiB"), "{text}");
    assert!(text.contains("pinned H2D 64 MiB  ") && text.contains("+23.0%"), "{text}");
    // One file with names and one without, of a lesson whose old form is not known: both by place.
    let copies = |ms: f64| json!({ "copies": [[{ "htod": stats(ms, 0.001), "dtoh": stats(ms, 0.001) }]] });
    let named = doc(copies(1.0), vec![figure("pinned H2D 4 KiB", 1.0, 0.0)]);
    let c = compare(&named, &json!({ "result": copies(1.2) }), &table());
    assert_eq!(c.matched, Matched::Places);
    assert_eq!(c.changes[0].name, "copies[0][0].dtoh");
}

#[test]
fn runs_that_did_different_work_are_named() {
    let a = json!({ "work": { "Process": 1200 }, "plan": { "chunks": 32 }, "sizes": [1, 2] });
    let b = json!({ "work": { "Process": 1310 }, "plan": { "chunks": 32 }, "sizes": [1] });
    let keys = SETTINGS.iter().map(|s| s.to_string()).collect();
    let d = differing_settings(&a, &b, &keys);
    assert_eq!(d.len(), 2, "{d:?}");
    assert_eq!(d[0].0, "sizes");
    assert_eq!(d[1], ("work".into(), "{\"Process\":1200}".into(), "{\"Process\":1310}".into()));
}

/// Three runs of a lesson as `--json` writes them, with a command line.
fn run_of(program: &str, figures: Vec<Value>) -> Value {
    json!({
        "schema_version": 1,
        "machine": { "command": [format!("/bundle/{program}"), "--json"], "gpus": [{ "name": "NVIDIA H200", "driver_version": "580.1" }], "unix_time": 1_800_000_000u64 },
        "result": {},
        "figures": figures,
    })
}

#[test]
fn calibration_fits_each_kind_from_back_to_back_runs() {
    // latency: three runs, its microsecond copies moving by up to 40%; pinned_memory-like large copies
    // by up to 1%; an error document and a lesson run once, which are left out.
    let copies = |i: usize| -> Vec<Value> {
        (0..8)
            .map(|k| figure(&format!("pinned H2D {} KiB / gpu", 4 + k), 0.006, 0.02))
            .enumerate()
            .map(|(k, mut f)| {
                let m = 1.0 + 0.2 * [0.0, 1.0, -0.5][i] * ((k % 3) as f64 / 2.0);
                f["stats"] = stats(0.006 * m, 0.02);
                f["transfer_bytes"] = json!((4 + k) << 10);
                f
            })
            .collect()
    };
    let large = |i: usize| -> Vec<Value> {
        (0..6)
            .map(|k| {
                figure(
                    &format!("pinned D2H {} MiB", 64 << k),
                    1.2 * (k + 1) as f64 * (1.0 + 0.01 * [0.0, 1.0, -1.0][i]),
                    0.002,
                )
            })
            .collect()
    };
    let dir = folder(
        "calibrate",
        &[
            ("latency-1.json", &run_of("latency", copies(0))),
            ("latency-2.json", &run_of("latency", copies(1))),
            ("latency-3.json", &run_of("latency", copies(2))),
            ("big-1.json", &run_of("pinned_memory", large(0))),
            ("big-2.json", &run_of("pinned_memory", large(1))),
            ("big-3.json", &run_of("pinned_memory", large(2))),
            ("overlap-1.json", &run_of("overlap", large(0))),
            ("error.json", &json!({ "error": "no NVIDIA driver", "kind": "no_gpu" })),
        ],
    );
    let (t, text) = calibrate(&dir).unwrap();
    assert!(
        text.contains("latency: 3 runs, 48 movements") && text.contains("pinned_memory: 3 runs, 36 movements"),
        "{text}"
    );
    assert!(text.contains("overlap: one run only: left out") && text.contains("error.json has no result"), "{text}");
    let small = t.row(FigureKind::of(Clock::Gpu, false, Some(4096), 0.006));
    assert!(small.fitted && small.pairs == 48, "every ordered pair of 3 runs, 8 figures: {small:?}");
    assert!(small.drift < 0.9, "{small:?}");
    // Fitted to them, the runs it came from are quiet: in no pair is a figure slower or faster.
    for runs in [
        [copies(0), copies(1), copies(2)].map(|f| run_of("latency", f)),
        [large(0), large(1), large(2)].map(|f| run_of("pinned_memory", f)),
    ] {
        for (i, j) in [(0, 1), (1, 0), (1, 2), (2, 1), (0, 2), (2, 0)] {
            let c = compare(&runs[i], &runs[j], &t);
            assert_eq!(c.count(Verdict::Slower) + c.count(Verdict::Faster), 0, "{i} against {j}: {:?}", verdicts(&c));
        }
    }
    let mid = t.row(FigureKind::of(Clock::Gpu, false, Some(64 << 20), 1.2));
    let long = t.row(FigureKind::of(Clock::Gpu, false, Some(128 << 20), 2.4));
    assert!(!mid.fitted && long.fitted, "one figure of 1.2 ms (6 movements) is too few: {mid:?}");
    assert!(long.drift < 0.07 && long.drift > 0.02, "{long:?}");
    assert!(t.source.starts_with("fitted from 6 runs of 2 lessons on NVIDIA H200 (driver 580.1)"), "{}", t.source);
    assert_eq!(t.fitted_from["lessons"]["latency"], 3);
    // What it writes reads back, and holds changes against it.
    let back = DriftTable::parse(&t.to_json()).unwrap();
    assert_eq!(back.drift(FigureKind::OverBound), t.drift(FigureKind::OverBound));
    assert!(!back.provisional_only());
    let out = dir.join("fitted.json");
    let mut f = flags(&dir, &dir, &out);
    (f.a, f.b, f.drift, f.calibrate, f.out) = (None, None, None, Some(dir.clone()), Some(out.clone()));
    assert_eq!(run(f).unwrap(), 0);
    assert_eq!(DriftTable::read(&out).unwrap(), back);
    let small = |ms: f64| {
        let mut f = figure("pinned H2D 4 KiB / gpu", ms, 0.02);
        f["transfer_bytes"] = json!(4096);
        doc(json!({}), vec![f])
    };
    let (a, b) = (small(0.006), small(0.0119));
    assert_eq!(compare(&a, &b, &table()).changes[0].verdict, Verdict::Same, "2x is within the provisional 100%");
    assert_eq!(compare(&a, &b, &back).changes[0].verdict, Verdict::Slower, "and beyond the fitted drift");
    // Grouped by command line, else by file name.
    assert_eq!(lesson_of(&json!({}), Path::new("runs/latency-12.json")), "latency");
    assert_eq!(lesson_of(&run_of("overlap", vec![]), Path::new("x.json")), "overlap");
    let _ = std::fs::remove_dir_all(dir);
    assert!(calibrate(Path::new("/nonexistent-xtask-dir")).is_err());
}

#[test]
fn baseline_runs_fit_the_drift_for_the_comparison() {
    // Three microsecond copies that agree to 0.2% over A and two baselines, and move 30% in B.
    let copies = |m: [f64; 3]| {
        doc(json!({}), (0..3).map(|k| figure(&format!("pinned H2D {} KiB", 4 << k), 0.007 * m[k], 0.01)).collect())
    };
    let a = copies([1.0, 1.0, 1.0]);
    let b = copies([1.3, 1.0, 1.0]);
    let (a2, a3) = (copies([1.002, 0.999, 1.001]), copies([0.998, 1.001, 1.0]));
    assert_eq!(verdicts(&compare(&a, &b, &table())), [], "30% of 7 µs is within the provisional drift");
    let dir = folder("baseline", &[("a.json", &a), ("b.json", &b), ("a2.json", &a2), ("a3.json", &a3)]);
    std::fs::write(dir.join("drift.table"), table().to_json()).unwrap();
    let mut f = flags(&dir.join("a.json"), &dir.join("b.json"), &dir.join("drift.table"));
    f.baseline = vec![dir.join("a2.json"), dir.join("a3.json")];
    assert_eq!(run(f).unwrap(), 1, "the baselines agree to 0.2%: 30% is slower");
    let mut f = flags(&dir.join("a.json"), &dir.join("b.json"), &dir.join("drift.table"));
    f.baseline = vec![dir.join("a2.json")];
    assert_eq!(run(f).unwrap(), 0, "one baseline run can only widen the drift");
    let _ = std::fs::remove_dir_all(dir);
}

#[test]
fn a_run_from_before_a_rename_still_compares() {
    // Before: overlap ran as `--seed`, named its parts "upload"/"download" and called its kernel `work`.
    let old = json!({
        "machine": { "command": ["./lessons/overlap", "--seed", "--json"] },
        "result": { "plan": {"chunks": 4}, "work": {"SinCos": 500}, "report": {} },
        "figures": [
            { "name": "bound part: uploads, best", "stats": stats(5.0, 0.01), "clock": "gpu",
              "depends_on": ["plan"], "calibrated": ["work"] },
            { "name": "one stream", "stats": stats(15.7, 0.01), "clock": "gpu", "bound_ms": 15.6,
              "depends_on": ["plan", "work"], "calibrated": ["work"] },
        ],
    });
    let new = json!({
        "machine": { "command": ["./lessons/overlap", "--original", "--json"] },
        "result": { "plan": {"chunks": 4}, "steps": {"InPlace": "OverlapPattern"}, "report": {} },
        "figures": [
            { "name": "bound part: H2D copies, best", "stats": stats(5.0, 0.01), "clock": "gpu",
              "depends_on": ["plan"], "calibrated": ["steps"] },
            { "name": "one stream", "stats": stats(15.7, 0.01), "clock": "gpu", "bound_ms": 15.6,
              "depends_on": ["plan", "steps"], "calibrated": ["steps"] },
        ],
    });
    let c = compare(&old, &new, &table());
    let names: Vec<&str> = c.changes.iter().map(|c| c.name.as_str()).collect();
    assert_eq!(names, ["bound part: H2D copies, best", "one stream"], "{c:?}");
    assert!(c.only_in_a.is_empty() && c.only_in_b.is_empty() && c.differing.is_empty(), "{c:?}");
    assert_eq!(c.changes[1].figure, "overlap --original: one stream", "the old flag is the new one");
    assert_eq!(lesson_in(&old), lesson_in(&new));
    // A kernel that did change is still seen, under its new key.
    let mut other = new.clone();
    other["result"]["steps"] = json!({"InPlace": {"ProcessSincos": 600}});
    assert_eq!(compare(&old, &other, &table()).differing.len(), 1);
    // The sin * cos work was named `SinCos` by its rounds, 500 meaning overlap_pattern.cu's own kernel:
    // the same as `OverlapPattern` now, and not the 500 rounds of process_sincos that `--iters 500` runs.
    let mut sincos = new.clone();
    sincos["result"]["steps"] = json!({"InPlace": {"SinCos": 500}});
    assert!(compare(&sincos, &new, &table()).differing.is_empty());
    other["result"]["steps"] = json!({"InPlace": {"ProcessSincos": 500}});
    assert_eq!(compare(&sincos, &other, &table()).differing.len(), 1);
    sincos["result"]["steps"] = json!({"InPlace": {"SinCos": 600}});
    other["result"]["steps"] = json!({"InPlace": {"ProcessSincos": 600}});
    assert!(compare(&sincos, &other, &table()).differing.is_empty());
}

/// The planner's runs, its kernel calibrated anew in each run: each run held against the model's
/// prediction made in that run.
fn planner(work: u32, runs: &[(&str, f64, f64)]) -> Value {
    let figures = runs
        .iter()
        .map(|(name, ms, model)| {
            json!({ "name": name, "stats": stats(*ms, 0.004), "clock": "gpu",
            "model_ms": model, "depends_on": ["work"], "calibrated": ["work"], "transfer_bytes": 8 << 20 })
        })
        .collect();
    doc(json!({ "work": { "Process": work }, "bytes": 256 << 20 }), figures)
}

#[test]
fn planner_runs_with_different_calibrations_are_compared_over_their_model() {
    let a = planner(1566, &[("32 chunks on 3 streams", 7.33, 7.62), ("32 chunks on 1 streams", 17.44, 17.9)]);
    let b = planner(1490, &[("32 chunks on 3 streams", 7.05, 7.31), ("32 chunks on 1 streams", 16.9, 17.3)]);
    let c = compare(&a, &b, &table());
    let how: Vec<(Measure, String)> = c.changes.iter().map(|c| (c.measure, c.kind.to_string())).collect();
    assert_eq!(how, [(Measure::OverModel, "over its model".into()), (Measure::OverModel, "over its model".into())]);
    assert_eq!(verdicts(&c), []);
    // A run that lands 20% further over its model is found, whatever its kernel.
    let slow = planner(1490, &[("32 chunks on 3 streams", 8.8, 7.31), ("32 chunks on 1 streams", 16.9, 17.3)]);
    let c = compare(&a, &slow, &table());
    assert_eq!(verdicts(&c), [("32 chunks on 3 streams", Verdict::Slower)]);
    assert!(c.changes[0].why().starts_with("slower: further over its model"), "{}", c.changes[0].why());
    assert_eq!(c.changes[0].value(c.changes[0].b.center), "1.204x model");
    // Without the model's figure the calibrated work cannot be compared: left out, not guessed.
    let mut bare = b.clone();
    bare["figures"].as_array_mut().unwrap().iter_mut().for_each(|f| f["model_ms"] = Value::Null);
    let c = compare(&a, &bare, &table());
    assert!(c.changes.is_empty() && c.left_out.len() == 2, "{:?}", c.left_out);
}

#[test]
fn a_setting_one_run_lacks_is_not_taken_as_the_same() {
    // overlap_sweep before `work` was named `steps`: its kernel calibrated anew in each run, under
    // either name, so its runs are compared over their bounds, never by their times.
    let sweep = |key: &str, rounds: u32, ms: f64, bound: f64| {
        let f = json!({ "name": "16 chunks / 16 streams", "stats": stats(ms, 0.004), "clock": "gpu",
            "bound_ms": bound, "depends_on": ["elements", key], "calibrated": [key] });
        doc(json!({ "elements": 16 << 20, "points": [], key: { "Process": rounds } }), vec![f])
    };
    let c = compare(&sweep("work", 1209, 1.726, 1.546), &sweep("steps", 3078, 3.591, 3.22), &table());
    assert_eq!(c.changes.len(), 1, "{c:?}");
    assert_eq!(c.changes[0].measure, Measure::OverBound);
    assert_eq!(verdicts(&c), []);
    let text = report(&c, false);
    assert!(text.contains("steps is {\"InPlace\":{\"Process\":1209}} in A and {\"Process\":3078} in B"), "{text}");
    // A setting renamed where compare does not know it: absent in one run, so never the same.
    let mut other = sweep("work", 1209, 1.726, 1.546);
    other["result"].as_object_mut().unwrap().remove("points");
    let c = compare(&other, &sweep("steps", 3078, 3.591, 3.22), &table());
    assert_eq!(c.changes[0].measure, Measure::OverBound, "{c:?}");
    assert!(report(&c, false).contains("work is {\"Process\":1209} in A and absent in B"), "{}", report(&c, false));
}

/// What "same" means: the smallest change each figure would have shown, each way. A change just past
/// it is called a change; one just under it is the same; and the summary says it for the median figure.
#[test]
fn same_says_the_smallest_change_it_would_have_shown() {
    let [a, b] = pinned_sweep(quiet);
    let c = compare(&a, &b, &table());
    for ch in &c.changes {
        let (slower, faster) = ch.detectable();
        assert!(slower >= ch.drift - 1e-12 && faster > 0.0 && faster < 1.0, "{}: {slower} {faster}", ch.name);
        let at = |factor: f64| {
            let mut x = ch.clone();
            x.b.center = x.a.center * factor;
            x.judge()
        };
        assert_eq!(at(1.0 + slower * 1.001 + 1e-9), Verdict::Slower, "{}: just past +{slower}", ch.name);
        assert_ne!(at(1.0 + slower * 0.999), Verdict::Slower, "{}: just under +{slower}", ch.name);
        assert_eq!(at(1.0 - faster * 1.001 - 1e-9), Verdict::Faster, "{}: just past -{faster}", ch.name);
        assert_ne!(at(1.0 - faster * 0.999), Verdict::Faster, "{}: just under -{faster}", ch.name);
    }
    assert!(report(&c, true).contains("would not show here"), "{}", report(&c, true));
    // Pageable figures apart from the GPU's, in the table and in what "same" means.
    let text = report(&c, true);
    let (apart, first_pageable) = (text.find(&format!("{}:\n", interleave::HOST_GROUP)), text.find("pageable H2D"));
    assert!(apart.is_some() && apart < first_pageable, "{text}");
    let lines = group_lines(&c.changes);
    assert_eq!(lines.len(), 2, "{lines:?}");
    assert!(lines[0].starts_with("GPU-timed") && lines[0].contains(" of 48 figures would show 5% slower"), "{lines:?}");
    assert!(lines[1].starts_with("of pageable") && lines[1].contains(" of 16 figures"), "{lines:?}");
    let line = detectable_summary(&c.changes);
    assert!(
        line.starts_with("same means: a change under +") && line.contains(" of 64 figures would show 5% slower"),
        "{line}"
    );
}

/// Beside a load, one run of a pageable copy can land within its drift while its own runs spread past
/// anything A's reach (pageable D2H 16 MiB on the H200: A 1.50 ms in 1.48-1.51, B 5.10 ms in 1.15-6.15,
/// +240% within a drift of 393%; long runs moved it +517%): ambiguous, not the same. A figure whose runs
/// spread wide in both runs alike is judged by its medians.
#[test]
fn a_run_whose_own_spread_reaches_past_the_others_is_ambiguous() {
    let s = |median: f64, min: f64, q3: f64| json!({ "name": "pageable D2H", "transfer_bytes": 16 << 20, "memory": "pageable", "stats": { "median_ms": median, "min_ms": min, "q3_ms": q3, "max_ms": q3 * 1.2, "runs": 10, "cv": 0.3 }, "clock": "gpu" });
    let wide_drift = uniform(3.93);
    let a = doc(json!({}), vec![s(1.50, 1.479, 1.508)]);
    let loaded = doc(json!({}), vec![s(5.10, 1.152, 6.154)]);
    let c = compare(&a, &loaded, &wide_drift);
    assert_eq!(verdicts(&c), [("pageable D2H", Verdict::Ambiguous)]);
    assert!(
        c.changes[0].why().starts_with("ambiguous: within its drift, but one run's own spread"),
        "{}",
        c.changes[0].why()
    );
    // The same medians with spreads like A's: the same (the drift is that wide).
    let quiet = doc(json!({}), vec![s(5.10, 5.03, 5.13)]);
    assert_eq!(verdicts(&compare(&a, &quiet, &wide_drift)), []);
    // Both runs spread alike (a restless figure): judged by the medians, the same.
    let restless = |median: f64| s(median, median * 0.5, median * 1.6);
    let (a, b) = (doc(json!({}), vec![restless(1.5)]), doc(json!({}), vec![restless(1.6)]));
    assert_eq!(verdicts(&compare(&a, &b, &uniform(0.2))), []);
}

/// Two runs apart: a GPU time paced by the host's calls (either run says so) is grouped with the host's
/// figures, where a change of the host moves it; its kind, and so its drift, stays its clock's.
#[test]
fn a_gpu_time_paced_by_the_host_is_grouped_with_the_hosts_figures() {
    let (plain, mut paced) = (reading("1000 x 256 B / memcpy each / gpu", 4.7), reading("x", 4.7));
    paced.host_paced = true;
    let change =
        |a: &Reading, b: &Reading| Change::new("x".into(), "small_copies", Measure::Time, a, b, &table()).unwrap();
    assert!(change(&plain, &plain).on_the_gpu());
    assert!(!change(&plain, &paced).on_the_gpu() && !change(&paced, &plain).on_the_gpu());
    assert_eq!(change(&paced, &paced).kind, change(&plain, &plain).kind);
}
