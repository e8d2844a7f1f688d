//! The flags the lessons share, and the parsing of sizes.

use anyhow::{bail, Context as _};
use clap::{error::ErrorKind, Args, Parser};

use crate::{timing::Repeats, ChunkPlan};

/// Parses the command line like `clap::Parser::parse`, but a bad flag gives one line and exit code 2
/// (clap's own message adds a usage hint on further lines).
pub fn parse<A: Parser>() -> A {
    match A::try_parse() {
        Ok(a) => a,
        Err(e)
            if matches!(
                e.kind(),
                ErrorKind::DisplayHelp
                    | ErrorKind::DisplayVersion
                    | ErrorKind::DisplayHelpOnMissingArgumentOrSubcommand
            ) =>
        {
            e.exit()
        }
        Err(e) => {
            eprintln!("{}", first_line(&e.render().to_string()));
            std::process::exit(2)
        }
    }
}

fn first_line(text: &str) -> &str {
    text.lines().find(|l| !l.trim().is_empty()).unwrap_or("error: bad arguments").trim_end()
}

/// How to measure and how to print.
#[derive(Args, Clone, Debug)]
pub struct RunArgs {
    /// Timed runs per measurement (the median is reported)
    #[arg(long, default_value_t = 10, value_parser = clap::value_parser!(u32).range(1..))]
    pub repeats: u32,
    /// Untimed runs before each measurement
    #[arg(long, default_value_t = 2)]
    pub warmup: u32,
    /// Print one JSON document instead of tables
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
    #[arg(short = 'n', long, value_parser = parse_count)]
    pub elements: Option<usize>,
    /// Chunks the data is cut into
    #[arg(long, value_parser = parse_count)]
    pub chunks: Option<usize>,
    /// Streams the chunks are dealt to, round-robin
    #[arg(long, value_parser = parse_count)]
    pub streams: Option<usize>,
}

impl PipelineArgs {
    /// The plan from the flags, with the lesson's defaults for those not given.
    pub fn plan(&self, elements: usize, chunks: usize, streams: usize) -> anyhow::Result<ChunkPlan> {
        ChunkPlan::new(
            self.elements.unwrap_or(elements),
            self.chunks.unwrap_or(chunks),
            self.streams.unwrap_or(streams),
        )
    }
}

/// The per-chunk work of the pipeline lessons.
#[derive(Args, Clone, Debug)]
pub struct WorkArgs {
    /// Kernel rounds per element (default: calibrated so computing a chunk takes as long as copying it)
    #[arg(long)]
    pub iters: Option<u32>,
}

/// `1000`, `1_000`, `4k`, `64M`, `1G` (binary multiples).
pub fn parse_count(s: &str) -> anyhow::Result<usize> {
    let t = s.trim().replace('_', "");
    let (digits, mult) = match t.char_indices().find(|(_, c)| !c.is_ascii_digit()) {
        None => (t.as_str(), 1usize),
        Some((0, _)) => bail!("'{s}' is not a number"),
        Some((i, _)) => {
            let mult = match &t[i..] {
                "k" | "K" => 1 << 10,
                "m" | "M" => 1 << 20,
                "g" | "G" => 1 << 30,
                _ => bail!("'{s}' is not a whole number (k, M or G may follow the digits)"),
            };
            (&t[..i], mult)
        }
    };
    if digits.is_empty() {
        bail!("'{s}' is not a number");
    }
    let n: usize = digits.parse().with_context(|| format!("'{s}' is not a number"))?;
    n.checked_mul(mult).with_context(|| format!("'{s}' is too large"))
}

/// `4096`, `4KiB`, `4K`, `256MiB`, `1GiB`, `1G` (binary units; a bare number is bytes).
pub fn parse_bytes(s: &str) -> anyhow::Result<usize> {
    let t = s.trim();
    let split = t.find(|c: char| !c.is_ascii_digit() && c != '_').unwrap_or(t.len());
    let (num, unit) = t.split_at(split);
    let mult: usize = match unit.trim() {
        "" | "B" => 1,
        "k" | "K" | "KiB" | "KB" => 1 << 10,
        "M" | "MiB" | "MB" => 1 << 20,
        "G" | "GiB" | "GB" => 1 << 30,
        other => bail!("'{s}': unknown unit '{other}' (use B, KiB, MiB or GiB)"),
    };
    let n = parse_count(num).with_context(|| format!("'{s}' is not a size"))?;
    n.checked_mul(mult).with_context(|| format!("'{s}' is too large"))
}

/// Sizes from `min` to `max` bytes, each `factor` times the last (and `max` itself), whole f32 elements.
pub fn size_sweep(min: usize, max: usize, factor: usize) -> anyhow::Result<Vec<usize>> {
    if min < 4 || max < min {
        bail!("sizes must run from at least 4 bytes up: --min {min} --max {max}");
    }
    if min % 4 != 0 || max % 4 != 0 {
        bail!("sizes must be whole f32 elements (multiples of 4 bytes): --min {min} --max {max}");
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

    #[test]
    fn counts() {
        assert_eq!(parse_count("1000").unwrap(), 1000);
        assert_eq!(parse_count("1_000_003").unwrap(), 1_000_003);
        assert_eq!(parse_count("64M").unwrap(), 64 << 20);
        assert_eq!(parse_count("4k").unwrap(), 4096);
        for bad in ["", "x", "-1", "1.5M", "12Q", "M", "99999999999999999999"] {
            assert!(parse_count(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn bytes() {
        assert_eq!(parse_bytes("4KiB").unwrap(), 4096);
        assert_eq!(parse_bytes("256MiB").unwrap(), 256 << 20);
        assert_eq!(parse_bytes("1G").unwrap(), 1 << 30);
        assert_eq!(parse_bytes("100").unwrap(), 100);
        assert!(parse_bytes("1TiB").is_err());
        assert!(parse_bytes("abc").is_err());
    }

    #[test]
    fn bad_flags_give_one_line() {
        #[derive(clap::Parser, Debug)]
        struct A {
            #[command(flatten)]
            p: PipelineArgs,
        }
        let e = A::try_parse_from(["x", "--chunks", "abc"]).unwrap_err();
        let line = first_line(&e.render().to_string()).to_string();
        assert!(line.starts_with("error: invalid value 'abc' for '--chunks"), "{line}");
        assert!(line.contains("not a number"), "{line}");
        assert!(e.render().to_string().lines().count() > 1, "clap's own message is longer");
    }

    #[test]
    fn sweeps() {
        assert_eq!(size_sweep(4096, 65536, 4).unwrap(), vec![4096, 16384, 65536]);
        assert_eq!(size_sweep(4096, 100_000, 4).unwrap(), vec![4096, 16384, 65536, 100_000]);
        assert_eq!(size_sweep(64, 64, 4).unwrap(), vec![64]);
        assert!(size_sweep(4096, 1024, 4).is_err());
        assert!(size_sweep(6, 1024, 4).is_err());
        assert!(size_sweep(0, 1024, 4).is_err());
    }

    #[test]
    fn plan_defaults_and_overrides() {
        let a = PipelineArgs { elements: Some(100), chunks: None, streams: Some(2) };
        assert_eq!(a.plan(1 << 20, 8, 4).unwrap(), ChunkPlan::new(100, 8, 2).unwrap());
        let zero = PipelineArgs { elements: None, chunks: Some(0), streams: None };
        assert!(zero.plan(100, 8, 4).is_err());
    }
}
