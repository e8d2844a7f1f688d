//! A thread bound near its GPU: run on the CPUs of the GPU's NUMA node, so that the pinned memory it
//! then allocates and touches lands on that node.

use anyhow::{bail, Context as _};

/// Runs the calling thread on the CPUs of NUMA node `node`, so that pinned memory it then allocates and
/// touches lies near the GPU. Returns how many CPUs it was given.
pub fn bind_thread_to_node(node: u32) -> anyhow::Result<usize> {
    let list = std::fs::read_to_string(format!("/sys/devices/system/node/node{node}/cpulist"))
        .with_context(|| format!("reading the CPUs of NUMA node {node}"))?;
    let cpus = parse_cpulist(&list)?;
    // SAFETY: cpu_set_t is plain data, zeroed then filled by the libc macros; pid 0 is this thread.
    unsafe {
        let mut set: libc::cpu_set_t = std::mem::zeroed();
        for &c in &cpus {
            libc::CPU_SET(c, &mut set);
        }
        if libc::sched_setaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &set) != 0 {
            bail!("binding the thread to NUMA node {node}: {}", std::io::Error::last_os_error());
        }
    }
    Ok(cpus.len())
}

/// `0-3,8,10-11` -> [0, 1, 2, 3, 8, 10, 11].
fn parse_cpulist(list: &str) -> anyhow::Result<Vec<usize>> {
    let mut out = Vec::new();
    for part in list.trim().split(',').filter(|p| !p.is_empty()) {
        let (a, b) = part.split_once('-').unwrap_or((part, part));
        let (a, b): (usize, usize) =
            (a.trim().parse().context("bad cpulist")?, b.trim().parse().context("bad cpulist")?);
        out.extend(a..=b);
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cpulists() {
        assert_eq!(parse_cpulist("0-3,8,10-11\n").unwrap(), vec![0, 1, 2, 3, 8, 10, 11]);
        assert_eq!(parse_cpulist("5").unwrap(), vec![5]);
        assert!(parse_cpulist("a-b").is_err());
    }
}
