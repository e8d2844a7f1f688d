//! Phases in lockstep: the threads that drive the GPUs meet before each phase, so that every GPU
//! starts it together.

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
}
