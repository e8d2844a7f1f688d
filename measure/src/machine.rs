//! What the machine says about a GPU's path to host memory, read at run time, and what that tells about
//! a measured rate: the PCIe link's generation and width against its maximum, the clocks and why they
//! are held down (NVIDIA's management library, NVML, through `nvml-wrapper`), the NUMA node of the GPU
//! and of a host buffer (Linux), and which limit a copy rate sits at.
//!
//! GPUs drop their link to a slower generation when idle to save power, so a link read below its
//! maximum is read again while copies run before it is called trained down.

use nvml_wrapper::{
    bitmasks::device::ThrottleReasons,
    enum_wrappers::device::{Clock, PerformanceState},
    Nvml,
};
use serde::Serialize;

use std::fmt::Write as _;

use cuda_scope::{Bytes, DeviceInfo, Gpu};

/// The GPU's link and clocks as NVML reports them, and the NUMA node it hangs off.
#[derive(Clone, Debug, Default, Serialize)]
pub struct Health {
    /// Why NVML could not be read (then every NVML field is empty).
    pub nvml_missing: Option<String>,
    pub link: Option<LinkState>,
    /// Graphics/SM clock, current and maximum, MHz.
    pub sm_clock_mhz: Option<(u32, u32)>,
    /// Memory clock, current and maximum, MHz.
    pub memory_clock_mhz: Option<(u32, u32)>,
    /// Why the clocks are below their maximum, as NVML names the reasons (idle left out).
    pub clocks_held_by: Vec<String>,
    /// P0 (full speed) to P15.
    pub performance_state: Option<u32>,
    pub gpu_numa_node: Option<u32>,
}

/// The negotiated PCIe link against what the GPU and its slot allow.
#[derive(Clone, Debug, Serialize)]
pub struct LinkState {
    pub gen: u32,
    pub width: u32,
    pub max_gen: u32,
    pub max_width: u32,
    /// Whether it was read while copies ran (it was read again under load because it read low idle).
    pub read_under_load: bool,
}

impl LinkState {
    pub fn trained_down(&self) -> bool {
        self.gen < self.max_gen || self.width < self.max_width
    }

    /// Raw rate of one direction, GB/s, of the link as it runs.
    pub fn gbps(&self) -> Option<f64> {
        PcieLink::from_gen_width(self.gen, self.width).map(|l| l.gbps)
    }
}

impl Health {
    /// Reads `gpu`'s state; where the link reads below its maximum, again while 32 MiB copies run.
    pub fn read(gpu: &Gpu) -> Health {
        let nvml = match Nvml::init() {
            Ok(n) => n,
            Err(e) => return Health { nvml_missing: Some(format!("NVML not available ({e})")), ..Health::idle(gpu) },
        };
        let mut h = snapshot(&nvml, gpu);
        if h.link.as_ref().is_some_and(LinkState::trained_down) {
            if let Ok(Some(busy)) = under_load(gpu, || snapshot(&nvml, gpu)) {
                h = busy;
                if let Some(l) = &mut h.link {
                    l.read_under_load = true;
                }
            }
        }
        h
    }

    fn idle(gpu: &Gpu) -> Health {
        Health { gpu_numa_node: numa_node(&gpu.info), ..Health::default() }
    }

    /// One direction's raw link rate, GB/s: NVML's reading where it was taken under load or shows the
    /// maximum, else the OS's.
    pub fn link_gbps(&self, gpu: &Gpu) -> Option<f64> {
        let nvml = self.link.as_ref().filter(|l| l.read_under_load || !l.trained_down()).and_then(LinkState::gbps);
        nvml.or(PcieLink::of(&gpu.info).map(|l| l.gbps))
    }

    /// One line for the device report.
    pub fn summary(&self) -> String {
        if let Some(why) = &self.nvml_missing {
            return format!("{why}: link, clocks and throttling not read");
        }
        let mut parts = Vec::new();
        if let Some(l) = &self.link {
            parts.push(format!(
                "link Gen{} x{} of Gen{} x{}{}",
                l.gen,
                l.width,
                l.max_gen,
                l.max_width,
                if l.read_under_load { " (read under load)" } else { "" }
            ));
        }
        if let Some((cur, max)) = self.sm_clock_mhz {
            parts.push(format!("SM clock {cur} of {max} MHz"));
        }
        if let Some((cur, max)) = self.memory_clock_mhz {
            parts.push(format!("memory clock {cur} of {max} MHz"));
        }
        if let Some(p) = self.performance_state {
            parts.push(format!("P{p}"));
        }
        parts.push(match self.clocks_held_by.is_empty() {
            true => "no throttling".into(),
            false => format!("clocks held by {}", self.clocks_held_by.join(", ")),
        });
        parts.join(", ")
    }

    /// What, among the facts read, would hold host-device copies below what the machine should give.
    pub fn likely_causes(&self, host_buffer_node: Option<u32>) -> Vec<String> {
        let mut causes = Vec::new();
        if let Some(l) = self.link.as_ref().filter(|l| l.trained_down() && l.read_under_load) {
            let rate = l.gbps().map_or(String::new(), |g| format!(": copies are held to {g:.1} GB/s raw"));
            causes.push(format!(
                "the PCIe link trained down to Gen{} x{} of the Gen{} x{} the GPU and slot allow{rate} \
                 (reseat the card, or check the slot and the BIOS link settings)",
                l.gen, l.width, l.max_gen, l.max_width
            ));
        }
        if !self.clocks_held_by.is_empty() {
            causes.push(format!("the clocks are held down by {}", self.clocks_held_by.join(", ")));
        }
        if let Some((cur, max)) = self.memory_clock_mhz.filter(|(c, m)| *m > 0 && (*c as f64) < 0.9 * *m as f64) {
            causes.push(format!("the memory clock runs at {cur} of {max} MHz (locked with nvidia-smi -lmc?)"));
        }
        if let (Some(buf), Some(gpu)) = (host_buffer_node, self.gpu_numa_node) {
            if buf != gpu {
                causes.push(format!(
                    "the host buffer lies on NUMA node {buf} and the GPU hangs off node {gpu}: copies cross the \
                     link between sockets"
                ));
            }
        }
        causes
    }

    /// Where a host buffer lies against the GPU, in words.
    pub fn numa_line(&self, host_buffer_node: Option<u32>) -> String {
        match (self.gpu_numa_node, host_buffer_node) {
            (Some(g), Some(b)) if g == b => format!("host buffer on NUMA node {b}, the GPU's own"),
            (Some(g), Some(b)) => format!("host buffer on NUMA node {b}, the GPU hangs off node {g}"),
            (None, Some(b)) => format!("host buffer on NUMA node {b}; the host exposes no NUMA node for the GPU"),
            (_, None) => "the host does not say where the buffer lies (no NUMA information)".into(),
        }
    }
}

fn snapshot(nvml: &Nvml, gpu: &Gpu) -> Health {
    let dev = match nvml.device_by_pci_bus_id(gpu.info.pci_bus_id.as_str()) {
        Ok(d) => d,
        Err(e) => {
            return Health { nvml_missing: Some(format!("NVML does not know this GPU ({e})")), ..Health::idle(gpu) }
        }
    };
    let link = match (
        dev.current_pcie_link_gen(),
        dev.current_pcie_link_width(),
        dev.max_pcie_link_gen(),
        dev.max_pcie_link_width(),
    ) {
        (Ok(gen), Ok(width), Ok(max_gen), Ok(max_width)) => {
            Some(LinkState { gen, width, max_gen, max_width, read_under_load: false })
        }
        _ => None,
    };
    let clock = |c: Clock| dev.clock_info(c).ok().zip(dev.max_clock_info(c).ok());
    let reasons = dev.current_throttle_reasons().unwrap_or(ThrottleReasons::NONE);
    Health {
        nvml_missing: None,
        link,
        sm_clock_mhz: clock(Clock::SM),
        memory_clock_mhz: clock(Clock::Memory),
        clocks_held_by: throttle_names(reasons),
        performance_state: dev.performance_state().ok().map(pstate_number),
        gpu_numa_node: dev.numa_node_id().ok().or_else(|| numa_node(&gpu.info)),
    }
}

/// NVML's throttle reasons in words, leaving out idle (a GPU at rest is not held back).
pub fn throttle_names(r: ThrottleReasons) -> Vec<String> {
    let names = [
        (ThrottleReasons::APPLICATIONS_CLOCKS_SETTING, "applications or locked clocks (nvidia-smi -ac, -lgc)"),
        (ThrottleReasons::SW_POWER_CAP, "the power cap"),
        (ThrottleReasons::HW_SLOWDOWN, "hardware slowdown"),
        (ThrottleReasons::SYNC_BOOST, "sync boost"),
        (ThrottleReasons::SW_THERMAL_SLOWDOWN, "thermal slowdown (software)"),
        (ThrottleReasons::HW_THERMAL_SLOWDOWN, "thermal slowdown (hardware)"),
        (ThrottleReasons::HW_POWER_BRAKE_SLOWDOWN, "power brake"),
        (ThrottleReasons::DISPLAY_CLOCK_SETTING, "display clocks"),
    ];
    names.iter().filter(|(bit, _)| r.contains(*bit)).map(|(_, n)| n.to_string()).collect()
}

fn pstate_number(p: PerformanceState) -> u32 {
    use PerformanceState as P;
    let all = [
        P::Zero,
        P::One,
        P::Two,
        P::Three,
        P::Four,
        P::Five,
        P::Six,
        P::Seven,
        P::Eight,
        P::Nine,
        P::Ten,
        P::Eleven,
        P::Twelve,
        P::Thirteen,
        P::Fourteen,
        P::Fifteen,
    ];
    all.iter().position(|q| *q == p).map_or(16, |i| i as u32)
}

/// Runs `read` while 32 MiB host-to-device copies keep the link busy for about 20 ms.
fn under_load<R>(gpu: &Gpu, read: impl FnOnce() -> R) -> anyhow::Result<Option<R>> {
    let n = 8 << 20;
    let (src, mut dst) = (gpu.pinned::<f32>(n)?, gpu.alloc::<f32>(n)?);
    let streams = gpu.streams(1)?;
    let mut read = Some(read);
    gpu.scope(&streams, |s| {
        let d = s.device(&mut dst);
        for _ in 0..32 {
            s.stream(0).htod(&src, d)?;
        }
        std::thread::sleep(std::time::Duration::from_millis(3));
        Ok(read.take().map(|f| f()))
    })
}

/// The NUMA node that holds the first page of `buf` (Linux `get_mempolicy`), where there is one: touch
/// the buffer first (pinned buffers are), or an untouched page reads as wherever it is faulted in.
pub fn numa_node_of<T>(buf: &[T]) -> Option<u32> {
    if buf.is_empty() {
        return None;
    }
    let mut node: libc::c_int = -1;
    // SAFETY: get_mempolicy(int *mode, unsigned long *nodemask, unsigned long maxnode, void *addr,
    // unsigned long flags) with MPOL_F_NODE | MPOL_F_ADDR writes one int (the node of the page that holds
    // `addr`) through a valid pointer; a null node mask with a max node of 0 is allowed. `addr` lies in a
    // live slice; the kernel may fault its page in, as a read would, and writes nothing of ours.
    let rc = unsafe {
        libc::syscall(
            libc::SYS_get_mempolicy,
            &mut node as *mut libc::c_int,
            std::ptr::null_mut::<libc::c_ulong>(),
            0 as libc::c_ulong,
            buf.as_ptr() as *const libc::c_void,
            (MPOL_F_NODE | MPOL_F_ADDR) as libc::c_ulong,
        )
    };
    (rc == 0 && node >= 0).then_some(node as u32)
}

const MPOL_F_NODE: u32 = 1;
const MPOL_F_ADDR: u32 = 2;

/// What a copy's rate sits at, in words, from the machine's facts and the run's own measurements.
#[derive(Clone, Debug, Serialize)]
pub struct CopyPath<'a> {
    /// "pinned", "pageable", ...
    pub memory: &'a str,
    /// The copy moved this many bytes at this rate.
    pub bytes: usize,
    pub gbps: f64,
    /// The per-copy cost, µs, from a fit over sizes (see [`crate::fit`]), where there is one.
    pub per_copy_us: Option<f64>,
    /// One direction's raw link rate, GB/s.
    pub link_gbps: Option<f64>,
    /// The host's own memory-copy rate on one thread, GB/s, measured in the same run.
    pub host_copy_gbps: Option<f64>,
}

impl CopyPath<'_> {
    /// `per-copy cost (73% of this copy's time)`, `the link (88% of Gen5 x16's raw rate)`, ...
    pub fn limit(&self) -> String {
        let ms = self.bytes as f64 / (self.gbps * 1e9) * 1e3;
        if let Some(a) = self.per_copy_us.filter(|a| *a * 1e-3 > 0.5 * ms) {
            return format!("per-copy cost ({:.0}% of this copy's time)", 100.0 * a * 1e-3 / ms);
        }
        let link = self.link_gbps.map(|l| self.gbps / l);
        if self.memory == "pageable" {
            return match self.host_copy_gbps {
                Some(h) => format!(
                    "the pageable path: the driver's staging copy, {:.0}% of one thread's memcpy rate",
                    100.0 * self.gbps / h
                ),
                None => "the pageable path: the driver's staging copy".into(),
            };
        }
        match link {
            Some(f) if f >= 0.80 => {
                format!("the link ({:.0}% of its raw rate: packet overhead takes the rest)", 100.0 * f)
            }
            Some(f) => format!("below the link ({:.0}% of its raw rate)", 100.0 * f),
            None => "the copy engine (the link's rate is not known)".into(),
        }
    }
}

/// How fast the host's CPUs read and write their memory, all threads at once: what several GPUs copying
/// at once compete for (a GPU's upload reads host memory, its download writes it). The writes are
/// ordinary stores, which read each line before writing it, as the GPU's DMA writes do not: a figure
/// of the CPUs, to set beside the GPUs', not a bound on them.
#[derive(Clone, Debug, Serialize)]
pub struct HostMemory {
    pub threads: usize,
    pub bytes: usize,
    pub read_gbps: f64,
    pub write_gbps: f64,
}

impl HostMemory {
    /// The best of three passes over `bytes` of fresh memory, each way.
    pub fn measure(bytes: usize) -> anyhow::Result<HostMemory> {
        use rayon::prelude::*;
        let n = bytes / 8;
        let mut v: Vec<u64> = Vec::new();
        v.try_reserve_exact(n)
            .map_err(|_| anyhow::anyhow!("no room for {} of host memory", crate::report::fmt_bytes(bytes)))?;
        // Touched first by all threads, so that on a host of several NUMA nodes the pages spread as the
        // threads do, rather than all landing on the node of one thread.
        v.par_extend(rayon::iter::repeat_n(1u64, n));
        const PIECE: usize = 1 << 16;
        let (mut read, mut write) = (f64::INFINITY, f64::INFINITY);
        for pass in 0..3u64 {
            let t = std::time::Instant::now();
            v.par_chunks_mut(PIECE).for_each(|c| c.fill(pass));
            write = write.min(t.elapsed().as_secs_f64());
            let t = std::time::Instant::now();
            let sum: u64 = v.par_chunks(PIECE).map(|c| c.iter().fold(0u64, |a, x| a.wrapping_add(*x))).sum();
            read = read.min(t.elapsed().as_secs_f64());
            if sum != pass * n as u64 {
                anyhow::bail!("host memory read back wrong: {sum} for {}", pass * n as u64);
            }
        }
        let gbps = |secs: f64| (n * 8) as f64 / secs / 1e9;
        Ok(HostMemory {
            threads: rayon::current_num_threads(),
            bytes: n * 8,
            read_gbps: gbps(read),
            write_gbps: gbps(write),
        })
    }
}

/// The PCI devices between the root complex and a GPU, as sysfs lays them out: `["pci0000:00",
/// "0000:00:01.0", "0000:01:00.0"]`, the GPU last.
pub fn pci_path(pci_bus_id: &str) -> Option<Vec<String>> {
    let p = std::fs::canonicalize(std::path::Path::new("/sys/bus/pci/devices").join(pci_bus_id.to_lowercase())).ok()?;
    Some(pci_components(&p.to_string_lossy()))
}

fn pci_components(path: &str) -> Vec<String> {
    path.split('/').filter(|c| c.starts_with("pci") || c.matches(':').count() == 2).map(String::from).collect()
}

/// Which GPUs share a bridge on their way to the host (whose bandwidth they then share), in words;
/// empty where each has a path of its own below the root.
pub fn shared_bridges(paths: &[(u32, Vec<String>)]) -> Vec<String> {
    let mut lines = Vec::new();
    for (i, (a, pa)) in paths.iter().enumerate() {
        for (b, pb) in &paths[i + 1..] {
            // The last bridge both paths pass through, short of the GPUs themselves.
            let common = pa.iter().zip(pb).take(pa.len().min(pb.len()) - 1).take_while(|(x, y)| x == y).count();
            if common >= 2 {
                lines.push(format!("GPUs {a} and {b} share the bridge {} on their way to the host", pa[common - 1]));
            } else if common == 1 {
                lines.push(format!("GPUs {a} and {b} meet only at the root complex {}", pa[0]));
            }
        }
    }
    lines
}

/// One of several GPUs as measured alone, for [`why_together`].
pub struct GpuAlone<'a> {
    pub device: u32,
    pub health: Option<&'a Health>,
    pub likely_causes: &'a [String],
    /// Its slower direction alone, GB/s.
    pub slowest_gbps: f64,
    pub pci_bus_id: &'a str,
}

/// Why GPUs copying at once get less than alone, in lines: each GPU's state, with the likely cause
/// where one is slower alone than the best by a fifth; the bridges they share on the way to the host;
/// and how fast the CPUs read and write host memory beside `least`, the direction the host gives least
/// in: (`"H2D"` or `"D2H"`, GB/s together, share of alone).
pub fn why_together(gpus: &[GpuAlone], least: Option<(&str, f64, f64)>, host: &HostMemory) -> Vec<String> {
    let mut lines = Vec::new();
    let best = gpus.iter().map(|g| g.slowest_gbps).fold(0.0, f64::max);
    for g in gpus {
        lines.push(format!("GPU {}: {}", g.device, g.health.map_or("not read".into(), Health::summary)));
        if g.slowest_gbps < 0.8 * best {
            let cause = g.likely_causes.first().map_or("none among link, clocks and NUMA", |c| c);
            lines.push(format!("  slower alone than the best GPU; likely cause: {cause}"));
        }
    }
    let paths: Vec<(u32, Vec<String>)> =
        gpus.iter().filter_map(|g| Some((g.device, pci_path(g.pci_bus_id)?))).collect();
    lines.extend(shared_bridges(&paths));
    let (threads, read, write) = (host.threads, host.read_gbps, host.write_gbps);
    lines.push(format!("the host's {threads} CPU threads read memory at {read:.1} GB/s and write it at {write:.1}"));
    if let Some((way, got, share)) = least {
        let (what, cpus) = if way == "H2D" { ("read", read) } else { ("write", write) };
        lines.push(format!(
            "the host gives least in {way}: {got:.1} GB/s together, {:.0}% of alone; the GPUs {what} host memory \
             there, which the CPUs {what} at {cpus:.1}",
            100.0 * share
        ));
    }
    lines
}

/// The host link as the OS reports it (`/sys/bus/pci`): generation, lanes, and its raw rate.
#[derive(Clone, Debug, Serialize)]
pub struct PcieLink {
    /// PCIe generation, 1 to 6.
    pub gen: u32,
    /// Lanes.
    pub width: u32,
    /// Raw rate of one direction after line encoding, before packet overhead.
    pub gbps: f64,
}

impl PcieLink {
    /// The link of `info`'s GPU as the OS reports it now; `None` where it does not.
    pub fn of(info: &DeviceInfo) -> Option<PcieLink> {
        PcieLink::read(&info.pci_bus_id)
    }

    /// Reads the negotiated link from sysfs; `None` where the OS does not expose it.
    pub fn read(pci_bus_id: &str) -> Option<PcieLink> {
        let dir = std::path::Path::new("/sys/bus/pci/devices").join(pci_bus_id.to_lowercase());
        let speed = std::fs::read_to_string(dir.join("current_link_speed")).ok()?;
        let width = std::fs::read_to_string(dir.join("current_link_width")).ok()?;
        PcieLink::parse(&speed, &width)
    }

    /// `"32.0 GT/s PCIe"`, `"16"` -> Gen5 x16, 63.0 GB/s.
    pub fn parse(speed: &str, width: &str) -> Option<PcieLink> {
        let gts: f64 = speed.split_whitespace().next()?.parse().ok()?;
        let width: u32 = width.trim().parse().ok()?;
        let gen = match gts {
            g if g < 3.0 => 1,
            g if g < 6.0 => 2,
            g if g < 10.0 => 3,
            g if g < 20.0 => 4,
            g if g < 40.0 => 5,
            _ => 6,
        };
        PcieLink::from_gen_width(gen, width)
    }

    /// Generation 1 to 6 and lane count -> the raw rate of one direction after line encoding.
    pub fn from_gen_width(gen: u32, width: u32) -> Option<PcieLink> {
        let (gts, encoding) = match gen {
            1 => (2.5, 8.0 / 10.0),
            2 => (5.0, 8.0 / 10.0),
            3 => (8.0, 128.0 / 130.0),
            4 => (16.0, 128.0 / 130.0),
            5 => (32.0, 128.0 / 130.0),
            6 => (64.0, 242.0 / 256.0),
            _ => return None,
        };
        (width > 0).then(|| PcieLink { gen, width, gbps: gts * width as f64 * encoding / 8.0 })
    }
}

/// The NUMA node the GPU hangs off, where the host says (`/sys/bus/pci/devices/*/numa_node`).
pub fn numa_node(info: &DeviceInfo) -> Option<u32> {
    let path = std::path::Path::new("/sys/bus/pci/devices").join(info.pci_bus_id.to_lowercase()).join("numa_node");
    std::fs::read_to_string(path).ok()?.trim().parse::<i32>().ok().filter(|n| *n >= 0).map(|n| n as u32)
}

/// The GPU in two lines: name, compute capability, SMs, memory; driver, copy engines, link, bus.
pub fn describe(info: &DeviceInfo) -> String {
    let (major, minor) = info.compute_capability;
    let mut f = String::new();
    writeln!(
        f,
        "GPU {}: {} (compute {major}.{minor}, {} SMs, {})",
        info.ordinal,
        info.name,
        info.sms,
        Bytes(info.total_memory)
    )
    .unwrap();
    let link = match PcieLink::of(info) {
        Some(l) => format!("PCIe Gen{} x{} ({:.1} GB/s per direction, raw)", l.gen, l.width, l.gbps),
        None => "host link not reported by the OS".into(),
    };
    write!(
        f,
        "      driver {}.{}, {} copy engine{}, {}, maps host memory: {}, bus {}",
        info.driver_version.0,
        info.driver_version.1,
        info.async_engines,
        if info.async_engines == 1 { "" } else { "s" },
        link,
        if info.can_map_host_memory { "yes" } else { "no" },
        info.pci_bus_id
    )
    .unwrap();
    f
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pcie_gen5_x16() {
        let l = PcieLink::parse("32.0 GT/s PCIe\n", "16\n").unwrap();
        assert_eq!((l.gen, l.width), (5, 16));
        assert!((l.gbps - 63.015).abs() < 0.01, "{}", l.gbps);
    }

    #[test]
    fn pcie_gen3_and_garbage() {
        let l = PcieLink::parse("8.0 GT/s PCIe", "8").unwrap();
        assert_eq!((l.gen, l.width), (3, 8));
        assert!(PcieLink::parse("Unknown", "16").is_none());
        assert!(PcieLink::parse("16.0 GT/s", "0").is_none());
    }

    fn healthy() -> Health {
        Health {
            link: Some(LinkState { gen: 5, width: 16, max_gen: 5, max_width: 16, read_under_load: false }),
            sm_clock_mhz: Some((1980, 1980)),
            memory_clock_mhz: Some((3201, 3201)),
            performance_state: Some(0),
            gpu_numa_node: Some(0),
            ..Health::default()
        }
    }

    #[test]
    fn a_healthy_gpu_has_no_likely_cause() {
        let h = healthy();
        assert!(h.likely_causes(Some(0)).is_empty());
        assert_eq!(
            h.summary(),
            "link Gen5 x16 of Gen5 x16, SM clock 1980 of 1980 MHz, memory clock 3201 of 3201 MHz, P0, no throttling"
        );
    }

    #[test]
    fn a_link_trained_down_under_load_is_named_and_idle_downshift_is_not() {
        let mut h = healthy();
        h.link = Some(LinkState { gen: 1, width: 16, max_gen: 5, max_width: 16, read_under_load: false });
        assert!(h.likely_causes(None).is_empty(), "read idle only: power saving, not a fault");
        h.link = Some(LinkState { gen: 3, width: 8, max_gen: 5, max_width: 16, read_under_load: true });
        let c = h.likely_causes(None);
        assert_eq!(c.len(), 1);
        assert!(c[0].contains("Gen3 x8 of the Gen5 x16") && c[0].contains("7.9 GB/s"), "{}", c[0]);
    }

    #[test]
    fn clocks_memory_and_numa_are_named() {
        let mut h = healthy();
        h.clocks_held_by = throttle_names(ThrottleReasons::SW_POWER_CAP | ThrottleReasons::APPLICATIONS_CLOCKS_SETTING);
        h.memory_clock_mhz = Some((1593, 3201));
        let c = h.likely_causes(Some(1));
        assert_eq!(c.len(), 3, "{c:?}");
        assert!(c[0].contains("applications or locked clocks") && c[0].contains("power cap"), "{}", c[0]);
        assert!(c[1].contains("1593 of 3201"));
        assert!(c[2].contains("NUMA node 1") && c[2].contains("node 0"));
        assert_eq!(throttle_names(ThrottleReasons::GPU_IDLE), Vec::<String>::new());
    }

    #[test]
    fn what_limits_a_copy() {
        let pinned = |bytes, gbps, a| CopyPath {
            memory: "pinned",
            bytes,
            gbps,
            per_copy_us: a,
            link_gbps: Some(63.0),
            host_copy_gbps: Some(20.0),
        };
        assert!(pinned(64 << 20, 55.4, Some(8.0)).limit().starts_with("the link (88%"));
        assert!(pinned(64 << 20, 30.0, Some(8.0)).limit().starts_with("below the link (48%"));
        // 4 KiB at 0.5 GB/s takes 8.2 µs, of which 8 µs is the per-copy cost.
        assert!(pinned(4096, 0.5, Some(8.0)).limit().starts_with("per-copy cost (98%"));
        let pageable = CopyPath { memory: "pageable", ..pinned(64 << 20, 9.0, None) };
        assert!(pageable.limit().contains("45% of one thread's memcpy rate"));
        let unknown = CopyPath { link_gbps: None, ..pinned(64 << 20, 50.0, None) };
        assert!(unknown.limit().contains("not known"));
    }

    #[test]
    fn bridges_shared_on_the_way_to_the_host() {
        let p = pci_components("/sys/devices/pci0000:00/0000:00:01.0/0000:01:00.0/0000:02:00.0/0000:03:00.0");
        assert_eq!(p, ["pci0000:00", "0000:00:01.0", "0000:01:00.0", "0000:02:00.0", "0000:03:00.0"]);
        let q = pci_components("/sys/devices/pci0000:00/0000:00:01.0/0000:01:00.0/0000:02:01.0/0000:04:00.0");
        let r = pci_components("/sys/devices/pci0000:00/0000:00:02.0/0000:05:00.0");
        let s = pci_components("/sys/devices/pci0000:40/0000:40:01.0/0000:41:00.0");
        let lines = shared_bridges(&[(0, p), (1, q), (2, r), (3, s)]);
        assert_eq!(lines.len(), 3, "{lines:?}");
        assert_eq!(lines[0], "GPUs 0 and 1 share the bridge 0000:01:00.0 on their way to the host");
        assert!(lines[1].contains("GPUs 0 and 2 meet only at the root complex pci0000:00"));
        assert!(lines[2].contains("GPUs 1 and 2"));
    }

    #[test]
    fn why_several_gpus_lose_names_the_slow_one_and_the_host() {
        let h = healthy();
        let causes = vec!["the PCIe link trained down".to_string()];
        let gpu = |device, slowest_gbps| GpuAlone {
            device,
            health: Some(&h),
            likely_causes: &causes,
            slowest_gbps,
            pci_bus_id: "0000:ff:00.0",
        };
        let host = HostMemory { threads: 64, bytes: 1 << 30, read_gbps: 109.0, write_gbps: 81.8 };
        let lines = why_together(&[gpu(0, 55.0), gpu(1, 14.0)], Some(("D2H", 94.7, 0.56)), &host);
        assert_eq!(lines.len(), 5, "{lines:?}");
        assert!(lines[2].contains("slower alone") && lines[2].contains("trained down"), "{lines:?}");
        assert!(lines[4].contains("D2H: 94.7 GB/s together, 56% of alone") && lines[4].ends_with("write at 81.8"));
        assert_eq!(why_together(&[gpu(0, 55.0)], None, &host).len(), 2);
    }

    #[test]
    fn host_memory_rates_are_measured_and_checked() {
        let m = HostMemory::measure(8 << 20).unwrap();
        assert!(m.read_gbps > 0.1 && m.write_gbps > 0.1 && m.threads >= 1, "{m:?}");
        assert_eq!(m.bytes, 8 << 20);
    }

    #[test]
    fn the_numa_node_of_a_buffer_is_read_or_absent() {
        let v = vec![1u8; 1 << 16];
        // On Linux with NUMA support this is the node of the page; without it, None. Never a crash.
        if let Some(n) = numa_node_of(&v) {
            assert!(n < 1024);
        }
        assert_eq!(numa_node_of::<u8>(&[]), None);
        let h = Health { gpu_numa_node: None, ..healthy() };
        assert!(h.numa_line(Some(0)).contains("no NUMA node for the GPU"));
    }
}
