//! A **modelled** device time: for every task the simulation queues (each aclnn launch,
//! `aclrtMemcpyAsync`, `aclrtMemsetAsync`), the floating-point operations and the HBM bytes
//! the op must move, counted from the shapes and dtypes its first stage decoded — never
//! measured — and the roofline time an Atlas A2 NPU would need for them:
//!
//! `t = max(flops / peak(dtype), bytes / HBM bandwidth)` per launch, nothing else (no launch
//! latency, no overlap between launches, no cache reuse across launches); a step's modelled
//! time is the sum over its launches.
//!
//! Counting rules (one place for every op; the attention ops' first stages hand their work in
//! through [`note_attention`], the only hook outside the state module):
//! - bytes: every `aclTensor` the first stage decoded, inputs read once and outputs written
//!   once (a view counts its own elements, not its storage; an in-place operand once);
//! - `aclnnMatmul`: `2·numel(out)·K` (K: the last dim of `self`); `aclnnGroupedMatmulV4`:
//!   `2·numel(x)·N` (N: the last dim of `out`; every row of x goes to one group);
//! - attention ([`Attention`]): per head, `2·(D + Dv)` per unmasked (query, key) pair
//!   forward (`Q·Kᵀ` and `P·V`), 2.5× that backward (`Q·Kᵀ` recomputed, `dV`, `dP`, `dQ`,
//!   `dK`); causal, band and window masks count only the pairs they keep. Bytes: Q and O
//!   (query tokens × N heads), K and V read once per sequence (key tokens × Nkv heads: a
//!   paged cache counts the tokens the lengths name, not the whole cache); backward twice
//!   the forward's (Q, K, V, O, dO read, dQ, dK, dV written). The compressed causal mask and
//!   the softmax statistics are not counted;
//! - every other op (elementwise, reductions, casts, indexing, the fused norm / activation /
//!   loss ops): one operation per element of its largest operand — they are bandwidth-bound,
//!   so the bytes decide;
//! - `aclrtMemsetAsync`: the bytes set; device-to-device `aclrtMemcpyAsync`: read + write;
//!   host↔device copies: the bytes over PCIe 4.0 ×16 (the slower link);
//! - collectives (HCCL) are not modelled.
//!
//! Off by default (the first stages then do no extra work); [`set_cost_model`] turns it on
//! (`finetune --profile`, `generate --profile`).

use std::cell::RefCell;
use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Mutex;

use burn_ascend_cann::acl::ffi::names;
use burn_ascend_contract::DataType;

use crate::state::lock;

/// Atlas A2 (Ascend 910B) figures the roofline uses. Sources:
/// - CANN's platform configuration of the Ascend 910B (`platform_config/Ascend910B*.ini`,
///   e.g. gitcode.com/cann runtime `src/platform/platform_config/Ascend910B2C.ini`):
///   `cube_freq=1800` (MHz), a 16×16×16 cube (`cube_m/n/k_size`) per AI core;
/// - 20 AI (cube) cores on the Ascend 910B3 of the Atlas 800T A2 (Project-HAMi's
///   `ascend-device-configmap.yaml`, `Ascend910B3 … aiCore: 20`), so bf16 / fp16 dense peak
///   = 20 × 4096 MACs × 2 × 1.8 GHz = 294.9 TFLOPS, in line with the ≈ 300 TFLOPS of Huawei's
///   Atlas 800T A2 datasheet (docs/scaling.md);
/// - f32: **assumed** half the bf16 rate (the cube's f32 fractal is 16×8×16, half of bf16's
///   K); no published dense f32 figure was found;
/// - HBM: 64 GB of HBM2e in four stacks (Atlas 800T A2 datasheet), 4 × 1024 bits × 3.2 Gb/s =
///   1.64 TB/s, taken as 1.6 TB/s (**derived** from the HBM2e pin rate, not a published
///   sustained figure);
/// - PCIe 4.0 ×16: 31.5 GB/s each way (host↔device copies).
pub mod atlas_a2 {
    /// AI (cube) cores of the Ascend 910B3.
    pub const CUBE_CORES: f64 = 20.0;
    /// Multiply-adds per cycle of one cube (16 × 16 × 16).
    pub const CUBE_MACS_PER_CYCLE: f64 = 4096.0;
    /// The cube's clock (CANN's `cube_freq`).
    pub const CUBE_HZ: f64 = 1.8e9;
    /// bf16 / fp16 dense peak, FLOP/s.
    pub const PEAK_BF16: f64 = CUBE_CORES * CUBE_MACS_PER_CYCLE * 2.0 * CUBE_HZ;
    /// f32 peak, FLOP/s (assumed: half of bf16).
    pub const PEAK_F32: f64 = PEAK_BF16 / 2.0;
    /// HBM bandwidth, bytes/s.
    pub const HBM_BYTES_PER_S: f64 = 1.6e12;
    /// PCIe 4.0 ×16, bytes/s each way.
    pub const PCIE_BYTES_PER_S: f64 = 31.5e9;
}

/// What one launch must do.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct OpCost {
    /// Floating-point operations.
    pub flops: f64,
    /// HBM bytes read and written.
    pub bytes: f64,
    /// The peak the flops run at (FLOP/s), by the op's dtype.
    pub peak: f64,
    /// Bytes over the host link (host↔device copies), else 0.
    pub link_bytes: f64,
}

impl OpCost {
    /// The roofline time: `max(flops / peak, bytes / HBM, link bytes / PCIe)`, seconds.
    pub fn seconds(&self) -> f64 {
        let compute = if self.peak > 0.0 {
            self.flops / self.peak
        } else {
            0.0
        };
        compute
            .max(self.bytes / atlas_a2::HBM_BYTES_PER_S)
            .max(self.link_bytes / atlas_a2::PCIE_BYTES_PER_S)
    }
}

/// The modelled totals of one task name since [`reset_modelled_device_time`].
#[derive(Debug, Clone, PartialEq)]
pub struct ModelledOp {
    /// The aclnn op's C name, `aclrtMemcpyAsync` or `aclrtMemsetAsync`.
    pub name: &'static str,
    /// Tasks queued by the host (a graph's replay is one, named `aclmdlRIExecuteAsync`).
    pub launches: u64,
    /// Tasks run from a graph's replay (recorded at the capture, queued by the replay's one
    /// launch): device work, not host launches.
    pub replayed: u64,
    /// Floating-point operations, all launches.
    pub flops: f64,
    /// HBM bytes, all launches.
    pub bytes: f64,
    /// Roofline seconds, the sum over the launches.
    pub seconds: f64,
}

static ENABLED: AtomicBool = AtomicBool::new(false);
static TABLE: Mutex<Option<HashMap<&'static str, ModelledOp>>> = Mutex::new(None);

/// Turns the cost model on or off (process-wide). Off, nothing is counted.
pub fn set_cost_model(on: bool) {
    ENABLED.store(on, Ordering::Relaxed);
}

/// Whether the cost model counts.
pub fn cost_model_enabled() -> bool {
    ENABLED.load(Ordering::Relaxed)
}

/// The modelled time per task name, most time first (then by name).
pub fn modelled_device_time() -> Vec<ModelledOp> {
    let mut v: Vec<ModelledOp> = lock(&TABLE)
        .iter()
        .flatten()
        .map(|(_, m)| m.clone())
        .collect();
    v.sort_by(|a, b| b.seconds.total_cmp(&a.seconds).then(a.name.cmp(b.name)));
    v
}

/// Clears [`modelled_device_time`].
pub fn reset_modelled_device_time() {
    *lock(&TABLE) = None;
}

thread_local! {
    /// The tasks this thread queued while the model was on (the first 4096 since the last
    /// take; for the tests: the process-wide table mixes in other threads' launches).
    static RECORDED: RefCell<Vec<(&'static str, OpCost)>> = const { RefCell::new(Vec::new()) };
}

/// Takes the costs of the tasks the calling thread queued since the last call, in order.
#[doc(hidden)]
pub fn take_recorded_on_this_thread() -> Vec<(&'static str, OpCost)> {
    RECORDED
        .try_with(|r| std::mem::take(&mut *r.borrow_mut()))
        .unwrap_or_default()
}

/// Adds one queued task `name` costing `cost`.
pub(crate) fn record(name: &'static str, cost: OpCost) {
    add(name, cost, false);
}

/// Adds one task `name` costing `cost` that a graph's replay runs.
pub(crate) fn record_replayed(name: &'static str, cost: OpCost) {
    add(name, cost, true);
}

fn add(name: &'static str, cost: OpCost, replayed: bool) {
    let _ = RECORDED.try_with(|r| {
        let mut r = r.borrow_mut();
        // Bounded: a long profiled run must not grow it without end.
        if r.len() < 4096 {
            r.push((name, cost));
        }
    });
    let mut g = lock(&TABLE);
    let e = g
        .get_or_insert_with(HashMap::new)
        .entry(name)
        .or_insert_with(|| ModelledOp {
            name,
            launches: 0,
            replayed: 0,
            flops: 0.0,
            bytes: 0.0,
            seconds: 0.0,
        });
    if replayed {
        e.replayed += 1;
    } else {
        e.launches += 1;
    }
    e.flops += cost.flops;
    e.bytes += cost.bytes;
    e.seconds += cost.seconds();
}

/// One `aclTensor` a first stage decoded.
struct Operand {
    dims: Vec<usize>,
    dtype: DataType,
}

impl Operand {
    fn numel(&self) -> f64 {
        self.dims.iter().product::<usize>() as f64
    }
    fn bytes(&self) -> f64 {
        self.numel() * self.dtype.size() as f64
    }
}

thread_local! {
    /// The tensors decoded on this thread since the last executor was made.
    static OPERANDS: RefCell<Vec<Operand>> = const { RefCell::new(Vec::new()) };
    /// The attention work a first stage reported since the last executor was made.
    static ATTENTION: RefCell<Option<OpCost>> = const { RefCell::new(None) };
    /// Its `(query length, key length)` per sequence, kept whether or not the model is on:
    /// what a task recorded into a graph attends ([`crate::graph_attention`]).
    static ATTENDED: RefCell<Option<Vec<(usize, usize)>>> = const { RefCell::new(None) };
}

/// Notes a decoded tensor (called by the handle decoder).
pub(crate) fn note_operand(dims: &[usize], dtype: DataType) {
    if cost_model_enabled() {
        let _ = OPERANDS.try_with(|o| {
            o.borrow_mut().push(Operand {
                dims: dims.to_vec(),
                dtype,
            })
        });
    }
}

/// Forgets what the calling thread noted (a failed first stage, a collective).
pub(crate) fn discard() {
    let _ = OPERANDS.try_with(|o| o.borrow_mut().clear());
    let _ = ATTENTION.try_with(|a| a.borrow_mut().take());
    let _ = ATTENDED.try_with(|a| a.borrow_mut().take());
}

/// The per-sequence `(query, key)` lengths the attention launch whose first stage just ran
/// reported (cleared); `None` for any other op.
pub(crate) fn take_attended() -> Option<Vec<(usize, usize)>> {
    ATTENDED.try_with(|a| a.borrow_mut().take()).ok().flatten()
}

/// The peak for an op computing in `dtype`.
fn peak_of(dtype: DataType) -> f64 {
    match dtype {
        DataType::Float | DataType::Double => atlas_a2::PEAK_F32,
        _ => atlas_a2::PEAK_BF16,
    }
}

/// The cost of `op` from what its first stage decoded on this thread (cleared); `None` when
/// the model is off.
pub(crate) fn take(op: &str) -> Option<OpCost> {
    let operands = OPERANDS
        .try_with(|o| std::mem::take(&mut *o.borrow_mut()))
        .unwrap_or_default();
    let attention = ATTENTION.try_with(|a| a.borrow_mut().take()).ok().flatten();
    if !cost_model_enabled() {
        return None;
    }
    Some(attention.unwrap_or_else(|| of_operands(op, &operands)))
}

/// The rules of the module docs for a non-attention op.
fn of_operands(op: &str, operands: &[Operand]) -> OpCost {
    let bytes = operands.iter().map(Operand::bytes).sum();
    let dtype = operands.first().map_or(DataType::Float, |o| o.dtype);
    let last_dim = |o: Option<&Operand>| o.and_then(|o| o.dims.last().copied()).unwrap_or(0) as f64;
    let flops = match op {
        _ if op == names::matmul => {
            2.0 * operands.get(2).map_or(0.0, Operand::numel) * last_dim(operands.first())
        }
        _ if op == names::grouped_matmul_v4 => {
            2.0 * operands.first().map_or(0.0, Operand::numel) * last_dim(operands.get(2))
        }
        _ => operands.iter().map(Operand::numel).fold(0.0, f64::max),
    };
    OpCost {
        flops,
        bytes,
        peak: peak_of(dtype),
        link_bytes: 0.0,
    }
}

/// The cost of a queued copy or memset of `count` bytes: `kind` as `aclrtMemcpyAsync`'s
/// (1 host to device, 2 device to host, 3 device to device), `None` for a memset.
pub(crate) fn of_transfer(count: usize, kind: Option<u32>) -> OpCost {
    let n = count as f64;
    let (bytes, link_bytes) = match kind {
        None => (n, 0.0),
        Some(3) => (2.0 * n, 0.0),
        Some(_) => (n, n),
    };
    OpCost {
        flops: 0.0,
        bytes,
        peak: atlas_a2::PEAK_BF16,
        link_bytes,
    }
}

/// Which (query, key) pairs an attention mask keeps, per sequence of `sq` queries and `skv`
/// keys: query `i` sees the keys `j` with `-left ≤ j − (i + origin) ≤ right`.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) struct Keep {
    /// `true`: origin bottom-right (`Skv − Sq`), else top-left (0).
    pub bottom_right: bool,
    /// Keys before the query's diagonal it sees (`i64::MAX`: all).
    pub left: i64,
    /// Keys after it (`i64::MAX`: all).
    pub right: i64,
}

impl Keep {
    /// Every pair.
    pub const ALL: Self = Self {
        bottom_right: false,
        left: i64::MAX,
        right: i64::MAX,
    };

    /// CANN's `sparseMode` with `preTokens` / `nextTokens` (varlen, PFA, FIA): 0 the band
    /// `[−pre, next]` from the top-left (an explicit mask's own zeros are not counted), 2
    /// top-left causal, 3 / 6 / 7 bottom-right causal, 8 top-left causal, 4 the band from the
    /// bottom-right; anything else (1: the explicit mask alone) keeps every pair.
    pub fn of_sparse_mode(mode: i64, pre: i64, next: i64) -> Self {
        let causal = |bottom_right| Self {
            bottom_right,
            left: i64::MAX,
            right: 0,
        };
        match mode {
            0 => Self {
                bottom_right: false,
                left: pre,
                right: next,
            },
            2 | 8 => causal(false),
            3 | 6 | 7 => causal(true),
            4 => Self {
                bottom_right: true,
                left: pre,
                right: next,
            },
            _ => Self::ALL,
        }
    }

    /// The pairs kept of a sequence: `Σ_i |[i + o − left, i + o + right] ∩ [0, skv)|`.
    pub fn pairs(&self, sq: usize, skv: usize) -> f64 {
        let (sq, skv) = (sq as i64, skv as i64);
        let origin = if self.bottom_right { skv - sq } else { 0 };
        // Clamped so the sums below cannot overflow.
        let left = self.left.clamp(-skv - sq, skv + sq);
        let right = self.right.clamp(-skv - sq, skv + sq);
        if left >= skv + sq && right >= skv + sq {
            return (sq * skv) as f64;
        }
        (0..sq)
            .map(|i| {
                let lo = (i + origin - left).max(0);
                let hi = (i + origin + right).min(skv - 1);
                (hi - lo + 1).max(0)
            })
            .sum::<i64>() as f64
    }
}

/// Per-batch sequence lengths for [`Attention::seqs`] from an `actualSeqLengths`-style array
/// (cumulative ends where `cumulative`, as in TND), else `full` for each of `batch` entries.
pub(crate) fn seq_lens(
    a: &Option<Vec<i64>>,
    cumulative: bool,
    batch: usize,
    full: usize,
) -> Vec<usize> {
    match a {
        None => vec![full; batch],
        Some(v) if cumulative => {
            let mut prev = 0;
            v.iter()
                .map(|&e| {
                    let l = (e - prev).max(0) as usize;
                    prev = e;
                    l
                })
                .collect()
        }
        Some(v) => v.iter().map(|&l| l.max(0) as usize).collect(),
    }
}

/// An attention launch's work, as its first stage decoded it.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Attention {
    /// `(query length, key length)` of each sequence (batch entry).
    pub seqs: Vec<(usize, usize)>,
    /// Query heads N.
    pub heads: usize,
    /// Key / value heads Nkv.
    pub kv_heads: usize,
    /// Query / key head dim D.
    pub head_dim: usize,
    /// Value head dim Dv.
    pub value_dim: usize,
    /// The pairs kept.
    pub keep: Keep,
    /// Bytes per element of Q / O and of K / V.
    pub q_elem: usize,
    pub kv_elem: usize,
    /// The fused backward (varlen grad).
    pub backward: bool,
    /// The dtype the op computes in (its query's).
    pub dtype: DataType,
}

impl Attention {
    /// The rules of the module docs.
    pub fn cost(&self) -> OpCost {
        let pairs: f64 = self.seqs.iter().map(|&(q, k)| self.keep.pairs(q, k)).sum();
        let fwd_flops = pairs * self.heads as f64 * 2.0 * (self.head_dim + self.value_dim) as f64;
        let tq: usize = self.seqs.iter().map(|s| s.0).sum();
        let tkv: usize = self.seqs.iter().map(|s| s.1).sum();
        let dd = (self.head_dim + self.value_dim) as f64;
        let fwd_bytes = (tq * self.heads * self.q_elem) as f64 * dd
            + (tkv * self.kv_heads * self.kv_elem) as f64 * dd;
        let (flops, bytes) = if self.backward {
            (2.5 * fwd_flops, 2.0 * fwd_bytes)
        } else {
            (fwd_flops, fwd_bytes)
        };
        OpCost {
            flops,
            bytes,
            peak: peak_of(self.dtype),
            link_bytes: 0.0,
        }
    }
}

/// Reports the attention work of the launch whose first stage is running (replacing the
/// generic rule for it).
pub(crate) fn note_attention(work: impl FnOnce() -> Attention) {
    let work = work();
    if cost_model_enabled() {
        let c = work.cost();
        let _ = ATTENTION.try_with(|a| *a.borrow_mut() = Some(c));
    }
    let _ = ATTENDED.try_with(|a| *a.borrow_mut() = Some(work.seqs));
}

/// The pairs [`Keep::of_sparse_mode`]`(mode, pre, next)` keeps of a sequence of `sq`
/// queries and `skv` keys (for the tests).
#[doc(hidden)]
pub fn pairs_for_tests(mode: i64, pre: i64, next: i64, sq: usize, skv: usize) -> f64 {
    Keep::of_sparse_mode(mode, pre, next).pairs(sq, skv)
}
