//! The simulated HCCL (not CANN's): communicators over N simulated devices in one process,
//! collectives queued on the device streams and reduced in rank order, and HCCL's validation —
//! a bad argument refused at the call, a mismatched or abandoned collective failing every rank
//! with a typed error naming the rank and the HCCL status, never a hang.

use std::sync::{Mutex, MutexGuard, PoisonError};
use std::time::{Duration, Instant};

use burn_ascend_acl_sim as sim;
use burn_ascend_cann::acl::{DataType, DeviceTensor, Runtime, TensorDesc};
use burn_ascend_cann::hccl::ffi::{HCCL_E_PARA, HCCL_E_PTR, HCCL_E_REMOTE, HCCL_E_TIMEOUT};
use burn_ascend_cann::hccl::{
    launch, root_info, Communicator, HcclDataType, HcclError, LaunchEnv, ReduceOp,
};

/// The collectives' timeouts are process-wide settings read when a communicator is made:
/// these tests take turns.
fn serial() -> MutexGuard<'static, ()> {
    static LOCK: Mutex<()> = Mutex::new(());
    LOCK.lock().unwrap_or_else(PoisonError::into_inner)
}

fn devices(n: u32) {
    if sim::device_count() < n {
        sim::set_device_count(n);
    }
}

fn up(rt: &Runtime, v: &[f32]) -> DeviceTensor {
    let bytes: Vec<u8> = v.iter().flat_map(|x| x.to_le_bytes()).collect();
    rt.upload(
        TensorDesc::contiguous(&[v.len()], DataType::Float).unwrap(),
        &bytes,
    )
    .unwrap()
}

fn down(t: &DeviceTensor) -> Vec<f32> {
    t.download()
        .unwrap()
        .chunks_exact(4)
        .map(|c| f32::from_le_bytes(c.try_into().unwrap()))
        .collect()
}

/// Rank `r`'s input: values whose f32 sum depends on the order they are added in.
fn input(r: usize, n: usize) -> Vec<f32> {
    (0..n)
        .map(|i| {
            (1.0 + i as f32 * 0.37).powi(r as i32 + 1) * if r.is_multiple_of(2) { 1e7 } else { 0.3 }
        })
        .collect()
}

/// Runs `f(rank, runtime, communicator)` on one thread per rank of `HcclCommInitAll`.
fn on_ranks<T: Send + 'static>(
    n: usize,
    f: impl Fn(usize, &Runtime, &Communicator) -> T + Send + Sync + 'static,
) -> Vec<T> {
    devices(n as u32);
    let ids: Vec<i32> = (0..n as i32).collect();
    let comms = Communicator::init_all(sim::hccl_api(), sim::api(), &ids).unwrap();
    let f = std::sync::Arc::new(f);
    let handles: Vec<_> = comms
        .into_iter()
        .enumerate()
        .map(|(r, comm)| {
            let f = f.clone();
            std::thread::spawn(move || {
                let rt = sim::runtime_on(r as i32).unwrap();
                f(r, &rt, &comm)
            })
        })
        .collect();
    handles.into_iter().map(|h| h.join().unwrap()).collect()
}

#[test]
fn four_ranks_all_reduce_to_the_rank_order_sum_on_every_rank() {
    let _g = serial();
    let n = 4;
    let len = 1000;
    let got = on_ranks(n, move |r, rt, comm| {
        let t = up(rt, &input(r, len));
        comm.all_reduce(rt, &t.buf, &t.buf, len, HcclDataType::Fp32, ReduceOp::Sum)
            .unwrap();
        // Queued, not run yet: the host waits only here.
        comm.synchronize(rt, "HcclAllReduce").unwrap();
        down(&t)
    });
    let want: Vec<f32> = (0..len)
        .map(|i| (1..n).fold(input(0, len)[i], |acc, r| acc + input(r, len)[i]))
        .collect();
    for (r, g) in got.iter().enumerate() {
        // Bit-exact: one order of summation (rank 0 + 1 + 2 + 3) on every rank.
        assert_eq!(g, &want, "rank {r}");
    }
}

#[test]
fn broadcast_copies_the_roots_buffer_and_a_barrier_orders_the_ranks() {
    let _g = serial();
    let got = on_ranks(3, |r, rt, comm| {
        let t = up(rt, &[r as f32; 5]);
        comm.broadcast(rt, &t.buf, 5, HcclDataType::Fp32, 2)
            .unwrap();
        comm.barrier(rt).unwrap();
        comm.synchronize(rt, "HcclBroadcast").unwrap();
        down(&t)
    });
    assert_eq!(got, vec![vec![2.0f32; 5]; 3]);
}

#[test]
fn bf16_and_max_reduce_on_the_device_streams() {
    let _g = serial();
    let got = on_ranks(2, |r, rt, comm| {
        let vals: Vec<half::bf16> = [1.5f32, -2.0, 3.0]
            .iter()
            .map(|&v| half::bf16::from_f32(v * (r + 1) as f32))
            .collect();
        let bytes: Vec<u8> = vals.iter().flat_map(|v| v.to_le_bytes()).collect();
        let t = rt
            .upload(
                TensorDesc::contiguous(&[3], DataType::Bf16).unwrap(),
                &bytes,
            )
            .unwrap();
        comm.all_reduce(rt, &t.buf, &t.buf, 3, HcclDataType::Bfp16, ReduceOp::Max)
            .unwrap();
        comm.synchronize(rt, "HcclAllReduce").unwrap();
        t.download()
            .unwrap()
            .chunks_exact(2)
            .map(|c| half::bf16::from_le_bytes([c[0], c[1]]).to_f32())
            .collect::<Vec<f32>>()
    });
    assert_eq!(got, vec![vec![3.0f32, -2.0, 6.0]; 2]);
}

#[test]
fn mismatched_counts_fail_every_rank_with_hccl_e_para_naming_both_calls() {
    let _g = serial();
    let errs = on_ranks(2, |r, rt, comm| {
        let count = 4 + r;
        let t = up(rt, &vec![1.0; count]);
        comm.all_reduce(rt, &t.buf, &t.buf, count, HcclDataType::Fp32, ReduceOp::Sum)
            .unwrap();
        comm.synchronize(rt, "HcclAllReduce").unwrap_err()
    });
    for (r, e) in errs.iter().enumerate() {
        assert_eq!(e.status(), Some(HCCL_E_PARA), "{e}");
        assert_eq!(e.rank(), Some(r as u32));
        let msg = e.to_string();
        assert!(
            msg.starts_with(&format!(
                "HcclAllReduce on rank {r} failed with status 1 (HCCL_E_PARA)"
            )),
            "{msg}"
        );
        assert!(msg.contains("rank 0 called HcclAllReduce(count 4, Fp32, Sum), rank 1 called HcclAllReduce(count 5, Fp32, Sum)"), "{msg}");
    }
}

#[test]
fn a_rank_that_never_arrives_times_out_every_other_rank_naming_it() {
    let _g = serial();
    sim::set_exec_timeout(Some(Duration::from_millis(300)));
    let started = Instant::now();
    let errs = on_ranks(3, |r, rt, comm| {
        let t = up(rt, &[1.0; 8]);
        if r != 1 {
            comm.all_reduce(rt, &t.buf, &t.buf, 8, HcclDataType::Fp32, ReduceOp::Sum)
                .unwrap();
            comm.synchronize(rt, "HcclAllReduce").err()
        } else {
            // Rank 1 keeps its communicator but never calls: a hung peer.
            std::thread::sleep(Duration::from_millis(800));
            None
        }
    });
    sim::set_exec_timeout(None);
    assert!(started.elapsed() < Duration::from_secs(10));
    for r in [0, 2] {
        let e = errs[r].as_ref().expect("rank failed");
        assert_eq!(e.status(), Some(HCCL_E_TIMEOUT), "{e}");
        assert!(
            e.to_string()
                .contains("rank(s) 1 did not get there within 300ms (HCCL_EXEC_TIMEOUT)"),
            "{e}"
        );
    }
}

#[test]
fn a_rank_whose_communicator_is_destroyed_fails_its_peers_at_once() {
    let _g = serial();
    let started = Instant::now();
    let errs = on_ranks(2, |r, rt, comm| {
        if r == 0 {
            let t = up(rt, &[1.0; 8]);
            comm.all_reduce(rt, &t.buf, &t.buf, 8, HcclDataType::Fp32, ReduceOp::Sum)
                .unwrap();
            comm.synchronize(rt, "HcclAllReduce").err()
        } else {
            None // returns: its communicator is dropped (HcclCommDestroy), as a failed rank's
        }
    });
    // Well before HCCL_EXEC_TIMEOUT's default of 1836 s.
    assert!(started.elapsed() < Duration::from_secs(10));
    let e = errs[0].as_ref().expect("rank 0 failed");
    assert_eq!(e.status(), Some(HCCL_E_REMOTE), "{e}");
    assert!(
        e.to_string()
            .contains("rank 1's communicator was destroyed"),
        "{e}"
    );
}

#[test]
fn bad_arguments_are_refused_at_the_call_with_hccl_statuses() {
    let _g = serial();
    let errs = on_ranks(2, |r, rt, comm| {
        let t = up(rt, &[1.0; 4]);
        let mut out: Vec<HcclError> = Vec::new();
        // Counts beyond the buffer: refused before HCCL is called.
        out.push(
            comm.all_reduce(rt, &t.buf, &t.buf, 5, HcclDataType::Fp32, ReduceOp::Sum)
                .unwrap_err(),
        );
        out.push(
            comm.broadcast(rt, &t.buf, 4, HcclDataType::Fp32, 2)
                .unwrap_err(),
        );
        // Null buffers and an unknown dtype reach the simulated HCCL, which refuses them.
        let api = sim::hccl_api();
        // SAFETY: null buffers are what is being tested; the stream and comm are live.
        let st = unsafe {
            (api.all_reduce)(
                std::ptr::null_mut(),
                t.buf.as_ptr(),
                4,
                4,
                0,
                std::ptr::null_mut(),
                rt.stream().as_ptr(),
            )
        };
        assert_eq!(st, HCCL_E_PTR, "null comm");
        let _ = r;
        out.push(
            comm.all_reduce(rt, &t.buf, &t.buf, 4, HcclDataType::Int8, ReduceOp::Sum)
                .unwrap_err(),
        );
        out
    });
    let msgs: Vec<String> = errs[0].iter().map(|e| e.to_string()).collect();
    assert!(
        msgs[0].starts_with("invalid sendBuf: 5 Fp32 elements (20 bytes) do not fit its 16 bytes"),
        "{}",
        msgs[0]
    );
    assert!(
        msgs[1].starts_with("invalid root: must be below the rank count 2, got 2"),
        "{}",
        msgs[1]
    );
    assert!(
        msgs[2].contains("HcclAllReduce on rank 0 failed with status 5 (HCCL_E_NOT_SUPPORT)"),
        "{}",
        msgs[2]
    );
    assert!(msgs[2].contains("does not reduce Int8"), "{}", msgs[2]);
}

#[test]
fn ranks_join_through_the_root_info_rendezvous_on_loopback_and_all_reduce() {
    let _g = serial();
    devices(2);
    // A free port for the rendezvous.
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let handles: Vec<_> = (0..2u32)
        .map(|rank| {
            std::thread::spawn(move || {
                let env = LaunchEnv::from_vars(|k| {
                    Some(match k {
                        "RANK" => rank.to_string(),
                        "WORLD_SIZE" => "2".into(),
                        "LOCAL_RANK" => rank.to_string(),
                        "MASTER_ADDR" => "127.0.0.1".into(),
                        "MASTER_PORT" => port.to_string(),
                        _ => return None,
                    })
                })
                .unwrap()
                .unwrap();
                let rt = sim::runtime_on(env.local_rank as i32).unwrap();
                let info = (rank == 0).then(|| root_info(sim::hccl_api(), sim::api()).unwrap());
                let info = launch::exchange_root_info(&env, info.as_ref(), Duration::from_secs(20))
                    .unwrap();
                let comm = Communicator::init_root_info(
                    sim::hccl_api(),
                    sim::api(),
                    2,
                    &info,
                    rank,
                    env.local_rank as i32,
                )
                .unwrap();
                let t = up(&rt, &[rank as f32 + 1.0; 3]);
                comm.all_reduce(&rt, &t.buf, &t.buf, 3, HcclDataType::Fp32, ReduceOp::Sum)
                    .unwrap();
                comm.synchronize(&rt, "HcclAllReduce").unwrap();
                down(&t)
            })
        })
        .collect();
    for h in handles {
        assert_eq!(h.join().unwrap(), vec![3.0f32; 3]);
    }
}

#[test]
fn communicators_are_refused_for_devices_the_simulation_lacks_and_destroyed_on_drop() {
    let _g = serial();
    devices(2);
    let before = sim::live_communicators();
    let n = sim::device_count() as i32;
    let e = Communicator::init_all(sim::hccl_api(), sim::api(), &[0, n]).unwrap_err();
    assert_eq!(e.status(), Some(HCCL_E_PARA), "{e}");
    assert!(e.to_string().contains(&format!("devices[1] = {n}")), "{e}");
    let e = Communicator::init_all(sim::hccl_api(), sim::api(), &[1, 1]).unwrap_err();
    assert!(
        e.to_string()
            .contains("invalid devices: device 1 appears twice"),
        "{e}"
    );
    let comms = Communicator::init_all(sim::hccl_api(), sim::api(), &[0, 1]).unwrap();
    assert_eq!(sim::live_communicators(), before + 2);
    drop(comms);
    assert_eq!(sim::live_communicators(), before);
}

#[test]
fn all_gather_stacks_every_ranks_block_in_rank_order_on_every_rank() {
    let _g = serial();
    let n = 3;
    let got = on_ranks(n, move |r, rt, comm| {
        let send = up(rt, &[r as f32 + 0.5, -(r as f32), 10.0 * r as f32]);
        let recv = up(rt, &[f32::NAN; 9]);
        comm.all_gather(rt, &send.buf, &recv.buf, 3, HcclDataType::Fp32)
            .unwrap();
        comm.synchronize(rt, "HcclAllGather").unwrap();
        down(&recv)
    });
    let want = vec![0.5f32, 0.0, 0.0, 1.5, -1.0, 10.0, 2.5, -2.0, 20.0];
    assert_eq!(got, vec![want; n]);
}

#[test]
fn reduce_scatter_gives_rank_r_the_rank_order_sum_of_block_r() {
    let _g = serial();
    let n = 4;
    let block = 250;
    let got = on_ranks(n, move |r, rt, comm| {
        let send = up(rt, &input(r, n * block));
        let recv = up(rt, &[f32::NAN; 250]);
        comm.reduce_scatter(
            rt,
            &send.buf,
            &recv.buf,
            block,
            HcclDataType::Fp32,
            ReduceOp::Sum,
        )
        .unwrap();
        comm.synchronize(rt, "HcclReduceScatter").unwrap();
        down(&recv)
    });
    for (r, g) in got.iter().enumerate() {
        let want: Vec<f32> = (r * block..(r + 1) * block)
            .map(|i| {
                (1..n).fold(input(0, n * block)[i], |acc, s| {
                    acc + input(s, n * block)[i]
                })
            })
            .collect();
        // Bit-exact: rank 0 + 1 + 2 + 3, the order HcclAllReduce uses.
        assert_eq!(g, &want, "rank {r}");
    }
}

#[test]
fn all_gather_and_reduce_scatter_refuse_bad_arguments_with_hccl_statuses() {
    let _g = serial();
    let errs = on_ranks(2, |_r, rt, comm| {
        let small = up(rt, &[1.0; 4]);
        let big = up(rt, &[1.0; 8]);
        vec![
            // recvBuf must hold 2 × 4 elements; sendBuf of a reduce-scatter 2 × recvCount.
            comm.all_gather(rt, &small.buf, &small.buf, 4, HcclDataType::Fp32)
                .unwrap_err()
                .to_string(),
            comm.reduce_scatter(
                rt,
                &small.buf,
                &big.buf,
                4,
                HcclDataType::Fp32,
                ReduceOp::Sum,
            )
            .unwrap_err()
            .to_string(),
            // A zero count reaches the simulated HCCL, which refuses it as HCCL does.
            comm.all_gather(rt, &small.buf, &big.buf, 0, HcclDataType::Fp32)
                .unwrap_err()
                .to_string(),
            comm.reduce_scatter(
                rt,
                &big.buf,
                &small.buf,
                4,
                HcclDataType::Int8,
                ReduceOp::Sum,
            )
            .unwrap_err()
            .to_string(),
        ]
    });
    let m = &errs[0];
    assert!(
        m[0].starts_with("invalid recvBuf: 8 Fp32 elements (32 bytes) do not fit its 16 bytes"),
        "{}",
        m[0]
    );
    assert!(
        m[1].starts_with("invalid sendBuf: 8 Fp32 elements (32 bytes) do not fit its 16 bytes"),
        "{}",
        m[1]
    );
    assert!(
        m[2].contains("HcclAllGather on rank 0 failed with status 1 (HCCL_E_PARA)")
            && m[2].contains("sendCount is 0"),
        "{}",
        m[2]
    );
    assert!(
        m[3].contains("HcclReduceScatter on rank 0 failed with status 5 (HCCL_E_NOT_SUPPORT)"),
        "{}",
        m[3]
    );
}

#[test]
fn ranks_calling_all_gather_with_different_counts_fail_with_hccl_e_para() {
    let _g = serial();
    let got = on_ranks(2, |r, rt, comm| {
        let send = up(rt, &[1.0; 4]);
        let recv = up(rt, &[0.0; 8]);
        let count = if r == 0 { 4 } else { 3 };
        comm.all_gather(rt, &send.buf, &recv.buf, count, HcclDataType::Fp32)
            .unwrap();
        comm.synchronize(rt, "HcclAllGather")
            .unwrap_err()
            .to_string()
    });
    for (r, e) in got.iter().enumerate() {
        assert!(e.contains("status 1 (HCCL_E_PARA)"), "rank {r}: {e}");
        assert!(
            e.contains("rank 0 called HcclAllGather(sendCount 4, Fp32), rank 1 called HcclAllGather(sendCount 3, Fp32)"),
            "rank {r}: {e}"
        );
    }
}
