//! Burn tensor helpers shared by the composites and the public functions: moving between a
//! backend's float primitive and `Tensor<B, D>`, the GQA head expansion, the paged-cache
//! gather (incremental and fused inference attention both read paged KV) and the `[B, N, S, D]`
//! view of the prompt-style layouts (prompt and fused inference attention).

use burn::tensor::backend::Backend;
use burn::tensor::ops::FloatTensor;
use burn::tensor::{Int, Tensor, TensorData, TensorPrimitive};

use burn_ascend_contract::incre::PagedLayout;
use burn_ascend_contract::prompt::PfaLayout;

/// A float primitive as a rank-`D` tensor.
pub fn wrap<B: Backend, const D: usize>(p: FloatTensor<B>) -> Tensor<B, D> {
    Tensor::from_primitive(TensorPrimitive::Float(p))
}

/// A float tensor's primitive.
pub fn unwrap<B: Backend, const D: usize>(t: Tensor<B, D>) -> FloatTensor<B> {
    t.into_primitive().tensor()
}

/// `[B, N, S, D]` view of a rank-3/4 query, key or value in a prompt-style layout (prompt and
/// fused inference attention share them); a TND tensor is one batch of all its tokens (prompt
/// attention slices TND per sequence before it gets here).
pub fn bnsd<B: Backend>(t: FloatTensor<B>, layout: PfaLayout, heads: usize) -> Tensor<B, 4> {
    match layout {
        PfaLayout::Bsh => {
            let t: Tensor<B, 3> = wrap(t);
            let [b, s, h] = t.dims();
            t.reshape([b, s, heads, h / heads]).swap_dims(1, 2)
        }
        PfaLayout::Bsnd => wrap::<B, 4>(t).swap_dims(1, 2),
        PfaLayout::Bnsd | PfaLayout::BnsdBsnd => wrap(t),
        PfaLayout::Tnd => {
            let t: Tensor<B, 3> = wrap(t);
            let [s, n, d] = t.dims();
            t.swap_dims(0, 1).reshape([1, n, s, d])
        }
    }
}

/// `[Nkv, S, D]` → `[N, S, D]`, each kv head repeated for its group.
pub fn expand_gqa<B: Backend>(x: Tensor<B, 3>, group: usize) -> Tensor<B, 3> {
    if group == 1 {
        return x;
    }
    let [nkv, s, d] = x.dims();
    x.reshape([nkv, 1, s, d])
        .expand([nkv, group, s, d])
        .reshape([nkv * group, s, d])
}

/// `[Nkv, len, D]`: the first `len` tokens of batch `b` from a paged cache.
pub fn paged_rows<B: Backend>(
    cache: &FloatTensor<B>,
    layout: PagedLayout,
    ids: &[i32],
    len: usize,
    nkv: usize,
) -> Tensor<B, 3> {
    let device = B::float_device(cache);
    let idx = Tensor::<B, 1, Int>::from_data(
        TensorData::new(
            ids.iter().map(|&x| x as i64).collect::<Vec<_>>(),
            [ids.len()],
        ),
        &device,
    );
    match layout {
        PagedLayout::Bsh => {
            let c: Tensor<B, 3> = wrap(cache.clone());
            let [_, bs, h] = c.dims();
            c.select(0, idx)
                .reshape([ids.len() * bs, nkv, h / nkv])
                .narrow(0, 0, len)
                .swap_dims(0, 1)
        }
        PagedLayout::Bnsd => {
            let c: Tensor<B, 4> = wrap(cache.clone());
            let [_, n, bs, d] = c.dims();
            c.select(0, idx)
                .swap_dims(0, 1)
                .reshape([n, ids.len() * bs, d])
                .narrow(1, 0, len)
        }
    }
}
