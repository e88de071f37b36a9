//! `NdArray` runs prompt attention on the CPU reference ([`cpu_prompt_fwd`]) instead of the
//! composite; other backends' host fallbacks call the same function.

use burn::tensor::backend::Backend;
use burn::tensor::ops::FloatTensor;
use burn::tensor::TensorMetadata;

use burn_ascend_kernels::reference::prompt::prompt_flash_attention;

use super::{composite, PromptBackend, PromptInputs, PromptSpec};
use crate::common::ndarray::ndarray_on_host;
use crate::common::shapes;
use crate::error::Result;
use crate::host::{from_vec, to_vec};

ndarray_on_host! {
    PromptBackend {
        fn prompt_fwd(inputs: PromptInputs<FloatTensor<Self>>, spec: &PromptSpec)
            -> Result<FloatTensor<Self>> => cpu_prompt_fwd;
    }
}

/// Prompt attention on host memory through the CPU reference, for any backend.
pub fn cpu_prompt_fwd<B: Backend>(
    inputs: PromptInputs<FloatTensor<B>>,
    spec: &PromptSpec,
) -> Result<FloatTensor<B>> {
    let dims = spec.validate(&shapes::prompt(&inputs))?;
    composite::unsupported_on_burn(spec)?;
    let device = B::float_device(&inputs.query);
    let shape = |t: &FloatTensor<B>| t.shape().to_vec();
    let mask = inputs.atten_mask.map(|m| {
        let s = shape(&m);
        let bytes: Vec<u8> = to_vec::<B>(m).iter().map(|&x| u8::from(x != 0.0)).collect();
        (bytes, s)
    });
    let pse = inputs.pse_shift.map(|p| (shape(&p), to_vec::<B>(p)));
    let (q, k, v) = (
        to_vec::<B>(inputs.query),
        to_vec::<B>(inputs.key),
        to_vec::<B>(inputs.value),
    );
    let args = spec.args(
        &dims,
        &q,
        &k,
        &v,
        mask.as_ref().map(|(d, s)| (&d[..], &s[..])),
        pse.as_ref().map(|(s, d)| (&d[..], &s[..])),
    )?;
    let out = prompt_flash_attention(&args);
    let out = out.into_iter().map(|x| x as f32).collect();
    Ok(from_vec::<B>(out, &dims.out_shape(), &device))
}
