//! The child process that runs a kernel of yours (`--ptx mine.ptx --kernel NAME`): the planner starts
//! itself again with the job in [`CHILD`], and that child loads the kernel, adopts it (the one `unsafe`
//! of this lesson: your promise that the kernel stays inside its data), times it or runs the pipeline
//! with it, and prints the times as one line of JSON for the planner to read. Whatever the kernel does,
//! it can reach nothing of the planner's: a fault kills the child's context, and the planner says so.

use anyhow::Context as _;
use serde::Serialize;

use cuda_scope::Gpu;
use kernels::Kernels;
use measure::{
    pipeline::{Buffering, Pipeline},
    timing::{Repeats, Stats},
    work::{Steps, Work},
    Chunking,
};

use crate::model::kernel_times;

/// A kernel of your own, in a PTX file (`nvcc -ptx -arch=sm_90 mine.cu`), declared
/// `extern "C" __global__ void NAME(float* data, unsigned long long n)`: in place, one thread per element
/// in blocks of 256, as the lessons launch theirs.
///
/// It runs in a child process: this program started again with [`CHILD`] set, which loads the kernel,
/// runs what it is asked and prints the times. Only the planner's own `main` acts as that child
/// ([`job`], then [`ChildJob::run`], where the kernel is adopted in an `unsafe` block). Nothing here can
/// check what the kernel does (it might write outside its data); in the child it can reach nothing of
/// this process's, and a fault kills the child's context, not this one.
#[derive(Clone, Debug, Serialize, serde::Deserialize)]
pub struct UserPtx {
    pub ptx: std::path::PathBuf,
    pub name: String,
}

/// The variable that makes the planner the child of a [`UserPtx`]: the job, as JSON.
const CHILD: &str = "GPU_TRANSFERS_USER_KERNEL";

/// What the child is asked: the kernel's times at `sizes`, and the pipeline over `elements` for each
/// (chunks, streams) of `configs`.
#[derive(Serialize, serde::Deserialize)]
struct Job {
    kernel: UserPtx,
    sizes: Vec<usize>,
    elements: usize,
    configs: Vec<(usize, usize)>,
    repeats: Repeats,
}

#[derive(Serialize, serde::Deserialize)]
struct Done {
    kernel: Vec<(usize, f64)>,
    runs: Vec<Stats>,
}

impl UserPtx {
    /// Checks the file and the kernel's parameters before anything runs.
    pub fn new(ptx: std::path::PathBuf, name: String) -> anyhow::Result<UserPtx> {
        let text = std::fs::read_to_string(&ptx).with_context(|| format!("reading {}", ptx.display()))?;
        user_signature(&text, &name)?;
        Ok(UserPtx { ptx, name })
    }

    /// The kernel's best time over each of `sizes` elements, as `(bytes, ms)`.
    pub fn kernel_times(&self, sizes: &[usize], r: Repeats) -> anyhow::Result<Vec<(usize, f64)>> {
        let job = Job { kernel: self.clone(), sizes: sizes.to_vec(), elements: 0, configs: vec![], repeats: r };
        Ok(self.ask(&job)?.kernel)
    }

    /// The pipeline over `elements` with the kernel, for each (chunks, streams) of `configs`.
    pub fn run(&self, elements: usize, configs: &[(usize, usize)], r: Repeats) -> anyhow::Result<Vec<Stats>> {
        let job = Job { kernel: self.clone(), sizes: vec![], elements, configs: configs.to_vec(), repeats: r };
        Ok(self.ask(&job)?.runs)
    }

    fn ask(&self, job: &Job) -> anyhow::Result<Done> {
        let me = std::env::current_exe().context("finding this program, to run your kernel in a child of it")?;
        let out = std::process::Command::new(me)
            .env(CHILD, serde_json::to_string(job)?)
            .stdin(std::process::Stdio::null())
            .output()
            .context("starting the child process for your kernel")?;
        let stdout = String::from_utf8_lossy(&out.stdout);
        match (out.status.success(), stdout.lines().last()) {
            (true, Some(last)) => serde_json::from_str(last).context("reading the child's times"),
            _ => anyhow::bail!(
                "your kernel's child process failed ({}): {}",
                out.status,
                String::from_utf8_lossy(&out.stderr).trim().lines().last().unwrap_or("no message")
            ),
        }
    }
}

/// Whether the PTX text declares `name` as a kernel of the user's may be: `.entry name(.param .u64,
/// .param .u64)`, that is `extern "C" __global__ void name(float* data, unsigned long long n)`.
fn user_signature(ptx: &str, name: &str) -> anyhow::Result<()> {
    let params = cuda_scope::module::signature(ptx, name).with_context(|| {
        format!("the PTX has no kernel named {name} (declare it extern \"C\" so that its name is not mangled)")
    })?;
    let params = params.map_err(|why| anyhow::anyhow!("{name}: {why}"))?;
    if params != [".u64", ".u64"] {
        anyhow::bail!(
            "{name} takes ({}); kernels of yours must be declared (float* data, unsigned long long n)",
            params.join(", ")
        );
    }
    Ok(())
}

/// The job of a child that [`UserPtx`] started, where this process is one ([`CHILD`] is set).
pub fn job() -> Option<anyhow::Result<ChildJob>> {
    let job = std::env::var(CHILD).ok()?;
    Some(serde_json::from_str::<Job>(&job).context("reading the planner's job").map(ChildJob))
}

/// What a child of [`UserPtx`] is asked to do with the user's kernel.
pub struct ChildJob(Job);

impl ChildJob {
    /// In the child: loads your kernel, adopts it, does the job and prints the result as one line of
    /// JSON, for the planner to read.
    pub fn run(self) -> anyhow::Result<()> {
        let path = &self.0.kernel.ptx;
        let ptx = std::fs::read_to_string(path).with_context(|| format!("reading {}", path.display()))?;
        let gpu = Gpu::init()?;
        let kernel = gpu.load_ptx(&ptx)?.kernel(&self.0.kernel.name)?;
        let mut kernels = Kernels::load(&gpu)?;
        // SAFETY: the promise that the kernel touches only data[0..n) is yours, who passed --ptx, as for any
        // program of yours you run. This process holds nothing but the GPU, the job's buffers and the times
        // it prints, so whatever the kernel does reaches nothing of the planner's: a fault kills this
        // process's context only, and the planner reports it.
        unsafe { kernels.adopt_user(kernel) };
        let done = self.0.with(&gpu, &kernels)?;
        println!("{}", serde_json::to_string(&done)?);
        Ok(())
    }
}

impl Job {
    /// The job done with your kernel adopted in `kernels` ([`Kernels::adopt_user`]).
    fn with(self, gpu: &Gpu, kernels: &Kernels) -> anyhow::Result<Done> {
        let work = Work::User;
        let kernel =
            if self.sizes.is_empty() { vec![] } else { kernel_times(gpu, kernels, work, &self.sizes, self.repeats)? };
        let mut runs = Vec::new();
        if !self.configs.is_empty() {
            let mut p = Pipeline::new(gpu, kernels, Steps::InPlace(work), self.elements, self.repeats)?;
            for &(chunks, streams) in &self.configs {
                let chunking = Chunking::new(self.elements, chunks, streams)?;
                runs.push(p.time("your kernel", &chunking, Buffering::per_stream(streams))?.time);
            }
        }
        Ok(Done { kernel, runs })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn entry(params: &str) -> String {
        format!(".version 8.0\n.target sm_90\n.address_size 64\n.visible .entry mine(\n{params}\n)\n{{\n\tret;\n}}\n")
    }

    #[test]
    fn a_kernel_of_yours_takes_a_pointer_and_a_count() {
        user_signature(&entry("\t.param .u64 data,\n\t.param .u64 n"), "mine").unwrap();
        let three = user_signature(&entry("\t.param .u64 a,\n\t.param .u32 b,\n\t.param .f32 c"), "mine");
        assert!(three.unwrap_err().to_string().contains("takes (.u64, .u32, .f32)"));
        let missing = user_signature(&entry("\t.param .u64 data,\n\t.param .u64 n"), "theirs");
        assert!(format!("{:#}", missing.unwrap_err()).contains("no kernel named theirs"));
    }

    /// The job as tests/cli.rs writes it by hand reads as a job, and the variable is the one it sets.
    #[test]
    fn the_job_reads_from_its_json() {
        let job = concat!(
            r#"{"kernel":{"ptx":"/nonexistent/yours.ptx","name":"yours"},"#,
            r#""sizes":[1024],"elements":0,"configs":[],"repeats":{"warmup":0,"repeats":1}}"#
        );
        let job: Job = serde_json::from_str(job).unwrap();
        assert_eq!((job.kernel.name.as_str(), job.sizes.as_slice()), ("yours", &[1024][..]));
        assert_eq!(CHILD, "GPU_TRANSFERS_USER_KERNEL");
    }
}
