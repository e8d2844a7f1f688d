//! The repository's own rules, as tests (they read the workspace with cargo, so they run through
//! `cargo test`, not from a bundle).

use cargo_metadata::semver::Version;

use crate::tools;

/// The workspace's `rust-version` is true: no locked dependency declares a newer one. (Our own code is
/// held to it by clippy's `incompatible_msrv` lint, and `cargo xtask ci msrv` builds with that Rust.)
#[test]
fn no_locked_dependency_needs_a_newer_rust() {
    let meta = tools::metadata().unwrap();
    let ours: Vec<Version> = meta.workspace_packages().iter().map(|p| p.rust_version.clone().unwrap()).collect();
    assert!(ours.windows(2).all(|w| w[0] == w[1]), "every workspace package declares the same rust-version");
    let msrv = &ours[0];
    let newer: Vec<String> = meta
        .packages
        .iter()
        .filter(|p| p.rust_version.as_ref().is_some_and(|v| v > msrv))
        .map(|p| format!("{} {} needs Rust {}", p.name, p.version, p.rust_version.as_ref().unwrap()))
        .collect();
    assert!(newer.is_empty(), "rust-version {msrv} is too old: {}", newer.join(", "));
}

/// The lessons in `examples/`: a folder `NAME/` each, with its `main.rs` (and the lesson's own modules,
/// kernels and PTX beside it).
fn lesson_files() -> Vec<String> {
    let dir = tools::root().join("examples");
    let mut names: Vec<String> = std::fs::read_dir(&dir)
        .unwrap()
        .flatten()
        .filter(|e| e.path().join("main.rs").exists())
        .filter_map(|e| e.file_name().to_str().map(String::from))
        .collect();
    names.sort();
    names
}

/// A lesson's source files, relative to the root: its `main.rs` first.
fn lesson_sources(name: &str) -> Vec<String> {
    let root = tools::root();
    let mut files: Vec<String> = walkdir::WalkDir::new(root.join("examples").join(name))
        .into_iter()
        .flatten()
        .filter(|e| e.path().extension().is_some_and(|x| x == "rs"))
        .map(|e| e.path().strip_prefix(&root).unwrap().to_string_lossy().into_owned())
        .collect();
    files.sort_by_key(|f| (!f.ends_with("/main.rs"), f.clone()));
    files
}

/// `examples/` holds one folder per lesson and nothing else: no lesson as a flat `NAME.rs`, and no
/// kernel or PTX outside its lesson's folder.
#[test]
fn every_lesson_is_a_folder() {
    let dir = tools::root().join("examples");
    let mut loose: Vec<String> = std::fs::read_dir(&dir)
        .unwrap()
        .flatten()
        .filter(|e| !e.path().join("main.rs").exists())
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .collect();
    loose.sort();
    assert!(loose.is_empty(), "examples/ holds more than lesson folders (NAME/main.rs): {}", loose.join(", "));
}

/// Every lesson is registered once, in `lessons::LESSONS`, and README.md's lesson table names each.
#[test]
fn every_lesson_is_registered_once() {
    let mut registered: Vec<String> = crate::lessons::LESSONS.iter().map(|l| l.name.to_string()).collect();
    registered.sort();
    let unique = registered.len();
    registered.dedup();
    assert_eq!(unique, registered.len(), "a lesson is registered twice in xtask/src/lessons.rs");
    assert_eq!(lesson_files(), registered, "examples/ and xtask/src/lessons.rs disagree");
    let readme = std::fs::read_to_string(tools::root().join("README.md")).unwrap();
    for name in &registered {
        assert!(readme.contains(&format!("| `{name}` |")), "README.md's lesson table lacks `{name}`");
    }
}

/// The longest a seed's program in Rust may be: the CUDA C++ programs are 40 to 110 lines.
const SEED_FUNCTION_LINES: usize = 60;
/// The least share of its `main.rs` a seed lesson's program is: the rest is flags, `main` and one call
/// to a rig.
const SEED_SHARE: f64 = 0.4;
/// The longest function in a lesson.
const LESSON_FUNCTION_LINES: usize = 60;

/// The functions of a Rust file, by a reading of its lines that rustfmt's layout makes sound: a line
/// `fn NAME` (any indent, any of `pub`, `const`, `unsafe`, `async` before it) up to the first line
/// at its indent that closes it; each with its first line (its doc comment's, if any), its `fn` line
/// and its last line, 0-based.
fn functions(lines: &[&str]) -> Vec<(String, usize, usize, usize)> {
    let mut out = Vec::new();
    for (i, l) in lines.iter().enumerate() {
        let t = l.trim_start();
        let indent = &l[..l.len() - t.len()];
        let mut rest = t;
        for prefix in ["pub(crate) ", "pub ", "const ", "async ", "unsafe "] {
            rest = rest.strip_prefix(prefix).unwrap_or(rest);
        }
        let Some(rest) = rest.strip_prefix("fn ") else { continue };
        let name = rest.split(['(', '<']).next().unwrap_or("").to_string();
        let end = if l.trim_end().ends_with('}') || l.trim_end().ends_with(';') {
            i
        } else {
            lines[i..].iter().position(|x| *x == format!("{indent}}}")).map_or(lines.len() - 1, |e| i + e)
        };
        let doc = (0..i).rev().take_while(|&j| lines[j].trim_start().starts_with("///")).last().unwrap_or(i);
        out.push((name, doc, i, end));
    }
    out
}

/// A lesson reads as its seed first: a lesson that follows a CUDA C++ program opens (right after
/// `main`) with one function that is that program in Rust, short, naming the program in the lesson's
/// doc, and at least [`SEED_SHARE`] of its `main.rs`: the measuring rig follows it in one call to
/// a rig. No function of a lesson runs past [`LESSON_FUNCTION_LINES`] lines, and no line of a lesson
/// is wider than rustfmt's 120 columns. Every offender is listed at once.
#[test]
fn lessons_read_as_their_seed_first() {
    let mut offences = Vec::new();
    for lesson in crate::lessons::LESSONS.iter() {
        let sources = lesson_sources(lesson.name);
        for path in &sources {
            let text = std::fs::read_to_string(tools::root().join(path)).unwrap();
            let lines: Vec<&str> = text.lines().collect();
            for (i, l) in lines.iter().enumerate().filter(|(_, l)| l.chars().count() > 120) {
                offences.push(format!("{path}:{}: {} columns, more than 120", i + 1, l.chars().count()));
            }
            for (name, _, start, end) in functions(&lines) {
                if end - start + 1 > LESSON_FUNCTION_LINES {
                    offences.push(format!(
                        "{path}:{}: fn {name} is {} lines, more than {LESSON_FUNCTION_LINES}",
                        start + 1,
                        end - start + 1
                    ));
                }
            }
        }
        let Some(seed) = &lesson.seed else { continue };
        let path = &sources[0];
        let text = std::fs::read_to_string(tools::root().join(path)).unwrap();
        let lines: Vec<&str> = text.lines().collect();
        if !text.lines().take_while(|l| l.starts_with("//!")).any(|l| l.contains(seed.program)) {
            offences.push(format!("{path}: its doc does not name the program it follows, {}", seed.program));
        }
        let fns: Vec<_> = functions(&lines).into_iter().filter(|f| !lines[f.2].starts_with(' ')).collect();
        let after_main = fns.iter().position(|f| f.0 == "main").and_then(|m| fns.get(m + 1));
        match after_main {
            Some((f, doc, start, end)) if *f == seed.function => {
                if end - start + 1 > SEED_FUNCTION_LINES {
                    offences.push(format!(
                        "{path}: {f}, {}'s program, is {} lines, more than {SEED_FUNCTION_LINES}",
                        seed.program,
                        end - start + 1
                    ));
                }
                let share = (end - doc + 1) as f64 / lines.len() as f64;
                if share < SEED_SHARE {
                    offences.push(format!(
                        "{path}: {f}, {}'s program, is {:.0}% of the file ({} of {} lines), less than {:.0}%: the \
                         rest should be flags, main and one call to a rig",
                        seed.program,
                        100.0 * share,
                        end - doc + 1,
                        lines.len(),
                        100.0 * SEED_SHARE
                    ));
                }
            }
            other => offences.push(format!(
                "{path}: the function after main should be {}, {}'s program in Rust; it is {:?}",
                seed.function,
                seed.program,
                other.map(|o| &o.0)
            )),
        }
    }
    assert!(offences.is_empty(), "{} offences:\n  {}", offences.len(), offences.join("\n  "));
}

/// The modules of `measure` a text names: `measure::MODULE`, and `use measure::{...}` lists, the crate
/// root's re-exports (`Chunking`, `Stats`) resolved to their modules.
fn measure_modules_named(text: &str, modules: &[String], reexports: &[(String, String)]) -> Vec<String> {
    let as_crate = text.replace("measure::", "crate::");
    let named = uses(&as_crate, reexports);
    named.into_iter().filter(|m| modules.contains(m)).collect()
}

/// The shared crate holds what two lessons or more use: every module of `measure` serves at least two
/// lessons, by name or through another of its modules that does. Code that serves one lesson lives in
/// that lesson (a folder, `examples/NAME/`, where it is large). Benchmarks, tests and xtask do not count.
#[test]
fn every_shared_module_serves_two_lessons() {
    let dir = tools::root().join("measure/src");
    let (_, layers) = LAYERS.iter().find(|(d, _)| *d == "measure/src").unwrap();
    let modules: Vec<String> = layers.iter().map(|m| m.to_string()).collect();
    let reexports = reexports_of(&std::fs::read_to_string(dir.join("lib.rs")).unwrap());
    let inner: Vec<(String, Vec<String>)> = modules
        .iter()
        .map(|m| {
            let text = std::fs::read_to_string(dir.join(format!("{m}.rs"))).unwrap();
            (m.clone(), uses(&text, &reexports))
        })
        .collect();
    let mut served: std::collections::BTreeMap<String, Vec<&str>> = Default::default();
    for lesson in crate::lessons::LESSONS.iter() {
        let mut reached: Vec<String> = Vec::new();
        for path in lesson_sources(lesson.name) {
            let text = std::fs::read_to_string(tools::root().join(path)).unwrap();
            reached.extend(measure_modules_named(&text, &modules, &reexports));
        }
        // Through the modules it names, and theirs.
        let mut i = 0;
        while i < reached.len() {
            let next = inner.iter().find(|(m, _)| *m == reached[i]).map(|x| x.1.clone()).unwrap_or_default();
            reached.extend(next.into_iter().filter(|m| modules.contains(m)));
            reached.sort();
            reached.dedup();
            i += 1;
        }
        for m in reached {
            served.entry(m).or_default().push(lesson.name);
        }
    }
    let lonely: Vec<String> = modules
        .iter()
        .filter(|m| served.get(*m).is_none_or(|l| l.len() < 2))
        .map(|m| {
            format!(
                "measure/src/{m}.rs serves {:?}: move it into that lesson",
                served.get(m).cloned().unwrap_or_default()
            )
        })
        .collect();
    assert!(
        lonely.is_empty(),
        "{} modules of the shared crate serve fewer than two lessons:\n  {}",
        lonely.len(),
        lonely.join("\n  ")
    );
}

/// Parameters travel as named structs, not long lists: `allow(clippy::too_many_arguments)` stands only
/// on the driver's own declarations (`common/src/ffi.rs`, and the copy of its form that check-ffi's
/// tests read).
#[test]
fn no_long_parameter_lists_outside_the_driver_declarations() {
    let root = tools::root();
    let mut offences = Vec::new();
    for e in walkdir::WalkDir::new(&root).into_iter().filter_entry(|e| {
        let n = e.file_name().to_string_lossy();
        !(n == "target" || n.starts_with('.') || n == "compile_fail")
    }) {
        let Ok(e) = e else { continue };
        let rel = e.path().strip_prefix(&root).unwrap().to_string_lossy().into_owned();
        if !rel.ends_with(".rs")
            || rel == "common/src/ffi.rs"
            || rel == "xtask/src/decls.rs"
            || rel == "xtask/src/tidy.rs"
        {
            continue;
        }
        let text = std::fs::read_to_string(e.path()).unwrap_or_default();
        for (i, _) in text.lines().enumerate().filter(|(_, l)| l.contains("too_many_arguments")) {
            offences.push(format!("{rel}:{}", i + 1));
        }
    }
    assert!(offences.is_empty(), "allow(too_many_arguments) outside the driver declarations: {}", offences.join(", "));
}

/// Where `unsafe` may stand outside `common`: the promise a launch of a kernel makes (that it stays
/// inside the views it was given), which no type can check, for the lessons' kernels, for a kernel of
/// the user's adopted by the planner's child, and in the example of a kernel of one's own; and three
/// calls into the operating system (not the GPU) that have no safe form in std: restoring SIGPIPE's
/// default (the lessons' flags and the xtask's `main`), reading a buffer's NUMA node (`get_mempolicy`)
/// and binding a thread to a node's CPUs (`sched_setaffinity`).
const UNSAFE_OUTSIDE_COMMON: [&str; 9] = [
    "kernels/src/lib.rs",
    "examples/every_gpu/numa.rs",
    "examples/planner/child.rs",
    "examples/your_kernel/main.rs",
    "lift/src/main.rs",
    "measure/src/args.rs",
    "measure/src/machine.rs",
    "xtask/src/main.rs",
    "xtask/src/tidy.rs",
];

/// `unsafe` lives in `common` (its sources, tests and benchmarks) and the few places above, and each
/// use says why it is sound: a `// SAFETY:` comment (or a `# Safety` section for an unsafe fn) in the
/// lines just above. Every offender is listed at once.
#[test]
fn unsafe_only_in_common_with_a_safety_note() {
    let mut offences = Vec::new();
    let root = tools::root();
    for entry in walkdir::WalkDir::new(&root).into_iter().filter_entry(|e| {
        let n = e.file_name().to_string_lossy();
        !(n == "target" || n.starts_with('.') || n == "compile_fail")
    }) {
        let entry = entry.unwrap();
        if entry.path().extension().is_none_or(|x| x != "rs") {
            continue;
        }
        let rel = entry.path().strip_prefix(&root).unwrap().to_string_lossy().into_owned();
        let text = std::fs::read_to_string(entry.path()).unwrap();
        let lines: Vec<&str> = text.lines().collect();
        for (i, line) in lines.iter().enumerate() {
            let code = line.split("//").next().unwrap();
            let uses = ["unsafe {", "unsafe impl", "unsafe fn", "unsafe extern"].iter().any(|u| code.contains(u));
            if !uses || code.contains('"') {
                continue;
            }
            if !(rel.starts_with("common/") || UNSAFE_OUTSIDE_COMMON.contains(&rel.as_str())) {
                offences.push(format!("{rel}:{}: unsafe outside common", i + 1));
            }
            let above = &lines[i.saturating_sub(8)..=i];
            let noted =
                above.iter().any(|l| l.contains("SAFETY:") || l.contains("# Safety")) || code.contains("unsafe extern");
            if !noted {
                offences.push(format!("{rel}:{}: unsafe without a SAFETY note just above", i + 1));
            }
        }
    }
    assert!(offences.is_empty(), "{} places break the rule:\n  {}", offences.len(), offences.join("\n  "));
}

/// Each crate's modules in layers, lowest first: a module may use only those before it, so there are
/// no circles and nothing imports from a layer above.
const LAYERS: [(&str, &[&str]); 3] = [
    (
        "common/src",
        &[
            "ffi",
            "error",
            "ptx",
            "cubin",
            "prototype",
            "context",
            "memory",
            "host",
            "stream",
            "view",
            "order",
            "module",
            "launch",
            "coalesce",
            "scope",
            "probe",
            "batch",
            "graph",
            "device",
            "staging",
            "ptx_differential",
        ],
    ),
    (
        "measure/src",
        &[
            "error", "report", "timing", "chunks", "verify", "machine", "fit", "timeline", "work", "pipeline", "bound",
            "args", "lesson", "rig",
        ],
    ),
    (
        "profiler/src",
        &[
            "table", "trace", "metrics", "builtin", "svg", "api", "checks", "limits", "segments", "nsys", "analyze",
            "report",
        ],
    ),
];

/// The crate root's re-exports, `pub use MODULE::{A, B};`: (name, module) for each.
fn reexports_of(lib: &str) -> Vec<(String, String)> {
    let mut reexports = Vec::new();
    for line in lib.lines().filter_map(|l| l.strip_prefix("pub use ")) {
        let (module, names) = line.trim_end_matches(';').split_once("::").unwrap_or((line, ""));
        for name in names.trim_matches(|c| c == '{' || c == '}').split(',') {
            let name = name.trim().rsplit("::").next().unwrap_or("").to_string();
            reexports.push((name, module.to_string()));
        }
    }
    reexports
}

/// The modules a module's code (its tests left out) names through `crate::`, the crate root's
/// re-exports (`pub use MODULE::...` in lib.rs) resolved to their modules.
fn uses(text: &str, reexports: &[(String, String)]) -> Vec<String> {
    let code: String = text
        .split("#[cfg(test)]\nmod tests")
        .next()
        .unwrap()
        .lines()
        .filter(|l| !l.trim_start().starts_with("//"))
        .collect::<Vec<_>>()
        .join("\n");
    let mut names = Vec::new();
    for (i, _) in code.match_indices("crate::") {
        let rest = &code[i + "crate::".len()..];
        if let Some(block) = rest.strip_prefix('{') {
            let block = &block[..block.find("};").unwrap_or(block.len())];
            let mut depth = 0;
            let mut item = String::new();
            for ch in block.chars().chain([',']) {
                match ch {
                    '{' => depth += 1,
                    '}' => depth -= 1,
                    ',' if depth == 0 => {
                        names.push(item.trim().split("::").next().unwrap_or("").to_string());
                        item.clear();
                        continue;
                    }
                    _ => {}
                }
                item.push(ch);
            }
        } else {
            names.push(rest.chars().take_while(|c| c.is_alphanumeric() || *c == '_').collect());
        }
    }
    let mut out: Vec<String> = names
        .into_iter()
        .filter(|n| !n.is_empty())
        .map(|n| reexports.iter().find(|(name, _)| *name == n).map_or(n, |(_, m)| m.clone()))
        .collect();
    out.sort();
    out.dedup();
    out
}

#[test]
fn no_module_uses_one_above_it() {
    let mut offences = Vec::new();
    for (dir, layers) in LAYERS {
        let dir = tools::root().join(dir);
        let reexports = reexports_of(&std::fs::read_to_string(dir.join("lib.rs")).unwrap());
        let mut files: Vec<String> = std::fs::read_dir(&dir)
            .unwrap()
            .flatten()
            .filter_map(|e| e.file_name().to_str()?.strip_suffix(".rs").map(String::from))
            .filter(|m| m != "lib")
            .collect();
        files.sort();
        let listed: Vec<String> = layers.iter().map(|l| l.to_string()).collect();
        let mut sorted = listed.clone();
        sorted.sort();
        assert_eq!(files, sorted, "{}: the modules and the layers listed in tidy.rs differ", dir.display());
        for (rank, module) in layers.iter().enumerate() {
            let text = std::fs::read_to_string(dir.join(format!("{module}.rs"))).unwrap();
            for used in uses(&text, &reexports) {
                match layers.iter().position(|l| *l == used) {
                    Some(r) if r >= rank && used != *module => {
                        offences.push(format!("{}/{module}.rs uses {used}, a layer above it", dir.display()))
                    }
                    _ => {}
                }
            }
        }
    }
    assert!(offences.is_empty(), "{} imports break the layers:\n  {}", offences.len(), offences.join("\n  "));
}

/// `common` is the core a user lifts: it depends on nothing of the lessons (their kernels, rig,
/// flags, progress bars or NVML), and names none of it.
#[test]
fn common_knows_nothing_of_the_lessons() {
    let root = tools::root();
    let manifest = std::fs::read_to_string(root.join("common/Cargo.toml")).unwrap();
    let deps = manifest.split("[dependencies]").nth(1).unwrap().split("\n[").next().unwrap();
    for lessons_crate in ["measure", "kernels", "clap", "indicatif", "nvml", "serde_json", "cust"] {
        assert!(!deps.contains(lessons_crate), "common depends on {lessons_crate}");
    }
    let files =
        walkdir::WalkDir::new(root.join("common/src")).into_iter().flatten().filter(|e| e.file_type().is_file());
    for entry in files {
        let text = std::fs::read_to_string(entry.path()).unwrap();
        for name in ["measure::", "kernels::"] {
            assert!(!text.contains(name), "{} names {name}", entry.path().display());
        }
    }
}

/// README.md's figures are made from `results/` (`cargo xtask results --readme`): the block between its
/// markers is what the committed results make, and no figure stands outside it.
#[test]
fn readme_figures_come_from_results() {
    use crate::results;
    let root = tools::root();
    let all = results::all_results(&root).unwrap();
    let text = std::fs::read_to_string(root.join("README.md")).unwrap();
    let expected =
        results::replace_block(&text, &results::readme_block(&all)).expect("README.md has the results markers");
    assert!(text == expected, "README.md's figures differ from results/: run `cargo xtask results --readme`");
    let a = text.find(results::BEGIN).unwrap();
    let b = text.find(results::END).unwrap();
    let outside = format!("{}{}", &text[..a], &text[b..]);
    let mut figures = Vec::new();
    for (i, line) in outside.lines().enumerate() {
        let words: Vec<&str> = line.split_whitespace().collect();
        for w in words.windows(2) {
            let number = w[0].trim_start_matches(['(', '~']).replace(',', "");
            if number.parse::<f64>().is_ok() && ["GB/s", "ms", "µs", "ms,", "GB/s,", "µs,"].contains(&w[1]) {
                figures.push(format!("README.md:{}: {} {}", i + 1, w[0], w[1]));
            }
        }
        for w in &words {
            let w = w.trim_end_matches([',', '.', ')', ';', ':']);
            if let Some(x) = w.strip_suffix('x') {
                if x.contains('.') && x.parse::<f64>().is_ok() {
                    figures.push(format!("README.md:{}: {w}", i + 1));
                }
            }
        }
    }
    assert!(figures.is_empty(), "figures typed by hand outside the results block:\n  {}", figures.join("\n  "));
    assert!(text.lines().count() <= 300, "README.md is {} lines, more than 300", text.lines().count());
    // History lives in git: no dates, no commit hashes.
    let dated = |w: &str| {
        let b = w.as_bytes();
        b.len() >= 10 && b[..4].iter().all(u8::is_ascii_digit) && b[4] == b'-' && b[7] == b'-'
    };
    let hash = |w: &str| {
        (7..=40).contains(&w.len())
            && w.chars().all(|c| c.is_ascii_hexdigit())
            && w.chars().any(|c| c.is_ascii_digit())
            && w.chars().any(|c| c.is_ascii_alphabetic())
    };
    let history: Vec<&str> =
        text.split(|c: char| c.is_whitespace() || "()[]`,;:".contains(c)).filter(|w| dated(w) || hash(w)).collect();
    assert!(history.is_empty(), "README.md names dates or commits: {history:?}");
}

/// The modules of `common` no user can name. Their items are reached only through the re-exports of
/// the public modules (`pub use crate::order::Waits`), so only those are checked in them.
const COMMON_PRIVATE_MODULES: [&str; 7] = ["ffi", "cubin", "ptx", "prototype", "order", "context", "ptx_differential"];

/// A `pub` item of a Rust file, as [`pub_items`] reads it.
#[derive(Debug, PartialEq)]
struct PubItem {
    /// Its line, from 1.
    line: usize,
    /// `fn`, `struct`, `enum`, `trait` or `type`.
    kind: &'static str,
    name: String,
    /// The type whose `impl` block holds it, for a method.
    owner: Option<String>,
    /// Whether its doc comment (the `///` lines above it and its attributes) holds a code block.
    example: bool,
}

/// The type an `impl` line is for: `impl<T: Element> DeviceBuffer<T> {` and `impl<T> Deref for
/// Part<'_, T> {` are for `DeviceBuffer` and `Part`.
fn impl_type(line: &str) -> String {
    let rest = line.trim_start_matches("unsafe ").trim_start_matches("impl");
    let mut depth = 0;
    let start = rest
        .char_indices()
        .find(|&(_, c)| {
            match c {
                '<' => depth += 1,
                '>' => depth -= 1,
                _ => {}
            }
            depth == 0 && c != '>'
        })
        .map_or(rest.len(), |(i, _)| i);
    let ty = rest[start..].rsplit(" for ").next().unwrap_or("").trim().trim_start_matches('&');
    let ty = ty.split(['<', ' ', '{']).next().unwrap_or("");
    ty.rsplit("::").next().unwrap_or("").to_string()
}

/// The `pub` items of a Rust file (`pub(crate)` ones left out), by a reading of its lines that rustfmt's
/// layout makes sound: a line `pub fn NAME` (or `pub const fn`, `pub unsafe fn`, `pub struct`, `pub enum`,
/// `pub trait`, `pub type`) at any indent, its owner the type of the `impl` line above it at indent 0.
/// Blocks of private inline modules (`mod tests {`, `pub(crate) mod sealed {`) are skipped to their
/// closing line at their indent.
fn pub_items(text: &str) -> Vec<PubItem> {
    let lines: Vec<&str> = text.lines().collect();
    let (mut items, mut owner, mut skip_to) = (Vec::new(), None, None::<String>);
    for (i, l) in lines.iter().enumerate() {
        if let Some(end) = &skip_to {
            if l == end {
                skip_to = None;
            }
            continue;
        }
        let t = l.trim_start();
        let indent = &l[..l.len() - t.len()];
        let words: Vec<&str> = t.split_whitespace().collect();
        if t.ends_with('{') && words.contains(&"mod") && words[0] != "pub" {
            skip_to = Some(format!("{indent}}}"));
            continue;
        }
        if indent.is_empty() && (t.starts_with("impl") || t.starts_with("unsafe impl")) && !t.ends_with("{}") {
            owner = Some(impl_type(t));
        } else if indent.is_empty() && t == "}" {
            owner = None;
        }
        let Some(mut rest) = t.strip_prefix("pub ") else { continue };
        for qualifier in ["const ", "async ", "unsafe "] {
            rest = rest.strip_prefix(qualifier).unwrap_or(rest);
        }
        let kinds = ["fn", "struct", "enum", "trait", "type"];
        let Some((kind, after)) = kinds.iter().find_map(|k| Some((*k, rest.strip_prefix(k)?.strip_prefix(' ')?)))
        else {
            continue;
        };
        let name = after.chars().take_while(|c| c.is_alphanumeric() || *c == '_').collect();
        let above = lines[..i].iter().rev().skip_while(|l| l.trim_start().starts_with("#["));
        let example = above.take_while(|l| l.trim_start().starts_with("///")).any(|l| l.contains("```"));
        let owner = if indent.is_empty() { None } else { owner.clone() };
        items.push(PubItem { line: i + 1, kind, name, owner, example });
    }
    items
}

#[test]
fn pub_items_are_read_with_their_examples_and_owners() {
    let text = [
        "/// A thing.",
        "///",
        "/// ```",
        "/// let t = Thing;",
        "/// ```",
        "#[derive(Clone)]",
        "pub struct Thing;",
        "",
        "impl<T: Copy> Thing<T> {",
        "    /// Undocumented by example.",
        "    #[inline]",
        "    pub fn bare(&self) {}",
        "",
        "    pub(crate) fn inner(&self) {}",
        "}",
        "",
        "/// Nothing.",
        "pub unsafe fn raw() {}",
        "",
        "#[cfg(test)]",
        "mod tests {",
        "    pub fn helper() {}",
        "}",
    ]
    .join("\n");
    let items = pub_items(&text);
    let item = |line, kind, name: &str, owner: Option<&str>, example| PubItem {
        line,
        kind,
        name: name.into(),
        owner: owner.map(String::from),
        example,
    };
    assert_eq!(
        items,
        [
            item(7, "struct", "Thing", None, true),
            item(12, "fn", "bare", Some("Thing"), false),
            item(18, "fn", "raw", None, false)
        ]
    );
    assert_eq!(impl_type("impl<'scope, T: Element> PendingDownload<'scope, '_, T> {"), "PendingDownload");
    assert_eq!(impl_type("impl<T> std::ops::Deref for Part<'_, T> {"), "Part");
}

/// The public API is what the docs show: every public type and function of `common` (of its public
/// modules, methods of its public types and what is re-exported from its private modules) has an example
/// in its doc comment, which `cargo test --doc` compiles. Every offender is listed at once.
#[test]
fn every_public_item_of_common_has_an_example() {
    let dir = tools::root().join("common/src");
    let mut files: Vec<(String, String)> = std::fs::read_dir(&dir)
        .unwrap()
        .flatten()
        .filter_map(|e| {
            let stem = e.file_name().to_str()?.strip_suffix(".rs")?.to_string();
            Some((stem, std::fs::read_to_string(e.path()).ok()?))
        })
        .collect();
    files.sort();
    let private = |module: &str| COMMON_PRIVATE_MODULES.contains(&module);
    // Names re-exported from the private modules: `pub use crate::order::Waits;`.
    let mut public: Vec<String> = Vec::new();
    for (_, text) in &files {
        for line in text.lines().filter_map(|l| l.trim_start().strip_prefix("pub use crate::")) {
            let Some((module, names)) = line.trim_end_matches(';').split_once("::") else { continue };
            if private(module) {
                public.extend(names.trim_matches(['{', '}']).split(',').map(|n| n.trim().to_string()));
            }
        }
    }
    let items: Vec<(&str, Vec<PubItem>)> = files.iter().map(|(m, text)| (m.as_str(), pub_items(text))).collect();
    // The types the public modules declare.
    for (_, items) in items.iter().filter(|(module, _)| !private(module)) {
        public.extend(items.iter().filter(|i| i.owner.is_none() && i.kind != "fn").map(|i| i.name.clone()));
    }
    let mut offences = Vec::new();
    for (module, items) in &items {
        for i in items.iter().filter(|i| !i.example) {
            let reachable = match &i.owner {
                None => !private(module) || public.contains(&i.name),
                Some(owner) => public.contains(owner),
            };
            if reachable {
                let owner = i.owner.as_ref().map_or(String::new(), |o| format!("{o}::"));
                offences.push(format!("common/src/{module}.rs:{}: {} {owner}{}", i.line, i.kind, i.name));
            }
        }
    }
    assert!(
        offences.is_empty(),
        "{} public items of common have no example (a ``` block) in their docs:\n  {}",
        offences.len(),
        offences.join("\n  ")
    );
}

/// Nothing of `common` is hidden from its docs: what a user can call, the docs show.
#[test]
fn common_hides_nothing_from_its_docs() {
    let root = tools::root();
    let hidden: Vec<String> = walkdir::WalkDir::new(root.join("common"))
        .into_iter()
        .flatten()
        .filter(|e| e.file_type().is_file())
        .filter(|e| std::fs::read_to_string(e.path()).is_ok_and(|t| t.contains("doc(hidden)")))
        .map(|e| e.path().strip_prefix(&root).unwrap().display().to_string())
        .collect();
    assert!(hidden.is_empty(), "doc(hidden) in {}", hidden.join(", "));
}

/// The folders whose public types [`no_two_public_types_share_a_name`] holds to one name each: the
/// library crates and the tools. `common/src/ffi.rs`, the mirror of cuda.h's types, is left out, and so
/// are a library's private modules (`mod NAME;` in its `lib.rs`) and every file's tests.
const TYPE_FOLDERS: [&str; 7] =
    ["measure/src", "xtask/src", "profiler/src", "kernels/src", "chart/src", "common/src", "figures/src"];

/// The names of `pub struct|enum|trait|type NAME` in a Rust text, before its tests (`#[cfg(test)]`):
/// `pub` alone, not `pub(crate)`, at the start of its line, `unsafe` allowed before the word.
fn public_types(text: &str) -> Vec<String> {
    let mut names = Vec::new();
    for line in text.lines().take_while(|l| l.trim() != "#[cfg(test)]") {
        let Some(rest) = line.trim_start().strip_prefix("pub ") else { continue };
        let rest = rest.strip_prefix("unsafe ").unwrap_or(rest);
        let Some(rest) = ["struct ", "enum ", "trait ", "type "].iter().find_map(|k| rest.strip_prefix(k)) else {
            continue;
        };
        let name: String = rest.chars().take_while(|c| c.is_alphanumeric() || *c == '_').collect();
        if !name.is_empty() {
            names.push(name);
        }
    }
    names
}

#[test]
fn public_types_are_read_from_their_declarations() {
    let text = "pub struct A {\n    pub(crate) enum B;\npub trait C<T> {}\n    pub type D = u8;\nstruct E;\n\
                pub fn f() {}\npub unsafe trait F {}\n// pub struct G\n#[cfg(test)]\nmod tests {\npub struct H;\n";
    assert_eq!(public_types(text), ["A", "C", "D", "F"]);
}

/// One name, one type: no two public types of the workspace's library crates and tools share a name
/// ([`TYPE_FOLDERS`]), so that a name in prose or in an error says which one. Every name declared twice
/// is listed, with where.
#[test]
fn no_two_public_types_share_a_name() {
    let root = tools::root();
    let mut by_name: std::collections::BTreeMap<String, Vec<String>> = Default::default();
    for folder in TYPE_FOLDERS {
        let lib = std::fs::read_to_string(root.join(folder).join("lib.rs")).unwrap_or_default();
        let private: Vec<String> = lib
            .lines()
            .filter_map(|l| l.strip_prefix("mod ")?.strip_suffix(';'))
            .map(|m| format!("{folder}/{m}"))
            .collect();
        for entry in walkdir::WalkDir::new(root.join(folder)).into_iter().flatten() {
            let rel = entry.path().strip_prefix(&root).unwrap().to_string_lossy().into_owned();
            let in_private = private.iter().any(|m| rel == format!("{m}.rs") || rel.starts_with(&format!("{m}/")));
            if entry.path().extension().is_none_or(|x| x != "rs") || rel == "common/src/ffi.rs" || in_private {
                continue;
            }
            let text = std::fs::read_to_string(entry.path()).unwrap();
            for name in public_types(&text) {
                by_name.entry(name).or_default().push(rel.clone());
            }
        }
    }
    let shared: Vec<String> =
        by_name.iter().filter(|(_, at)| at.len() > 1).map(|(name, at)| format!("{name}: {}", at.join(", "))).collect();
    assert!(
        shared.is_empty(),
        "{} public type names are declared more than once:\n  {}",
        shared.len(),
        shared.join("\n  ")
    );
}
