//! The varlen functions on plain `Tensor<B, D>`: the CANN-shaped [`varlen_score`] family and
//! its backward, and the flash-attn-shaped front door [`flash_attention_varlen`].

use burn::tensor::backend::Backend;
use burn::tensor::ops::FloatTensor;
use burn::tensor::{Tensor, TensorData};

use burn_ascend_contract::dropout;
use burn_ascend_contract::varlen::{lengths_from_cumulative, PseType, SoftmaxLayout, SparseMode};

use super::{MaskSpec, VarlenBackend, VarlenGradInputs, VarlenInputs, VarlenOutputs, VarlenSpec};
use crate::common::tensor::{unwrap as prim, wrap as tensor};
use crate::error::{ensure, AttnError, Result};

/// The forward's outputs.
#[derive(Debug, Clone)]
pub struct VarlenAttention<B: Backend> {
    /// `attentionOut` `[Tq, N, Dv]` (differentiable under `Autodiff`).
    pub attention_out: Tensor<B, 3>,
    /// `softmaxMax` `[Tq, N, 8]` in the spec's layout (a constant under `Autodiff`).
    pub softmax_max: Tensor<B, 3>,
    /// `softmaxSum` `[Tq, N, 8]` (a constant under `Autodiff`).
    pub softmax_sum: Tensor<B, 3>,
}

impl<B: Backend> VarlenAttention<B> {
    fn of(out: VarlenOutputs<FloatTensor<B>>) -> Self {
        Self {
            attention_out: tensor(out.attention_out),
            softmax_max: tensor(out.softmax_max),
            softmax_sum: tensor(out.softmax_sum),
        }
    }
}

/// The backward's outputs.
#[derive(Debug, Clone)]
pub struct VarlenAttentionGrads<B: Backend> {
    /// `dq` `[Tq, N, D]`.
    pub dq: Tensor<B, 3>,
    /// `dk` `[Tkv, Nkv, D]`.
    pub dk: Tensor<B, 3>,
    /// `dv` `[Tkv, Nkv, D]`.
    pub dv: Tensor<B, 3>,
    /// `dpse` `[pseTotalLen]`, when the call has a flat external pse (pseType 0/1): from
    /// [`varlen_score_grad_with`] with the carrier's pse (or, under `Autodiff`, the pse
    /// tensor's gradient after [`varlen_score_with_pse`]).
    pub dpse: Option<Tensor<B, 1>>,
    /// `dsink` `[N]`, when a sink was given.
    pub dsink: Option<Tensor<B, 1>>,
}

/// The carrier of the public varlen functions: query, key, value and sink, no other input
/// (each function sets its own).
fn carrier<B: VarlenBackend>(
    query: Tensor<B, 3>,
    key: Tensor<B, 3>,
    value: Tensor<B, 3>,
    sink: Option<Tensor<B, 1>>,
) -> VarlenInputs<FloatTensor<B>> {
    VarlenInputs {
        sink: sink.map(prim),
        ..VarlenInputs::new(prim(query), prim(key), prim(value))
    }
}

/// The varlen forward of the public functions.
fn varlen_forward<B: VarlenBackend>(
    inputs: VarlenInputs<FloatTensor<B>>,
    spec: &VarlenSpec,
) -> Result<VarlenAttention<B>> {
    Ok(VarlenAttention::of(B::varlen_fwd(inputs, spec)?))
}

/// `aclnnFlashAttentionVarLenScoreV5`: query `[Tq, N, D]`, key `[Tkv, Nkv, D]`, value
/// `[Tkv, Nkv, Dv]`, sink `[N]`. Under `Autodiff`, gradients reach query, key, value and sink
/// through `attention_out` by one fused backward.
pub fn varlen_score<B: VarlenBackend>(
    query: Tensor<B, 3>,
    key: Tensor<B, 3>,
    value: Tensor<B, 3>,
    sink: Option<Tensor<B, 1>>,
    spec: &VarlenSpec,
) -> Result<VarlenAttention<B>> {
    varlen_forward(carrier(query, key, value, sink), spec)
}

/// [`varlen_score`] with an external pse (`realShift`, pseType 0 or 1) of rank `P`: the flat
/// `[pseTotalLen]` tensor (per sequence `[N, Sq_b, Skv_b]`, concatenated; differentiable) or
/// CANN's ALiBi-compressed `[1|B, N, 1024, maxSkv]` (the last 1024 rows of a Toeplitz ALiBi
/// bias, constant along its diagonals; not differentiated). It is an input of the op like the
/// sink ([`VarlenInputs::pse`]), never read back to the host on a device backend. Under
/// `Autodiff`, a flat `pse` receives `dpse` from the same fused backward as query, key, value
/// and sink.
pub fn varlen_score_with_pse<B: VarlenBackend, const P: usize>(
    query: Tensor<B, 3>,
    key: Tensor<B, 3>,
    value: Tensor<B, 3>,
    sink: Option<Tensor<B, 1>>,
    pse: Tensor<B, P>,
    spec: &VarlenSpec,
) -> Result<VarlenAttention<B>> {
    let inputs = VarlenInputs {
        pse: Some(prim(pse)),
        ..carrier(query, key, value, sink)
    };
    varlen_forward(inputs, spec)
}

/// [`varlen_score`] with ALiBi slopes (`realShift` with pseType 2 or 3): `[N]` or `[B, N]`
/// (rank `S`), any float dtype (the op reads them as f32). The op builds the bias
/// `−slope·|Δ|` (pseType 2) or `−slope·√|Δ|` (pseType 3) itself; the slopes stay where they
/// are ([`VarlenInputs::alibi_slopes`]) and are not differentiated.
pub fn varlen_score_with_alibi<B: VarlenBackend, const S: usize>(
    query: Tensor<B, 3>,
    key: Tensor<B, 3>,
    value: Tensor<B, 3>,
    sink: Option<Tensor<B, 1>>,
    alibi_slopes: Tensor<B, S>,
    spec: &VarlenSpec,
) -> Result<VarlenAttention<B>> {
    let inputs = VarlenInputs {
        alibi_slopes: Some(prim(alibi_slopes)),
        ..carrier(query, key, value, sink)
    };
    varlen_forward(inputs, spec)
}

/// [`varlen_score`] with an explicit mask (`spec.atten_mask` is [`MaskSpec::Dense`]): a
/// float tensor of rank `M` holding 0 (attend) or 1 (masked), `[maxSq, maxSkv]` or
/// `[B|1, N|1, maxSq, maxSkv]`. It is an input of the op like the sink
/// ([`VarlenInputs::atten_mask`]), never read back to the host on a device backend, and not
/// differentiated; under `Autodiff` the backward reads it again.
pub fn varlen_score_with_mask<B: VarlenBackend, const M: usize>(
    query: Tensor<B, 3>,
    key: Tensor<B, 3>,
    value: Tensor<B, 3>,
    sink: Option<Tensor<B, 1>>,
    atten_mask: Tensor<B, M>,
    spec: &VarlenSpec,
) -> Result<VarlenAttention<B>> {
    let inputs = VarlenInputs {
        atten_mask: Some(prim(atten_mask)),
        ..carrier(query, key, value, sink)
    };
    varlen_forward(inputs, spec)
}

/// [`varlen_score`] with dropout (`spec.attrs.keep_prob < 1`): `drop_mask` is CANN's
/// bit-packed keep mask as a 1-D float tensor holding the byte values 0..=255
/// ([`VarlenInputs::drop_mask`]; [`dropout_mask`] makes one from a seed). It stays where it is
/// and is not differentiated; under `Autodiff` the backward reads it again.
pub fn varlen_score_with_dropout<B: VarlenBackend>(
    query: Tensor<B, 3>,
    key: Tensor<B, 3>,
    value: Tensor<B, 3>,
    sink: Option<Tensor<B, 1>>,
    drop_mask: Tensor<B, 1>,
    spec: &VarlenSpec,
) -> Result<VarlenAttention<B>> {
    let inputs = VarlenInputs {
        drop_mask: Some(prim(drop_mask)),
        ..carrier(query, key, value, sink)
    };
    varlen_forward(inputs, spec)
}

/// The seeded dropout mask of a validated-shape call of `spec` (`keepProb` from its attributes)
/// on `device`: [`dropout::generate_mask`]'s bits as the byte values
/// [`VarlenInputs::drop_mask`] holds. Generated on the host and uploaded once: the generator
/// (splitmix64 from the seed) gives the same bits on every backend, which no device-side Burn
/// op offers; a mask made on the NPU (CANN's Philox stream) can be passed as a tensor instead.
pub fn dropout_mask<B: Backend>(
    spec: &VarlenSpec,
    seed: u64,
    device: &B::Device,
) -> Result<Tensor<B, 1>> {
    let (seq_q, seq_kv) = spec.sequence_lengths()?;
    let bits = dropout::mask_bits(spec.head_num, &seq_q, &seq_kv);
    let bytes: Vec<f32> = dropout::generate_mask(bits, spec.attrs.keep_prob, seed)
        .into_iter()
        .map(f32::from)
        .collect();
    let len = bytes.len();
    Ok(Tensor::from_data(TensorData::new(bytes, [len]), device))
}

/// `aclnnFlashAttentionUnpaddingScoreGradV5`, given the forward's inputs and outputs and `dy`,
/// for a call without tensor inputs besides the sink (with a mask, pse, slopes or dropout
/// mask: [`varlen_score_grad_with`]).
pub fn varlen_score_grad<B: VarlenBackend>(
    query: Tensor<B, 3>,
    key: Tensor<B, 3>,
    value: Tensor<B, 3>,
    sink: Option<Tensor<B, 1>>,
    forward: &VarlenAttention<B>,
    dy: Tensor<B, 3>,
    spec: &VarlenSpec,
) -> Result<VarlenAttentionGrads<B>> {
    varlen_score_grad_with(carrier(query, key, value, sink), forward, dy, spec)
}

/// [`varlen_score`] with the whole carrier: any combination of the tensor inputs (sink, pse or
/// ALiBi slopes, explicit mask, dropout mask), each as the single-input functions above take
/// it. Build it with [`VarlenInputs::new`] and set the optional fields.
pub fn varlen_score_with<B: VarlenBackend>(
    inputs: VarlenInputs<FloatTensor<B>>,
    spec: &VarlenSpec,
) -> Result<VarlenAttention<B>> {
    varlen_forward(inputs, spec)
}

/// [`varlen_score_grad`] for a call of [`varlen_score_with`]: the same carrier, the forward's
/// outputs and `dy`. `dpse` is returned when the carrier has a flat pse (pseType 0/1).
pub fn varlen_score_grad_with<B: VarlenBackend>(
    inputs: VarlenInputs<FloatTensor<B>>,
    forward: &VarlenAttention<B>,
    dy: Tensor<B, 3>,
    spec: &VarlenSpec,
) -> Result<VarlenAttentionGrads<B>> {
    let g = B::varlen_bwd(
        VarlenGradInputs {
            inputs,
            dy: prim(dy),
            attention_in: prim(forward.attention_out.clone()),
            softmax_max: prim(forward.softmax_max.clone()),
            softmax_sum: prim(forward.softmax_sum.clone()),
        },
        spec,
    )?;
    Ok(VarlenAttentionGrads {
        dq: tensor(g.dq),
        dk: tensor(g.dk),
        dv: tensor(g.dv),
        dpse: g.dpse.map(tensor),
        dsink: g.dsink.map(tensor),
    })
}

/// Options of [`flash_attention_varlen`], named as in flash-attn.
#[derive(Debug, Clone)]
pub struct FlashAttnOptions<B: Backend> {
    /// Causal, aligned bottom-right like flash-attn (query i of a sequence sees keys
    /// `j ≤ i + Skv − Sq`).
    pub causal: bool,
    /// Sliding window `(left, right)`, bottom-right aligned; −1 means unbounded.
    pub window: Option<(i64, i64)>,
    /// Learned per-head sink logits `[N]` (unscaled, in the softmax denominator).
    pub sinks: Option<Tensor<B, 1>>,
    /// Score scale; default `1/sqrt(D)`.
    pub softmax_scale: Option<f64>,
    /// Dropout probability in [0, 1).
    pub dropout: f64,
    /// Seed of the dropout mask.
    pub dropout_seed: u64,
    /// ALiBi slopes `[N]` or `[B·N]` (bias `−slope·|Δ|`, CANN's pseType 2; Δ is measured from
    /// the top-left, equal to flash-attn's for Sq = Skv), a tensor on the query's device (read
    /// as f32 by the op, not differentiated).
    pub alibi_slopes: Option<Tensor<B, 1>>,
}

impl<B: Backend> Default for FlashAttnOptions<B> {
    fn default() -> Self {
        Self {
            causal: false,
            window: None,
            sinks: None,
            softmax_scale: None,
            dropout: 0.0,
            dropout_seed: 0,
            alibi_slopes: None,
        }
    }
}

/// Flash-attn's `flash_attn_varlen_func` on CANN's varlen op: `cu_seqlens_*` in flash-attn's
/// convention (B + 1 entries starting at 0). Returns the output `[Tq, N, Dv]`.
pub fn flash_attention_varlen<B: VarlenBackend>(
    query: Tensor<B, 3>,
    key: Tensor<B, 3>,
    value: Tensor<B, 3>,
    cu_seqlens_q: &[i64],
    cu_seqlens_k: &[i64],
    opts: FlashAttnOptions<B>,
) -> Result<Tensor<B, 3>> {
    let spec = flash_spec(query.dims(), cu_seqlens_q, cu_seqlens_k, &opts)?;
    let batch = spec.actual_seq_q_len.len();
    // [B·N] slopes are the op's [B, N] (checked by flash_spec).
    let slopes = opts
        .alibi_slopes
        .map(|s| match s.dims()[0] == spec.head_num {
            true => prim(s),
            false => prim(s.reshape([batch, spec.head_num])),
        });
    let drop_mask = (spec.attrs.keep_prob < 1.0)
        .then(|| dropout_mask::<B>(&spec, opts.dropout_seed, &query.device()))
        .transpose()?;
    let inputs = VarlenInputs {
        alibi_slopes: slopes,
        drop_mask: drop_mask.map(prim),
        ..carrier(query, key, value, opts.sinks)
    };
    Ok(varlen_forward(inputs, &spec)?.attention_out)
}

/// The CANN spec for flash-attn style options.
pub fn flash_spec<B: Backend>(
    query_dims: [usize; 3],
    cu_seqlens_q: &[i64],
    cu_seqlens_k: &[i64],
    opts: &FlashAttnOptions<B>,
) -> Result<VarlenSpec> {
    const UNBOUNDED: i64 = 2_147_483_647;
    ensure!(
        cu_seqlens_q.first() == Some(&0),
        "cu_seqlens_q",
        "must start with 0 (flash-attn convention), got {cu_seqlens_q:?}"
    );
    ensure!(
        cu_seqlens_k.first() == Some(&0),
        "cu_seqlens_k",
        "must start with 0 (flash-attn convention), got {cu_seqlens_k:?}"
    );
    ensure!(
        (0.0..1.0).contains(&opts.dropout),
        "dropout",
        "must be in [0, 1), got {}",
        opts.dropout
    );
    let [_, n, d] = query_dims;
    let scale = opts.softmax_scale.unwrap_or(1.0 / (d.max(1) as f64).sqrt());
    let mut spec = VarlenSpec::new(
        cu_seqlens_q[1..].to_vec(),
        cu_seqlens_k[1..].to_vec(),
        n,
        scale,
    );
    spec.attrs.softmax_layout = SoftmaxLayout::SameAsInput;
    let seq_q = lengths_from_cumulative(&spec.actual_seq_q_len);
    let seq_kv = lengths_from_cumulative(&spec.actual_seq_kv_len);
    let (Some(seq_q), Some(seq_kv)) = (seq_q, seq_kv) else {
        return Err(AttnError::invalid(
            "cu_seqlens_q",
            "cumulative lengths must be non-decreasing",
        ));
    };
    if opts.causal || opts.window.is_some() {
        let (left, right) = opts.window.unwrap_or((-1, -1));
        let pre = if left < 0 { UNBOUNDED } else { left };
        let mut next = if right < 0 { UNBOUNDED } else { right };
        if opts.causal {
            next = next.min(0);
        }
        let fits_mode3 = seq_q.iter().zip(&seq_kv).all(|(q, k)| q <= k);
        spec.atten_mask = MaskSpec::Compressed;
        if opts.causal && pre == UNBOUNDED && fits_mode3 {
            spec.attrs.sparse_mode = SparseMode::RightDownCausal;
        } else {
            spec.attrs.sparse_mode = SparseMode::Band;
            spec.attrs.pre_tokens = pre;
            spec.attrs.next_tokens = next;
        }
    }
    if opts.dropout > 0.0 {
        // The mask itself is a tensor of the call: `flash_attention_varlen` makes it
        // (`dropout_mask`).
        spec.attrs.keep_prob = 1.0 - opts.dropout;
    }
    if let Some(slopes) = &opts.alibi_slopes {
        let (len, batch) = (slopes.dims()[0], seq_q.len());
        ensure!(
            len == n || len == batch * n,
            "alibi_slopes",
            "must hold N = {n} or B·N = {} slopes, got {len}",
            batch * n
        );
        spec.attrs.pse_type = PseType::InnerMulAdd;
    }
    Ok(spec)
}
