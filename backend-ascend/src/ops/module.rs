//! Module ops (convolutions, pools, interpolation, attention, FFT): host fallbacks for now.
//! `embedding` and its backward use Burn's defaults (select / select_add).

#![allow(unused_imports)]

use burn_backend::ops::{
    AttentionModuleOptions, ConvOptions, ConvTransposeOptions, DeformConv2dBackward,
    DeformConvOptions, InterpolateOptions, MaxPool2dBackward, MaxPool2dWithIndices, ModuleOps,
};
use burn_backend::tensor::{BoolTensor, FloatTensor, IntTensor};

use crate::fallback::{Fallback, Host};
use crate::Ascend;

impl ModuleOps<Self> for Ascend {
    // ---- GENERATED host fallbacks (tools/gen_fallbacks.py): do not edit below ----
    fn conv2d(
        x: FloatTensor<Self>,
        weight: FloatTensor<Self>,
        bias: Option<FloatTensor<Self>>,
        options: ConvOptions<2>,
    ) -> FloatTensor<Self> {
        let mut cx = Fallback::new("conv2d");
        let x = cx.arg(x);
        let weight = cx.arg(weight);
        let bias = cx.arg(bias);
        cx.ret(<Host as ModuleOps<Host>>::conv2d(x, weight, bias, options))
    }

    fn deform_conv2d(
        x: FloatTensor<Self>,
        offset: FloatTensor<Self>,
        weight: FloatTensor<Self>,
        mask: Option<FloatTensor<Self>>,
        bias: Option<FloatTensor<Self>>,
        options: DeformConvOptions<2>,
    ) -> FloatTensor<Self> {
        let mut cx = Fallback::new("deform_conv2d");
        let x = cx.arg(x);
        let offset = cx.arg(offset);
        let weight = cx.arg(weight);
        let mask = cx.arg(mask);
        let bias = cx.arg(bias);
        cx.ret(<Host as ModuleOps<Host>>::deform_conv2d(
            x, offset, weight, mask, bias, options,
        ))
    }

    fn deform_conv2d_backward(
        x: FloatTensor<Self>,
        offset: FloatTensor<Self>,
        weight: FloatTensor<Self>,
        mask: Option<FloatTensor<Self>>,
        bias: Option<FloatTensor<Self>>,
        output_grad: FloatTensor<Self>,
        options: DeformConvOptions<2>,
    ) -> DeformConv2dBackward<Self> {
        let mut cx = Fallback::new("deform_conv2d_backward");
        let x = cx.arg(x);
        let offset = cx.arg(offset);
        let weight = cx.arg(weight);
        let mask = cx.arg(mask);
        let bias = cx.arg(bias);
        let output_grad = cx.arg(output_grad);
        cx.ret(<Host as ModuleOps<Host>>::deform_conv2d_backward(
            x,
            offset,
            weight,
            mask,
            bias,
            output_grad,
            options,
        ))
    }

    fn conv3d(
        x: FloatTensor<Self>,
        weight: FloatTensor<Self>,
        bias: Option<FloatTensor<Self>>,
        options: ConvOptions<3>,
    ) -> FloatTensor<Self> {
        let mut cx = Fallback::new("conv3d");
        let x = cx.arg(x);
        let weight = cx.arg(weight);
        let bias = cx.arg(bias);
        cx.ret(<Host as ModuleOps<Host>>::conv3d(x, weight, bias, options))
    }

    fn conv_transpose2d(
        x: FloatTensor<Self>,
        weight: FloatTensor<Self>,
        bias: Option<FloatTensor<Self>>,
        options: ConvTransposeOptions<2>,
    ) -> FloatTensor<Self> {
        let mut cx = Fallback::new("conv_transpose2d");
        let x = cx.arg(x);
        let weight = cx.arg(weight);
        let bias = cx.arg(bias);
        cx.ret(<Host as ModuleOps<Host>>::conv_transpose2d(
            x, weight, bias, options,
        ))
    }

    fn conv_transpose3d(
        x: FloatTensor<Self>,
        weight: FloatTensor<Self>,
        bias: Option<FloatTensor<Self>>,
        options: ConvTransposeOptions<3>,
    ) -> FloatTensor<Self> {
        let mut cx = Fallback::new("conv_transpose3d");
        let x = cx.arg(x);
        let weight = cx.arg(weight);
        let bias = cx.arg(bias);
        cx.ret(<Host as ModuleOps<Host>>::conv_transpose3d(
            x, weight, bias, options,
        ))
    }

    fn avg_pool2d(
        x: FloatTensor<Self>,
        kernel_size: [usize; 2],
        stride: [usize; 2],
        padding: [usize; 2],
        count_include_pad: bool,
        ceil_mode: bool,
    ) -> FloatTensor<Self> {
        let mut cx = Fallback::new("avg_pool2d");
        let x = cx.arg(x);
        cx.ret(<Host as ModuleOps<Host>>::avg_pool2d(
            x,
            kernel_size,
            stride,
            padding,
            count_include_pad,
            ceil_mode,
        ))
    }

    fn avg_pool2d_backward(
        x: FloatTensor<Self>,
        grad: FloatTensor<Self>,
        kernel_size: [usize; 2],
        stride: [usize; 2],
        padding: [usize; 2],
        count_include_pad: bool,
        ceil_mode: bool,
    ) -> FloatTensor<Self> {
        let mut cx = Fallback::new("avg_pool2d_backward");
        let x = cx.arg(x);
        let grad = cx.arg(grad);
        cx.ret(<Host as ModuleOps<Host>>::avg_pool2d_backward(
            x,
            grad,
            kernel_size,
            stride,
            padding,
            count_include_pad,
            ceil_mode,
        ))
    }

    fn adaptive_avg_pool2d(x: FloatTensor<Self>, output_size: [usize; 2]) -> FloatTensor<Self> {
        let mut cx = Fallback::new("adaptive_avg_pool2d");
        let x = cx.arg(x);
        cx.ret(<Host as ModuleOps<Host>>::adaptive_avg_pool2d(
            x,
            output_size,
        ))
    }

    fn adaptive_avg_pool2d_backward(
        x: FloatTensor<Self>,
        grad: FloatTensor<Self>,
    ) -> FloatTensor<Self> {
        let mut cx = Fallback::new("adaptive_avg_pool2d_backward");
        let x = cx.arg(x);
        let grad = cx.arg(grad);
        cx.ret(<Host as ModuleOps<Host>>::adaptive_avg_pool2d_backward(
            x, grad,
        ))
    }

    fn max_pool2d(
        x: FloatTensor<Self>,
        kernel_size: [usize; 2],
        stride: [usize; 2],
        padding: [usize; 2],
        dilation: [usize; 2],
        ceil_mode: bool,
    ) -> FloatTensor<Self> {
        let mut cx = Fallback::new("max_pool2d");
        let x = cx.arg(x);
        cx.ret(<Host as ModuleOps<Host>>::max_pool2d(
            x,
            kernel_size,
            stride,
            padding,
            dilation,
            ceil_mode,
        ))
    }

    fn max_pool2d_with_indices(
        x: FloatTensor<Self>,
        kernel_size: [usize; 2],
        stride: [usize; 2],
        padding: [usize; 2],
        dilation: [usize; 2],
        ceil_mode: bool,
    ) -> MaxPool2dWithIndices<Self> {
        let mut cx = Fallback::new("max_pool2d_with_indices");
        let x = cx.arg(x);
        cx.ret(<Host as ModuleOps<Host>>::max_pool2d_with_indices(
            x,
            kernel_size,
            stride,
            padding,
            dilation,
            ceil_mode,
        ))
    }

    fn max_pool2d_with_indices_backward(
        x: FloatTensor<Self>,
        kernel_size: [usize; 2],
        stride: [usize; 2],
        padding: [usize; 2],
        dilation: [usize; 2],
        ceil_mode: bool,
        output_grad: FloatTensor<Self>,
        indices: IntTensor<Self>,
    ) -> MaxPool2dBackward<Self> {
        let mut cx = Fallback::new("max_pool2d_with_indices_backward");
        let x = cx.arg(x);
        let output_grad = cx.arg(output_grad);
        let indices = cx.arg(indices);
        cx.ret(<Host as ModuleOps<Host>>::max_pool2d_with_indices_backward(
            x,
            kernel_size,
            stride,
            padding,
            dilation,
            ceil_mode,
            output_grad,
            indices,
        ))
    }

    fn interpolate(
        x: FloatTensor<Self>,
        output_size: [usize; 2],
        options: InterpolateOptions,
    ) -> FloatTensor<Self> {
        let mut cx = Fallback::new("interpolate");
        let x = cx.arg(x);
        cx.ret(<Host as ModuleOps<Host>>::interpolate(
            x,
            output_size,
            options,
        ))
    }

    fn interpolate_backward(
        x: FloatTensor<Self>,
        grad: FloatTensor<Self>,
        output_size: [usize; 2],
        options: InterpolateOptions,
    ) -> FloatTensor<Self> {
        let mut cx = Fallback::new("interpolate_backward");
        let x = cx.arg(x);
        let grad = cx.arg(grad);
        cx.ret(<Host as ModuleOps<Host>>::interpolate_backward(
            x,
            grad,
            output_size,
            options,
        ))
    }

    fn attention(
        query: FloatTensor<Self>,
        key: FloatTensor<Self>,
        value: FloatTensor<Self>,
        mask: Option<BoolTensor<Self>>,
        attn_bias: Option<FloatTensor<Self>>,
        options: AttentionModuleOptions,
    ) -> FloatTensor<Self> {
        let mut cx = Fallback::new("attention");
        let query = cx.arg(query);
        let key = cx.arg(key);
        let value = cx.arg(value);
        let mask = cx.arg(mask);
        let attn_bias = cx.arg(attn_bias);
        cx.ret(<Host as ModuleOps<Host>>::attention(
            query, key, value, mask, attn_bias, options,
        ))
    }

    fn rfft(
        signal: FloatTensor<Self>,
        dim: usize,
        n: Option<usize>,
    ) -> (FloatTensor<Self>, FloatTensor<Self>) {
        let mut cx = Fallback::new("rfft");
        let signal = cx.arg(signal);
        cx.ret(<Host as ModuleOps<Host>>::rfft(signal, dim, n))
    }

    fn irfft(
        spectrum_re: FloatTensor<Self>,
        spectrum_im: FloatTensor<Self>,
        dim: usize,
        n: Option<usize>,
    ) -> FloatTensor<Self> {
        let mut cx = Fallback::new("irfft");
        let spectrum_re = cx.arg(spectrum_re);
        let spectrum_im = cx.arg(spectrum_im);
        cx.ret(<Host as ModuleOps<Host>>::irfft(
            spectrum_re,
            spectrum_im,
            dim,
            n,
        ))
    }
}
