//! The scatter reference's unit tests.

use super::*;
use half::f16;

/// Distinct, exactly representable values.
fn seq(n: usize, base: f32) -> Vec<f32> {
    (0..n).map(|i| base + i as f32).collect()
}

/// Reads slot `s` back from a cache as `N·D` flat elements, from first principles.
fn read_slot<T: Copy>(
    cache: &[T],
    mode: CacheMode,
    s: usize,
    n: usize,
    d: usize,
    bs: usize,
    last: usize,
) -> Vec<T> {
    let (blk, off) = (s / bs, s % bs);
    (0..n * d)
        .map(|e| match mode {
            CacheMode::Norm => cache[((blk * bs + off) * n + e / d) * d + e % d],
            CacheMode::PaNz => {
                cache[((blk * (n * d / last) + e / last) * bs + off) * last + e % last]
            }
            CacheMode::Nhsd => cache[((blk * n + e / d) * bs + off) * d + e % d],
        })
        .collect()
}

fn args<'a>(
    key: &'a [f32],
    value: Option<&'a [f32]>,
    slots: &'a [i32],
    mode: CacheMode,
) -> PlainScatterArgs<'a, f32, i32> {
    PlainScatterArgs {
        key,
        value,
        slot_mapping: slots,
        num_tokens: slots.len(),
        num_heads: 2,
        k_head_size: 4,
        v_head_size: 8,
        num_blocks: 3,
        block_size: 4,
        cache_mode: mode,
        scatter_mode: ScatterMode::None,
    }
}

#[test]
fn round_trip_norm_nz_nhsd_with_negative_slot_skipped() {
    let slots = [5i32, -1, 0, 11];
    let key = seq(4 * 8, 1.0);
    let value = seq(4 * 16, 1000.0);
    for mode in [CacheMode::Norm, CacheMode::PaNz, CacheMode::Nhsd] {
        let a = args(&key, Some(&value), &slots, mode);
        let mut kc = vec![0.0f32; 12 * 8];
        let mut vc = vec![0.0f32; 12 * 16];
        check_scatter(&a, kc.len(), Some(vc.len())).unwrap();
        scatter_pa_kv_cache(&a, &mut kc, Some(&mut vc));
        let last = nz_last_dim::<f32>();
        assert_eq!(last, 8);
        for (t, &s) in slots.iter().enumerate() {
            if s < 0 {
                continue;
            }
            assert_eq!(
                read_slot(&kc, mode, s as usize, 2, 4, 4, last),
                &key[t * 8..t * 8 + 8],
                "{mode:?} key t={t}"
            );
            assert_eq!(
                read_slot(&vc, mode, s as usize, 2, 8, 4, last),
                &value[t * 16..t * 16 + 16],
                "{mode:?} value t={t}"
            );
        }
        // Token 1 (slot −1) is nowhere: exactly 3 tokens' worth of non-zero elements.
        assert_eq!(kc.iter().filter(|&&x| x != 0.0).count(), 3 * 8);
        assert!(!kc.contains(&key[8]));
    }
}

#[test]
fn pa_nz_layout_by_hand_f16() {
    // f16: last = 16. N·D = 32 → cache [nb, 2, bs, 16]. Slot 1 (blk 0, off 1) gets token 0:
    // element e goes to [0, e / 16, 1, e % 16].
    assert_eq!(nz_last_dim::<f16>(), 16);
    assert_eq!(nz_last_dim::<i8>(), 32);
    let key: Vec<f16> = (0..32).map(|i| f16::from_f32(i as f32)).collect();
    let slots = [1i64];
    let a = PlainScatterArgs {
        key: &key,
        value: None,
        slot_mapping: &slots[..],
        num_tokens: 1,
        num_heads: 2,
        k_head_size: 16,
        v_head_size: 0,
        num_blocks: 1,
        block_size: 2,
        cache_mode: CacheMode::PaNz,
        scatter_mode: ScatterMode::None,
    };
    let mut kc = vec![f16::ZERO; 2 * 2 * 16];
    check_scatter(&a, kc.len(), None).unwrap();
    scatter_pa_kv_cache(&a, &mut kc, None);
    // [0, c, 1, e]: index (c·2 + 1)·16 + e.
    assert_eq!(kc[16 + 3], f16::from_f32(3.0));
    assert_eq!(kc[(2 + 1) * 16 + 5], f16::from_f32(21.0));
    assert_eq!(kc[0], f16::ZERO);
}

#[test]
fn nct_strided_source_and_key_only() {
    // Key token t lives at t·20 + 3 (N·Dk = 8 contiguous elements).
    let (stride, offset) = (20usize, 3usize);
    let slots = [2i32, 7];
    let mut strided = vec![-9.0f32; stride * 2 + offset + 8];
    for t in 0..2 {
        for e in 0..8 {
            strided[t * stride + offset + e] = (t * 100 + e) as f32;
        }
    }
    let mut a = args(&strided, None, &slots, CacheMode::Norm);
    a.scatter_mode = ScatterMode::Nct {
        strides: [stride, 1],
        offsets: [offset, 0],
    };
    let mut kc = vec![0.0f32; 12 * 8];
    check_scatter(&a, kc.len(), None).unwrap();
    scatter_pa_kv_cache(&a, &mut kc, None);
    for (t, &s) in slots.iter().enumerate() {
        let expect: Vec<f32> = (0..8).map(|e| (t * 100 + e) as f32).collect();
        assert_eq!(
            read_slot(&kc, CacheMode::Norm, s as usize, 2, 4, 4, 8),
            expect
        );
    }
    assert!(!kc.contains(&-9.0));
    // Nct with PA_NZ is rejected.
    a.cache_mode = CacheMode::PaNz;
    assert!(check_scatter(&a, kc.len(), None).is_err());
}

#[test]
fn nct_value_tokens_are_strided_by_the_key_stride() {
    // strides = [20, 999]: the kernel reads value token t at t·20 + offsets[1]
    // (scatter_pa_kv_cache_nd.h: startV = t·strideK_ + offsetV_); strides[1] is never read.
    let slots = [3i32, 9];
    let (stride, ko, vo) = (20usize, 0usize, 4usize);
    let mut store = vec![-9.0f32; stride * 2 + 16 + vo];
    for t in 0..2 {
        for e in 0..8 {
            store[t * stride + ko + e] = (t * 100 + e) as f32;
        }
    }
    let mut vstore = vec![-9.0f32; stride + vo + 16];
    for t in 0..2 {
        for e in 0..16 {
            vstore[t * stride + vo + e] = (1000 + t * 100 + e) as f32;
        }
    }
    let mut a = args(&store, Some(&vstore), &slots, CacheMode::Norm);
    a.scatter_mode = ScatterMode::Nct {
        strides: [stride, 999],
        offsets: [ko, vo],
    };
    let (mut kc, mut vc) = (vec![0.0f32; 12 * 8], vec![0.0f32; 12 * 16]);
    check_scatter(&a, kc.len(), Some(vc.len())).unwrap();
    scatter_pa_kv_cache(&a, &mut kc, Some(&mut vc));
    for (t, &s) in slots.iter().enumerate() {
        let want: Vec<f32> = (0..16).map(|e| (1000 + t * 100 + e) as f32).collect();
        assert_eq!(
            read_slot(&vc, CacheMode::Norm, s as usize, 2, 8, 4, 8),
            want
        );
    }
}

#[test]
fn plain_checks_refuse_overflowing_sizes_without_panicking() {
    let key = seq(3 * 8, 1.0);
    let mut a = args(&key, None, &[0, 1, 2], CacheMode::Norm);
    // (T−1)·stride + offset + N·D overflows usize: refused, not wrapped into a pass.
    a.scatter_mode = ScatterMode::Nct {
        strides: [usize::MAX / 2 + 1, 1],
        offsets: [0, 0],
    };
    let e = check_scatter(&a, 12 * 8, None).unwrap_err();
    assert!(e.contains("overflows"), "{e}");
    a.scatter_mode = ScatterMode::Nct {
        strides: [8, 1],
        offsets: [usize::MAX - 4, 0],
    };
    assert!(check_scatter(&a, 12 * 8, None)
        .unwrap_err()
        .contains("overflows"));
    // num_blocks·block_size and N·D overflow.
    let mut a = args(&key, None, &[0, 1, 2], CacheMode::Norm);
    a.num_blocks = usize::MAX;
    assert!(check_scatter(&a, 12 * 8, None)
        .unwrap_err()
        .contains("overflows"));
    let mut a = args(&key, None, &[0, 1, 2], CacheMode::Norm);
    a.num_heads = usize::MAX;
    assert!(check_scatter(&a, 12 * 8, None)
        .unwrap_err()
        .contains("overflows"));
}

#[test]
fn check_rejects_bad_slots_and_shapes() {
    let key = seq(3 * 8, 1.0);
    let kc_len = 12 * 8;
    assert!(check_scatter(
        &args(&key, None, &[0, 12, 1], CacheMode::Norm),
        kc_len,
        None
    )
    .is_err());
    assert!(check_scatter(&args(&key, None, &[4, 4, 1], CacheMode::Norm), kc_len, None).is_err());
    assert!(check_scatter(
        &args(&key, None, &[-1, -1, 1], CacheMode::Norm),
        kc_len,
        None
    )
    .is_ok());
    assert!(check_scatter(&args(&key, None, &[0, 1], CacheMode::Norm), kc_len, None).is_ok());
    assert!(check_scatter(
        &args(&key, None, &[0, 1, 2], CacheMode::Norm),
        kc_len - 1,
        None
    )
    .is_err());
    assert!(check_scatter(
        &args(&key, None, &[0, 1, 2], CacheMode::Norm),
        kc_len,
        Some(kc_len)
    )
    .is_err());
    // Out-of-range slots are also skipped by the write path (no panic, nothing written).
    let a = args(&key, None, &[12, 0, 1], CacheMode::Norm);
    let mut kc = vec![0.0f32; kc_len];
    scatter_pa_kv_cache(&a, &mut kc, None);
    assert_eq!(kc.iter().filter(|&&x| x != 0.0).count(), 2 * 8);
}

fn compressed<'a>(
    key: &'a [f32],
    slots: &'a [i32],
    clens: &'a [i32],
    seq_lens: &'a [i32],
    offsets: Option<&'a [i32]>,
    mode: CompressMode,
) -> CompressedScatterArgs<'a, f32, i32> {
    CompressedScatterArgs {
        key,
        value: None,
        slot_mapping: slots,
        compress_lens: clens,
        seq_lens,
        compress_seq_offset: offsets,
        num_heads: 2,
        k_head_size: 1,
        v_head_size: 1,
        num_blocks: 2,
        block_size: 8,
        mode,
    }
}

/// key[t, h, 0] = 10·t + h for sequences of lengths `lens`.
fn tokens(total: usize) -> Vec<f32> {
    (0..total)
        .flat_map(|t| [10.0 * t as f32, 10.0 * t as f32 + 1.0])
        .collect()
}

#[test]
fn alibi_copies_last_compress_lens_tokens() {
    // B = 2, N = 2, seqLens = [4, 3]: batch 1 starts at token 4.
    let key = tokens(7);
    let seq_lens = [4, 3];
    let slots = [0, 4, 8, 11];
    let clens = [2, 1, 3, 2];
    let a = compressed(&key, &slots, &clens, &seq_lens, None, CompressMode::Alibi);
    let mut kc = vec![-1.0f32; 16];
    check_compressed_scatter(&a, kc.len(), None).unwrap();
    scatter_pa_kv_cache_compressed(&a, &mut kc, None);
    // (0,0): positions 2, 3 → slots 0, 1: tokens 2, 3 head 0.
    assert_eq!(&kc[0..3], &[20.0, 30.0, -1.0]);
    // (0,1): position 3 → slot 4.
    assert_eq!(&kc[4..6], &[31.0, -1.0]);
    // (1,0): positions 0, 1, 2 of batch 1 = tokens 4, 5, 6 → slots 8, 9, 10.
    assert_eq!(&kc[8..11], &[40.0, 50.0, 60.0]);
    // (1,1): positions 1, 2 → slots 11, 12.
    assert_eq!(&kc[11..14], &[51.0, 61.0, -1.0]);
    // More than the sequence holds: the kernel would read the previous sequence's rows.
    let clens = [2, 1, 3, 5];
    let a = compressed(&key, &slots, &clens, &seq_lens, None, CompressMode::Alibi);
    let e = check_compressed_scatter(&a, 16, None).unwrap_err();
    assert!(e.contains("compressLens 5 exceeds"), "{e}");
}

#[test]
fn rope_copies_prefix_means_window_copies_rest_after_a_gap_free_slot() {
    // One batch, N = 2, L = 6, head 0: offset 2, window 3 → slots s0+0, s0+1 ← p0, p1;
    // s0+2 ← mean(p2, p3, p4); s0+3 ← p5. Head 1: offset 0, window 2 → mean(p0, p1), then
    // p2..p5.
    let key = tokens(6);
    let seq_lens = [6];
    let slots = [0, 8];
    let clens = [3, 2];
    let offs = [2, 0];
    let a = compressed(
        &key,
        &slots,
        &clens,
        &seq_lens,
        Some(&offs),
        CompressMode::Rope,
    );
    let mut kc = vec![-1.0f32; 16];
    check_compressed_scatter(&a, kc.len(), None).unwrap();
    scatter_pa_kv_cache_compressed(&a, &mut kc, None);
    assert_eq!(&kc[0..5], &[0.0, 10.0, 30.0, 50.0, -1.0]);
    assert_eq!(&kc[8..14], &[6.0, 21.0, 31.0, 41.0, 51.0, -1.0]);
    // Rope without compressSeqOffset is rejected.
    let a = compressed(&key, &slots, &clens, &seq_lens, None, CompressMode::Rope);
    assert!(check_compressed_scatter(&a, 16, None).is_err());
}

#[test]
fn omni_discards_the_window_and_writes_the_tail_from_slot_plus_offset() {
    // scatter_pa_kv_cache_compress_omni.h: PART A copies [0, o), PART B discards the window,
    // PART C copies [o + w, L) to s0 + o + k.
    let key = tokens(6);
    let a = compressed(
        &key,
        &[0, 8],
        &[3, 2],
        &[6],
        Some(&[2, 0]),
        CompressMode::Omni,
    );
    let mut kc = vec![-1.0f32; 16];
    check_compressed_scatter(&a, kc.len(), None).unwrap();
    scatter_pa_kv_cache_compressed(&a, &mut kc, None);
    // Head 0: p0, p1 → 0, 1; window p2..p4 discarded; p5 → 2.
    assert_eq!(&kc[0..4], &[0.0, 10.0, 50.0, -1.0]);
    // Head 1: window p0, p1 discarded; p2..p5 → 8..11.
    assert_eq!(&kc[8..13], &[21.0, 31.0, 41.0, 51.0, -1.0]);
}

#[test]
fn rope_and_omni_without_a_window_copy_the_whole_sequence_contiguously() {
    // compressLens = 0 (and offset = L with a window): ParamSet sets offsetIdx = seqLen,
    // PART A copies everything to s0 .. s0 + L − 1, no gap at s0 + o.
    let key = tokens(4);
    for mode in [CompressMode::Rope, CompressMode::Omni] {
        let a = compressed(&key, &[0, 8], &[0, 3], &[4], Some(&[2, 4]), mode);
        let mut kc = vec![-1.0f32; 16];
        check_compressed_scatter(&a, kc.len(), None).unwrap();
        scatter_pa_kv_cache_compressed(&a, &mut kc, None);
        assert_eq!(&kc[0..5], &[0.0, 10.0, 20.0, 30.0, -1.0], "{mode:?} head 0");
        assert_eq!(
            &kc[8..13],
            &[1.0, 11.0, 21.0, 31.0, -1.0],
            "{mode:?} head 1"
        );
    }
}

#[test]
fn rope_mean_is_summed_in_f32_in_sequence_order_as_the_kernel_does() {
    // ComputeAvg adds the window's rows in f32, in order: 1e8 + 1 rounds back to 1e8
    // (f32 spacing 8 there), so the mean of (1e8, 1, −1e8) is 0, not 1/3.
    let key = [1e8f32, 1.0, -1e8];
    let a = CompressedScatterArgs {
        key: &key,
        value: None,
        slot_mapping: &[0i32][..],
        compress_lens: &[3],
        seq_lens: &[3],
        compress_seq_offset: Some(&[0]),
        num_heads: 1,
        k_head_size: 1,
        v_head_size: 1,
        num_blocks: 1,
        block_size: 4,
        mode: CompressMode::Rope,
    };
    let mut kc = vec![-1.0f32; 4];
    check_compressed_scatter(&a, kc.len(), None).unwrap();
    scatter_pa_kv_cache_compressed(&a, &mut kc, None);
    assert_eq!(kc[0], 0.0);
    // f16: the f32 mean 2049 of (2048, 2050) rounds to even, 2048.
    let key: Vec<f16> = [2048.0f32, 2050.0]
        .iter()
        .map(|&x| f16::from_f32(x))
        .collect();
    let a = CompressedScatterArgs {
        key: &key,
        value: None,
        slot_mapping: &[0i32][..],
        compress_lens: &[2],
        seq_lens: &[2],
        compress_seq_offset: Some(&[0]),
        num_heads: 1,
        k_head_size: 1,
        v_head_size: 1,
        num_blocks: 1,
        block_size: 4,
        mode: CompressMode::Rope,
    };
    let mut kc = vec![f16::ZERO; 4];
    check_compressed_scatter(&a, kc.len(), None).unwrap();
    scatter_pa_kv_cache_compressed(&a, &mut kc, None);
    assert_eq!(kc[0], f16::from_f32(2048.0));
}

#[test]
fn rope_windows_past_the_sequence_are_refused() {
    let key = tokens(4);
    for (clens, offs, what) in [
        (
            [3, 0],
            [2, 0],
            "compressLens 3 after compressSeqOffset 2 exceeds",
        ),
        ([1, 0], [5, 0], "compressSeqOffset 5 exceeds"),
        ([i32::MAX, 0], [1, 0], "exceeds"),
    ] {
        let a = compressed(&key, &[0, 8], &clens, &[4], Some(&offs), CompressMode::Omni);
        let e = check_compressed_scatter(&a, 16, None).unwrap_err();
        assert!(e.contains(what), "{clens:?} {offs:?}: {e}");
    }
}

#[test]
fn huge_lengths_are_refused_without_overflow_or_unbounded_work() {
    let key = [0.0f32; 8];
    let big = [i64::MAX, i64::MAX];
    let a = CompressedScatterArgs {
        key: &key,
        value: None,
        slot_mapping: &[0i64, 8][..],
        compress_lens: &[i64::MAX, 0],
        seq_lens: &big[..1],
        compress_seq_offset: None,
        num_heads: 2,
        k_head_size: 1,
        v_head_size: 1,
        num_blocks: 2,
        block_size: 8,
        mode: CompressMode::Alibi,
    };
    // Σ seqLens = i64::MAX ≠ the key's 4 tokens: refused, no loop of i64::MAX steps.
    assert!(check_compressed_scatter(&a, 16, None).is_err());
    let a = CompressedScatterArgs {
        seq_lens: &big[..],
        slot_mapping: &[0i64, 4, 8, 12],
        compress_lens: &[0, 0, 0, 0],
        ..a
    };
    assert!(check_compressed_scatter(&a, 16, None).is_err());
    let a = CompressedScatterArgs {
        num_blocks: usize::MAX,
        ..a
    };
    assert!(check_compressed_scatter(&a, 16, None)
        .unwrap_err()
        .contains("overflows"));
}

#[test]
fn compressed_check_rejects_overlaps_and_range() {
    let key = tokens(4);
    let seq_lens = [4];
    // Head 0 writes slots 0..2, head 1 writes 1..3: overlap.
    let a = compressed(&key, &[0, 1], &[2, 2], &seq_lens, None, CompressMode::Alibi);
    assert!(check_compressed_scatter(&a, 16, None).is_err());
    // Slot 15 + 1 = 16 is out of range.
    let a = compressed(
        &key,
        &[0, 15],
        &[2, 2],
        &seq_lens,
        None,
        CompressMode::Alibi,
    );
    assert!(check_compressed_scatter(&a, 16, None).is_err());
    let a = compressed(
        &key,
        &[0, 14],
        &[2, 2],
        &seq_lens,
        None,
        CompressMode::Alibi,
    );
    assert!(check_compressed_scatter(&a, 16, None).is_ok());
    // Wrong key length (Σ seqLens · N · D).
    let a = compressed(
        &key[..7],
        &[0, 14],
        &[2, 2],
        &seq_lens,
        None,
        CompressMode::Alibi,
    );
    assert!(check_compressed_scatter(&a, 16, None).is_err());
}
