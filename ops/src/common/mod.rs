//! What several ops share, named by what it is: the shapes a call's carrier hands to the
//! contract's validation ([`shapes`], used by the composites and by every backend's impl, so
//! that no backend reaches into an op's composite for them) and the Burn tensor helpers of the
//! composites ([`tensor`]); the graph node of the ops with a fused backward ([`autodiff`]); the
//! `NdArray` impl every op writes as a hand-over to its host
//! function (`ndarray`).

pub mod autodiff;
pub(crate) mod ndarray;
pub mod shapes;
pub mod tensor;
