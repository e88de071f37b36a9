//! Activations: `relu` (`aclnnRelu`), `sigmoid` (`aclnnSigmoid`) and `gelu` (`aclnnGeluV2`,
//! exact) on the device, with the host fallback for dtypes they do not take; the rest are
//! Burn's defaults, composed of the float ops (native where those are).

use burn_ascend_cann::acl::aclnn::Unary;
use burn_backend::ops::ActivationOps;
use burn_backend::tensor::FloatTensor;

use super::native;
use super::native_elementwise as ne;
use crate::fallback::{Fallback, Host};
use crate::Ascend;

impl ActivationOps<Self> for Ascend {
    fn relu(tensor: FloatTensor<Self>) -> FloatTensor<Self> {
        if let Some(t) = native::unary(Unary::Relu, &tensor) {
            return t;
        }
        let mut cx = Fallback::new("relu");
        let tensor = cx.arg(tensor);
        cx.ret(<Host as ActivationOps<Host>>::relu(tensor))
    }

    fn sigmoid(tensor: FloatTensor<Self>) -> FloatTensor<Self> {
        if let Some(t) = native::unary(Unary::Sigmoid, &tensor) {
            return t;
        }
        let mut cx = Fallback::new("sigmoid");
        let tensor = cx.arg(tensor);
        cx.ret(<Host as ActivationOps<Host>>::sigmoid(tensor))
    }

    fn gelu(tensor: FloatTensor<Self>) -> FloatTensor<Self> {
        if let Some(t) = ne::gelu(&tensor) {
            return t;
        }
        let mut cx = Fallback::new("gelu");
        let tensor = cx.arg(tensor);
        cx.ret(<Host as ActivationOps<Host>>::gelu(tensor))
    }
}
