//! **A host simulation of the ACL / aclnn C ABI — not CANN.**
//!
//! [`api`] is an [`AclApi`] whose entries are `extern "C"` functions of this module: "device"
//! memory is host memory, streams are synchronous, nnopbase handles are boxed Rust values, and
//! each aclnn op decodes the descriptors it was handed (dims, strides, offset, dtype, format,
//! storage) and runs this crate's CPU kernels. It exists so CI, which has no NPU, exercises
//! the dispatch code path byte for byte: a wrong argument order, stride or dtype in
//! [`super::ops`] / [`super::host`] changes the simulated result or is refused.
//!
//! What it enforces, as CANN does (status codes of `aclnn_return_code.md`):
//! - null required argument → 161001 (`ACLNN_ERR_PARAM_NULLPTR`);
//! - bad dtype / shape / format / attribute → 161002 (`ACLNN_ERR_PARAM_INVALID`);
//! - two-stage order: a launch needs an executor from the same op's `GetWorkspaceSize`, used
//!   once (161002 otherwise), and a workspace of at least the size asked for (161002);
//! - every tensor's storage must lie inside one live device allocation, and the view inside
//!   its storage (161002) — checks CANN itself does not make, which catch stride bugs;
//! - each failure leaves a message for `aclGetRecentErrMsg`.
//!
//! The elementwise and matmul ops the Burn backend calls (`aclnnAdd`, `aclnnSub`, `aclnnMul`,
//! `aclnnDiv`, `aclnnMatmul`, `aclnnAdds`, `aclnnMuls`, `aclnnExp/Log/Sqrt/Abs/Tanh`,
//! `aclnnReduceSum`, `aclnnMean`, with `aclCreateScalar` for scalars) are simulated in `math`
//! with the same validation; unlike CANN they do not promote mixed dtypes (161002). The
//! comparisons, `aclnnSWhere`, masked fill, copy, logic, cast, Amax/Amin/ArgMax/ArgMin/MaxDim/
//! MinDim, activations, pow/clamp and random fills are in `elementwise`, validated the same way.
//!
//! It does not model: layouts other than TND for varlen, rope, padding masks, int8 Q/K/V
//! (full quantisation), NHSD / 4-D scatter; those return 161002 with an "unsupported in the
//! simulation" message. A kernel panic becomes 561000 (`ACLNN_ERR_INNER`), never an unwind
//! across the C boundary.
//!
//! [`set_compute`] turns the kernels off (everything else still runs) so the host overhead of a
//! dispatched call can be measured ([`super::bench`]).

mod elementwise;
mod index;
mod math;
mod ops;
mod state;

pub use state::{live_handles, memory_in_use, set_compute, set_memory_limit, LiveHandles};

use super::ffi::{AclApi, ApiKind, OpFns};

static API: AclApi = AclApi {
    kind: ApiKind::Simulation,
    acl_init: state::acl_init,
    acl_finalize: state::acl_finalize,
    set_device: state::set_device,
    reset_device: state::reset_device,
    get_device_count: state::get_device_count,
    create_stream: state::create_stream,
    destroy_stream: state::destroy_stream,
    synchronize_stream: state::synchronize_stream,
    malloc: state::malloc,
    free: state::free,
    memcpy: state::memcpy,
    get_recent_err_msg: state::get_recent_err_msg,
    create_tensor: state::create_tensor,
    destroy_tensor: state::destroy_tensor,
    create_int_array: state::create_int_array,
    destroy_int_array: state::destroy_int_array,
    create_tensor_list: state::create_tensor_list,
    destroy_tensor_list: state::destroy_tensor_list,
    create_scalar: math::create_scalar,
    destroy_scalar: math::destroy_scalar,
    varlen_fwd_v5: Some(OpFns {
        workspace: ops::varlen_fwd_v5_ws,
        launch: ops::varlen_fwd_v5_launch,
    }),
    varlen_fwd_base: Some(OpFns {
        workspace: ops::varlen_fwd_base_ws,
        launch: ops::varlen_fwd_base_launch,
    }),
    varlen_grad_v5: Some(OpFns {
        workspace: ops::varlen_grad_v5_ws,
        launch: ops::varlen_grad_v5_launch,
    }),
    pfa_v3: Some(OpFns {
        workspace: ops::pfa_v3_ws,
        launch: ops::pfa_v3_launch,
    }),
    pfa_v1: Some(OpFns {
        workspace: ops::pfa_v1_ws,
        launch: ops::pfa_v1_launch,
    }),
    ifa_v4: Some(OpFns {
        workspace: ops::ifa_v4_ws,
        launch: ops::ifa_v4_launch,
    }),
    scatter_pa_kv_cache: Some(OpFns {
        workspace: ops::scatter_ws,
        launch: ops::scatter_launch,
    }),
    add: Some(OpFns {
        workspace: math::add_ws,
        launch: math::add_launch,
    }),
    sub: Some(OpFns {
        workspace: math::sub_ws,
        launch: math::sub_launch,
    }),
    mul: Some(OpFns {
        workspace: math::mul_ws,
        launch: math::mul_launch,
    }),
    div: Some(OpFns {
        workspace: math::div_ws,
        launch: math::div_launch,
    }),
    matmul: Some(OpFns {
        workspace: math::matmul_ws,
        launch: math::matmul_launch,
    }),
    adds: Some(OpFns {
        workspace: math::adds_ws,
        launch: math::adds_launch,
    }),
    muls: Some(OpFns {
        workspace: math::muls_ws,
        launch: math::muls_launch,
    }),
    exp: Some(OpFns {
        workspace: math::exp_ws,
        launch: math::exp_launch,
    }),
    log: Some(OpFns {
        workspace: math::log_ws,
        launch: math::log_launch,
    }),
    sqrt: Some(OpFns {
        workspace: math::sqrt_ws,
        launch: math::sqrt_launch,
    }),
    abs: Some(OpFns {
        workspace: math::abs_ws,
        launch: math::abs_launch,
    }),
    tanh: Some(OpFns {
        workspace: math::tanh_ws,
        launch: math::tanh_launch,
    }),
    reduce_sum: Some(OpFns {
        workspace: math::reduce_sum_ws,
        launch: math::reduce_sum_launch,
    }),
    mean: Some(OpFns {
        workspace: math::mean_ws,
        launch: math::mean_launch,
    }),
    layout: index::LAYOUT,
    elementwise: elementwise::API,
};

/// The simulation's function table.
pub fn api() -> &'static AclApi {
    &API
}

/// The simulation's table with some ops removed, to exercise the loader's fallbacks (V5 → base
/// varlen, PFA V3 → V1) the way an older CANN would present them.
pub fn api_without(varlen_v5: bool, pfa_v3: bool) -> &'static AclApi {
    static VARIANTS: std::sync::OnceLock<[AclApi; 4]> = std::sync::OnceLock::new();
    let v = VARIANTS.get_or_init(|| {
        let mk = |drop_v5: bool, drop_v3: bool| AclApi {
            varlen_fwd_v5: if drop_v5 { None } else { API.varlen_fwd_v5 },
            pfa_v3: if drop_v3 { None } else { API.pfa_v3 },
            ..API
        };
        [
            mk(false, false),
            mk(true, false),
            mk(false, true),
            mk(true, true),
        ]
    });
    &v[varlen_v5 as usize + 2 * pfa_v3 as usize]
}
