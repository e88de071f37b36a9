//! Prompt attention, incremental attention over the paged cache and the KV cache scatter on
//! `Ascend` (simulation) against `NdArray`, through the paged cache manager the generator uses
//! (prefill, appends, batched decode, a sliding window and sinks: through FIA's `learnableSink`
//! and masks, and riding on prompt / incremental attention's `attenMask` / `pseShift`), with
//! the device path asserted (no host fallback, no composite), the two paths against each
//! other; and the scatter's functional contract: an unshared cache is updated where it lies, a
//! shared one is copied first so the other handle never sees the write. `Ascend` serves in
//! FLOAT16 here: CANN's PFA, IFA, FIA and ScatterPaKvCache take no FLOAT (f32 runs the counted
//! composite, `infer_dtypes.rs`).

use burn::backend::NdArray;
use burn::tensor::{DType, FloatDType, Tensor, TensorData, Tolerance};
use burn_ascend_backend::{fallback_count, Ascend, AscendDevice};
use burn_ascend_ops::IncreKvFromTensors;
use burn_ascend_ops::{
    incre_flash_attention, scatter_pa_kv_cache, AttendOptions, AttendPath, AttentionBackend,
    IfaLayout, IncreKv, IncreSpec, PagedKvCache, ScatterSpec,
};

const N: usize = 4;
const NKV: usize = 2;
const D: usize = 8;
const BS: usize = 16;

fn values(n: usize, seed: u32) -> Vec<f32> {
    (0..n)
        .map(|i| {
            let x = (i as u32)
                .wrapping_mul(2654435761)
                .wrapping_add(seed.wrapping_mul(40503));
            ((x >> 7) % 2000) as f32 / 1000.0 - 1.0
        })
        .collect()
}

fn t<B: AttentionBackend, const K: usize>(
    v: Vec<f32>,
    s: [usize; K],
    dev: &B::Device,
) -> Tensor<B, K> {
    Tensor::from_data(TensorData::new(v, s), dev)
}

/// The host fallbacks and the f32 composites of the serving ops.
fn counts() -> [u64; 8] {
    [
        "prompt_fwd",
        "incre_fwd",
        "fia_fwd",
        "scatter_kv",
        "prompt_composite",
        "incre_composite",
        "fia_composite",
        "scatter_composite",
    ]
    .map(fallback_count)
}

/// `v` rounded to FLOAT16 and back (what an f16 cache holds of it).
fn f16_round(v: Vec<f32>) -> Vec<f32> {
    v.into_iter()
        .map(|x| half::f16::from_f32(x).to_f32())
        .collect()
}

/// `x` read back as f32 values.
fn read<B: AttentionBackend, const K: usize>(x: Tensor<B, K>) -> Vec<f32> {
    x.cast(FloatDType::F32).into_data().to_vec::<f32>().unwrap()
}

/// Two sequences: prefill 6 and 20 tokens, two decode steps with appends (scatter + paged
/// attention), window 5 and sinks, on `path` with head dim `d` (the placeholder path appends
/// the sink slot first), caches and attention in `dt` (the inputs f16-exact either way).
fn serve<B: AttentionBackend>(
    dev: &B::Device,
    path: AttendPath,
    d: usize,
    dt: FloatDType,
) -> Vec<Vec<f32>> {
    let scale = 1.0 / (d as f64).sqrt();
    let mut cache = PagedKvCache::<B>::new(16, BS, N, NKV, d, scale, dev)
        .unwrap()
        .with_dtype(dt.into())
        .unwrap();
    let t = |v: Vec<f32>, s: &[usize]| -> Tensor<B, 1> {
        t::<B, 1>(f16_round(v), [s.iter().product()], dev).cast(dt)
    };
    let opts = AttendOptions {
        window: Some(5),
        sinks: Some(Tensor::from_data(
            TensorData::new(vec![0.3f32, -0.2, 0.8, 0.0], [4]),
            dev,
        )),
        path,
    };
    let ids = [cache.add_sequence(), cache.add_sequence()];
    let mut outs = Vec::new();
    for (i, (&id, len)) in ids.iter().zip([6usize, 20]).enumerate() {
        if path == AttendPath::PromptIncre {
            let zero = || t(vec![0.0; NKV * d], &[NKV * d]).reshape([1, NKV, d]);
            cache.append(id, zero(), zero()).unwrap();
        }
        let k = t(values(len * NKV * d, 10 + i as u32), &[len * NKV * d]).reshape([len, NKV, d]);
        let v = t(values(len * NKV * d, 20 + i as u32), &[len * NKV * d]).reshape([len, NKV, d]);
        cache.append(id, k, v).unwrap();
        let q = t(values(len * N * d, 30 + i as u32), &[len * N * d]).reshape([1, len, N, d]);
        let o = cache.attend_with(&[id], q, &opts).unwrap();
        outs.push(read(o));
    }
    for step in 0..2u32 {
        for (i, &id) in ids.iter().enumerate() {
            let s = 40 + 10 * step + i as u32;
            let k = t(values(NKV * d, s), &[NKV * d]).reshape([1, NKV, d]);
            let v = t(values(NKV * d, s + 1), &[NKV * d]).reshape([1, NKV, d]);
            cache.append(id, k, v).unwrap();
        }
        let q = t(values(2 * N * d, 60 + step), &[2 * N * d]).reshape([2, 1, N, d]);
        let o = cache.attend_with(&ids, q, &opts).unwrap();
        outs.push(read(o));
    }
    outs
}

/// Within `tol` (relative, absolute).
fn assert_outputs_close(got: &[Vec<f32>], want: &[Vec<f32>], tol: (f32, f32)) {
    assert_eq!(got.len(), want.len());
    for (i, (g, w)) in got.iter().zip(want).enumerate() {
        let (g, w) = (
            TensorData::new(g.clone(), [g.len()]),
            TensorData::new(w.clone(), [w.len()]),
        );
        eprintln!("output {i}");
        g.assert_approx_eq::<f32>(&w, Tolerance::rel_abs(tol.0, tol.1));
    }
}

#[test]
fn paged_serving_matches_ndarray_on_the_device_path() {
    let _lock = crate::exclusive();
    for (path, d) in [(AttendPath::PromptIncre, D), (AttendPath::Fused, 64)] {
        eprintln!("{path:?}, head dim {d}");
        let before = counts();
        let got = serve::<Ascend>(&AscendDevice::sim(), path, d, FloatDType::F16);
        let after = counts();
        let want = serve::<NdArray>(&Default::default(), path, d, FloatDType::F32);
        // f16 caches and outputs against f32 on f16-exact inputs below 1.
        assert_outputs_close(&got, &want, (1e-2, 4e-3));
        assert_eq!(
            after, before,
            "an attention op fell back or ran the composite"
        );
    }
}

/// The two ways of serving sinks and windows — FIA's `learnableSink` with band / dense masks,
/// and prompt / incremental attention with the sink on a placeholder token's `pseShift` — are
/// different operators with different masks; they must give the same outputs.
#[test]
fn fused_serving_equals_the_placeholder_path() {
    let dev = Default::default();
    let fused = serve::<NdArray>(&dev, AttendPath::Fused, 64, FloatDType::F32);
    let placeholder = serve::<NdArray>(&dev, AttendPath::PromptIncre, 64, FloatDType::F32);
    assert_outputs_close(&fused, &placeholder, (1e-4, 1e-5));
}

#[test]
fn incremental_attention_contiguous_and_list_forms_match_ndarray() {
    let _lock = crate::exclusive();
    fn run<B: AttentionBackend>(dev: &B::Device, dt: FloatDType) -> Vec<f32> {
        let (b, s) = (2, 7);
        let t = |v: Vec<f32>, sh: [usize; 4]| t::<B, 4>(f16_round(v), sh, dev).cast(dt);
        let q = t(values(b * N * D, 1), [b, 1, N, D]);
        let k = t(values(b * s * NKV * D, 2), [b, s, NKV, D]);
        let v = t(values(b * s * NKV * D, 3), [b, s, NKV, D]);
        let mut spec = IncreSpec::new(N, 0.35, IfaLayout::Bsnd);
        spec.num_key_value_heads = NKV;
        spec.actual_seq_lengths = Some(vec![5, 7]);
        let a = incre_flash_attention(q.clone(), IncreKv::contiguous(k.clone(), v.clone()), &spec)
            .unwrap();
        // the list form: one batch-1 tensor per batch
        let part = |x: &Tensor<B, 4>, i: usize| x.clone().narrow(0, i, 1).into_primitive().tensor();
        let list = IncreKv::List {
            key: (0..b).map(|i| part(&k, i)).collect(),
            value: (0..b).map(|i| part(&v, i)).collect(),
        };
        spec.actual_seq_lengths = None;
        let l = incre_flash_attention(q, list, &spec).unwrap();
        [a, l].into_iter().flat_map(read).collect()
    }
    let before = counts();
    let got = run::<Ascend>(&AscendDevice::sim(), FloatDType::F16);
    assert_eq!(counts(), before, "incre_fwd fell back or ran the composite");
    let want = run::<NdArray>(&Default::default(), FloatDType::F32);
    TensorData::new(got.clone(), [got.len()]).assert_approx_eq::<f32>(
        &TensorData::new(want, [got.len()]),
        Tolerance::rel_abs(1e-2, 4e-3),
    );
}

#[test]
fn scatter_writes_in_place_only_when_the_cache_is_unshared() {
    let _lock = crate::exclusive();
    let dev = AscendDevice::sim();
    let shape = [3, BS, NKV, D];
    let f16 = FloatDType::F16;
    let cache = || t::<Ascend, 4>(values(3 * BS * NKV * D, 7), shape, &dev).cast(f16);
    let key = t::<Ascend, 3>(values(2 * NKV * D, 8), [2, NKV, D], &dev).cast(f16);
    let spec = ScatterSpec::new(vec![5, 0]);
    // slot 5 = block 0, offset 5; slot 0 = block 0, offset 0 (written in slot order)
    let expect = |old: Vec<f32>| {
        let mut e = old;
        let kv = f16_round(values(2 * NKV * D, 8));
        let row = NKV * D;
        e[5 * row..6 * row].copy_from_slice(&kv[..row]);
        e[..row].copy_from_slice(&kv[row..]);
        e
    };
    let old = f16_round(values(3 * BS * NKV * D, 7));

    // shared: the clone keeps its values
    let kc = cache();
    let keep = kc.clone();
    let before = counts();
    let (new, _) = scatter_pa_kv_cache(key.clone(), None, kc, None, &spec).unwrap();
    assert_eq!(counts(), before);
    assert_eq!(read(keep), old);
    assert_eq!(read(new), expect(old.clone()));

    // unshared: updated where it lies (same device buffer)
    let kc = cache();
    let ptr = kc.clone().into_primitive().tensor().storage_ptr();
    let (new, _) = scatter_pa_kv_cache(key, None, kc, None, &spec).unwrap();
    let prim = new.into_primitive().tensor();
    assert_eq!(
        prim.storage_ptr(),
        ptr,
        "an unshared cache must not be copied"
    );
    let got = Tensor::<Ascend, 4>::from_primitive(burn::tensor::TensorPrimitive::Float(prim));
    assert_eq!(read(got), expect(old));
}

#[test]
fn paged_cache_appends_without_copying_the_cache() {
    let _lock = crate::shared();
    let dev = AscendDevice::sim();
    let mut cache = PagedKvCache::<Ascend>::new(4, BS, N, NKV, D, 0.3, &dev)
        .unwrap()
        .with_dtype(DType::F16)
        .unwrap();
    let id = cache.add_sequence();
    let ptrs = |c: &PagedKvCache<Ascend>| {
        let (k, v) = c.caches();
        [k, v].map(|x| x.clone().into_primitive().tensor().storage_ptr())
    };
    let first = ptrs(&cache);
    for i in 0..3u32 {
        let k = t::<Ascend, 3>(values(NKV * D, i), [1, NKV, D], &dev).cast(FloatDType::F16);
        let v = t::<Ascend, 3>(values(NKV * D, i + 9), [1, NKV, D], &dev).cast(FloatDType::F16);
        cache.append(id, k, v).unwrap();
        assert_eq!(ptrs(&cache), first, "append {i} copied the cache");
    }
    let (k, _) = cache.caches();
    let row = &read(k.clone())[2 * NKV * D..3 * NKV * D];
    assert_eq!(row, &f16_round(values(NKV * D, 2))[..]);
}

/// A key on another device is refused with a typed error naming `key`, before any block is
/// taken or the caches are moved into the scatter.
#[test]
fn an_append_from_another_device_is_a_typed_error_that_changes_nothing() {
    let _lock = crate::shared();
    use burn_ascend_backend::AscendKind;
    let dev = AscendDevice::sim();
    // A second simulated device (the simulation has one unless asked for more).
    burn_ascend_backend::collective::simulate_devices(2);
    let other = AscendDevice {
        kind: AscendKind::Simulation,
        index: 1,
    };
    let mut cache = PagedKvCache::<Ascend>::new(2, BS, N, NKV, D, 0.3, &dev).unwrap();
    let id = cache.add_sequence();
    let free = cache.free_blocks();
    let k = t::<Ascend, 3>(values(NKV * D, 1), [1, NKV, D], &other);
    let err = cache.append(id, k.clone(), k).unwrap_err();
    assert_eq!(err.param(), Some("key"), "{err}");
    assert_eq!(cache.free_blocks(), free);
    assert_eq!(cache.len(id).unwrap(), 0);
    assert_eq!(cache.caches().0.dims(), [2, BS, NKV, D]);
}

/// The placeholder path's prefill builds the sink slot's `pseShift` from the sinks where they
/// lie: the device is not read back to the host (it was, once per prefill per layer).
#[test]
fn the_placeholder_paths_prefill_reads_nothing_back_from_the_device() {
    // Its own device: the counters are the device runtime's, shared by every thread.
    burn_ascend_backend::collective::simulate_devices(23);
    let dev = AscendDevice {
        kind: burn_ascend_backend::AscendKind::Simulation,
        index: 22,
    };
    let dt = FloatDType::F16;
    let mut cache = PagedKvCache::<Ascend>::new(16, BS, N, NKV, D, 0.35, &dev)
        .unwrap()
        .with_dtype(dt.into())
        .unwrap();
    let f16 = |v: Vec<f32>, s: [usize; 3]| t::<Ascend, 3>(f16_round(v), s, &dev).cast(dt);
    let opts = AttendOptions {
        window: Some(5),
        sinks: Some(t::<Ascend, 1>(vec![0.3, -0.2, 0.8, 0.0], [N], &dev)),
        path: AttendPath::PromptIncre,
    };
    let id = cache.add_sequence();
    let zero = f16(vec![0.0; NKV * D], [1, NKV, D]);
    cache.append(id, zero.clone(), zero).unwrap();
    let len = 6;
    let (k, v) = (
        f16(values(len * NKV * D, 1), [len, NKV, D]),
        f16(values(len * NKV * D, 2), [len, NKV, D]),
    );
    cache.append(id, k, v).unwrap();
    let q = t::<Ascend, 4>(f16_round(values(len * N * D, 3)), [1, len, N, D], &dev).cast(dt);
    let before = burn_ascend_backend::device_counters(&dev).d2h_bytes;
    let out = cache.attend_with(&[id], q, &opts).unwrap();
    let read_back = burn_ascend_backend::device_counters(&dev).d2h_bytes - before;
    assert_eq!(read_back, 0, "the prefill read {read_back} bytes back");
    assert!(read(out).iter().all(|x| x.is_finite()));
}
