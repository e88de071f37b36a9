//! The op traits of Burn's `Backend`, one file per trait as in `burn-tch`. Native methods are
//! written by hand in each file; the rest are host fallbacks (see [`crate::fallback`]) generated
//! by `backend-ascend/tools/gen_fallbacks.py` into `generated/` (never edited by hand), one
//! `macro_rules!` per trait that the hand-written impl block invokes as its last item. After
//! adding or removing a hand-written method, rerun the script; CI runs it with `--check`.

pub(crate) mod activation;
pub(crate) mod base;
pub(crate) mod bool_tensor;
mod generated;
pub(crate) mod int_tensor;
pub(crate) mod module;
pub(crate) mod native;
pub(crate) mod native_elementwise;
pub(crate) mod native_index;
pub(crate) mod qtensor;
pub(crate) mod tensor;
pub(crate) mod transaction;
