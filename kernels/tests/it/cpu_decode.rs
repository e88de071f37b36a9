//! The fast decode kernel (`kernels::cpu::incre_flash_attention`) against the reference
//! (`kernels::reference::incre`).
//!
//! Both implementations get the *same* argument struct (query, KV, pse in their element types;
//! int8 KV as int8), so the comparison isolates the kernel: the reference widens to f64 and
//! accumulates in f64, the kernel computes in f32.
//!
//! Tolerance: |got − exp| ≤ 2e-5 + 1e-4·|exp| on the f32 output, for every dtype combination
//! (f16 / bf16 inputs are converted exactly, so they do not widen it). Outputs rounded to
//! f16 / bf16 (`_as`) may differ from the rounded reference by one ulp of the narrow type on
//! top of that; the int8 output (`_int8`) by one quantisation step.
//!
//! Paged caches hold NaN in every slot no valid token uses (and the block table −1 in every
//! unused entry), so reading outside the window poisons the result.

use burn_ascend_contract::incre::{
    Antiquant, IfaLayout, IfaMask, IfaPostQuant, IfaPse, IncreFlashAttentionArgs, KvInput,
    PagedLayout,
};
use burn_ascend_contract::Element;
use burn_ascend_kernels::cpu;
use burn_ascend_kernels::reference::incre::{self as reference};
use burn_ascend_test_support::{check_close, Rng};
use half::{bf16, f16};

const ABS: f64 = 2e-5;
const REL: f64 = 1e-4;

/// The shared splitmix64 generator, seeded as this suite always was (`seed` mixed with the
/// increment, one draw skipped).
fn rng(seed: u64) -> Rng {
    let mut r = Rng::new(seed ^ 0x9e37_79b9_7f4a_7c15);
    r.next_u64();
    r
}

#[derive(Clone, Debug)]
enum Form {
    Contiguous {
        kv_seq: usize,
    },
    List {
        seqs: Vec<usize>,
    },
    Paged {
        layout: PagedLayout,
        bs: usize,
        maxb: usize,
        table: Vec<i32>,
    },
}

/// One random configuration, values in f64 (converted to the element types per check).
#[derive(Clone, Debug)]
struct Case {
    b: usize,
    n: usize,
    nkv: usize,
    d: usize,
    scale: f64,
    layout: IfaLayout,
    form: Form,
    q: Vec<f64>,
    /// Contiguous: the `(B, S, …)` tensor; List: the per-batch tensors concatenated; Paged:
    /// the cache. NaN where nothing valid lives (paged).
    k: Vec<f64>,
    v: Vec<f64>,
    lens: Option<Vec<i64>>,
    pad: Option<i64>,
    mask: Option<(Vec<u8>, usize)>,
    pse: Option<(Vec<f64>, bool, usize)>,
    /// (scale, offset, per_channel)
    aq: Option<(Vec<f32>, Option<Vec<f32>>, bool)>,
    /// KV values are integers in [−128, 127] (int8 or int8-valued floats).
    int_kv: bool,
}

impl Case {
    fn random(seed: u64) -> Self {
        let mut r = rng(seed);
        let b = 1 + r.below(3);
        let nkv = 1 + r.below(3);
        let g = r.pick(&[1usize, 2, 3, 4, 8]);
        let n = nkv * g;
        let long = r.chance(0.12);
        let d = if long {
            // D = 128 with several kv heads also splits chunks into sub-chunks.
            r.pick(&[8usize, 33, 64, 128])
        } else {
            r.pick(&[1usize, 3, 8, 17, 64, 128])
        };
        let scale = (0.5 + r.uniform()) / (d as f64).sqrt();
        let layout = r.pick(&[IfaLayout::Bsh, IfaLayout::Bsnd, IfaLayout::Bnsd]);
        let max_s = if long {
            513 + r.below(1100)
        } else {
            1 + r.below(70)
        };
        let int_kv = r.chance(0.35);
        let val = |r: &mut Rng| {
            if int_kv {
                (r.below(256) as f64 - 128.0).round()
            } else {
                r.sym(1.0)
            }
        };
        let q: Vec<f64> = (0..b * n * d).map(|_| r.sym(1.0)).collect();
        let kind = r.below(4);
        let (form, kv_s): (Form, Vec<usize>) = match kind {
            0 | 1 => (Form::Contiguous { kv_seq: max_s }, vec![max_s; b]),
            2 => {
                let seqs: Vec<usize> = (0..b).map(|_| 1 + r.below(max_s)).collect();
                (Form::List { seqs: seqs.clone() }, seqs)
            }
            _ => {
                let bs = r.pick(&[1usize, 4, 16, 128]);
                let maxb = max_s.div_ceil(bs);
                (
                    Form::Paged {
                        layout: r.pick(&[PagedLayout::Bsh, PagedLayout::Bnsd]),
                        bs,
                        maxb,
                        table: Vec::new(),
                    },
                    vec![maxb * bs; b],
                )
            }
        };
        let paged = matches!(form, Form::Paged { .. });
        // Left padding (not with paged KV).
        let min_s = kv_s.iter().copied().min().unwrap_or(0);
        // The window start KV_S − pad − len must stay ≥ 0: pad ≤ every KV_S.
        let pad = (!paged && r.chance(0.3)).then(|| (r.below(5) as i64 - 1).min(min_s as i64));
        let pad_eff = pad.map_or(0, |p| p.max(0) as usize);
        let lens = if paged || r.chance(0.6) {
            Some(
                (0..b)
                    .map(|bi| {
                        let room = kv_s[bi].saturating_sub(pad_eff);
                        if r.chance(0.15) {
                            0
                        } else {
                            room - r.below(room.min(9) + 1).min(room)
                        }
                    })
                    .map(|x| x as i64)
                    .collect::<Vec<_>>(),
            )
        } else {
            None
        };
        let len_of = |bi: usize| -> usize {
            match &lens {
                Some(l) => l[bi] as usize,
                None => kv_s[bi] - pad_eff,
            }
        };
        let (mut k, mut v);
        let mut form = form;
        match &mut form {
            Form::Contiguous { kv_seq } => {
                let len = b * *kv_seq * nkv * d;
                k = (0..len).map(|_| val(&mut r)).collect::<Vec<_>>();
                v = (0..len).map(|_| val(&mut r)).collect::<Vec<_>>();
            }
            Form::List { seqs } => {
                let len: usize = seqs.iter().sum::<usize>() * nkv * d;
                k = (0..len).map(|_| val(&mut r)).collect::<Vec<_>>();
                v = (0..len).map(|_| val(&mut r)).collect::<Vec<_>>();
            }
            Form::Paged {
                layout,
                bs,
                maxb,
                table,
            } => {
                let (bs, maxb) = (*bs, *maxb);
                let spare = r.below(4);
                let nblocks = b * maxb + spare;
                // A random assignment of distinct physical blocks; −1 where unused.
                let mut ids: Vec<i32> = (0..nblocks as i32).collect();
                for i in (1..ids.len()).rev() {
                    ids.swap(i, r.below(i + 1));
                }
                *table = vec![-1; b * maxb];
                let mut next = 0;
                for bi in 0..b {
                    for i in 0..len_of(bi).div_ceil(bs) {
                        table[bi * maxb + i] = ids[next];
                        next += 1;
                    }
                }
                let len = nblocks * bs * nkv * d;
                k = vec![f64::NAN; len];
                v = vec![f64::NAN; len];
                for bi in 0..b {
                    for t in 0..len_of(bi) {
                        let blk = table[bi * maxb + t / bs] as usize;
                        let off = t % bs;
                        for ni in 0..nkv {
                            for di in 0..d {
                                let idx = match layout {
                                    PagedLayout::Bsh => (blk * bs + off) * nkv * d + ni * d + di,
                                    PagedLayout::Bnsd => ((blk * nkv + ni) * bs + off) * d + di,
                                };
                                k[idx] = val(&mut r);
                                v[idx] = val(&mut r);
                            }
                        }
                    }
                }
            }
        }
        let cols = kv_s.iter().copied().max().unwrap_or(0) + r.below(3);
        let mask = r.chance(0.4).then(|| {
            let density = r.pick(&[0.05, 0.5, 0.95]);
            let mut m: Vec<u8> = (0..b * cols).map(|_| r.chance(density) as u8).collect();
            if r.chance(0.3) {
                // A fully masked row.
                let bi = r.below(b);
                m[bi * cols..(bi + 1) * cols].fill(1);
            }
            (m, cols)
        });
        let pse = r.chance(0.4).then(|| {
            let batched = r.chance(0.5);
            let rows = if batched { b } else { 1 };
            let data = (0..rows * n * cols).map(|_| r.sym(2.0)).collect();
            (data, batched, cols)
        });
        let aq = (int_kv || r.chance(0.15)).then(|| {
            let per_channel = r.chance(0.5);
            let c = if per_channel { 2 * nkv * d } else { 2 };
            let scale: Vec<f32> = (0..c)
                .map(|_| {
                    if int_kv {
                        (0.005 + 0.03 * r.uniform()) as f32
                    } else {
                        (0.5 + r.uniform()) as f32
                    }
                })
                .collect();
            let offset = r
                .chance(0.6)
                .then(|| (0..c).map(|_| r.sym(8.0) as f32).collect());
            (scale, offset, per_channel)
        });
        Case {
            b,
            n,
            nkv,
            d,
            scale,
            layout,
            form,
            q,
            k,
            v,
            lens,
            pad,
            mask,
            pse,
            aq,
            int_kv,
        }
    }
}

fn conv<T: Element>(x: &[f64]) -> Vec<T> {
    x.iter().map(|&v| T::from_f64(v)).collect()
}

/// Builds the arguments over converted data and runs `f` on them.
fn with_args<Q: Element, KV: Element, R>(
    c: &Case,
    f: impl FnOnce(&IncreFlashAttentionArgs<Q, KV>) -> R,
) -> R {
    let q: Vec<Q> = conv(&c.q);
    let (k, v): (Vec<KV>, Vec<KV>) = (conv(&c.k), conv(&c.v));
    let pse: Option<Vec<Q>> = c.pse.as_ref().map(|p| conv(&p.0));
    let (mut kl, mut vl) = (Vec::new(), Vec::new());
    let kv = match &c.form {
        Form::Contiguous { kv_seq } => KvInput::Contiguous {
            key: &k,
            value: &v,
            kv_seq: *kv_seq,
        },
        Form::List { seqs } => {
            let mut at = 0;
            for s in seqs {
                let len = s * c.nkv * c.d;
                kl.push(&k[at..at + len]);
                vl.push(&v[at..at + len]);
                at += len;
            }
            KvInput::TensorList {
                key: &kl,
                value: &vl,
            }
        }
        Form::Paged {
            layout,
            bs,
            maxb,
            table,
        } => KvInput::Paged {
            key_cache: &k,
            value_cache: &v,
            layout: *layout,
            block_table: table,
            max_blocks_per_seq: *maxb,
            block_size: *bs,
        },
    };
    let mut a = IncreFlashAttentionArgs::new(&q, kv, c.layout, c.b, c.n, c.d, c.scale);
    a.num_key_value_heads = if c.nkv == c.n { 0 } else { c.nkv };
    a.actual_seq_lengths = c.lens.as_deref();
    a.kv_padding_size = c.pad;
    a.atten_mask = c.mask.as_ref().map(|(m, cols)| IfaMask {
        data: m,
        cols: *cols,
    });
    a.pse_shift = c
        .pse
        .as_ref()
        .zip(pse.as_deref())
        .map(|((_, batched, cols), data)| IfaPse {
            data,
            batched: *batched,
            cols: *cols,
        });
    a.antiquant = c.aq.as_ref().map(|(s, o, pc)| Antiquant {
        scale: s,
        offset: o.as_deref(),
        per_channel: *pc,
    });
    f(&a)
}

fn close(got: &[f32], want: &[f64]) -> Result<(), String> {
    let got: Vec<f64> = got.iter().map(|&g| g as f64).collect();
    check_close("out", &got, want, ABS, REL)
}

fn check<Q: Element, KV: Element>(c: &Case, what: &str) {
    check_path::<Q, KV>(c, what, false);
}

/// [`check`] on the default path (`portable = false`: the AVX-512 in-place loops where the
/// CPU has them) or the portable one (what CPUs without AVX-512 run).
fn check_path<Q: Element, KV: Element>(c: &Case, what: &str, portable: bool) {
    let (got, want) = with_args::<Q, KV, _>(c, |a| {
        (
            if portable {
                cpu::decode::incre_flash_attention_portable(a)
            } else {
                cpu::incre_flash_attention(a)
            },
            reference::incre_flash_attention(a),
        )
    });
    if let Err(e) = close(&got, &want) {
        panic!("{what} (portable: {portable}): {e}\ncase: {c:?}");
    }
}

/// Runs the case in the dtype combination chosen by the seed.
fn check_seed(seed: u64) -> &'static str {
    check_seed_path(seed, false)
}

fn check_seed_path(seed: u64, portable: bool) -> &'static str {
    let c = Case::random(seed);
    let combo = seed % 4;
    let p = portable;
    match (c.int_kv, combo) {
        (true, 0) => check_path::<f32, f32>(&c, "f32 query, int8-valued f32 KV", p),
        (true, 1) => check_path::<f16, i8>(&c, "f16 query, int8 KV", p),
        (true, 2) => check_path::<bf16, i8>(&c, "bf16 query, int8 KV", p),
        (true, _) => check_path::<f32, i8>(&c, "f32 query, int8 KV", p),
        (false, 0) => check_path::<f16, f16>(&c, "f16", p),
        (false, 1) => check_path::<bf16, bf16>(&c, "bf16", p),
        (false, 2) => check_path::<f64, f64>(&c, "f64", p),
        (false, _) => check_path::<f32, f32>(&c, "f32", p),
    }
    if c.int_kv {
        "int8"
    } else {
        "float"
    }
}

#[test]
fn random_configurations_match_the_reference() {
    let mut stats = std::collections::BTreeMap::<String, usize>::new();
    for seed in 0..400u64 {
        let c = Case::random(seed);
        let form = match &c.form {
            Form::Contiguous { .. } => format!("contiguous {:?}", c.layout),
            Form::List { .. } => "list".to_string(),
            Form::Paged { layout, .. } => format!("paged {layout:?}"),
        };
        *stats.entry(form).or_default() += 1;
        *stats.entry(check_seed(seed).into()).or_default() += 1;
        for (flag, name) in [
            (c.mask.is_some(), "mask"),
            (c.pse.is_some(), "pse"),
            (c.pad.is_some(), "left padding"),
            (c.aq.is_some(), "antiquant"),
            (
                c.lens.as_ref().is_some_and(|l| l.contains(&0)),
                "zero length",
            ),
            (c.n != c.nkv, "gqa"),
            (c.d % 2 == 1, "odd D"),
        ] {
            if flag {
                *stats.entry(name.into()).or_default() += 1;
            }
        }
    }
    // Every feature was exercised.
    for key in [
        "contiguous Bsh",
        "contiguous Bsnd",
        "contiguous Bnsd",
        "list",
        "paged Bsh",
        "paged Bnsd",
        "int8",
        "float",
        "mask",
        "pse",
        "left padding",
        "antiquant",
        "zero length",
        "gqa",
        "odd D",
    ] {
        assert!(
            stats.get(key).copied().unwrap_or(0) >= 5,
            "{key} rarely covered: {stats:?}"
        );
    }
}

/// The portable path (pulp; what CPUs without AVX-512 run, and f32 / f64 KV everywhere)
/// against the reference on the same random configurations: on an AVX-512 machine the
/// default path of int8 / f16 / bf16 KV is the in-place one, so this keeps the other tested.
#[test]
fn portable_path_matches_the_reference() {
    for seed in 0..400u64 {
        check_seed_path(seed, true);
    }
}

/// Shapes at the edges of the in-place loops' blocking: D around multiples of 16 (masked row
/// tails), GQA groups of 1–8 and 12 query heads (row groups 8 / 4 / 2 / 1), window lengths
/// that leave remainders after the 16-score groups and the token pairs, int8 KV with
/// per-channel and per-tensor antiquant (with and without offset), f16 and bf16 KV; both
/// paths against the reference.
#[test]
fn in_place_edge_shapes_match_the_reference() {
    let mut r = rng(4242);
    let mut cases = 0;
    for &d in &[1usize, 5, 15, 16, 17, 31, 48, 100, 130] {
        for &g in &[1usize, 3, 5, 6, 7, 8, 12] {
            let s = r.pick(&[1usize, 2, 3, 17, 31, 300]);
            let nkv = 1 + r.below(2);
            let kind = cases % 5;
            let mut c = Case::random(cases as u64);
            let n = nkv * g;
            let int_kv = kind < 3;
            let val = |r: &mut Rng| {
                if int_kv {
                    r.below(256) as f64 - 128.0
                } else {
                    r.sym(1.0)
                }
            };
            c.b = 2;
            c.n = n;
            c.nkv = nkv;
            c.d = d;
            c.scale = 1.0 / (d as f64).sqrt();
            c.layout = if cases % 2 == 0 {
                IfaLayout::Bsh
            } else {
                IfaLayout::Bnsd
            };
            c.form = Form::Contiguous { kv_seq: s };
            c.q = (0..2 * n * d).map(|_| r.sym(1.0)).collect();
            c.k = (0..2 * s * nkv * d).map(|_| val(&mut r)).collect();
            c.v = (0..2 * s * nkv * d).map(|_| val(&mut r)).collect();
            c.lens = Some(vec![s as i64, (s as i64 - 1).max(0)]);
            c.pad = None;
            c.mask = None;
            c.pse = None;
            c.int_kv = int_kv;
            c.aq = int_kv.then(|| {
                // kind 0: per channel with offset, 1: per tensor with offset, 2: per channel.
                let per_channel = kind != 1;
                let ch = if per_channel { 2 * nkv * d } else { 2 };
                let scale = (0..ch)
                    .map(|_| (0.005 + 0.03 * r.uniform()) as f32)
                    .collect();
                let offset = (kind != 2).then(|| (0..ch).map(|_| r.sym(8.0) as f32).collect());
                (scale, offset, per_channel)
            });
            for portable in [false, true] {
                match kind {
                    0 | 1 => check_path::<f32, i8>(&c, "int8 KV", portable),
                    2 => check_path::<bf16, i8>(&c, "bf16 query, int8 KV", portable),
                    3 => check_path::<f16, f16>(&c, "f16", portable),
                    _ => check_path::<bf16, bf16>(&c, "bf16", portable),
                }
            }
            cases += 1;
        }
    }
}

/// A long window spanning several chunks (and sub-chunks: 4 kv heads × D = 128 in BSH split a
/// chunk in two), with a mask that blanks a whole chunk, and pse.
fn long_case() -> Case {
    let mut c = Case::random(7);
    let (b, n, nkv, d, s) = (2usize, 8usize, 4usize, 128usize, 2000usize);
    let mut r = rng(99);
    c.b = b;
    c.n = n;
    c.nkv = nkv;
    c.d = d;
    c.scale = 0.09;
    c.layout = IfaLayout::Bsh;
    c.form = Form::Contiguous { kv_seq: s };
    c.q = (0..b * n * d).map(|_| r.sym(1.0)).collect();
    c.k = (0..b * s * nkv * d).map(|_| r.sym(1.0)).collect();
    c.v = (0..b * s * nkv * d).map(|_| r.sym(1.0)).collect();
    c.lens = Some(vec![1999, 1500]);
    c.pad = None;
    let mut m = vec![0u8; b * s];
    m[512..1024].fill(1); // batch 0: the whole second chunk (of 512) masked
    for t in (0..s).step_by(3) {
        m[s + t] = 1;
    }
    c.mask = Some((m, s));
    c.pse = Some(((0..n * s).map(|_| r.sym(1.0)).collect(), false, s));
    c.aq = None;
    c.int_kv = false;
    c
}

#[test]
fn long_windows_merge_chunks_like_the_reference() {
    let c = long_case();
    check::<f32, f32>(&c, "long f32");
    check::<bf16, bf16>(&c, "long bf16");
}

#[test]
fn fully_masked_rows_are_the_uniform_average() {
    // B = 1, N = Nkv = 1, D = 2, 700 tokens (two chunks), everything masked.
    let s = 700;
    let q = [1.0f32, -1.0];
    let k: Vec<f32> = (0..s * 2).map(|i| (i as f32 * 0.37).sin()).collect();
    let v: Vec<f32> = (0..s * 2).map(|i| (i as f32 * 0.11).cos()).collect();
    let mask = vec![1u8; s];
    let mut a = IncreFlashAttentionArgs::new(
        &q,
        KvInput::Contiguous {
            key: &k,
            value: &v,
            kv_seq: s,
        },
        IfaLayout::Bsh,
        1,
        1,
        2,
        0.5,
    );
    a.atten_mask = Some(IfaMask {
        data: &mask,
        cols: s,
    });
    let got = cpu::incre_flash_attention(&a);
    for di in 0..2 {
        let mean = (0..s).map(|t| v[t * 2 + di] as f64).sum::<f64>() / s as f64;
        assert!(
            (got[di] as f64 - mean).abs() < 1e-5,
            "{} vs {mean}",
            got[di]
        );
    }
    assert!(got.iter().all(|x| x.is_finite()));
}

#[test]
fn zero_length_windows_give_zero_rows_and_int8_offsets() {
    let (q, k, v) = ([1.0f32, 2.0], [1.0f32, 2.0], [10.0f32, 20.0]);
    let lens = [1i64, 0];
    let mut a = IncreFlashAttentionArgs::new(
        &q,
        KvInput::Contiguous {
            key: &k,
            value: &v,
            kv_seq: 1,
        },
        IfaLayout::Bnsd,
        2,
        1,
        1,
        0.5,
    );
    a.actual_seq_lengths = Some(&lens);
    assert_eq!(cpu::incre_flash_attention(&a), vec![10.0, 0.0]);
    let pq = IfaPostQuant {
        scale: &[2.0],
        offset: Some(&[-3.0]),
    };
    assert_eq!(
        cpu::incre_flash_attention_int8(&a, &pq),
        reference::incre_flash_attention_int8(&a, &pq)
    );
    assert_eq!(cpu::incre_flash_attention_int8(&a, &pq), vec![17, -3]);
}

#[test]
fn narrow_and_int8_outputs_match_the_rounded_reference() {
    for seed in [3u64, 11, 25, 40] {
        let c = Case::random(seed);
        let (got, want) = with_args::<f16, f16, _>(&c, |a| {
            (
                cpu::incre_flash_attention_as::<_, _, f16>(a),
                reference::incre_flash_attention_as::<_, _, f16>(a),
            )
        });
        for (g, w) in got.iter().zip(&want) {
            let (g, w) = (g.to_f64(), w.to_f64());
            assert!(
                (g - w).abs() <= ABS + REL * w.abs() + w.abs() * 2f64.powi(-10),
                "f16 {g} vs {w}"
            );
        }
        let per_channel: Vec<f32> = (0..c.n * c.d).map(|i| 4.0 + (i % 7) as f32).collect();
        let pq = IfaPostQuant {
            scale: &per_channel,
            offset: None,
        };
        let (got, want) = with_args::<f32, f32, _>(&c, |a| {
            (
                cpu::incre_flash_attention_int8(a, &pq),
                reference::incre_flash_attention_int8(a, &pq),
            )
        });
        for (g, w) in got.iter().zip(&want) {
            assert!((*g as i32 - *w as i32).abs() <= 1, "int8 {g} vs {w}");
        }
    }
}

#[test]
fn bitwise_identical_for_any_thread_count() {
    let mut cases = vec![long_case()];
    // A paged case and an int8 case with several chunks per batch.
    let (mut paged, mut int8) = (false, false);
    for seed in 0..5000 {
        let c = Case::random(seed);
        if !c.lens.as_ref().is_some_and(|l| l.iter().any(|&x| x > 600)) {
            continue;
        }
        let is_paged = matches!(c.form, Form::Paged { .. });
        if (is_paged && !paged) || (c.int_kv && !int8) {
            paged |= is_paged;
            int8 |= c.int_kv;
            cases.push(c);
        }
        if paged && int8 {
            break;
        }
    }
    assert!(paged && int8, "no long paged / int8 case found");
    for c in &cases {
        let run = |threads: usize| {
            let pool = rayon::ThreadPoolBuilder::new()
                .num_threads(threads)
                .build()
                .expect("a thread pool");
            pool.install(|| {
                if c.int_kv {
                    with_args::<f32, i8, _>(c, cpu::incre_flash_attention)
                } else {
                    with_args::<f32, f32, _>(c, cpu::incre_flash_attention)
                }
            })
        };
        let one = run(1);
        for threads in [2, 3] {
            let other = run(threads);
            assert!(
                one.iter()
                    .zip(&other)
                    .all(|(x, y)| x.to_bits() == y.to_bits()),
                "{threads} threads differ from 1"
            );
        }
    }
}

/// The kernel keeps its working buffers per thread between calls; a call with another head
/// dim of the same padded width (D = 8, then D = 1: both padded to 16) must not see the
/// previous call's values in the padding.
#[test]
fn reused_scratch_does_not_leak_between_calls() {
    let pool = rayon::ThreadPoolBuilder::new()
        .num_threads(1)
        .build()
        .expect("a thread pool");
    pool.install(|| {
        for d in [8usize, 1, 16, 3, 8] {
            let (s, n) = (5usize, 2usize);
            let q: Vec<f32> = (0..n * d).map(|i| (i as f32 * 0.7).sin() * 3.0).collect();
            let k: Vec<f32> = (0..s * n * d)
                .map(|i| (i as f32 * 0.3).cos() * 2.0)
                .collect();
            let v: Vec<f32> = (0..s * n * d).map(|i| (i as f32 * 0.9).sin()).collect();
            let a = IncreFlashAttentionArgs::new(
                &q,
                KvInput::Contiguous {
                    key: &k,
                    value: &v,
                    kv_seq: s,
                },
                IfaLayout::Bnsd,
                1,
                n,
                d,
                0.5,
            );
            let got = cpu::incre_flash_attention(&a);
            close(&got, &reference::incre_flash_attention(&a))
                .unwrap_or_else(|e| panic!("D = {d}: {e}"));
        }
    });
}
