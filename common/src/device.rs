//! GPU start-up with clear errors, and the device report every lesson prints first.

use std::{cell::RefCell, fmt};

use anyhow::{bail, Context as _};
use cust::{
    context::Context,
    device::{Device, DeviceAttribute},
    memory::{DeviceBuffer, DeviceCopy},
    stream::{Stream, StreamFlags},
    sys::{self, CUresult},
};
use serde::Serialize;

use crate::{error::check, host::Element, kernels::Kernels, report::fmt_bytes, timeline::Recorder, timing::Event};

/// One GPU, made current on this thread, with the lessons' kernels loaded.
pub struct Gpu {
    pub info: DeviceInfo,
    pub kernels: Kernels,
    pub(crate) events: RefCell<Vec<Event>>,
    pub(crate) recorder: RefCell<Option<Recorder>>,
    pub device: Device,
    // Dropped last: everything above lives in this context.
    _context: Context,
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

    pub fn init_device(ordinal: u32) -> anyhow::Result<Gpu> {
        driver_init()?;
        let count = Device::num_devices().context("counting CUDA devices")?;
        if ordinal >= count {
            bail!("CUDA device {ordinal} does not exist: this machine has {count} (set CUDA_DEVICE to 0..{count})");
        }
        let device = Device::get_device(ordinal).context("opening the CUDA device")?;
        let context = Context::new(device).context("creating a CUDA context")?;
        let info = DeviceInfo::query(ordinal, device)?;
        let kernels = Kernels::load(info.sms).context("loading the kernels (PTX JIT)")?;
        let recorder = Recorder::from_env(ordinal, || {
            let origin = Event::new()?;
            let s = Stream::new(StreamFlags::NON_BLOCKING, None)?;
            origin.record(&s)?;
            s.synchronize()?;
            Ok(origin)
        })?;
        Ok(Gpu {
            info,
            kernels,
            events: RefCell::new(Vec::new()),
            recorder: RefCell::new(recorder),
            device,
            _context: context,
        })
    }

    /// `n` streams that may run concurrently with each other.
    pub fn streams(&self, n: usize) -> anyhow::Result<Vec<Stream>> {
        (0..n).map(|_| Stream::new(StreamFlags::NON_BLOCKING, None).context("creating a stream")).collect()
    }

    /// Device memory for `len` elements, zeroed, with a clear error when the device has too little free.
    pub fn alloc<T: Element + DeviceCopy>(&self, len: usize) -> anyhow::Result<DeviceBuffer<T>> {
        let bytes = len.checked_mul(std::mem::size_of::<T>()).context("allocation size overflows")?;
        let (free, _) = self.memory()?;
        if bytes > free {
            bail!(
                "needs {} of device memory, but {} has only {} free: choose a smaller size",
                fmt_bytes(bytes),
                self.info.name,
                fmt_bytes(free)
            );
        }
        if len == 0 {
            bail!("a device buffer needs at least one element");
        }
        // SAFETY: the memory is zeroed below before anyone can read it, and zero is a valid T (Element).
        let buf = unsafe { DeviceBuffer::<T>::uninitialized(len) }
            .with_context(|| format!("allocating {} of device memory", fmt_bytes(bytes)))?;
        // SAFETY: `bytes` bytes at the start of the new allocation. The memset runs on the legacy default
        // stream, which our non-blocking streams do not wait for, so the context is synchronized after it.
        check(unsafe { sys::cuMemsetD8_v2(buf.as_device_ptr().as_raw(), 0, bytes) }, || {
            "zeroing new device memory".into()
        })?;
        // SAFETY: no arguments; the context is current on this thread.
        check(unsafe { sys::cuCtxSynchronize() }, || "zeroing new device memory".into())?;
        Ok(buf)
    }

    /// (free, total) device memory in bytes.
    pub fn memory(&self) -> anyhow::Result<(usize, usize)> {
        let (mut free, mut total) = (0, 0);
        // SAFETY: two valid out-pointers; the context is current on this thread.
        check(unsafe { sys::cuMemGetInfo_v2(&mut free, &mut total) }, || "querying device memory".into())?;
        Ok((free, total))
    }

    pub(crate) fn take_event(&self) -> anyhow::Result<Event> {
        match self.events.borrow_mut().pop() {
            Some(e) => Ok(e),
            None => Event::new(),
        }
    }

    pub(crate) fn give_events(&self, events: impl IntoIterator<Item = Event>) {
        self.events.borrow_mut().extend(events)
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

/// `cuInit`, with one line for each way a machine can lack a usable GPU.
pub fn driver_init() -> anyhow::Result<()> {
    // SAFETY: cuInit takes flags (must be 0) and may be called more than once.
    let code = unsafe { sys::cuInit(0) };
    match code {
        CUresult::CUDA_SUCCESS => Ok(()),
        CUresult::CUDA_ERROR_STUB_LIBRARY => bail!(
            "no NVIDIA driver: this program loaded the link-only libcuda stub, not a driver. \
             Run it on a machine with an NVIDIA GPU and its driver"
        ),
        CUresult::CUDA_ERROR_NO_DEVICE => {
            bail!("no CUDA GPU found: the NVIDIA driver is installed but sees no device (check nvidia-smi and CUDA_VISIBLE_DEVICES)")
        }
        CUresult::CUDA_ERROR_SYSTEM_DRIVER_MISMATCH => {
            bail!("the NVIDIA kernel module and driver library versions differ: reboot or reinstall the driver")
        }
        other => bail!("the NVIDIA driver failed to start: {}", crate::error::cuda_error_name(other)),
    }
}

impl DeviceInfo {
    fn query(ordinal: u32, device: Device) -> anyhow::Result<DeviceInfo> {
        let attr = |a: DeviceAttribute| device.get_attribute(a).with_context(|| format!("reading {a:?}"));
        let mut version = 0;
        // SAFETY: one valid out-pointer.
        check(unsafe { sys::cuDriverGetVersion(&mut version) }, || "reading the driver version".into())?;
        let mut bus = [0 as std::os::raw::c_char; 32];
        // SAFETY: the buffer is 32 bytes long and we pass its length; the driver NUL-terminates it.
        check(unsafe { sys::cuDeviceGetPCIBusId(bus.as_mut_ptr(), bus.len() as i32, device.as_raw()) }, || {
            "reading the PCI bus id".into()
        })?;
        // SAFETY: NUL-terminated by the driver, within the buffer.
        let pci_bus_id = unsafe { std::ffi::CStr::from_ptr(bus.as_ptr()) }.to_string_lossy().into_owned();
        let memory_gbps = match (attr(DeviceAttribute::MemoryClockRate), attr(DeviceAttribute::GlobalMemoryBusWidth)) {
            (Ok(khz), Ok(bits)) if khz > 0 && bits > 0 => Some(2.0 * khz as f64 * 1e3 * bits as f64 / 8.0 / 1e9),
            _ => None,
        };
        Ok(DeviceInfo {
            ordinal,
            name: device.name().context("reading the device name")?,
            compute_capability: (
                attr(DeviceAttribute::ComputeCapabilityMajor)?,
                attr(DeviceAttribute::ComputeCapabilityMinor)?,
            ),
            sms: attr(DeviceAttribute::MultiprocessorCount)? as u32,
            total_memory: device.total_memory().context("reading the device memory size")?,
            async_engines: attr(DeviceAttribute::AsyncEngineCount)? as u32,
            can_map_host_memory: attr(DeviceAttribute::CanMapHostMemory)? != 0,
            unified_addressing: attr(DeviceAttribute::UnifiedAddressing)? != 0,
            driver_version: (version / 1000, version % 1000 / 10),
            link: PcieLink::read(&pci_bus_id),
            pci_bus_id,
            memory_gbps,
        })
    }
}

/// How many CUDA devices this machine has (after `CUDA_VISIBLE_DEVICES`).
pub fn device_count() -> anyhow::Result<u32> {
    driver_init()?;
    Device::num_devices().context("counting CUDA devices")
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
        let (gen, encoding) = match gts {
            g if g < 3.0 => (1, 8.0 / 10.0),
            g if g < 6.0 => (2, 8.0 / 10.0),
            g if g < 10.0 => (3, 128.0 / 130.0),
            g if g < 20.0 => (4, 128.0 / 130.0),
            g if g < 40.0 => (5, 128.0 / 130.0),
            _ => (6, 242.0 / 256.0),
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
