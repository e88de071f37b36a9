//! burn-ascend: CANN's attention operators for Burn — varlen flash attention with learned
//! sinks (forward and fused backward), on every Burn backend, with a CPU reference and an
//! `Ascend` backend that runs them through aclnn. See the README for the feature table; the
//! op-replay CLI and the example model are the crates `burn-ascend-cli` and `burn-ascend-model`.
//!
//! ```
//! use burn::backend::NdArray;
//! use burn::tensor::{Distribution, Tensor};
//! use burn_ascend::{flash_attention_varlen, FlashAttnOptions};
//!
//! let device = Default::default();
//! // two packed sequences of 3 and 5 tokens, 4 query heads sharing 2 kv heads, D = 8
//! let q = Tensor::<NdArray, 3>::random([8, 4, 8], Distribution::Normal(0.0, 1.0), &device);
//! let k = Tensor::<NdArray, 3>::random([8, 2, 8], Distribution::Normal(0.0, 1.0), &device);
//! let v = Tensor::<NdArray, 3>::random([8, 2, 8], Distribution::Normal(0.0, 1.0), &device);
//! let sinks = Tensor::<NdArray, 1>::zeros([4], &device);
//! let cu = [0, 3, 8];
//! let opts = FlashAttnOptions { causal: true, sinks: Some(sinks), ..Default::default() };
//! let out = flash_attention_varlen(q, k, v, &cu, &cu, opts).unwrap();
//! assert_eq!(out.dims(), [8, 4, 8]);
//! ```

pub use burn_ascend_backend as backend;
pub use burn_ascend_cann as cann;
pub use burn_ascend_contract as contract;
pub use burn_ascend_kernels as kernels;
pub use burn_ascend_ops as ops;
pub use burn_ascend_ops::*;
