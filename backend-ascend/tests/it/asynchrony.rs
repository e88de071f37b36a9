//! The backend is asynchronous: native ops queue on the device's stream and return, the host
//! waits only when data must reach it, and the simulation catches a missing wait (proved by the
//! `test-hooks` switch that drops the read's wait, as the gradient check's mutation proves the
//! gradient check). One stream per device is shared by every thread.

use std::sync::mpsc;
use std::time::Duration;

use burn::backend::NdArray;
use burn::tensor::{Tensor, TensorData, Tolerance};
use burn_ascend_acl_sim as sim;
use burn_ascend_backend::{device_counters, fallback_counts, Ascend, AscendDevice};
use burn_ascend_cann::acl::test_hooks;

fn dev() -> AscendDevice {
    AscendDevice::sim()
}

fn data(n: usize, seed: usize) -> TensorData {
    let v: Vec<f32> = (0..n)
        .map(|i| ((i * 31 + seed * 17) % 23) as f32 / 23.0 - 0.5)
        .collect();
    TensorData::new(v, [n / 8, 8])
}

/// A chain of native ops (matmul, elementwise, scalar, unary, reduction) on any backend.
fn chain<B: burn::tensor::backend::Backend>(x: Tensor<B, 2>) -> Tensor<B, 2> {
    let mut y = x.clone();
    for i in 0..10 {
        y = (y.clone().matmul(x.clone().transpose()).matmul(x.clone()) / 8.0 + x.clone() * 0.5)
            .tanh()
            .sub_scalar(0.01 * i as f32);
    }
    y.clone() - y.mean_dim(1)
}

fn ascend_vs_ndarray(seed: usize) -> Result<(), String> {
    let d = data(64, seed);
    let got = chain(Tensor::<Ascend, 2>::from_data(d.clone(), &dev()))
        .try_into_data()
        .map_err(|e| e.to_string())?;
    let want = chain(Tensor::<NdArray, 2>::from_data(d, &Default::default())).into_data();
    got.assert_approx_eq::<f32>(&want, Tolerance::rel_abs(1e-4, 1e-5));
    Ok(())
}

#[test]
fn native_ops_queue_without_waiting_and_a_read_waits_once() {
    let _lock = crate::exclusive();
    let x = Tensor::<Ascend, 2>::from_data(data(64, 1), &dev());
    let fallbacks = fallback_counts();
    let before = device_counters(&dev());
    let y = chain(x);
    let queued = device_counters(&dev());
    let _ = y.into_data();
    let read = device_counters(&dev());
    assert_eq!(fallback_counts(), fallbacks, "the chain is native");
    assert!(queued.launches - before.launches >= 60, "{queued:?}");
    assert_eq!(
        queued.synchronizations, before.synchronizations,
        "no op waited for the device"
    );
    assert_eq!(
        read.synchronizations - queued.synchronizations,
        1,
        "the read waits once"
    );
}

#[test]
fn results_are_right_when_the_device_runs_far_behind_the_host() {
    let _lock = crate::exclusive();
    sim::set_stream_delay(Duration::from_micros(300));
    let r = ascend_vs_ndarray(2);
    sim::set_stream_delay(Duration::ZERO);
    r.unwrap();
}

#[test]
fn dropping_the_reads_wait_makes_the_comparison_fail_with_a_hazard() {
    let _lock = crate::exclusive();
    ascend_vs_ndarray(3).expect("the check passes with the wait");
    test_hooks::drop_read_wait(true);
    let mutated = std::panic::catch_unwind(|| ascend_vs_ndarray(3));
    test_hooks::drop_read_wait(false);
    // The queued work's failure is reported by the stream; clear it before the next test.
    let _ = <Ascend as burn::tensor::backend::Backend>::sync(&dev());
    let err = match mutated {
        Ok(r) => r.expect_err("the simulation must catch the read that skipped its wait"),
        Err(p) => p
            .downcast_ref::<String>()
            .cloned()
            .unwrap_or_else(|| "panic".into()),
    };
    assert!(err.contains("hazard"), "{err}");
}

#[test]
fn tensors_cross_threads_on_the_devices_one_stream() {
    let _lock = crate::exclusive();
    sim::set_stream_delay(Duration::from_micros(100));
    let (to_worker, at_worker) = mpsc::channel::<Tensor<Ascend, 2>>();
    let (to_main, at_main) = mpsc::channel::<Tensor<Ascend, 2>>();
    // Producers on two threads queue work and hand their (not yet computed) results on.
    let producers: Vec<_> = (0..2)
        .map(|t| {
            let tx = to_worker.clone();
            std::thread::spawn(move || {
                for i in 0..4 {
                    let x = Tensor::<Ascend, 2>::from_data(data(64, 10 * t + i), &dev());
                    tx.send(chain(x)).unwrap();
                }
            })
        })
        .collect();
    drop(to_worker);
    // A consumer thread computes on them and drops them (their blocks are reused at once).
    let consumer = std::thread::spawn(move || {
        for y in at_worker {
            to_main.send(y.clone().exp().sum_dim(1)).unwrap();
        }
    });
    let mut got: Vec<Vec<f32>> = at_main
        .iter()
        .map(|t| t.into_data().to_vec().unwrap())
        .collect();
    producers.into_iter().for_each(|p| p.join().unwrap());
    consumer.join().unwrap();
    sim::set_stream_delay(Duration::ZERO);
    let mut want: Vec<Vec<f32>> = (0..2)
        .flat_map(|t| (0..4).map(move |i| (t, i)))
        .map(|(t, i)| {
            let x = Tensor::<NdArray, 2>::from_data(data(64, 10 * t + i), &Default::default());
            chain(x).exp().sum_dim(1).into_data().to_vec().unwrap()
        })
        .collect();
    got.sort_by(|a, b| a[0].total_cmp(&b[0]));
    want.sort_by(|a, b| a[0].total_cmp(&b[0]));
    assert_eq!(got.len(), 8);
    for (g, w) in got.iter().zip(&want) {
        for (a, b) in g.iter().zip(w) {
            assert!((a - b).abs() <= 1e-4 * b.abs().max(1.0), "{g:?} vs {w:?}");
        }
    }
}

/// A graph capture makes the device's one stream the capturing thread's: another thread's ops
/// on the device wait for the capture to end instead of being recorded into its graph (or
/// refused, for an upload), and a capture inside the thread's own capture is refused.
#[test]
fn another_threads_ops_wait_for_a_capture_of_their_device_instead_of_entering_its_graph() {
    use burn_ascend_backend::graph::{capture, reserve_workspace, GraphError};
    use burn_ascend_backend::reserve_small;
    // Its own device: no other test's work can enter the capture.
    burn_ascend_backend::collective::simulate_devices(6);
    let device = AscendDevice {
        kind: burn_ascend_backend::AscendKind::Simulation,
        index: 5,
    };
    let x = Tensor::<Ascend, 1>::from_floats([1.0, 2.0, 3.0, 4.0], &device);
    reserve_small(&device, 1 << 16).unwrap();
    reserve_workspace(&device, 1 << 16).unwrap();
    let (started_tx, started_rx) = mpsc::channel::<()>();
    let (done_tx, done_rx) = mpsc::channel::<Vec<f32>>();
    let other = std::thread::scope(|s| {
        let worker = s.spawn(move || {
            started_rx.recv().unwrap();
            // Uploads and queues an op on the device while the main thread captures it.
            let y = Tensor::<Ascend, 1>::from_floats([10.0, 20.0, 30.0, 40.0], &device) * 2.0;
            done_tx
                .send(y.into_data().to_vec::<f32>().unwrap())
                .unwrap();
        });
        let (graph, out) = capture(&device, || {
            started_tx.send(()).unwrap();
            // Long enough for the other thread to reach the device, were it let through.
            std::thread::sleep(Duration::from_millis(200));
            assert!(
                done_rx.try_recv().is_err(),
                "the other thread's op finished during the capture"
            );
            let nested = capture(&device, || ());
            assert!(
                matches!(&nested, Err(GraphError::Refused(m)) if m.contains("do not nest")),
                "{nested:?}"
            );
            x.clone() + 1.0
        })
        .unwrap();
        // One op recorded: the other thread's upload and multiplication are not in the graph.
        assert_eq!(graph.recorded_tasks(), 1);
        graph.replay().unwrap();
        let got = out.into_data().to_vec::<f32>().unwrap();
        assert_eq!(got, vec![2.0, 3.0, 4.0, 5.0]);
        let other = done_rx.recv_timeout(Duration::from_secs(30)).unwrap();
        worker.join().unwrap();
        other
    });
    assert_eq!(other, vec![20.0, 40.0, 60.0, 80.0]);
}
