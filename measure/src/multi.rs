//! Driving several GPUs at once: which devices, phases in lockstep, threads bound near their GPU.

use anyhow::{bail, Context as _};

use common::device::device_count;

/// `all`, or a list like `0,1`: the devices to run on, checked against the machine.
pub fn parse_devices(spec: &str) -> anyhow::Result<Vec<u32>> {
    let count = device_count()?;
    let list: Vec<u32> = if spec.trim() == "all" {
        (0..count).collect()
    } else {
        spec.split(',')
            .map(|d| d.trim().parse::<u32>().with_context(|| format!("--devices: '{d}' is not a device number")))
            .collect::<anyhow::Result<_>>()?
    };
    if let Some(bad) = list.iter().find(|d| **d >= count) {
        bail!("--devices: device {bad} does not exist: this machine has {count}");
    }
    if list.is_empty() {
        bail!("--devices: no device named");
    }
    Ok(list)
}

/// The barrier that threads driving several GPUs meet before each phase, so that the GPUs start each
/// phase together. A thread that fails early still meets it as often as the others (its drop meets the
/// rest), so that they never wait for it forever. Without a barrier it does nothing.
pub struct Lockstep<'a> {
    barrier: Option<&'a std::sync::Barrier>,
    left: std::cell::Cell<usize>,
}

impl<'a> Lockstep<'a> {
    /// `steps` meetings of `barrier` (None: a GPU alone, nothing to meet).
    pub fn new(barrier: Option<&'a std::sync::Barrier>, steps: usize) -> Self {
        Lockstep { barrier, left: std::cell::Cell::new(steps) }
    }

    /// Waits for every other thread to reach its next step.
    pub fn wait(&self) {
        if let (Some(b), n @ 1..) = (self.barrier, self.left.get()) {
            self.left.set(n - 1);
            b.wait();
        }
    }
}

impl Drop for Lockstep<'_> {
    fn drop(&mut self) {
        while self.barrier.is_some() && self.left.get() > 0 {
            self.wait();
        }
    }
}

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
pub fn parse_cpulist(list: &str) -> anyhow::Result<Vec<usize>> {
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
    fn a_thread_that_fails_early_still_meets_the_others() {
        let b = std::sync::Barrier::new(2);
        std::thread::scope(|s| {
            s.spawn(|| {
                let step = Lockstep::new(Some(&b), 3);
                step.wait(); // then it "fails": its drop meets the two steps left
            });
            let step = Lockstep::new(Some(&b), 3);
            for _ in 0..3 {
                step.wait();
            }
        });
        Lockstep::new(None, 3).wait(); // alone: nothing to meet
    }

    #[test]
    fn cpulists() {
        assert_eq!(parse_cpulist("0-3,8,10-11\n").unwrap(), vec![0, 1, 2, 3, 8, 10, 11]);
        assert_eq!(parse_cpulist("5").unwrap(), vec![5]);
        assert!(parse_cpulist("a-b").is_err());
    }
}
