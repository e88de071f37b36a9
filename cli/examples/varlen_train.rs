//! Train a small attention layer with learned sinks on packed variable-length sequences, on
//! CPU, through this crate's varlen op (fused backward under `Autodiff<NdArray>`).
//!
//! A student layer (GQA, causal, sinks) learns to reproduce a fixed random teacher layer on
//! random packed batches; the loss falls while the sinks are trained through `dsink`.
//!
//! `cargo run --release --example varlen_train [-- --steps N]`

use burn::backend::{Autodiff, NdArray};
use burn::module::{Module, Param};
use burn::nn::{Linear, LinearConfig};
use burn::optim::{AdamConfig, GradientsParams, Optimizer};
use burn::tensor::backend::Backend;
use burn::tensor::{Distribution, Tensor};
use burn_ascend::{flash_attention_varlen, FlashAttnOptions, TrainingBackend};
// The command line (clap; in the library so that the tests parse it).
use burn_ascend_cli::args::VarlenTrainArgs;
use clap::Parser;

const HIDDEN: usize = 32;
const HEADS: usize = 4;
const KV_HEADS: usize = 2;
const HEAD_DIM: usize = 8;

#[derive(Module, Debug)]
struct SinkAttention<B: Backend> {
    wq: Linear<B>,
    wk: Linear<B>,
    wv: Linear<B>,
    wo: Linear<B>,
    sinks: Param<Tensor<B, 1>>,
}

impl<B: TrainingBackend> SinkAttention<B> {
    fn new(device: &B::Device, sink_init: f64) -> Self {
        let lin = |i, o| LinearConfig::new(i, o).with_bias(false).init(device);
        Self {
            wq: lin(HIDDEN, HEADS * HEAD_DIM),
            wk: lin(HIDDEN, KV_HEADS * HEAD_DIM),
            wv: lin(HIDDEN, KV_HEADS * HEAD_DIM),
            wo: lin(HEADS * HEAD_DIM, HIDDEN),
            sinks: Param::from_tensor(Tensor::full([HEADS], sink_init, device)),
        }
    }

    /// `x` is `[T, HIDDEN]`, packed sequences delimited by `cu_seqlens` (flash-attn style).
    fn forward(&self, x: Tensor<B, 2>, cu_seqlens: &[i64]) -> Tensor<B, 2> {
        let t = x.dims()[0];
        let q = self.wq.forward(x.clone()).reshape([t, HEADS, HEAD_DIM]);
        let k = self.wk.forward(x.clone()).reshape([t, KV_HEADS, HEAD_DIM]);
        let v = self.wv.forward(x).reshape([t, KV_HEADS, HEAD_DIM]);
        let opts = FlashAttnOptions {
            causal: true,
            sinks: Some(self.sinks.val()),
            ..Default::default()
        };
        let o =
            flash_attention_varlen(q, k, v, cu_seqlens, cu_seqlens, opts).expect("valid shapes");
        self.wo.forward(o.reshape([t, HEADS * HEAD_DIM]))
    }
}

/// A packed batch of sequences with lengths drawn from a fixed cycle.
fn batch<B: Backend>(step: usize, device: &B::Device) -> (Tensor<B, 2>, Vec<i64>) {
    let lengths = [5, 17, 1, 9, 24, 3, 13];
    let mut cu = vec![0i64];
    for i in 0..4 {
        cu.push(cu.last().unwrap() + lengths[(step + i) % lengths.len()]);
    }
    let t = *cu.last().unwrap() as usize;
    (
        Tensor::random([t, HIDDEN], Distribution::Normal(0.0, 1.0), device),
        cu,
    )
}

fn main() {
    type B = Autodiff<NdArray>;
    let steps = VarlenTrainArgs::parse().steps;
    let device = Default::default();
    B::seed(&device, 7);
    let teacher = SinkAttention::<NdArray>::new(&device, 0.0);
    let teacher = SinkAttention {
        sinks: Param::from_tensor(Tensor::from_floats([2.0, -1.0, 0.5, 3.0], &device)),
        ..teacher
    };
    let mut student = SinkAttention::<B>::new(&device, 0.0);
    let mut optim = AdamConfig::new().init();
    let (mut first, mut last) = (None, 0.0);
    for step in 0..steps {
        let (x, cu) = batch::<NdArray>(step, &device);
        let target = teacher.forward(x.clone(), &cu);
        let pred = student.forward(Tensor::from_inner(x), &cu);
        let loss = (pred - Tensor::from_inner(target)).powi_scalar(2).mean();
        last = loss.clone().into_scalar();
        first.get_or_insert(last);
        if step % 50 == 0 || step + 1 == steps {
            println!(
                "step {step:4}  loss {last:.5}  sinks {:?}",
                student.sinks.val().into_data().to_vec::<f32>().unwrap()
            );
        }
        let grads = GradientsParams::from_grads(loss.backward(), &student);
        student = optim.step(3e-3, student, grads);
    }
    println!(
        "varlen_train: loss {:.5} -> {last:.5} over {steps} steps",
        first.unwrap_or(0.0)
    );
}
