//! The GPU: start-up with clear errors, the device report, and everything made on it.

use std::{cell::RefCell, fmt, sync::Arc};

use anyhow::{bail, Context as _};
use cust::sys;
use serde::Serialize;

use crate::{
    context::Context,
    ffi::{self, check},
    host::{pin_in_place, HostAlloc, PinnedBuffer, Registered},
    kernels::Kernels,
    memory::{memory_info, room, DeviceBuffer, Element, ManagedBuffer, Room},
    report::fmt_bytes,
    scope::{self, Env, Scope},
    stream::{Event, EventPool, Stream},
    timeline::Recorder,
};

pub use crate::context::{device_count, driver_init};

/// One GPU, with the lessons' kernels loaded. Everything it makes (buffers, streams, pinned memory)
/// keeps its context alive, so they may be dropped in any order, before or after it.
pub struct Gpu {
    pub info: DeviceInfo,
    pub kernels: Kernels,
    events: EventPool,
    recorder: RefCell<Option<Recorder>>,
    ctx: Arc<Context>,
}

/// What a lesson needs to know of the GPU to judge its figures.
#[derive(Clone, Debug, Serialize)]
pub struct DeviceInfo {
    pub ordinal: u32,
    pub name: String,
    pub compute_capability: (i32, i32),
    pub sms: u32,
    pub total_memory: usize,
    /// Copy engines that can run at the same time as kernels: 2 or more lets H2D and D2H overlap each other too.
    pub async_engines: u32,
    pub can_map_host_memory: bool,
    pub unified_addressing: bool,
    /// Managed memory (`cudaMallocManaged`) is available, and the CPU and this GPU may touch it at the
    /// same time (`CU_DEVICE_ATTRIBUTE_CONCURRENT_MANAGED_ACCESS`): what [`Gpu::managed`] needs.
    pub managed_memory: bool,
    pub driver_version: (i32, i32),
    pub pci_bus_id: String,
    /// The host link as the OS reports it (`/sys/bus/pci`), when it does.
    pub link: Option<PcieLink>,
    /// Peak device-memory bandwidth from the memory clock and bus width, when the driver reports them.
    pub memory_gbps: Option<f64>,
}

#[derive(Clone, Debug, Serialize)]
pub struct PcieLink {
    pub gen: u32,
    pub width: u32,
    /// Raw rate of one direction after line encoding, before packet overhead.
    pub gbps: f64,
}

impl Gpu {
    /// Starts the GPU named by `CUDA_DEVICE` (default 0) with errors a person can act on.
    pub fn init() -> anyhow::Result<Gpu> {
        let ordinal = match std::env::var("CUDA_DEVICE") {
            Ok(v) => v.parse().with_context(|| format!("CUDA_DEVICE={v} is not a device number"))?,
            Err(_) => 0,
        };
        Gpu::init_device(ordinal)
    }

    /// Starts GPU `ordinal` and makes its context current on this thread.
    pub fn init_device(ordinal: u32) -> anyhow::Result<Gpu> {
        let ctx = Context::primary(ordinal)?;
        let info = DeviceInfo::query(ordinal, ctx.device())?;
        let kernels = Kernels::load(&ctx, info.sms).context("loading the kernels (PTX JIT)")?;
        let recorder = Recorder::from_env(ordinal, || {
            let origin = Event::new(&ctx)?;
            let s = Stream::new(&ctx, false)?;
            origin.record(&s)?;
            s.synchronize()?;
            Ok(origin)
        })?;
        Ok(Gpu { info, kernels, events: EventPool::new(&ctx), recorder: RefCell::new(recorder), ctx })
    }

    /// `n` streams that run concurrently with each other and with the legacy default stream
    /// (`cudaStreamCreateWithFlags(.., cudaStreamNonBlocking)`).
    pub fn streams(&self, n: usize) -> anyhow::Result<Vec<Stream>> {
        (0..n).map(|_| Stream::new(&self.ctx, false)).collect()
    }

    /// `n` streams that synchronize with the legacy default stream (`cudaStreamCreate`): work on
    /// stream 0, as other libraries may queue it, waits for them and they for it.
    pub fn blocking_streams(&self, n: usize) -> anyhow::Result<Vec<Stream>> {
        (0..n).map(|_| Stream::new(&self.ctx, true)).collect()
    }

    /// Device memory for `len` elements, zeroed (`cudaMalloc`), with a clear error when the device has
    /// too little free.
    pub fn alloc<T: Element>(&self, len: usize) -> anyhow::Result<DeviceBuffer<T>> {
        DeviceBuffer::zeroed(&self.ctx, &self.info.name, len)
    }

    /// `count` device buffers of `len` elements each: one per stream, say.
    pub fn alloc_each<T: Element>(&self, count: usize, len: usize) -> anyhow::Result<Vec<DeviceBuffer<T>>> {
        (0..count).map(|_| self.alloc(len)).collect()
    }

    /// Managed memory for `len` elements, zeroed (`cudaMallocManaged(.., cudaMemAttachGlobal)`): one
    /// address for the host and the GPU, its pages moved to whichever touches them. Refused, with the
    /// reason, on a GPU where the host may not touch managed memory while the GPU works, and when the
    /// device has no [`Room`] for it: more than its free memory less a margin kept for others.
    pub fn managed<T: Element>(&self, len: usize) -> anyhow::Result<ManagedBuffer<T>> {
        ManagedBuffer::zeroed(&self.ctx, &self.info.name, len)
    }

    /// How much memory that may come to rest on the device can still be asked for (see [`Room`]): for a
    /// program to check everything it means to allocate before it allocates any of it.
    pub fn room(&self) -> anyhow::Result<Room> {
        room(&self.ctx)
    }

    /// Pinned host memory for `len` elements, zeroed (`cudaMallocHost`).
    pub fn pinned<T: Element>(&self, len: usize) -> anyhow::Result<PinnedBuffer<T>> {
        PinnedBuffer::alloc(&self.ctx, len, HostAlloc::DEFAULT)
    }

    /// Pinned host memory holding `f(i)` at `i`.
    pub fn pinned_from_fn<T: Element>(
        &self,
        len: usize,
        f: impl Fn(usize) -> T + Sync,
    ) -> anyhow::Result<PinnedBuffer<T>> {
        let mut b = self.pinned(len)?;
        crate::verify::par_fill(&mut b, f);
        Ok(b)
    }

    /// Pinned host memory with `cudaHostAlloc` flags: write-combined, mapped, portable.
    pub fn pinned_with<T: Element>(&self, len: usize, flags: HostAlloc) -> anyhow::Result<PinnedBuffer<T>> {
        PinnedBuffer::alloc(&self.ctx, len, flags)
    }

    /// Pins a `Vec` in place (`cudaHostRegister`) until [`Registered::into_vec`] gives it back.
    pub fn register<T: Element>(&self, vec: Vec<T>) -> anyhow::Result<Registered<T>> {
        Registered::new(&self.ctx, vec)
    }

    /// Pins `slice` in place for the duration of `f` (`cudaHostRegister`, then `cudaHostUnregister`,
    /// also if `f` panics): for one transfer of part of a larger allocation.
    pub fn pin_in_place<T: Element, R>(&self, slice: &mut [T], f: impl FnOnce(&mut [T]) -> R) -> anyhow::Result<R> {
        pin_in_place(&self.ctx, slice, f)
    }

    /// Runs `f`, which queues work on `streams`, then synchronizes them all (also on error or panic).
    pub fn scope<'env, R>(
        &'env self,
        streams: &'env [Stream],
        f: impl for<'scope> FnOnce(&'scope Scope<'scope, 'env>) -> anyhow::Result<R>,
    ) -> anyhow::Result<R> {
        scope::run(self.env(), streams, false, f).map(|(r, _)| r)
    }

    /// Like [`Gpu::scope`], and returns the GPU time in milliseconds from before the first operation to
    /// after the last, on any stream (CUDA events: fork on the first stream, join back to it).
    pub fn timed<'env>(
        &'env self,
        streams: &'env [Stream],
        f: impl for<'scope> FnOnce(&'scope Scope<'scope, 'env>) -> anyhow::Result<()>,
    ) -> anyhow::Result<f64> {
        let (_, ms) = scope::run(self.env(), streams, true, f)?;
        ms.context("the timed scope measured nothing")
    }

    /// (free, total) device memory in bytes.
    pub fn memory(&self) -> anyhow::Result<(usize, usize)> {
        memory_info(&self.ctx)
    }

    fn env(&self) -> Env<'_> {
        Env { ctx: &self.ctx, events: &self.events, recorder: &self.recorder }
    }

    pub(crate) fn context(&self) -> &Arc<Context> {
        &self.ctx
    }
}

impl Drop for Gpu {
    fn drop(&mut self) {
        if let Some(mut r) = self.recorder.get_mut().take() {
            match r.write() {
                Ok(n) => eprintln!("built-in timeline: {n} operations written to {}", r.path.display()),
                Err(e) => eprintln!("built-in timeline not written: {e:#}"),
            }
        }
    }
}

impl DeviceInfo {
    fn query(ordinal: u32, device: sys::CUdevice) -> anyhow::Result<DeviceInfo> {
        use sys::CUdevice_attribute as A;
        let attr = |a: A| crate::context::device_attribute(device, a);
        let mut version = 0;
        // SAFETY: one valid out-pointer.
        check(unsafe { ffi::cuDriverGetVersion(&mut version) }, || "reading the driver version".into())?;
        let mut bus = [0 as std::os::raw::c_char; 32];
        // SAFETY: the buffer is 32 bytes long and we pass its length; the driver NUL-terminates it.
        check(unsafe { ffi::cuDeviceGetPCIBusId(bus.as_mut_ptr(), bus.len() as i32, device) }, || {
            "reading the PCI bus id".into()
        })?;
        // SAFETY: NUL-terminated by the driver, within the buffer.
        let pci_bus_id = unsafe { std::ffi::CStr::from_ptr(bus.as_ptr()) }.to_string_lossy().into_owned();
        let mut name = [0 as std::os::raw::c_char; 256];
        // SAFETY: as above, 256 bytes.
        check(unsafe { ffi::cuDeviceGetName(name.as_mut_ptr(), name.len() as i32, device) }, || {
            "reading the device name".into()
        })?;
        // SAFETY: NUL-terminated by the driver, within the buffer.
        let name = unsafe { std::ffi::CStr::from_ptr(name.as_ptr()) }.to_string_lossy().into_owned();
        let mut total_memory = 0;
        // SAFETY: valid out-pointer and device handle.
        check(unsafe { ffi::cuDeviceTotalMem_v2(&mut total_memory, device) }, || {
            "reading the device memory size".into()
        })?;
        let memory_gbps = match (
            attr(A::CU_DEVICE_ATTRIBUTE_MEMORY_CLOCK_RATE),
            attr(A::CU_DEVICE_ATTRIBUTE_GLOBAL_MEMORY_BUS_WIDTH),
        ) {
            (Ok(khz), Ok(bits)) if khz > 0 && bits > 0 => Some(2.0 * khz as f64 * 1e3 * bits as f64 / 8.0 / 1e9),
            _ => None,
        };
        Ok(DeviceInfo {
            ordinal,
            name,
            compute_capability: (
                attr(A::CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR)?,
                attr(A::CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR)?,
            ),
            sms: attr(A::CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT)? as u32,
            total_memory,
            async_engines: attr(A::CU_DEVICE_ATTRIBUTE_ASYNC_ENGINE_COUNT)? as u32,
            can_map_host_memory: attr(A::CU_DEVICE_ATTRIBUTE_CAN_MAP_HOST_MEMORY)? != 0,
            unified_addressing: attr(A::CU_DEVICE_ATTRIBUTE_UNIFIED_ADDRESSING)? != 0,
            managed_memory: crate::memory::managed_support(device).is_ok(),
            driver_version: (version / 1000, version % 1000 / 10),
            link: PcieLink::read(&pci_bus_id),
            pci_bus_id,
            memory_gbps,
        })
    }
}

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

impl DeviceInfo {
    /// The NUMA node the GPU hangs off, where the host says (`/sys/bus/pci/devices/*/numa_node`).
    pub fn numa_node(&self) -> Option<u32> {
        let path = std::path::Path::new("/sys/bus/pci/devices").join(self.pci_bus_id.to_lowercase()).join("numa_node");
        std::fs::read_to_string(path).ok()?.trim().parse::<i32>().ok().filter(|n| *n >= 0).map(|n| n as u32)
    }
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

impl PcieLink {
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

impl fmt::Display for DeviceInfo {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let (major, minor) = self.compute_capability;
        writeln!(
            f,
            "GPU {}: {} (compute {major}.{minor}, {} SMs, {})",
            self.ordinal,
            self.name,
            self.sms,
            fmt_bytes(self.total_memory)
        )?;
        let link = match &self.link {
            Some(l) => format!("PCIe Gen{} x{} ({:.1} GB/s per direction, raw)", l.gen, l.width, l.gbps),
            None => "host link not reported by the OS".into(),
        };
        write!(
            f,
            "      driver {}.{}, {} copy engine{}, {}, maps host memory: {}, bus {}",
            self.driver_version.0,
            self.driver_version.1,
            self.async_engines,
            if self.async_engines == 1 { "" } else { "s" },
            link,
            if self.can_map_host_memory { "yes" } else { "no" },
            self.pci_bus_id
        )
    }
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

    #[test]
    fn pcie_gen3_and_garbage() {
        let l = PcieLink::parse("8.0 GT/s PCIe", "8").unwrap();
        assert_eq!((l.gen, l.width), (3, 8));
        assert!(PcieLink::parse("Unknown", "16").is_none());
        assert!(PcieLink::parse("16.0 GT/s", "0").is_none());
    }

    /// On a machine without a driver this must be one clear error, never a panic; with a GPU it must start.
    #[test]
    fn init_is_an_error_or_a_gpu() {
        match Gpu::init() {
            Ok(gpu) => assert!(gpu.info.sms > 0),
            Err(e) => {
                let msg = format!("{e:#}");
                assert!(msg.starts_with("no NVIDIA driver") || msg.starts_with("no CUDA GPU"), "{msg}");
                assert!(!msg.contains('\n'), "{msg}");
            }
        }
    }
}
