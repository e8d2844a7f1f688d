//! The flags the lessons share, and the parsers of their values. Every flag is checked here, before the
//! GPU is touched: a bad one gives one line on stderr (or one JSON object on stdout under `--json`) and
//! exit code 2 (see [`crate::error`]).

use std::num::IntErrorKind;

use anyhow::bail;
use clap::{error::ErrorKind as ClapErrorKind, Args, Parser};

use crate::{
    error::{bad_args, report, ErrorKind},
    timing::Repeats,
    work::{ChunkKernel, Work},
    Chunking,
};

/// Parses the command line like `clap::Parser::parse`, but a bad flag gives one line (clap's message,
/// with its tip on the same line) and exit code 2; with `--json` on the command line, one JSON object
/// on stdout instead. Call it first: it also lets output into a closed pipe (`| head`) end the program
/// quietly, as it does C programs, instead of a panic in `println!`.
pub fn parse<A: Parser>() -> A {
    quiet_on_closed_pipe();
    match A::try_parse() {
        Ok(a) => a,
        Err(e)
            if matches!(
                e.kind(),
                ClapErrorKind::DisplayHelp
                    | ClapErrorKind::DisplayVersion
                    | ClapErrorKind::DisplayHelpOnMissingArgumentOrSubcommand
            ) =>
        {
            e.exit()
        }
        Err(e) => {
            let line = one_line(&e.render().to_string(), e.kind());
            let json = crate::error::json_requested(std::env::args_os());
            report(line.strip_prefix("error: ").unwrap_or(&line), ErrorKind::BadArguments, json);
            std::process::exit(ErrorKind::BadArguments.exit_code().into())
        }
    }
}

/// Restores the default action of SIGPIPE, which Rust programs ignore: a write into a closed pipe then
/// ends the program silently, as `head` expects, where `println!` would panic.
pub fn quiet_on_closed_pipe() {
    // SAFETY: setting a signal's disposition to its default; no handler runs our code.
    unsafe { libc::signal(libc::SIGPIPE, libc::SIG_DFL) };
}

/// clap's message in one line: its first line, and its tips (`a similar argument exists: '--streams'`)
/// after it in parentheses; the usage lines are left out. A flag clap knows nothing like points to `--help`.
fn one_line(text: &str, kind: ClapErrorKind) -> String {
    let mut raw = text.lines().filter(|l| !l.trim().is_empty()).peekable();
    let mut out = raw.next().unwrap_or("error: bad arguments").trim().to_string();
    // A first line that ends in ':' lists what it means on the indented lines below it (the missing
    // arguments): those join it.
    if out.ends_with(':') {
        let mut listed = Vec::new();
        while let Some(l) = raw.next_if(|l| l.starts_with(char::is_whitespace)) {
            listed.push(l.trim());
        }
        out = format!("{} {}", out, listed.join(", "));
    }
    let lines = raw.map(str::trim);
    let tips: Vec<&str> = lines.filter_map(|l| l.strip_prefix("tip:")).map(str::trim).collect();
    for tip in &tips {
        out += &format!(" (tip: {tip})");
    }
    if tips.is_empty() && kind == ClapErrorKind::UnknownArgument {
        out += " (--help lists the flags)";
    }
    out
}

/// How to measure and how to print.
#[derive(Args, Clone, Debug)]
pub struct RunArgs {
    /// Timed runs per measurement, at most (the median is reported; three once they add up to 250 ms)
    #[arg(long, default_value = "10", value_parser = parse_positive_u32, allow_negative_numbers = true)]
    pub repeats: u32,
    /// Untimed runs before each measurement
    #[arg(long, default_value = "2", value_parser = parse_u32, allow_negative_numbers = true)]
    pub warmup: u32,
    /// Print one JSON document instead of tables (errors too: one JSON object on stdout)
    #[arg(long)]
    pub json: bool,
}

impl RunArgs {
    pub fn repeats(&self) -> Repeats {
        Repeats { warmup: self.warmup as usize, repeats: self.repeats as usize }
    }
}

/// How the data is cut up: elements, chunks, streams. Each lesson has its own defaults.
#[derive(Args, Clone, Debug)]
pub struct PipelineArgs {
    /// Elements (f32) in all; k, M, G multiply by 2^10, 2^20, 2^30 (64M = 256 MiB of f32)
    #[arg(short = 'n', long, value_parser = parse_count, allow_negative_numbers = true)]
    pub elements: Option<usize>,
    /// Chunks the data is cut into
    #[arg(long, value_parser = parse_count, allow_negative_numbers = true)]
    pub chunks: Option<usize>,
    /// Streams the chunks are dealt to, round-robin
    #[arg(long, value_parser = parse_count, allow_negative_numbers = true)]
    pub streams: Option<usize>,
}

impl PipelineArgs {
    /// The chunking from the flags, with the lesson's defaults for those not given. Where a default does
    /// not fit a flag that was given, the message says which flag to add.
    pub fn chunking(&self, elements: usize, chunks: usize, streams: usize) -> anyhow::Result<Chunking> {
        let e = self.elements.unwrap_or(elements);
        let c = self.chunks.unwrap_or(chunks);
        let s = self.streams.unwrap_or(streams);
        if e > 0 && c > e && self.chunks.is_none() {
            return Err(bad_args(format!(
                "-n {e} is fewer elements than the {c} chunks this lesson cuts the data into by default: \
                 pass --chunks {e} or fewer"
            )));
        }
        if c > 0 && s > c && self.streams.is_none() {
            return Err(bad_args(format!(
                "--chunks {c} is fewer than the {s} streams this lesson uses by default: pass --streams {c} or fewer"
            )));
        }
        if c > 0 && s > c && self.chunks.is_none() {
            return Err(bad_args(format!(
                "--streams {s} is more than the {c} chunks this lesson uses by default: pass --chunks {s} or more"
            )));
        }
        Chunking::new(e, c, s)
    }
}

/// The flags of a pipeline lesson whose kernel runs in place: how the data is cut up, the kernel, and
/// how to measure.
#[derive(Args, Clone, Debug)]
pub struct PipelineFlags {
    #[command(flatten)]
    pub pipeline: PipelineArgs,
    #[command(flatten)]
    pub work: WorkArgs,
    #[command(flatten)]
    pub run: RunArgs,
}

/// The per-chunk work of the pipeline lessons.
#[derive(Args, Clone, Debug)]
pub struct WorkArgs {
    /// Kernel rounds per element (default: calibrated so computing a chunk takes as long as copying it)
    #[arg(long, value_parser = parse_u32, allow_negative_numbers = true)]
    pub iters: Option<u32>,
}

impl WorkArgs {
    /// The kernel these flags ask for: `--iters` rounds of process, or rounds calibrated once the GPU
    /// has started so that a chunk takes as long to compute as to copy both ways.
    pub fn kernel(&self) -> ChunkKernel {
        match self.iters {
            Some(iters) => ChunkKernel::Given(Work::Process(iters)),
            None => ChunkKernel::Balanced,
        }
    }

    /// The flags that ask for `work` (`--iters 1234`), where these flags can: how a run that calibrated
    /// its kernel tells another to do the same work ([`crate::report::Output::repeat_with`]).
    pub fn flags_for(work: Work) -> Option<Vec<String>> {
        match work {
            Work::Process(iters) => Some(vec!["--iters".into(), iters.to_string()]),
            _ => None,
        }
    }
}

/// The sizes a lesson sweeps, from `--min` to `--max`, 4x each step. Each lesson has its own defaults,
/// which its flags' summary names.
#[derive(Args, Clone, Debug)]
pub struct SweepArgs {
    /// Smallest size, then 4x each step up to --max: bytes, or with KiB, MiB or GiB (default: the lesson's, above)
    #[arg(long, value_parser = parse_bytes, allow_negative_numbers = true)]
    pub min: Option<usize>,
    /// Largest size (default: the lesson's, above)
    #[arg(long, value_parser = parse_bytes, allow_negative_numbers = true)]
    pub max: Option<usize>,
}

impl SweepArgs {
    /// The sizes the flags ask for, with the lesson's `min` and `max` for those not given
    /// ([`size_sweep`]): whole f32 elements, `--min` at most `--max`, and `--max` the last.
    pub fn sizes(&self, min: usize, max: usize) -> anyhow::Result<Vec<usize>> {
        size_sweep(self.min.unwrap_or(min), self.max.unwrap_or(max), 4)
    }
}

/// Why a string is not a whole number, in words: negative, too large, or not a number at all.
fn whole(s: &str, digits: &str, max: u128) -> anyhow::Result<u128> {
    if digits.starts_with('-') && digits.len() > 1 && digits[1..].chars().all(|c| c.is_ascii_digit() || c == '_') {
        bail!("'{s}' is negative: give a positive whole number");
    }
    if digits.is_empty() || !digits.chars().all(|c| c.is_ascii_digit()) {
        bail!("'{s}' is not a whole number");
    }
    match digits.parse::<u128>() {
        Ok(n) if n <= max => Ok(n),
        Ok(_) => bail!("'{s}' is too large (at most {max})"),
        Err(e) if *e.kind() == IntErrorKind::PosOverflow => bail!("'{s}' is too large (at most {max})"),
        Err(_) => bail!("'{s}' is not a whole number"),
    }
}

/// A count of things, at least 1: `1000`, `1_000`, `4k`, `64M`, `1G` (binary multiples).
pub fn parse_count(s: &str) -> anyhow::Result<usize> {
    let t = s.trim().replace('_', "");
    let (digits, mult): (&str, u128) =
        match t.char_indices().find(|(i, c)| !c.is_ascii_digit() && (*i != 0 || *c != '-')) {
            None => (t.as_str(), 1),
            Some((i, _)) => {
                let mult = match &t[i..] {
                    "k" | "K" => 1 << 10,
                    "m" | "M" => 1 << 20,
                    "g" | "G" => 1 << 30,
                    _ if t[..i].chars().any(|c| c.is_ascii_digit()) => {
                        bail!("'{s}' is not a whole number (k, M or G may follow the digits)")
                    }
                    _ => bail!("'{s}' is not a whole number"),
                };
                (&t[..i], mult)
            }
        };
    let n = whole(s, digits, usize::MAX as u128)?;
    if n == 0 {
        bail!("must be at least 1");
    }
    n.checked_mul(mult)
        .filter(|n| *n <= usize::MAX as u128)
        .map(|n| n as usize)
        .ok_or_else(|| anyhow::anyhow!("'{s}' is too large (at most {})", usize::MAX))
}

/// A whole number that fits in 32 bits: repeats, warm-up runs, kernel rounds.
pub fn parse_u32(s: &str) -> anyhow::Result<u32> {
    let t = s.trim().replace('_', "");
    Ok(whole(s, &t, u32::MAX as u128)? as u32)
}

/// [`parse_u32`], at least 1.
pub fn parse_positive_u32(s: &str) -> anyhow::Result<u32> {
    match parse_u32(s)? {
        0 => bail!("must be at least 1"),
        n => Ok(n),
    }
}

/// `4096`, `4KiB`, `4K`, `256MiB`, `1GiB`, `1G` (binary units; a bare number is bytes).
pub fn parse_bytes(s: &str) -> anyhow::Result<usize> {
    let t = s.trim();
    let split = t.char_indices().find(|(i, c)| !c.is_ascii_digit() && *c != '_' && (*i != 0 || *c != '-'));
    let (num, unit) = t.split_at(split.map_or(t.len(), |(i, _)| i));
    let mult: u128 = match unit.trim() {
        "" | "B" => 1,
        "k" | "K" | "KiB" | "KB" => 1 << 10,
        "M" | "MiB" | "MB" => 1 << 20,
        "G" | "GiB" | "GB" => 1 << 30,
        _ if num.is_empty() => bail!("'{s}' is not a size (a whole number of bytes, or with KiB, MiB or GiB)"),
        other => bail!("'{s}': unknown unit '{other}' (use B, KiB, MiB or GiB)"),
    };
    let n = whole(s, &num.replace('_', ""), usize::MAX as u128)?;
    n.checked_mul(mult)
        .filter(|n| *n <= usize::MAX as u128)
        .map(|n| n as usize)
        .ok_or_else(|| anyhow::anyhow!("'{s}' is too large"))
}

/// [`parse_bytes`], at least 1 byte: the size of a copy or a buffer.
pub fn parse_nonzero_bytes(s: &str) -> anyhow::Result<usize> {
    match parse_bytes(s)? {
        0 => bail!("must be at least 1 byte"),
        b => Ok(b),
    }
}

/// A size in bytes that holds whole f32 elements, at least one: `--slot`.
pub fn parse_elements_bytes(s: &str) -> anyhow::Result<usize> {
    let bytes = parse_bytes(s)?;
    if bytes < 4 {
        bail!("must hold at least one f32 element (4 bytes)");
    }
    if bytes % 4 != 0 {
        bail!("{bytes} bytes is not a whole number of f32 elements (a multiple of 4 bytes)");
    }
    Ok(bytes)
}

/// A count of CPU threads, from 1 to 4 per core of this machine: `--threads`.
pub fn parse_threads(s: &str) -> anyhow::Result<usize> {
    let n = parse_count(s)?;
    let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
    let max = 4 * cores;
    if n > max {
        bail!("at most {max}: 4 per CPU core, and this machine has {cores}");
    }
    Ok(n)
}

/// A rate in GB/s to hold a measurement against: finite, more than 0 (`--ref-htod 55.3`).
pub fn parse_gbps(s: &str) -> anyhow::Result<f64> {
    match s.trim().parse::<f64>() {
        Ok(x) if x.is_finite() && x > 0.0 => Ok(x),
        Ok(_) => bail!("'{s}' is not a rate: give GB/s as a finite number above 0, such as 55.3"),
        Err(_) => bail!("'{s}' is not a number: give GB/s, such as 55.3"),
    }
}

/// `--devices`: `all`, or a list of device numbers such as `0,1`, each once. Whether the devices exist
/// is known only to the driver: `every_gpu` checks that (its `parse_devices`), before any GPU work.
pub fn parse_device_list(s: &str) -> anyhow::Result<String> {
    let t = s.trim();
    if t == "all" {
        return Ok(t.to_string());
    }
    if t.is_empty() {
        bail!("no device named: give `all`, or device numbers such as 0,1");
    }
    let mut seen: Vec<u32> = Vec::new();
    for d in t.split(',').map(str::trim) {
        if d.is_empty() {
            bail!("'{s}' has an empty entry: give `all`, or device numbers such as 0,1");
        }
        let Ok(n) = d.parse::<u32>() else {
            bail!("'{d}' is not a device number: give `all`, or device numbers such as 0,1");
        };
        if seen.contains(&n) {
            bail!("device {n} is named twice");
        }
        seen.push(n);
    }
    Ok(seen.iter().map(u32::to_string).collect::<Vec<_>>().join(","))
}

/// Sizes from `min` to `max` bytes (the flags `--min` and `--max`), each `factor` times the last (and
/// `max` itself), whole f32 elements.
pub fn size_sweep(min: usize, max: usize, factor: usize) -> anyhow::Result<Vec<usize>> {
    use crate::report::fmt_bytes;
    for (flag, v) in [("--min", min), ("--max", max)] {
        if v < 4 {
            return Err(bad_args(format!("{flag} {v}: sizes must run from at least 4 bytes (one f32 element)")));
        }
        if v % 4 != 0 {
            return Err(bad_args(format!("{flag} {v}: sizes must be whole f32 elements (multiples of 4 bytes)")));
        }
    }
    if min > max {
        return Err(bad_args(format!("--min {} is more than --max {}", fmt_bytes(min), fmt_bytes(max))));
    }
    let mut v = vec![min];
    while let Some(next) = v.last().unwrap().checked_mul(factor.max(2)).filter(|n| *n < max) {
        v.push(next);
    }
    if *v.last().unwrap() != max {
        v.push(max);
    }
    Ok(v)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn err<T: std::fmt::Debug>(r: anyhow::Result<T>) -> String {
        r.unwrap_err().to_string()
    }

    #[test]
    fn counts() {
        assert_eq!(parse_count("1000").unwrap(), 1000);
        assert_eq!(parse_count("1_000_003").unwrap(), 1_000_003);
        assert_eq!(parse_count("64M").unwrap(), 64 << 20);
        assert_eq!(parse_count("4k").unwrap(), 4096);
        assert_eq!(err(parse_count("0")), "must be at least 1");
        for bad in ["", "x", "1.5M", "12Q", "M", "-"] {
            assert!(err(parse_count(bad)).contains("not a whole number"), "{bad}");
        }
        assert_eq!(err(parse_count("-5")), "'-5' is negative: give a positive whole number");
        assert!(err(parse_count("99999999999999999999")).contains("too large"));
        assert!(err(parse_count("99999999999999999999999999999999999999999")).contains("too large"));
        assert!(err(parse_count("17179869184G")).contains("too large"));
    }

    #[test]
    fn small_whole_numbers() {
        assert_eq!(parse_u32("0").unwrap(), 0);
        assert_eq!(parse_positive_u32("10").unwrap(), 10);
        assert_eq!(err(parse_u32("abc")), "'abc' is not a whole number");
        assert_eq!(err(parse_u32("-3")), "'-3' is negative: give a positive whole number");
        assert!(err(parse_u32("4294967296")).contains("too large (at most 4294967295)"));
        assert_eq!(err(parse_positive_u32("0")), "must be at least 1");
    }

    #[test]
    fn bytes() {
        assert_eq!(parse_bytes("4KiB").unwrap(), 4096);
        assert_eq!(parse_bytes("256MiB").unwrap(), 256 << 20);
        assert_eq!(parse_bytes("1G").unwrap(), 1 << 30);
        assert_eq!(parse_bytes("100").unwrap(), 100);
        assert!(err(parse_bytes("1TiB")).contains("unknown unit"));
        assert!(err(parse_bytes("abc")).contains("not a size"));
        assert!(err(parse_bytes("-1MiB")).contains("negative"));
        assert!(err(parse_bytes("99999999999GiB")).contains("too large"));
        assert_eq!(parse_nonzero_bytes("4").unwrap(), 4);
        assert_eq!(err(parse_nonzero_bytes("0")), "must be at least 1 byte");
        assert_eq!(parse_elements_bytes("8MiB").unwrap(), 8 << 20);
        assert!(err(parse_elements_bytes("0")).contains("at least one f32 element"));
        assert!(err(parse_elements_bytes("6")).contains("not a whole number of f32 elements"));
    }

    #[test]
    fn threads_rates_and_devices() {
        assert_eq!(parse_threads("1").unwrap(), 1);
        assert!(err(parse_threads("0")).contains("at least 1"));
        assert!(err(parse_threads("1000000")).contains("4 per CPU core"));
        assert_eq!(parse_gbps("55.3").unwrap(), 55.3);
        for bad in ["nan", "inf", "-inf", "0", "-5"] {
            assert!(err(parse_gbps(bad)).contains("not a rate"), "{bad}");
        }
        assert!(err(parse_gbps("fast")).contains("not a number"));
        assert_eq!(parse_device_list("all").unwrap(), "all");
        assert_eq!(parse_device_list(" 0, 1 ").unwrap(), "0,1");
        assert!(err(parse_device_list("")).contains("no device named"));
        assert!(err(parse_device_list("foo")).contains("'foo' is not a device number"));
        assert!(err(parse_device_list("0,,1")).contains("empty entry"));
        assert!(err(parse_device_list("-1")).contains("not a device number"));
        assert_eq!(err(parse_device_list("0,0")), "device 0 is named twice");
    }

    #[derive(clap::Parser, Debug)]
    struct Lesson {
        #[command(flatten)]
        p: PipelineArgs,
        #[command(flatten)]
        run: RunArgs,
    }

    fn clap_line(args: &[&str]) -> String {
        let e = Lesson::try_parse_from(std::iter::once("lesson").chain(args.iter().copied())).unwrap_err();
        one_line(&e.render().to_string(), e.kind())
    }

    #[test]
    fn bad_flags_give_one_line() {
        let line = clap_line(&["--chunks", "abc"]);
        assert_eq!(line, "error: invalid value 'abc' for '--chunks <CHUNKS>': 'abc' is not a whole number");
        let line = clap_line(&["-n", "-5"]);
        assert!(line.contains("'-5' is negative"), "{line}");
        let line = clap_line(&["--repeats", "abc"]);
        assert!(line.ends_with("'abc' is not a whole number"), "{line}");
        let line = clap_line(&["--repeats", "0"]);
        assert!(line.ends_with("must be at least 1"), "{line}");
    }

    #[test]
    fn missing_arguments_are_named_on_the_line() {
        let text = "error: the following required arguments were not provided:\n  --kernel <KERNEL>\n  --ptx <PTX>\n\nUsage: planner --ptx <PTX> --kernel <KERNEL>\n";
        assert_eq!(
            one_line(text, ClapErrorKind::MissingRequiredArgument),
            "error: the following required arguments were not provided: --kernel <KERNEL>, --ptx <PTX>"
        );
    }

    #[test]
    fn clap_tips_stay_on_the_line() {
        let line = clap_line(&["--stream", "4"]);
        assert!(line.starts_with("error: unexpected argument '--stream' found (tip: "), "{line}");
        assert!(line.contains("'--streams'"), "{line}");
        assert!(!line.contains('\n'));
        assert_eq!(clap_line(&["--size", "0"]), "error: unexpected argument '--size' found (--help lists the flags)");
    }

    #[test]
    fn sweeps() {
        assert_eq!(size_sweep(4096, 65536, 4).unwrap(), vec![4096, 16384, 65536]);
        assert_eq!(size_sweep(4096, 100_000, 4).unwrap(), vec![4096, 16384, 65536, 100_000]);
        assert_eq!(size_sweep(64, 64, 4).unwrap(), vec![64]);
        assert_eq!(err(size_sweep(1 << 30, 4096, 4)), "--min 1 GiB is more than --max 4 KiB");
        assert!(err(size_sweep(6, 1024, 4)).contains("--min 6: sizes must be whole f32 elements"));
        assert!(err(size_sweep(0, 1024, 4)).contains("--min 0: sizes must run from at least 4 bytes"));
        assert!(err(size_sweep(4096, 0, 4)).contains("--max 0: sizes must run from at least 4 bytes"));
        let e = size_sweep(4096, 0, 4).unwrap_err();
        assert_eq!(crate::error::ErrorKind::of(&e), crate::error::ErrorKind::BadArguments);
        let given = |min, max| SweepArgs { min, max }.sizes(4096, 65536);
        assert_eq!(given(None, None).unwrap(), vec![4096, 16384, 65536], "the lesson's defaults");
        assert_eq!(given(None, Some(16384)).unwrap(), vec![4096, 16384], "a flag given, the other the default");
        assert_eq!(err(given(None, Some(1024))), "--min 4 KiB is more than --max 1 KiB");
    }

    #[test]
    fn plan_defaults_and_overrides() {
        let a = PipelineArgs { elements: Some(100), chunks: None, streams: Some(2) };
        assert_eq!(a.chunking(1 << 20, 8, 4).unwrap(), Chunking::new(100, 8, 2).unwrap());
        let zero = PipelineArgs { elements: None, chunks: Some(0), streams: None };
        assert!(err(zero.chunking(100, 8, 4)).contains("--chunks must be at least 1"));
        assert!(clap_line(&["--streams", "0"]).ends_with("'--streams <STREAMS>': must be at least 1"));
    }

    #[test]
    fn defaults_that_do_not_fit_say_which_flag_to_pass() {
        let few = PipelineArgs { elements: Some(5), chunks: None, streams: None };
        assert_eq!(
            err(few.chunking(64 << 20, 32, 4)),
            "-n 5 is fewer elements than the 32 chunks this lesson cuts the data into by default: pass --chunks 5 or fewer"
        );
        let chunks = PipelineArgs { elements: None, chunks: Some(2), streams: None };
        assert!(err(chunks.chunking(64 << 20, 32, 4)).contains("pass --streams 2 or fewer"));
        let streams = PipelineArgs { elements: None, chunks: None, streams: Some(64) };
        assert!(err(streams.chunking(64 << 20, 32, 4)).contains("pass --chunks 64 or more"));
        let given = PipelineArgs { elements: Some(10), chunks: Some(11), streams: Some(2) };
        assert!(err(given.chunking(64 << 20, 32, 4)).contains("--chunks 11 is more than the 10 elements"));
        let e = few.chunking(64 << 20, 32, 4).unwrap_err();
        assert_eq!(crate::error::ErrorKind::of(&e), crate::error::ErrorKind::BadArguments);
    }
}
