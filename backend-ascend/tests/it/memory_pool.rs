//! The caching device-memory pool on the simulation: size classes, reuse of freed blocks,
//! allocated / reserved / peak bytes, `empty_cache`, and out-of-memory handling (the cache is
//! emptied and the allocation retried; a second failure panics naming the op, the bytes and
//! the status) under a simulated device-memory limit.
//!
//! The pool and the simulated memory are process-wide, so each test that reads them holds
//! [`crate::exclusive`]: no other test runs anything on a device meanwhile.

use std::panic::{catch_unwind, AssertUnwindSafe};

use burn::tensor::{Tensor, TensorData};
use burn_ascend_acl_sim as sim;
use burn_ascend_backend::memory::{size_class, SMALL_GRANULE, SMALL_LIMIT};
use burn_ascend_backend::{empty_cache, memory_stats, reset_peak_stats, Ascend, AscendDevice};

fn dev() -> AscendDevice {
    AscendDevice::sim()
}

/// A 1-D f32 tensor of `n` elements (`4n` bytes).
fn tensor(n: usize) -> Tensor<Ascend, 1> {
    Tensor::from_data(TensorData::new(vec![1.5f32; n], [n]), &dev())
}

const MIB: usize = 1 << 20;

#[test]
fn size_classes_round_to_512_bytes_then_2_mib() {
    assert_eq!(SMALL_GRANULE, 512);
    assert_eq!(SMALL_LIMIT, MIB);
    assert_eq!(size_class(0), 512);
    assert_eq!(size_class(1), 512);
    assert_eq!(size_class(512), 512);
    assert_eq!(size_class(513), 1024);
    assert_eq!(size_class(MIB), MIB);
    assert_eq!(size_class(MIB + 1), 2 * MIB);
    assert_eq!(size_class(3 * MIB), 4 * MIB);
    assert_eq!(size_class(5 * MIB), 6 * MIB);
    // a 40 GiB KV cache reserves 40 GiB + at most 2 MiB, not 64 GiB
    assert_eq!(size_class((40 << 30) + 1), (40 << 30) + 2 * MIB);
}

#[test]
fn a_freed_block_is_reused_and_the_numbers_add_up() {
    let _lock = crate::exclusive();
    let _ = tensor(1); // the runtime and pool exist
    let s0 = memory_stats(&dev());
    let t = tensor(1000); // 4000 B → a 4096 B block
    let s1 = memory_stats(&dev());
    assert_eq!(s1.allocated_bytes, s0.allocated_bytes + 4096);
    assert_eq!(s1.reserved_bytes, s1.allocated_bytes + s1.cached_bytes);
    drop(t);
    let s2 = memory_stats(&dev());
    assert_eq!(s2.allocated_bytes, s0.allocated_bytes);
    assert_eq!(
        s2.reserved_bytes, s1.reserved_bytes,
        "the block stays reserved"
    );
    assert!(s2.cached_bytes >= 4096);
    // the same class again (3900 B → 4096): a hit, no new device memory
    let t2 = tensor(975);
    let s3 = memory_stats(&dev());
    assert_eq!(s3.hits, s2.hits + 1);
    assert_eq!(s3.misses, s2.misses);
    assert_eq!(s3.reserved_bytes, s2.reserved_bytes);
    assert_eq!(t2.to_data().to_vec::<f32>().unwrap(), vec![1.5f32; 975]);
    // and reused output blocks of native ops read back right
    let sum = (t2.clone() + t2.clone())
        .into_data()
        .to_vec::<f32>()
        .unwrap();
    assert_eq!(sum, vec![3.0f32; 975]);
}

#[test]
fn peaks_reserved_and_empty_cache() {
    let _lock = crate::exclusive();
    let _ = tensor(1);
    empty_cache(&dev());
    reset_peak_stats(&dev());
    let s0 = memory_stats(&dev());
    assert_eq!(s0.cached_bytes, 0);
    assert_eq!(s0.reserved_bytes, s0.allocated_bytes);
    let ts: Vec<_> = (0..3).map(|_| tensor(MIB / 4)).collect(); // 3 × 1 MiB
    let s1 = memory_stats(&dev());
    assert_eq!(s1.allocated_bytes, s0.allocated_bytes + 3 * MIB);
    assert_eq!(s1.peak_allocated_bytes, s1.allocated_bytes);
    drop(ts);
    let s2 = memory_stats(&dev());
    assert_eq!(s2.allocated_bytes, s0.allocated_bytes);
    assert_eq!(
        s2.peak_allocated_bytes, s1.allocated_bytes,
        "the peak stays"
    );
    assert_eq!(s2.cached_bytes, 3 * MIB);
    assert_eq!(s2.peak_reserved_bytes, s2.reserved_bytes);
    let in_use = sim::memory_in_use();
    let released = empty_cache(&dev());
    assert_eq!(released, 3 * MIB);
    let s3 = memory_stats(&dev());
    assert_eq!(s3.cached_bytes, 0);
    assert_eq!(s3.reserved_bytes, s0.reserved_bytes);
    assert_eq!(s3.device_frees, s2.device_frees + 3);
    assert_eq!(
        sim::memory_in_use(),
        in_use - 3 * MIB,
        "returned to the device"
    );
}

/// Restores an unlimited simulated memory even when the test fails.
struct Unlimit;
impl Drop for Unlimit {
    fn drop(&mut self) {
        sim::set_memory_limit(None);
    }
}

#[test]
fn out_of_memory_retries_after_emptying_the_cache_then_panics_clearly() {
    let _lock = crate::exclusive();
    let _ = tensor(1);
    empty_cache(&dev());
    let _u = Unlimit;
    sim::set_memory_limit(Some(sim::memory_in_use() + 5 * MIB));
    // 2 MiB, freed into the cache (still held from the device)
    drop(tensor(MIB / 2));
    let s0 = memory_stats(&dev());
    assert_eq!(s0.cached_bytes, 2 * MIB);
    // 4 MiB does not fit beside the cached 2 MiB: the cache is emptied and the call retried
    let big = tensor(MIB); // 4 MiB
    let s1 = memory_stats(&dev());
    assert_eq!(s1.oom_retries, s0.oom_retries + 1);
    assert_eq!(s1.cached_bytes, 0);
    assert_eq!(big.to_data().to_vec::<f32>().unwrap()[MIB - 1], 1.5);
    // 8 MiB more cannot fit at all: a panic naming the op, the bytes and the status
    let err = catch_unwind(AssertUnwindSafe(|| tensor(2 * MIB))).unwrap_err();
    let msg = err.downcast_ref::<String>().cloned().unwrap_or_default();
    assert!(msg.contains("out of device memory"), "{msg}");
    assert!(msg.contains("tensor allocation"), "{msg}");
    assert!(msg.contains(&format!("{} bytes", 8 * MIB)), "{msg}");
    assert!(msg.contains("207001"), "{msg}");
    assert!(msg.contains("ACL_ERROR_RT_MEMORY_ALLOCATION"), "{msg}");
    assert_eq!(memory_stats(&dev()).oom_retries, s1.oom_retries + 1);
    // an op's output names the op
    let err = catch_unwind(AssertUnwindSafe(|| {
        Tensor::cat(vec![big.clone(), big.clone()], 0)
    }))
    .unwrap_err();
    let msg = err.downcast_ref::<String>().cloned().unwrap_or_default();
    assert!(msg.contains("aclnnCat"), "{msg}");
    drop(big);
}
