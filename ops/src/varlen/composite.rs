//! The composite varlen attention: per sequence, dense scores from Burn matmuls, the mode's
//! mask built on the host from the same rules the kernels use, every tensor of the call read
//! where it lies (an explicit mask compared with 0 and OR-ed in; the pse, the ALiBi slopes
//! times a host-built distance pattern, the compressed pse gathered by a host-built index; the
//! dropout bits peeled off the mask's bytes), softmax with the sink column, P·V. O(Sq·Skv)
//! memory per sequence — the fallback every backend can run, not a fast path.

use burn::tensor::backend::Backend;
use burn::tensor::ops::FloatTensor;
use burn::tensor::{Bool, FloatDType, Int, Tensor, TensorData};

use burn_ascend_contract::varlen::{alibi_compressed_index, PseType, SoftmaxLayout, VarlenProblem};

use crate::common::tensor::{unwrap, wrap};
use crate::error::Result;
use crate::varlen::{VarlenGradInputs, VarlenGrads, VarlenInputs, VarlenOutputs, VarlenSpec};
use burn::tensor::TensorMetadata;

type T3<B> = Tensor<B, 3>;

/// A validated explicit mask tensor (0/1 floats) as `[1|B, 1|N, maxSq, maxSkv]`.
fn mask_4d<B: Backend>(m: FloatTensor<B>) -> Tensor<B, 4> {
    let dims = match *m.shape().to_vec().as_slice() {
        [r, c] => [1, 1, r, c],
        [b, h, r, c] => [b, h, r, c],
        _ => unreachable!("validated"),
    };
    wrap(B::float_reshape(m, dims.into()))
}

/// The factor of dS that is dpse (`scale` for pseType 1, 1 for pseType 0), when the call has
/// a flat external pse tensor (the ALiBi-compressed 4-D one and ALiBi slopes are not
/// differentiated); the host kernels'
/// [`burn_ascend_kernels::reference::varlen::dpse_factor`] says the same of their view.
pub fn dpse_factor_of<T: TensorMetadata>(
    p: &VarlenProblem,
    inputs: &VarlenInputs<T>,
) -> Option<f64> {
    let flat = inputs.pse.as_ref()?.shape().num_dims() == 1;
    match p.attrs.pse_type {
        _ if !flat => None,
        PseType::OuterAddMul => Some(p.attrs.scale),
        _ => Some(1.0),
    }
}

/// The keep bits of a `dropMask` tensor (bytes 0..=255 as floats), one float 0/1 per score
/// element in CANN's order (element `e` is bit `e % 8` of byte `e / 8`, LSB first), computed
/// where the tensor lies with comparisons alone (Burn's `floor` and `remainder` are host
/// fallbacks on some backends): the bits are peeled off from the top, `b_k = (r ≥ 2^k)`,
/// `r −= b_k·2^k`. `None` unless the call drops (`keepProb < 1`).
fn drop_bits<B: Backend>(p: &VarlenProblem, mask: Option<FloatTensor<B>>) -> Option<Tensor<B, 1>> {
    let bytes = wrap::<B, 1>(mask.filter(|_| p.attrs.keep_prob < 1.0)?);
    let len = bytes.dims()[0];
    let mut rest = bytes;
    let mut bits = Vec::with_capacity(8);
    for k in (0..8).rev() {
        let weight = f32::from(1u8 << k);
        let bit = rest.clone().greater_equal_elem(weight).float();
        rest = rest - bit.clone().mul_scalar(weight);
        bits.push(bit);
    }
    bits.reverse();
    Some(Tensor::stack::<2>(bits, 1).reshape([len * 8]))
}

/// A call's `realShift` tensor as the composite reads it.
enum PseTensor<B: Backend> {
    /// The flat `[pseTotalLen]` pse.
    Flat(Tensor<B, 1>),
    /// The ALiBi-compressed `[Bp, N, 1024, S2]` pse.
    Compressed(Tensor<B, 4>),
    /// ALiBi slopes as `[1|B, N]`.
    Slopes(Tensor<B, 2>),
}

impl<B: Backend> PseTensor<B> {
    /// The call's pse or slopes (validated: at most one, of a valid shape).
    fn of(pse: Option<FloatTensor<B>>, slopes: Option<FloatTensor<B>>) -> Option<Self> {
        if let Some(s) = slopes {
            let n = *s.shape().last().expect("validated: [N] or [B, N]");
            let rows = s.shape().num_elements() / n.max(1);
            return Some(Self::Slopes(
                wrap::<B, 1>(B::float_reshape(s, [rows * n].into())).reshape([rows, n]),
            ));
        }
        let p = pse?;
        Some(match p.shape().num_dims() {
            4 => Self::Compressed(wrap(p)),
            _ => Self::Flat(wrap(p)),
        })
    }

    /// The bias `[N, Sq, Skv]` of sequence `b` (`pse0`: where it starts in a flat pse), read
    /// where the tensor lies; the index and distance patterns are host-built constants of the
    /// sequence's shape.
    fn sequence(&self, p: &VarlenProblem, b: usize, pse0: usize, device: &B::Device) -> T3<B> {
        let (n, sq, skv) = (p.dims.head_num, p.dims.seq_q[b], p.dims.seq_kv[b]);
        let shape = [n, sq, skv];
        match self {
            Self::Flat(t) => t.clone().narrow(0, pse0, n * sq * skv).reshape(shape),
            Self::Compressed(c) => {
                let [bp, _, rows, s2] = c.dims();
                let at: Vec<Option<usize>> = (0..sq)
                    .flat_map(|i| (0..skv).map(move |j| alibi_compressed_index(s2, i, j)))
                    .collect();
                let index: Vec<i64> = at.iter().map(|a| a.unwrap_or(0) as i64).collect();
                let upper: Vec<bool> = at.iter().map(Option::is_none).collect();
                let index =
                    Tensor::<B, 1, Int>::from_data(TensorData::new(index, [sq * skv]), device);
                let upper =
                    Tensor::<B, 3, Bool>::from_data(TensorData::new(upper, [1, sq, skv]), device);
                c.clone()
                    .narrow(0, b % bp, 1)
                    .reshape([n, rows * s2])
                    .select(1, index)
                    .reshape(shape)
                    .mask_fill(upper.expand(shape), 0.0)
            }
            Self::Slopes(s) => {
                let row = if s.dims()[0] == 1 { 0 } else { b };
                // −|Δ| (or −√|Δ|) per (i, j): the bias of slope 1.
                let dist: Vec<f32> = (0..sq)
                    .flat_map(|i| (0..skv).map(move |j| p.alibi_bias(1.0, i, j) as f32))
                    .collect();
                let dist = T3::<B>::from_data(TensorData::new(dist, [1, sq, skv]), device);
                let slope = s.clone().narrow(0, row, 1).reshape([n, 1, 1]);
                slope.expand(shape) * dist.expand(shape)
            }
        }
    }
}

/// Host-built per-sequence pieces: which scores are masked, the pse bias, the dropout factor.
struct SeqAux<B: Backend> {
    masked: Option<Tensor<B, 3, Bool>>,
    pse: Option<T3<B>>,
    drop: Option<T3<B>>,
}

/// `pse`: the call's pse tensor or ALiBi slopes, if given; `mask`: the call's explicit mask
/// tensor `[1|B, 1|N, maxSq, maxSkv]`, if given; `drop`: the call's keep bits
/// ([`drop_bits`]) when it drops. `pse0` is where sequence b starts in a flat pse and in the
/// dropout bits alike (`N·Σ_{b'<b} Sq_b'·Skv_b'`).
fn seq_aux<B: Backend>(
    p: &VarlenProblem,
    b: usize,
    pse0: usize,
    pse: Option<&PseTensor<B>>,
    mask: Option<&Tensor<B, 4>>,
    drop: Option<&Tensor<B, 1>>,
    device: &B::Device,
) -> SeqAux<B> {
    let (n, sq, skv) = (p.dims.head_num, p.dims.seq_q[b], p.dims.seq_kv[b]);
    let shape = [n, sq, skv];
    let idx =
        || (0..n).flat_map(move |h| (0..sq).flat_map(move |i| (0..skv).map(move |j| (h, i, j))));
    let rule = p.rule(b);
    let masked: Vec<bool> = idx()
        .map(|(h, i, j)| !p.allowed(&rule, b, h, i, j))
        .collect();
    let masked = masked
        .iter()
        .any(|&m| m)
        .then(|| Tensor::<B, 3, Bool>::from_data(TensorData::new(masked, shape), device));
    // The explicit mask's top-left [Sq_b, Skv_b] corner of sequence b, compared where it lies.
    let explicit = mask.map(|m| {
        let [mb, mh, _, _] = m.dims();
        m.clone()
            .narrow(0, if mb == 1 { 0 } else { b }, 1)
            .narrow(2, 0, sq)
            .narrow(3, 0, skv)
            .reshape([mh, sq, skv])
            .expand(shape)
            .not_equal_elem(0.0)
    });
    let masked = match (masked, explicit) {
        (Some(r), Some(e)) => Some(r.bool_or(e)),
        (r, e) => r.or(e),
    };
    let pse = pse.map(|t| t.sequence(p, b, pse0, device));
    // The sequence's bits, where they lie, scaled to the kept elements' factor 1/keepProb.
    let drop = drop.map(|bits| {
        bits.clone()
            .narrow(0, pse0, n * sq * skv)
            .reshape(shape)
            .mul_scalar(1.0 / p.attrs.keep_prob)
    });
    SeqAux { masked, pse, drop }
}

/// `[Skv, Nkv, D]` rows of one sequence → `[N, Skv, D]`, each kv head repeated for its group.
fn heads_major_gqa<B: Backend>(x: T3<B>, group: usize) -> T3<B> {
    let [skv, nkv, d] = x.dims();
    x.swap_dims(0, 1)
        .reshape([nkv, 1, skv, d])
        .expand([nkv, group, skv, d])
        .reshape([nkv * group, skv, d])
}

/// `[N, Skv, D]` per-query-head gradient → `[Skv, Nkv, D]`, summed over each group.
fn group_sum<B: Backend>(x: T3<B>, group: usize) -> T3<B> {
    let [n, skv, d] = x.dims();
    x.reshape([n / group, group, skv, d])
        .sum_dim(1)
        .reshape([n / group, skv, d])
        .swap_dims(0, 1)
}

/// Scaled, pse-biased scores `[N, Sq, Skv]` with masked entries at −FLT_MAX.
fn scores<B: Backend>(p: &VarlenProblem, q: &T3<B>, k: &T3<B>, aux: &SeqAux<B>) -> T3<B> {
    let qk = q.clone().matmul(k.clone().swap_dims(1, 2));
    let scale = p.attrs.scale;
    // ALiBi slopes may be f32 under a half-precision query: the bias is in the scores' dtype.
    let pse = aux.pse.clone().map(|t| match t.dtype() == qk.dtype() {
        true => t,
        false => t.cast(FloatDType::from(qk.dtype())),
    });
    let s = match (pse, p.attrs.pse_type) {
        (None, _) => qk.mul_scalar(scale),
        (Some(pse), PseType::OuterAddMul) => (qk + pse).mul_scalar(scale),
        (Some(pse), _) => qk.mul_scalar(scale) + pse,
    };
    match &aux.masked {
        Some(m) => s.mask_fill(m.clone(), f32::MIN),
        None => s,
    }
}

/// Unnormalised probabilities `exp(s − m)` with masked entries exactly 0.
fn exp_scores<B: Backend>(s: T3<B>, m: T3<B>, aux: &SeqAux<B>) -> T3<B> {
    let e = (s - m).exp();
    match &aux.masked {
        Some(mask) => e.mask_fill(mask.clone(), 0.0),
        None => e,
    }
}

/// Stats `[N, Sq, 1]` → the `[Sq, N, 8]` rows of this sequence in the given layout.
fn stats_rows<B: Backend>(x: T3<B>, layout: SoftmaxLayout) -> T3<B> {
    let [n, sq, _] = x.dims();
    match layout {
        SoftmaxLayout::SameAsInput => x.swap_dims(0, 1).expand([sq, n, 8]),
        SoftmaxLayout::SequenceHeadMajor => x.expand([n, sq, 8]).reshape([sq, n, 8]),
    }
}

/// The `[Sq, N, 8]` rows of this sequence → stats `[N, Sq, 1]`.
fn stats_of_rows<B: Backend>(rows: T3<B>, layout: SoftmaxLayout) -> T3<B> {
    let [sq, n, _] = rows.dims();
    let first = rows.slice([0..sq, 0..n, 0..1]);
    match layout {
        SoftmaxLayout::SameAsInput => first.swap_dims(0, 1),
        SoftmaxLayout::SequenceHeadMajor => first.reshape([n, sq, 1]),
    }
}

struct SeqIter {
    b: usize,
    q0: usize,
    kv0: usize,
    sq: usize,
    skv: usize,
    pse0: usize,
}

fn sequences(p: &VarlenProblem) -> Vec<SeqIter> {
    let (qo, ko, po) = (p.dims.q_offsets(), p.dims.kv_offsets(), p.pse_offsets());
    (0..p.dims.batch())
        .map(|b| SeqIter {
            b,
            q0: qo[b],
            kv0: ko[b],
            sq: p.dims.seq_q[b],
            skv: p.dims.seq_kv[b],
            pse0: po[b],
        })
        .collect()
}

fn cat_or_empty<B: Backend>(parts: Vec<T3<B>>, shape: [usize; 3], device: &B::Device) -> T3<B> {
    if parts.is_empty() {
        T3::<B>::zeros(shape, device)
    } else {
        Tensor::cat(parts, 0)
    }
}

/// Composite forward.
pub fn varlen_fwd<B: Backend>(
    inputs: VarlenInputs<FloatTensor<B>>,
    spec: &VarlenSpec,
) -> Result<VarlenOutputs<FloatTensor<B>>> {
    let dims_ = spec.validate_fwd(&crate::varlen::shapes(&inputs))?;
    let p = spec.problem(dims_, None);
    let (n, dv, g) = (p.dims.head_num, p.dims.value_dim, p.dims.group());
    let (q, k, v): (T3<B>, T3<B>, T3<B>) =
        (wrap(inputs.query), wrap(inputs.key), wrap(inputs.value));
    let device = q.device();
    let sink = inputs.sink.map(|s| wrap::<B, 1>(s).reshape([n, 1, 1]));
    let pse = PseTensor::<B>::of(inputs.pse, inputs.alibi_slopes);
    let mask = inputs.atten_mask.map(mask_4d::<B>);
    let drop = drop_bits::<B>(&p, inputs.drop_mask);
    let (mut outs, mut maxes, mut sums) = (Vec::new(), Vec::new(), Vec::new());
    for seq in sequences(&p).into_iter().filter(|s| s.sq > 0) {
        if seq.skv == 0 {
            // CANN skips the sequence: out, max and sum are 0.
            outs.push(T3::<B>::zeros([seq.sq, n, dv], &device));
            maxes.push(T3::<B>::zeros([seq.sq, n, 8], &device));
            sums.push(T3::<B>::zeros([seq.sq, n, 8], &device));
            continue;
        }
        let aux = seq_aux::<B>(
            &p,
            seq.b,
            seq.pse0,
            pse.as_ref(),
            mask.as_ref(),
            drop.as_ref(),
            &device,
        );
        let qb = q.clone().narrow(0, seq.q0, seq.sq).swap_dims(0, 1);
        let kb = heads_major_gqa(k.clone().narrow(0, seq.kv0, seq.skv), g);
        let vb = heads_major_gqa(v.clone().narrow(0, seq.kv0, seq.skv), g);
        let s = scores(&p, &qb, &kb, &aux);
        let mut m = s.clone().max_dim(2);
        if let Some(sink) = &sink {
            m = m.max_pair(sink.clone().expand([n, seq.sq, 1]));
        }
        let e = exp_scores(s, m.clone(), &aux);
        let mut l = e.clone().sum_dim(2);
        if let Some(sink) = &sink {
            l = l + (sink.clone().expand([n, seq.sq, 1]) - m.clone()).exp();
        }
        // A fully masked row without a sink has l = 0: CANN's invalid-row handling sets
        // l = FLT_MAX, so P = 0 and the output row is 0.
        let l = l.clone().mask_fill(l.equal_elem(0.0), f32::MAX);
        let mut pr = e / l.clone();
        if let Some(drop) = &aux.drop {
            pr = pr * drop.clone();
        }
        outs.push(pr.matmul(vb).swap_dims(0, 1));
        maxes.push(stats_rows(m, p.attrs.softmax_layout));
        sums.push(stats_rows(l, p.attrs.softmax_layout));
    }
    let t = p.dims.t_q();
    Ok(VarlenOutputs {
        attention_out: unwrap(cat_or_empty(outs, [t, n, dv], &device)),
        softmax_max: unwrap(cat_or_empty(maxes, [t, n, 8], &device)),
        softmax_sum: unwrap(cat_or_empty(sums, [t, n, 8], &device)),
    })
}

/// The backward's tensors, wrapped, and the call's problem.
struct BwdCall<B: Backend> {
    q: T3<B>,
    k: T3<B>,
    v: T3<B>,
    dy: T3<B>,
    o: T3<B>,
    smax: T3<B>,
    ssum: T3<B>,
    pse: Option<PseTensor<B>>,
    mask: Option<Tensor<B, 4>>,
    /// The keep bits ([`drop_bits`]) when the call drops.
    drop: Option<Tensor<B, 1>>,
}

impl<B: Backend> BwdCall<B> {
    fn new(
        p: &VarlenProblem,
        inputs: VarlenGradInputs<FloatTensor<B>>,
    ) -> (Self, Option<FloatTensor<B>>) {
        let VarlenGradInputs {
            inputs: fwd,
            dy,
            attention_in,
            softmax_max,
            softmax_sum,
        } = inputs;
        let call = Self {
            q: wrap(fwd.query),
            k: wrap(fwd.key),
            v: wrap(fwd.value),
            dy: wrap(dy),
            o: wrap(attention_in),
            smax: wrap(softmax_max),
            ssum: wrap(softmax_sum),
            pse: PseTensor::of(fwd.pse, fwd.alibi_slopes),
            mask: fwd.atten_mask.map(mask_4d::<B>),
            drop: drop_bits::<B>(p, fwd.drop_mask),
        };
        (call, fwd.sink)
    }
}

/// One sequence's backward pieces, recomputed from the forward's statistics (like CANN): the
/// heads-major q, k, dy, the probabilities (with and without dropout), dS, `D = rowsum(dO∘O)`
/// and the statistics.
struct SeqGrad<B: Backend> {
    qb: T3<B>,
    kb: T3<B>,
    dyb: T3<B>,
    p_drop: T3<B>,
    ds: T3<B>,
    d_row: T3<B>,
    m: T3<B>,
    l: T3<B>,
}

fn seq_grad<B: Backend>(p: &VarlenProblem, c: &BwdCall<B>, seq: &SeqIter) -> SeqGrad<B> {
    let (sq, skv, g) = (seq.sq, seq.skv, p.dims.group());
    let device = c.q.device();
    let aux = seq_aux::<B>(
        p,
        seq.b,
        seq.pse0,
        c.pse.as_ref(),
        c.mask.as_ref(),
        c.drop.as_ref(),
        &device,
    );
    let qb = c.q.clone().narrow(0, seq.q0, sq).swap_dims(0, 1);
    let kb = heads_major_gqa(c.k.clone().narrow(0, seq.kv0, skv), g);
    let vb = heads_major_gqa(c.v.clone().narrow(0, seq.kv0, skv), g);
    let m = stats_of_rows(c.smax.clone().narrow(0, seq.q0, sq), p.attrs.softmax_layout);
    let l = stats_of_rows(c.ssum.clone().narrow(0, seq.q0, sq), p.attrs.softmax_layout);
    let pr = exp_scores(scores(p, &qb, &kb, &aux), m.clone(), &aux) / l.clone();
    let dyb = c.dy.clone().narrow(0, seq.q0, sq).swap_dims(0, 1);
    let ob = c.o.clone().narrow(0, seq.q0, sq).swap_dims(0, 1);
    let d_row = (dyb.clone() * ob).sum_dim(2); // [N, Sq, 1]
    let mut dp = dyb.clone().matmul(vb.swap_dims(1, 2));
    let mut p_drop = pr.clone();
    if let Some(drop) = &aux.drop {
        dp = dp * drop.clone();
        p_drop = p_drop * drop.clone();
    }
    let ds = pr * (dp - d_row.clone());
    SeqGrad {
        qb,
        kb,
        dyb,
        p_drop,
        ds,
        d_row,
        m,
        l,
    }
}

/// A backward call validated, as the problem the composite's per-sequence math reads (the
/// backward and [`varlen_dpse`] start alike).
fn bwd_problem<'s, T: TensorMetadata>(
    inputs: &VarlenGradInputs<T>,
    spec: &'s VarlenSpec,
) -> Result<VarlenProblem<'s>> {
    let dims = spec.validate_bwd(
        &crate::varlen::shapes(&inputs.inputs),
        &crate::varlen::bwd_shapes(inputs),
    )?;
    Ok(spec.problem(dims, None))
}

/// Composite backward (recomputes P from the saved statistics, like CANN).
pub fn varlen_bwd<B: Backend>(
    inputs: VarlenGradInputs<FloatTensor<B>>,
    spec: &VarlenSpec,
) -> Result<VarlenGrads<FloatTensor<B>>> {
    let p = bwd_problem(&inputs, spec)?;
    let (n, nkv, d, g) = (
        p.dims.head_num,
        p.dims.kv_head_num,
        p.dims.head_dim,
        p.dims.group(),
    );
    let dpse_factor = dpse_factor_of(&p, &inputs.inputs);
    let (c, sink) = BwdCall::<B>::new(&p, inputs);
    let device = c.q.device();
    let has_sink = sink.is_some();
    let sink = sink.map(|s| wrap::<B, 1>(s).reshape([n, 1, 1]));
    let (mut dqs, mut dks, mut dvs) = (Vec::new(), Vec::new(), Vec::new());
    let mut dsink = Tensor::<B, 1>::zeros([n], &device);
    let mut dpses = Vec::new();
    for seq in sequences(&p) {
        let (sq, skv) = (seq.sq, seq.skv);
        if sq == 0 || skv == 0 {
            // Nothing attends: zero gradients for these rows.
            if sq > 0 {
                dqs.push(T3::<B>::zeros([sq, n, d], &device));
            }
            if skv > 0 {
                dks.push(T3::<B>::zeros([skv, nkv, d], &device));
                dvs.push(T3::<B>::zeros([skv, nkv, d], &device));
            }
            continue;
        }
        let sg = seq_grad(&p, &c, &seq);
        if let Some(f) = dpse_factor {
            dpses.push(sg.ds.clone().mul_scalar(f).reshape([n * sq * skv]));
        }
        let scale = p.attrs.scale;
        dqs.push(
            sg.ds
                .clone()
                .matmul(sg.kb)
                .mul_scalar(scale)
                .swap_dims(0, 1),
        );
        dks.push(group_sum(
            sg.ds.swap_dims(1, 2).matmul(sg.qb).mul_scalar(scale),
            g,
        ));
        dvs.push(group_sum(sg.p_drop.swap_dims(1, 2).matmul(sg.dyb), g));
        if let Some(sink) = &sink {
            let p_sink = (sink.clone().expand([n, sq, 1]) - sg.m).exp() / sg.l;
            dsink = dsink - (p_sink * sg.d_row).sum_dim(1).reshape([n]);
        }
    }
    let (tq, tkv) = (p.dims.t_q(), p.dims.t_kv());
    Ok(VarlenGrads {
        dq: unwrap(cat_or_empty(dqs, [tq, n, d], &device)),
        dk: unwrap(cat_or_empty(dks, [tkv, nkv, d], &device)),
        dv: unwrap(cat_or_empty(dvs, [tkv, nkv, d], &device)),
        dpse: dpse_factor.map(|_| unwrap(cat_flat(dpses, &device))),
        dsink: has_sink.then(|| unwrap(dsink)),
    })
}

/// dpse alone, with `B`'s own tensor ops (on `Ascend`: aclnn ops on the device), for a backend
/// whose fused backward does not write it (no arch32 grad kernel writes `dpseOut`): per
/// sequence, P from the forward's statistics and dS = P∘(dP − rowsum(dO∘O)), times the
/// pseType's factor. The external pse is per (head, query, key), so dpse is dS itself: no
/// reduction. Two matmuls per sequence (QKᵀ, dO·Vᵀ) and element-wise work; none of the
/// composite backward's dq, dk, dv, dsink. `None` without an external dense pse.
pub fn varlen_dpse<B: Backend>(
    inputs: VarlenGradInputs<FloatTensor<B>>,
    spec: &VarlenSpec,
) -> Result<Option<FloatTensor<B>>> {
    let p = bwd_problem(&inputs, spec)?;
    let Some(f) = dpse_factor_of(&p, &inputs.inputs) else {
        return Ok(None);
    };
    let n = p.dims.head_num;
    let (c, _) = BwdCall::<B>::new(&p, inputs);
    let device = c.q.device();
    let dpses = sequences(&p)
        .into_iter()
        .filter(|s| s.sq > 0 && s.skv > 0)
        .map(|seq| {
            let ds = seq_grad(&p, &c, &seq).ds;
            ds.mul_scalar(f).reshape([n * seq.sq * seq.skv])
        })
        .collect();
    Ok(Some(unwrap(cat_flat(dpses, &device))))
}

fn cat_flat<B: Backend>(parts: Vec<Tensor<B, 1>>, device: &B::Device) -> Tensor<B, 1> {
    if parts.is_empty() {
        Tensor::<B, 1>::zeros([0], device)
    } else {
        Tensor::cat(parts, 0)
    }
}

/// dsink from the forward's statistics, its output and dy alone, with `B`'s own tensor ops
/// (on `Ascend`: aclnn ops on the device): `dsink_h = −Σ_t p_sink(t, h)·D(t, h)` with
/// `p_sink = exp(sink_h − max)/sum` and `D = Σ_d dO∘O`. Rows of sequences with Skv = 0
/// (sum 0) contribute nothing. O(T·N·Dv): one product, three reductions, one gather of the
/// statistics into token-major order.
pub fn dsink_from_stats<B: Backend>(
    p: &VarlenProblem,
    dy: FloatTensor<B>,
    attention_in: FloatTensor<B>,
    softmax_max: FloatTensor<B>,
    softmax_sum: FloatTensor<B>,
    sink: FloatTensor<B>,
) -> FloatTensor<B> {
    let (t, n) = (p.dims.t_q(), p.dims.head_num);
    let (dy, o): (T3<B>, T3<B>) = (wrap(dy), wrap(attention_in));
    let device = dy.device();
    if t == 0 || n == 0 {
        return unwrap(Tensor::<B, 1>::zeros([n], &device));
    }
    // In f32 whatever the activations' dtype (as CANN's post step reduces dsink), and returned
    // in the sink's dtype: a bf16 `dy · o` summed over D and then over every token would lose
    // the gradient's low bits, and a mixed-precision model keeps its sinks in f32.
    let f32 = burn::tensor::FloatDType::F32;
    let d_row = (dy.cast(f32) * o.cast(f32)).sum_dim(2).reshape([t * n]);
    // Token-major position t·N + h → the stats row holding it (the first of its 8 copies):
    // the stats' own order when they are token-major, a transpose when every sequence has the
    // same length, else a gather by an uploaded index (a captured training step, which may
    // not upload, has fixed-length rows).
    let seq = &p.dims.seq_q;
    let equal = seq.iter().all(|&s| s == seq[0]) && seq.len() * seq[0] == t;
    let index = match p.attrs.softmax_layout {
        SoftmaxLayout::SameAsInput => None,
        SoftmaxLayout::SequenceHeadMajor if equal => None,
        layout => {
            let mut index = vec![0i64; t * n];
            for (b, q0) in p.dims.q_offsets().into_iter().enumerate() {
                let sq = seq[b];
                for i in 0..sq {
                    for h in 0..n {
                        index[(q0 + i) * n + h] = (layout.stat_index(q0, sq, n, h, i) / 8) as i64;
                    }
                }
            }
            Some(Tensor::<B, 1, burn::tensor::Int>::from_data(
                TensorData::new(index, [t * n]),
                &device,
            ))
        }
    };
    let layout = p.attrs.softmax_layout;
    let first = |x: FloatTensor<B>| {
        let rows = wrap::<B, 3>(x).slice([0..t, 0..n, 0..1]).reshape([t * n]);
        match (&index, layout) {
            (Some(index), _) => rows.select(0, index.clone()),
            (None, SoftmaxLayout::SameAsInput) => rows,
            // [B, N, Sq] in memory → [B, Sq, N], token-major.
            (None, SoftmaxLayout::SequenceHeadMajor) => rows
                .reshape([seq.len(), n, seq[0]])
                .swap_dims(1, 2)
                .reshape([t * n]),
        }
    };
    let (m, l) = (first(softmax_max), first(softmax_sum));
    let empty = l.clone().equal_elem(0.0);
    let sink = wrap::<B, 1>(sink)
        .reshape([1, n])
        .expand([t, n])
        .reshape([t * n]);
    let sink_dtype = sink.dtype();
    let p_sink = ((sink.cast(f32) - m.cast(f32)).exp() / l.cast(f32).mask_fill(empty.clone(), 1.0))
        .mask_fill(empty, 0.0);
    unwrap(
        (p_sink * d_row)
            .reshape([t, n])
            .sum_dim(0)
            .reshape([n])
            .neg()
            .cast(sink_dtype),
    )
}
