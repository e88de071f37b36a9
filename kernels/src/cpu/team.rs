//! Parts of a decode step's matrix-vector products (and, driven from a pool thread, of a
//! prompt's products) on threads that stay awake between them.
//!
//! A decode step of a 30-layer model is about 200 small products (0.4–3.5 MB of weights each,
//! 15–110 µs at the memory's speed) with serial work in between. As rayon parallel loops, each
//! product woke a sleeping worker through the kernel (a futex) and put the calling thread to
//! sleep until the workers were done: `perf` on a decode counted 12 % of its samples in the
//! scheduler, and a product streamed its weights at 12–18 GB/s where the machine reads 31.
//! OpenMP, which PyTorch's matrix-vector products run on, keeps its threads spinning for a
//! while after a parallel region instead; this module does the same on rayon's own threads:
//!
//! - the caller of [`map_parts`] publishes the job and computes parts itself;
//! - up to `threads − 1` helpers — rayon tasks, so they run on the pool's own threads — claim
//!   the other parts, then poll for [`KEEP_AWAKE`] waiting for the next job before they return
//!   to the pool: between polls a helper runs the pool's other pending work
//!   (`rayon::yield_now`) or, when there is none, yields its core to the scheduler, so a thread
//!   woken beside it (the caller after a rayon loop of its own) gets a core at once.
//!
//! Which thread computes which part does not change any result: a part is a function of its
//! index, and [`map_parts`] returns the parts in index order.

use std::any::Any;
use std::cell::Cell;
use std::panic::{catch_unwind, resume_unwind, AssertUnwindSafe};
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Mutex, MutexGuard, OnceLock};
use std::time::{Duration, Instant};

/// How long a helper polls for the next job after its last part: longer than the serial work
/// between two products of a decode step (tens of µs) and between two steps, short enough that
/// an idle process stops spinning at once to a person.
const KEEP_AWAKE: Duration = Duration::from_millis(2);

thread_local! {
    /// Set while this thread runs [`Team::help`]. What a waiting helper picks up from the pool
    /// (`rayon::yield_now`) runs inside it — a caller's whole model run, handed to the pool by
    /// `super::on_worker` within [`KEEP_AWAKE`] of the last job, included.
    static HELPING: Cell<bool> = const { Cell::new(false) };
}

/// `f(0), f(1), …, f(parts − 1)` computed on the calling thread and the awake helpers, returned
/// in index order. Falls back to a plain rayon loop when another thread is using the helpers
/// (products called from several threads at once) and runs on the calling thread alone when
/// the pool has one thread. A panic in a part is raised again here, after every part has
/// finished.
pub(crate) fn map_parts<T: Send + Sync>(parts: usize, f: impl Fn(usize) -> T + Sync) -> Vec<T> {
    let slots: Vec<OnceLock<T>> = (0..parts).map(|_| OnceLock::new()).collect();
    let part = |i: usize| {
        // Each index is claimed once, so the slot is empty.
        let _ = slots[i].set(f(i));
    };
    run_parts(parts, &part);
    slots
        .into_iter()
        .map(|s| s.into_inner().expect("map_parts: every part was computed"))
        .collect()
}

/// Runs `part(i)` for every `i < parts`, returning when all have finished.
fn run_parts(parts: usize, part: &(dyn Fn(usize) + Sync)) {
    let threads = rayon::current_num_threads();
    if parts <= 1 || threads <= 1 {
        (0..parts).for_each(part);
        return;
    }
    let team = team();
    let Some(_owner) = team.own() else {
        use rayon::prelude::*;
        (0..parts).into_par_iter().for_each(part);
        return;
    };
    // A helper that picked this call up from the pool is its caller now: uncounted until the
    // call returns, so the team starts another helper instead of leaving the parts to it alone.
    let _caller = HELPING.with(Cell::get).then(|| CallerInHelper::enter(team));
    team.wake_helpers(threads - 1);
    team.publish(parts, part);
    // The caller's own parts, then the wait for the helpers'. A part's panic is caught like a
    // helper's, so the caller always reaches the wait (the helpers may still be reading what
    // `part` borrows) and raises the first panic after it.
    while let Some((_, i)) = team.claim() {
        team.finish_part(catch_unwind(AssertUnwindSafe(|| part(i))));
    }
    team.wait_and_retire();
    if let Some(payload) = team.take_panic() {
        resume_unwind(payload);
    }
}

/// A published job: the parts' function with its lifetime erased (see [`Team::claim`]).
#[derive(Clone, Copy)]
struct Job(*const (dyn Fn(usize) + Sync + 'static));

// SAFETY: a `Job` points at a `Fn + Sync` closure, callable from any thread through a shared
// reference; it is only dereferenced for a part claimed while the job is published, and the
// publishing call does not return (so the closure stays alive) before every claimed part has
// finished (`Team::wait_and_retire`).
unsafe impl Send for Job {}

/// The job slot, read and claimed under the lock.
struct Slot {
    job: Option<Job>,
    parts: usize,
    next: usize,
}

/// The one set of helpers of the process.
struct Team {
    slot: Mutex<Slot>,
    /// Bumped at every publish: what spinning helpers poll (a load, not the lock).
    generation: AtomicU64,
    /// Parts of the published job not yet finished (claimed or not).
    unfinished: AtomicUsize,
    /// A caller has the team.
    owned: AtomicBool,
    /// Helpers spinning or working.
    helpers: AtomicUsize,
    /// The first panic of a helper's part, raised again by the caller.
    panic: Mutex<Option<Box<dyn Any + Send>>>,
}

fn team() -> &'static Team {
    static TEAM: OnceLock<Team> = OnceLock::new();
    TEAM.get_or_init(|| Team {
        slot: Mutex::new(Slot {
            job: None,
            parts: 0,
            next: 0,
        }),
        generation: AtomicU64::new(0),
        unfinished: AtomicUsize::new(0),
        owned: AtomicBool::new(false),
        helpers: AtomicUsize::new(0),
        panic: Mutex::new(None),
    })
}

/// A helper's thread running a call of its own (see [`HELPING`]): not counted among the awake
/// helpers until the call returns or unwinds.
struct CallerInHelper(&'static Team);

impl CallerInHelper {
    fn enter(team: &'static Team) -> Self {
        team.helpers.fetch_sub(1, Ordering::AcqRel);
        Self(team)
    }
}

impl Drop for CallerInHelper {
    fn drop(&mut self) {
        self.0.helpers.fetch_add(1, Ordering::AcqRel);
    }
}

/// Marks this thread as a helper's while [`Team::help`] runs (also when it unwinds), then
/// restores the mark it had (a helper can start inside another's `yield_now`).
struct Helping(bool);

impl Helping {
    fn enter() -> Self {
        Helping(HELPING.with(|h| h.replace(true)))
    }
}

impl Drop for Helping {
    fn drop(&mut self) {
        HELPING.with(|h| h.set(self.0));
    }
}

/// Releases the team when the owning call returns or unwinds.
struct Owner(&'static Team);

impl Drop for Owner {
    fn drop(&mut self) {
        self.0.owned.store(false, Ordering::Release);
    }
}

impl Team {
    fn own(&'static self) -> Option<Owner> {
        self.owned
            .compare_exchange(false, true, Ordering::Acquire, Ordering::Relaxed)
            .ok()
            .map(|_| Owner(self))
    }

    fn slot(&self) -> MutexGuard<'_, Slot> {
        // The slot holds plain values that are consistent between statements, so a poisoned
        // lock (a panic elsewhere while it was held) leaves nothing half-written.
        self.slot.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Starts helpers as rayon tasks until `want` are awake (only the owner starts them; they
    /// only ever leave on their own, so the count overshoots by at most a leaving one and, for
    /// a while after its call, a helper that ran a call of its own).
    fn wake_helpers(&'static self, want: usize) {
        while self.helpers.load(Ordering::Acquire) < want {
            self.helpers.fetch_add(1, Ordering::AcqRel);
            rayon::spawn(move || self.help());
        }
    }

    fn publish(&self, parts: usize, part: &(dyn Fn(usize) + Sync)) {
        // SAFETY: only the lifetime is erased (same fat-pointer layout); see `Job`: the pointer
        // is dereferenced for claimed parts only, and `wait_and_retire` runs before `part`'s
        // borrow ends.
        let job = Job(unsafe {
            std::mem::transmute::<
                *const (dyn Fn(usize) + Sync + '_),
                *const (dyn Fn(usize) + Sync + 'static),
            >(part)
        });
        self.unfinished.store(parts, Ordering::Release);
        let mut s = self.slot();
        *s = Slot {
            job: Some(job),
            parts,
            next: 0,
        };
        self.generation.fetch_add(1, Ordering::AcqRel);
    }

    /// The next unclaimed part of the published job. Reading the job and claiming an index
    /// happen under one lock, and a claimed part keeps the job alive (it counts as unfinished
    /// until [`Team::finish_part`]), so a helper never calls a job whose caller has returned.
    fn claim(&self) -> Option<(Job, usize)> {
        let mut s = self.slot();
        let job = s.job?;
        if s.next >= s.parts {
            return None;
        }
        s.next += 1;
        Some((job, s.next - 1))
    }

    fn finish_part(&self, outcome: std::thread::Result<()>) {
        if let Err(payload) = outcome {
            let mut first = self.panic.lock().unwrap_or_else(|e| e.into_inner());
            first.get_or_insert(payload);
        }
        self.unfinished.fetch_sub(1, Ordering::AcqRel);
    }

    /// Waits until every part has finished, then takes the job down.
    fn wait_and_retire(&self) {
        let mut spins = 0u32;
        while self.unfinished.load(Ordering::Acquire) != 0 {
            // A helper descheduled in the middle of a part can take a time slice to come back:
            // spin briefly, then give the core away.
            if spins < 1 << 12 {
                spins += 1;
                std::hint::spin_loop();
            } else {
                std::thread::yield_now();
            }
        }
        self.slot().job = None;
    }

    fn take_panic(&self) -> Option<Box<dyn Any + Send>> {
        self.panic.lock().unwrap_or_else(|e| e.into_inner()).take()
    }

    /// A helper: parts of every job published while it is awake, rayon's other work while it
    /// waits, gone after [`KEEP_AWAKE`] without a job.
    fn help(&self) {
        let _helping = Helping::enter();
        let mut seen = 0u64;
        let mut idle_since = Instant::now();
        loop {
            let generation = self.generation.load(Ordering::Acquire);
            if generation != seen {
                seen = generation;
                while let Some((job, i)) = self.claim() {
                    // SAFETY: `i` was claimed while `job` was published, so its caller is
                    // still waiting in `wait_and_retire` (this part counts as unfinished until
                    // `finish_part`), and the closure it points at is alive.
                    let part = unsafe { &*job.0 };
                    self.finish_part(catch_unwind(AssertUnwindSafe(|| part(i))));
                }
                idle_since = Instant::now();
                continue;
            }
            if idle_since.elapsed() > KEEP_AWAKE {
                self.helpers.fetch_sub(1, Ordering::AcqRel);
                return;
            }
            if rayon::yield_now() != Some(rayon::Yield::Executed) {
                std::thread::yield_now();
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parts_come_back_in_index_order_from_any_thread() {
        let pool = rayon::ThreadPoolBuilder::new()
            .num_threads(3)
            .build()
            .unwrap();
        pool.install(|| {
            for round in 0..200 {
                let got = map_parts(17, |i| i * 10 + round);
                let want: Vec<usize> = (0..17).map(|i| i * 10 + round).collect();
                assert_eq!(got, want);
            }
        });
        // From a thread outside any pool as well.
        assert_eq!(map_parts(5, |i| i * i), vec![0, 1, 4, 9, 16]);
    }

    #[test]
    fn a_call_picked_up_by_a_waiting_helper_still_gets_a_helper() {
        let pool = rayon::ThreadPoolBuilder::new()
            .num_threads(2)
            .build()
            .unwrap();
        // Slow parts, so that an awake helper surely claims one.
        let threads_used = || {
            pool.install(|| {
                let ids = map_parts(4, |_| {
                    std::thread::sleep(Duration::from_millis(30));
                    std::thread::current().id()
                });
                ids.into_iter()
                    .collect::<std::collections::HashSet<_>>()
                    .len()
            })
        };
        // Each call leaves a helper polling for the next job; the next call, handed to the
        // pool at once, is picked up by that helper's `yield_now` more often than not. (The
        // helpers are the process's: one another test started on its own pool may still be
        // awake and take a part too, hence at least two threads, not exactly two.)
        for round in 0..12 {
            let used = threads_used();
            assert!(used >= 2, "round {round}: every part on one thread");
        }
    }

    #[test]
    fn callers_on_several_threads_at_once_each_get_their_own_parts() {
        std::thread::scope(|s| {
            let handles: Vec<_> = (0..4)
                .map(|t| {
                    s.spawn(move || {
                        for _ in 0..100 {
                            assert_eq!(
                                map_parts(9, |i| t * 100 + i),
                                (0..9).map(|i| t * 100 + i).collect::<Vec<_>>()
                            );
                        }
                    })
                })
                .collect();
            for h in handles {
                h.join().unwrap();
            }
        });
    }

    #[test]
    fn a_panicking_part_is_raised_in_the_caller_after_the_others_finish() {
        let pool = rayon::ThreadPoolBuilder::new()
            .num_threads(2)
            .build()
            .unwrap();
        let done = AtomicUsize::new(0);
        let outcome = pool.install(|| {
            catch_unwind(AssertUnwindSafe(|| {
                map_parts(8, |i| {
                    if i == 3 {
                        panic!("part three");
                    }
                    done.fetch_add(1, Ordering::SeqCst);
                })
            }))
        });
        assert!(outcome.is_err());
        assert_eq!(done.load(Ordering::SeqCst), 7);
        // The team is usable again.
        assert_eq!(pool.install(|| map_parts(4, |i| i)), vec![0, 1, 2, 3]);
    }
}
