//! The **host fallback**: an op Ascend has no native kernel for downloads its inputs, runs
//! NdArray's implementation on the host and uploads the results. Written once: each fallback
//! method (generated into `tensor_ops/generated/*_fallbacks.rs` by
//! `backend-ascend/tools/gen_fallbacks.py`) is
//!
//! ```text
//! let mut cx = Fallback::new("float_remainder");   // counts the call
//! let lhs = cx.arg(lhs);                           // device → host (checks devices agree)
//! cx.ret(<Host as FloatTensorOps<Host>>::float_remainder(lhs, rhs))  // host → device
//! ```
//!
//! f16/bf16 travel to NdArray (f32/f64 only) as f32 and come back in the input's float dtype.
//! Calls are counted per op name: [`fallback_counts`].

use std::collections::BTreeMap;
use std::future::Future;
use std::sync::Mutex;
use std::task::{Context, Poll, Waker};

use burn_backend::ops::{
    DeformConv2dBackward, FloatTensorOps, MaxPool2dBackward, MaxPool2dWithIndices,
};
use burn_backend::quantization::QuantizationParametersPrimitive;
use burn_backend::{DType, FloatDType, TensorData};
use burn_ndarray::{NdArray, NdArrayDevice, NdArrayQTensor, NdArrayTensor};

use crate::device::AscendDevice;
use crate::qtensor::AscendQTensor;
use crate::tensor::AscendTensor;
use crate::Ascend;

/// The CPU backend the fallback runs.
pub type Host = NdArray<f32, i64, i8>;

static COUNTS: Mutex<BTreeMap<&'static str, u64>> = Mutex::new(BTreeMap::new());

/// How many times each op has run through the host fallback in this process. One entry is
/// not a host round trip: `attention_composite` counts Burn's `ModuleOps::attention` calls
/// that ran Burn's composite on the native ops instead of the aclnn op
/// (`crate::attention::burn_module`); each inference attention op's `<op>_composite` counts its
/// f32 calls that ran the ops crate's composite on the native ops, CANN's op taking no FLOAT
/// (the `*_COMPOSITE` constants of [`crate::attention`]).
pub fn fallback_counts() -> BTreeMap<&'static str, u64> {
    COUNTS.lock().unwrap_or_else(|e| e.into_inner()).clone()
}

/// How many times `op` has run through the host fallback in this process.
pub fn fallback_count(op: &str) -> u64 {
    fallback_counts().get(op).copied().unwrap_or(0)
}

pub(crate) fn count(op: &'static str) {
    *COUNTS
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .entry(op)
        .or_insert(0) += 1;
}

/// Polls a future that is ready at once (NdArray's `into_data`).
pub(crate) fn block_on<F: Future>(f: F) -> F::Output {
    let mut f = std::pin::pin!(f);
    let mut cx = Context::from_waker(Waker::noop());
    loop {
        if let Poll::Ready(v) = f.as_mut().poll(&mut cx) {
            return v;
        }
        std::thread::yield_now();
    }
}

static CPU: NdArrayDevice = NdArrayDevice::Cpu;

/// One fallback call: the op name, the device of its tensors and the float dtype results
/// return in.
pub struct Fallback {
    op: &'static str,
    device: Option<AscendDevice>,
    float: Option<DType>,
    explicit_float: bool,
    /// When the call started, while the dispatch profile is on (recorded on drop).
    started: Option<std::time::Instant>,
}

impl Drop for Fallback {
    fn drop(&mut self) {
        if let Some(t) = self.started {
            burn_ascend_cann::acl::profile::record(
                &format!("host fallback {}", self.op),
                t.elapsed(),
            );
        }
    }
}

impl Fallback {
    /// Starts (and counts) a fallback of `op`.
    pub fn new(op: &'static str) -> Self {
        count(op);
        Self {
            op,
            device: None,
            float: None,
            explicit_float: false,
            started: burn_ascend_cann::acl::profile::enabled().then(std::time::Instant::now),
        }
    }

    /// The op name.
    pub fn op(&self) -> &'static str {
        self.op
    }

    /// Records the device of an argument; every tensor argument must be on the same device.
    pub fn on(&mut self, d: AscendDevice) {
        match self.device {
            None => self.device = Some(d),
            Some(x) if x != d => panic!(
                "{}: tensors on different devices ({x} and {d}); move them with `to_device` first",
                self.op
            ),
            Some(_) => {}
        }
    }

    fn note_float(&mut self, d: DType) {
        if !self.explicit_float && self.float.is_none() {
            self.float = Some(d);
        }
    }

    /// A tensor argument (or a Vec/Option of them) moved to the host.
    pub fn arg<T: ToHost>(&mut self, t: T) -> T::Host {
        t.to_host(self)
    }

    /// A device argument: recorded, and replaced by the host device.
    pub fn device(&mut self, d: &AscendDevice) -> &'static NdArrayDevice {
        self.on(*d);
        &CPU
    }

    /// A requested float dtype: f16/bf16 run as f32 on the host and results come back in it.
    pub fn float_dtype(&mut self, d: FloatDType) -> FloatDType {
        self.explicit_float = true;
        match d {
            FloatDType::F16 | FloatDType::BF16 => {
                self.float = Some(DType::from(d));
                FloatDType::F32
            }
            other => {
                self.float = None;
                other
            }
        }
    }

    /// The host result moved back to the device.
    pub fn ret<T: FromHost<X>, X>(&self, x: X) -> T {
        T::from_host(x, self)
    }

    fn target(&self) -> AscendDevice {
        self.device.unwrap_or_else(|| {
            panic!(
                "{}: host fallback without a device (no tensor or device argument)",
                self.op
            )
        })
    }
}

/// Ascend → host.
pub trait ToHost {
    /// The host value.
    type Host;
    /// Moves `self` to the host, recording its device in `cx`.
    fn to_host(self, cx: &mut Fallback) -> Self::Host;
}

/// Host → Ascend.
pub trait FromHost<H>: Sized {
    /// Uploads `h` to `cx`'s device.
    fn from_host(h: H, cx: &Fallback) -> Self;
}

impl ToHost for AscendTensor {
    type Host = NdArrayTensor;
    fn to_host(self, cx: &mut Fallback) -> NdArrayTensor {
        cx.on(self.device());
        let mut data = self.to_data();
        if matches!(data.dtype, DType::F16 | DType::BF16) {
            cx.note_float(data.dtype);
            data = data.convert_dtype(DType::F32);
        }
        NdArrayTensor::from_data(data)
    }
}

impl ToHost for AscendQTensor {
    type Host = NdArrayQTensor;
    fn to_host(self, cx: &mut Fallback) -> NdArrayQTensor {
        cx.on(self.device);
        self.host
    }
}

impl<T: ToHost> ToHost for Option<T> {
    type Host = Option<T::Host>;
    fn to_host(self, cx: &mut Fallback) -> Self::Host {
        self.map(|t| t.to_host(cx))
    }
}

impl<T: ToHost> ToHost for Vec<T> {
    type Host = Vec<T::Host>;
    fn to_host(self, cx: &mut Fallback) -> Self::Host {
        self.into_iter().map(|t| t.to_host(cx)).collect()
    }
}

impl ToHost for QuantizationParametersPrimitive<Ascend> {
    type Host = QuantizationParametersPrimitive<Host>;
    fn to_host(self, cx: &mut Fallback) -> Self::Host {
        QuantizationParametersPrimitive {
            scales: self.scales.to_host(cx),
        }
    }
}

/// NdArray's tensor as `TensorData`.
pub(crate) fn host_data(t: NdArrayTensor) -> TensorData {
    block_on(<Host as FloatTensorOps<Host>>::float_into_data(t))
        .unwrap_or_else(|e| panic!("host fallback: reading NdArray's result failed: {e:?}"))
}

impl FromHost<NdArrayTensor> for AscendTensor {
    fn from_host(h: NdArrayTensor, cx: &Fallback) -> Self {
        let mut data = host_data(h);
        if let (DType::F32, Some(want)) = (data.dtype, cx.float) {
            data = data.convert_dtype(want);
        }
        AscendTensor::from_data(data, &cx.target())
    }
}

impl FromHost<NdArrayQTensor> for AscendQTensor {
    fn from_host(h: NdArrayQTensor, cx: &Fallback) -> Self {
        AscendQTensor {
            host: h,
            device: cx.target(),
        }
    }
}

impl<T: FromHost<H>, H> FromHost<Vec<H>> for Vec<T> {
    fn from_host(h: Vec<H>, cx: &Fallback) -> Self {
        h.into_iter().map(|x| T::from_host(x, cx)).collect()
    }
}

impl<T: FromHost<H>, H> FromHost<Option<H>> for Option<T> {
    fn from_host(h: Option<H>, cx: &Fallback) -> Self {
        h.map(|x| T::from_host(x, cx))
    }
}

impl<A: FromHost<HA>, B: FromHost<HB>, HA, HB> FromHost<(HA, HB)> for (A, B) {
    fn from_host(h: (HA, HB), cx: &Fallback) -> Self {
        (A::from_host(h.0, cx), B::from_host(h.1, cx))
    }
}

impl FromHost<DeformConv2dBackward<Host>> for DeformConv2dBackward<Ascend> {
    fn from_host(h: DeformConv2dBackward<Host>, cx: &Fallback) -> Self {
        DeformConv2dBackward {
            x_grad: cx.ret(h.x_grad),
            offset_grad: cx.ret(h.offset_grad),
            weight_grad: cx.ret(h.weight_grad),
            mask_grad: cx.ret(h.mask_grad),
            bias_grad: cx.ret(h.bias_grad),
        }
    }
}

impl FromHost<MaxPool2dWithIndices<Host>> for MaxPool2dWithIndices<Ascend> {
    fn from_host(h: MaxPool2dWithIndices<Host>, cx: &Fallback) -> Self {
        MaxPool2dWithIndices {
            output: cx.ret(h.output),
            indices: cx.ret(h.indices),
        }
    }
}

impl FromHost<MaxPool2dBackward<Host>> for MaxPool2dBackward<Ascend> {
    fn from_host(h: MaxPool2dBackward<Host>, cx: &Fallback) -> Self {
        MaxPool2dBackward {
            x_grad: cx.ret(h.x_grad),
        }
    }
}
