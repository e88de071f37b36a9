//! Shared test helpers: small varlen cases; the splitmix64 [`Rng`] and the tolerance check
//! [`close`] come from `burn-ascend-test-support`.

use burn_ascend::contract::dropout;
use burn_ascend::ops::varlen::{
    AttenMask, DenseMask, MaskSpec, Pse, VarlenDims, VarlenProblem, VarlenShapes, VarlenSpec,
};
use burn_ascend::{cumulative_from_lengths, PseType, SoftmaxLayout, SparseMode};
/// `|got − exp| ≤ atol + rtol·|exp|` elementwise (in the slices' type; NaN fails), else a
/// message naming the worst element.
pub use burn_ascend_test_support::check_close as close;
pub use burn_ascend_test_support::Rng;

/// One varlen problem: shapes, data and the CANN spec.
#[derive(Clone)]
pub struct Case {
    pub name: String,
    pub seq_q: Vec<usize>,
    pub seq_kv: Vec<usize>,
    pub n: usize,
    pub nkv: usize,
    pub d: usize,
    pub dv: usize,
    pub q: Vec<f32>,
    pub k: Vec<f32>,
    pub v: Vec<f32>,
    pub dy: Vec<f32>,
    pub sink: Option<Vec<f32>>,
    /// The explicit mask's bytes and shape (the spec's kind is then `MaskSpec::Dense`).
    pub mask: Option<(Vec<u8>, Vec<usize>)>,
    /// The external pse tensor's values and shape (`VarlenInputs::pse`: flat, or the
    /// ALiBi-compressed 4-D form).
    pub pse: Option<(Vec<f32>, Vec<usize>)>,
    /// The ALiBi slopes' values and shape (`VarlenInputs::alibi_slopes`).
    pub slopes: Option<(Vec<f32>, Vec<usize>)>,
    /// The bit-packed dropout mask (`VarlenInputs::drop_mask` holds its byte values).
    pub drop: Option<Vec<u8>>,
    pub spec: VarlenSpec,
}

impl Case {
    pub fn new(
        name: &str,
        seq_q: &[usize],
        seq_kv: &[usize],
        n: usize,
        nkv: usize,
        d: usize,
        seed: u64,
    ) -> Self {
        let mut rng = Rng(seed);
        let (tq, tkv) = (seq_q.iter().sum::<usize>(), seq_kv.iter().sum::<usize>());
        let spec = VarlenSpec::new(
            cumulative_from_lengths(seq_q),
            cumulative_from_lengths(seq_kv),
            n,
            1.0 / (d as f64).sqrt(),
        );
        Case {
            name: name.into(),
            seq_q: seq_q.to_vec(),
            seq_kv: seq_kv.to_vec(),
            n,
            nkv,
            d,
            dv: d,
            q: rng
                .vec_f32(tq * n * d, 1.0)
                .iter()
                .map(|x| x * 2.0)
                .collect(),
            k: rng
                .vec_f32(tkv * nkv * d, 1.0)
                .iter()
                .map(|x| x * 2.0)
                .collect(),
            v: rng.vec_f32(tkv * nkv * d, 1.0),
            dy: rng.vec_f32(tq * n * d, 1.0),
            sink: None,
            mask: None,
            pse: None,
            slopes: None,
            drop: None,
            spec,
        }
    }
    /// The explicit mask's shape, as the carrier's tensor has it.
    pub fn mask_shape(&self) -> Option<Vec<usize>> {
        self.mask.as_ref().map(|(_, s)| s.clone())
    }
    /// The mask as the carrier's float tensor holds it (0/1).
    pub fn mask_f32(&self) -> Option<(Vec<f32>, Vec<usize>)> {
        self.mask
            .as_ref()
            .map(|(d, s)| (d.iter().map(|&x| f32::from(x)).collect(), s.clone()))
    }
    /// The shapes of the case's tensors, as validation reads them.
    pub fn shapes(&self) -> VarlenShapes {
        let shape = |t: &Option<(Vec<f32>, Vec<usize>)>| t.as_ref().map(|(_, s)| s.clone());
        VarlenShapes {
            query: [self.tq(), self.n, self.d],
            key: [self.tkv(), self.nkv, self.d],
            value: [self.tkv(), self.nkv, self.dv],
            sink: self.sink.as_ref().map(Vec::len),
            pse: shape(&self.pse),
            atten_mask: self.mask_shape(),
            alibi_slopes: shape(&self.slopes),
            drop_mask: self.drop.as_ref().map(|m| vec![m.len()]),
        }
    }
    /// The dropout mask as the carrier's float tensor holds it (byte values).
    pub fn drop_f32(&self) -> Option<(Vec<f32>, Vec<usize>)> {
        (self.drop.as_ref()).map(|m| (m.iter().map(|&b| f32::from(b)).collect(), vec![m.len()]))
    }
    /// The kernels' view of a validated case, its explicit mask, pse and slopes included.
    pub fn problem(&self, dims: VarlenDims) -> VarlenProblem<'_> {
        let mut p = self.spec.problem(dims, self.sink.as_deref());
        if let Some((data, shape)) = &self.mask {
            p.atten_mask = AttenMask::Dense(DenseMask::from_shape(data, shape).expect("mask"));
        }
        p.pse = Pse::of_tensor(
            self.pse.as_ref().map(|(v, s)| (&v[..], &s[..])),
            self.slopes.as_ref().map(|(v, _)| &v[..]),
            self.n,
        );
        p.drop_mask = self.drop.as_deref();
        p
    }
    pub fn tq(&self) -> usize {
        self.seq_q.iter().sum()
    }
    pub fn tkv(&self) -> usize {
        self.seq_kv.iter().sum()
    }
    pub fn with_sink(mut self) -> Self {
        let mut rng = Rng(99);
        self.sink = Some((0..self.n).map(|_| rng.sym(1.0) as f32 * 1.5).collect());
        self
    }
    pub fn mode(mut self, mode: SparseMode, pre: i64, next: i64) -> Self {
        self.spec.attrs.sparse_mode = mode;
        self.spec.attrs.pre_tokens = pre;
        self.spec.attrs.next_tokens = next;
        (self.spec.atten_mask, self.mask) = if mode.takes_compressed_mask() {
            (MaskSpec::Compressed, None)
        } else {
            (MaskSpec::Dense, Some(self.random_mask()))
        };
        self
    }
    pub fn random_mask(&self) -> (Vec<u8>, Vec<usize>) {
        let rows = *self.seq_q.iter().max().unwrap();
        let cols = *self.seq_kv.iter().max().unwrap();
        let mut rng = Rng(5);
        // keep the diagonal-ish column 0 visible so rows are rarely fully masked
        let data: Vec<u8> = (0..rows * cols)
            .map(|e| (e % cols != 0 && rng.sym(1.0) > 0.3) as u8)
            .collect();
        (data, vec![rows, cols])
    }
    pub fn dropout(mut self, keep: f64) -> Self {
        self.spec.attrs.keep_prob = keep;
        let bits = dropout::mask_bits(self.n, &self.seq_q, &self.seq_kv);
        self.drop = Some(dropout::generate_mask(bits, keep, 11));
        self
    }
    pub fn pse_dense(mut self, pse_type: PseType) -> Self {
        let total: usize = self
            .seq_q
            .iter()
            .zip(&self.seq_kv)
            .map(|(q, k)| self.n * q * k)
            .sum();
        self.spec.attrs.pse_type = pse_type;
        self.pse = Some((Rng(3).vec_f32(total, 1.0), vec![total]));
        self
    }
    /// ALiBi slopes `[N]`, or `[B, N]` (`per_batch`, a different slope per sequence too).
    pub fn alibi(mut self, pse_type: PseType, per_batch: bool) -> Self {
        let (n, batch) = (self.n, self.seq_q.len());
        let rows = if per_batch { batch } else { 1 };
        let slopes: Vec<f32> = (0..rows * n)
            .map(|e| 0.5f32.powi((e % n) as i32 + 1) * (1.0 + 0.25 * (e / n) as f32))
            .collect();
        let shape = if per_batch { vec![batch, n] } else { vec![n] };
        self.spec.attrs.pse_type = pse_type;
        self.slopes = Some((slopes, shape));
        self.spec.q_start_idx = Some(1);
        self.spec.kv_start_idx = Some(0);
        self
    }
    pub fn layout(mut self, layout: SoftmaxLayout) -> Self {
        self.spec.attrs.softmax_layout = layout;
        self
    }
    pub fn prefix(mut self, prefix: Vec<i64>) -> Self {
        self.spec.prefix = Some(prefix);
        self
    }
    /// The ALiBi-compressed pse `[Bp, N, 1024, S2]` (the last 1024 rows of the Toeplitz bias
    /// `f_h(i − j)`, S2 = the longest KV length), with the causal mode 3 it needs (Sq = Skv).
    pub fn pse_alibi_compressed(mut self, pse_type: PseType, per_batch: bool) -> Self {
        self.pse = Some(alibi_compressed(&self, per_batch));
        self.spec.attrs.pse_type = pse_type;
        self.mode(SparseMode::RightDownCausal, 0, 0)
    }
    /// The flat `[pseTotalLen]` pse equal to [`Self::pse_alibi_compressed`]'s on the lower
    /// triangle (the upper one is masked).
    pub fn alibi_dense_equivalent(&self) -> Vec<f32> {
        let Some((_, shape)) = self.pse.as_ref().filter(|(_, s)| s.len() == 4) else {
            panic!("{}: no compressed pse", self.name)
        };
        let bp = shape[0];
        let mut out = Vec::new();
        for (b, (&sq, &skv)) in self.seq_q.iter().zip(&self.seq_kv).enumerate() {
            for h in 0..self.n {
                for i in 0..sq {
                    for j in 0..skv {
                        out.push(if i >= j {
                            alibi_f(b % bp, h, i - j)
                        } else {
                            0.0
                        });
                    }
                }
            }
        }
        out
    }
    /// CANN's trailing-zero form of the cumulative lengths: the repeated tail of empty
    /// sequences written as zeros (`[3, 5, 5, 5]` → `[3, 5, 0, 0]`).
    pub fn trailing_zero_cumulative(mut self) -> Self {
        for cum in [
            &mut self.spec.actual_seq_q_len,
            &mut self.spec.actual_seq_kv_len,
        ] {
            let end = *cum.last().expect("a sequence");
            let first = cum.iter().position(|&c| c == end).expect("present");
            cum[first + 1..].fill(0);
        }
        self
    }
}

/// A spread of cases: MHA/GQA/MQA, every sparse mode, empty sequences, dropout, pse, sinks.
/// The Toeplitz bias of the compressed-pse cases: head- and batch-dependent, not just ALiBi's
/// `−slope·d`, so a wrong row, column, head or batch reading shows.
pub fn alibi_f(b: usize, h: usize, d: usize) -> f32 {
    -(0.5f32.powi(h as i32 + 1)) * d as f32 + 0.1 * ((d * 7 + h * 3 + b * 5) % 11) as f32
}

/// `C[b, h, p, q] = f_{b,h}(p − q + S2 − 1024)` (the rows above the diagonal hold the same
/// Toeplitz continuation at negative distances, never read).
pub fn alibi_compressed(c: &Case, per_batch: bool) -> (Vec<f32>, Vec<usize>) {
    const ROWS: usize = 1024;
    let s2 = *c.seq_kv.iter().max().unwrap();
    let bp = if per_batch { c.seq_q.len() } else { 1 };
    let mut out = Vec::with_capacity(bp * c.n * ROWS * s2);
    for b in 0..bp {
        for h in 0..c.n {
            for p in 0..ROWS {
                for q in 0..s2 {
                    let d = p as i64 - q as i64 + s2 as i64 - ROWS as i64;
                    out.push(if d >= 0 {
                        alibi_f(b, h, d as usize)
                    } else {
                        -1.0 - d as f32
                    });
                }
            }
        }
    }
    (out, vec![bp, c.n, ROWS, s2])
}

pub fn cases() -> Vec<Case> {
    vec![
        Case::new("mha_full", &[3, 5], &[3, 5], 2, 2, 4, 1),
        Case::new("gqa_full_sink", &[3, 5], &[4, 6], 4, 2, 3, 2).with_sink(),
        Case::new("mqa_causal3_sink", &[2, 4, 3], &[3, 4, 5], 4, 1, 5, 3)
            .with_sink()
            .mode(SparseMode::RightDownCausal, 0, 0),
        // Rows of one length (`finetune --pack fixed`): dsink reads the sequence-head-major
        // stats by a transpose instead of an uploaded gather index.
        Case::new(
            "equal_rows_causal_sink",
            &[4, 4, 4],
            &[4, 4, 4],
            2,
            1,
            4,
            21,
        )
        .with_sink()
        .mode(SparseMode::RightDownCausal, 0, 0),
        Case::new("mode0_mask_prenext", &[4, 3], &[5, 3], 2, 2, 4, 4).mode(
            SparseMode::DefaultMask,
            1,
            0,
        ),
        Case::new("mode1_mask_sink", &[4, 3], &[5, 3], 2, 1, 4, 5)
            .with_sink()
            .mode(SparseMode::AllMask, 0, 0),
        Case::new("mode2_leftup", &[4, 3], &[3, 5], 2, 2, 4, 6).mode(
            SparseMode::LeftUpCausal,
            0,
            0,
        ),
        Case::new("mode4_band", &[5, 4], &[6, 4], 2, 2, 4, 7)
            .with_sink()
            .mode(SparseMode::Band, 2, 1),
        Case::new("mode6_prefix", &[4, 3], &[4, 5], 2, 2, 4, 8)
            .mode(SparseMode::PrefixCompress, 0, 0)
            .prefix(vec![1, 3]),
        Case::new("mode7_band_last", &[3, 2], &[3, 6], 2, 2, 4, 9).mode(
            SparseMode::RightDownCausalBand,
            6,
            -2,
        ),
        Case::new("mode8_band_first", &[3, 2], &[4, 4], 2, 2, 4, 10)
            .with_sink()
            .mode(SparseMode::BandLeftUpCausal, 4, 1),
        Case::new("empty_sequences", &[2, 0, 3, 2], &[2, 3, 0, 2], 2, 1, 4, 11).with_sink(),
        Case::new("alibi_compressed_type1_sink", &[5, 3], &[5, 3], 2, 1, 4, 20)
            .with_sink()
            .pse_alibi_compressed(PseType::OuterAddMul, true),
        Case::new(
            "alibi_compressed_type0_shared",
            &[4, 6],
            &[4, 6],
            2,
            2,
            4,
            21,
        )
        .pse_alibi_compressed(PseType::OuterMulAdd, false),
        Case::new(
            "trailing_zero_cum_lens",
            &[3, 2, 0, 0],
            &[4, 3, 0, 0],
            2,
            1,
            4,
            19,
        )
        .with_sink()
        .trailing_zero_cumulative(),
        Case::new("dropout_sink", &[3, 4], &[3, 4], 2, 2, 4, 12)
            .with_sink()
            .dropout(0.7),
        Case::new("pse_type0", &[3, 2], &[3, 4], 2, 2, 4, 13).pse_dense(PseType::OuterMulAdd),
        Case::new("pse_type1_sink", &[3, 2], &[3, 4], 2, 2, 4, 14)
            .with_sink()
            .pse_dense(PseType::OuterAddMul),
        Case::new("alibi_type2", &[4, 3], &[4, 3], 2, 2, 4, 15)
            .alibi(PseType::InnerMulAdd, false)
            .mode(SparseMode::RightDownCausal, 0, 0),
        Case::new("alibi_type3_per_batch_sink", &[4, 3], &[4, 3], 4, 2, 4, 16)
            .with_sink()
            .alibi(PseType::InnerMulAddSqrt, true),
        Case::new("odd_d_layout_tnd", &[3, 4], &[5, 2], 2, 2, 3, 17)
            .with_sink()
            .layout(SoftmaxLayout::SameAsInput),
        Case::new("fully_masked_rows", &[4, 3], &[2, 3], 2, 2, 4, 18)
            .with_sink()
            .mode(SparseMode::Band, 0, 0),
    ]
}
