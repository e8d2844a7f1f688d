//! Compiles every kernel for one architecture and prints what ptxas says of each.

use std::{fs, process::Command};

use crate::{flags::KernelsFlags, setup, tools};

pub fn run(flags: KernelsFlags) -> anyhow::Result<()> {
    let nvcc = setup::run()?.nvcc;
    let out = tools::target_dir().join("kernels").join(&flags.arch);
    fs::create_dir_all(&out)?;
    let mut sources: Vec<_> = fs::read_dir(tools::root().join("kernels"))?
        .flatten()
        .map(|e| e.path())
        .filter(|p| p.extension().is_some_and(|e| e == "cu"))
        .collect();
    sources.sort();
    println!(
        "{:<14} {:<16} {:>9} {:>7} {:>13} {:>12}",
        "file", "kernel", "registers", "stack", "spill stores", "spill loads"
    );
    for src in sources {
        let cubin = out.join(src.with_extension("cubin").file_name().unwrap());
        let o = tools::output(
            Command::new(&nvcc)
                .args(["-cubin", &format!("-arch={}", flags.arch), "-Xptxas", "-v", "-o"])
                .arg(&cubin)
                .arg(&src),
            &format!("compiling {} for {}", src.display(), flags.arch),
        )?;
        let file = src.file_name().unwrap().to_string_lossy().into_owned();
        for k in parse_ptxas(&String::from_utf8_lossy(&o.stderr)) {
            println!(
                "{:<14} {:<16} {:>9} {:>7} {:>13} {:>12}",
                file,
                k.name,
                k.registers,
                format!("{} B", k.stack),
                k.spill_stores,
                k.spill_loads
            );
        }
    }
    println!("\ncubins in {}", out.display());
    Ok(())
}

#[derive(Debug, Default, PartialEq)]
pub struct KernelInfo {
    pub name: String,
    pub registers: u32,
    pub stack: u32,
    pub spill_stores: u32,
    pub spill_loads: u32,
}

/// Reads `ptxas -v` output: "Compiling entry function 'X'", "N bytes stack frame, N bytes spill stores,
/// N bytes spill loads", "Used N registers".
pub fn parse_ptxas(text: &str) -> Vec<KernelInfo> {
    let mut out: Vec<KernelInfo> = Vec::new();
    let num_before = |line: &str, word: &str| -> Option<u32> {
        let i = line.find(word)?;
        line[..i].split_whitespace().last()?.parse().ok()
    };
    for line in text.lines() {
        if let Some(rest) = line.split("Compiling entry function '").nth(1) {
            out.push(KernelInfo { name: rest.split('\'').next().unwrap_or("").to_string(), ..Default::default() });
        } else if let Some(k) = out.last_mut() {
            if line.contains("stack frame") {
                k.stack = num_before(line, "bytes stack frame").unwrap_or(0);
                k.spill_stores = num_before(line, "bytes spill stores").unwrap_or(0);
                k.spill_loads = num_before(line, "bytes spill loads").unwrap_or(0);
            } else if line.contains("Used") {
                k.registers = num_before(line, "registers").unwrap_or(0);
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_ptxas_verbose_output() {
        let text = "ptxas info    : 24 bytes gmem\n\
ptxas info    : Compiling entry function 'heavy_sqrt' for 'sm_90'\n\
ptxas info    : Function properties for heavy_sqrt\n\
    0 bytes stack frame, 0 bytes spill stores, 0 bytes spill loads\n\
ptxas info    : Used 19 registers, used 0 barriers\n\
ptxas info    : Compiling entry function 'process_sincos' for 'sm_90'\n\
ptxas info    : Function properties for process_sincos\n\
    32 bytes stack frame, 4 bytes spill stores, 8 bytes spill loads\n\
ptxas info    : Used 22 registers, used 0 barriers, 32 bytes cumulative stack size\n";
        let k = parse_ptxas(text);
        assert_eq!(k.len(), 2);
        assert_eq!(k[0], KernelInfo { name: "heavy_sqrt".into(), registers: 19, ..Default::default() });
        assert_eq!(
            k[1],
            KernelInfo { name: "process_sincos".into(), registers: 22, stack: 32, spill_stores: 4, spill_loads: 8 }
        );
    }
}
