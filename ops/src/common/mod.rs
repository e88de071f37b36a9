//! What several ops share, named by what it is: the Burn tensor helpers of the composites
//! ([`tensor`]); the graph node of the ops with a fused backward ([`autodiff`]); the `NdArray`
//! impl every op writes as a hand-over to its host function (`ndarray`). The shapes a call's
//! carrier hands to the contract's validation are each op's own, in its folder
//! (`<op>::shapes`): the composites and every backend's impl validate through them.

pub mod autodiff;
pub(crate) mod ndarray;
pub mod tensor;
