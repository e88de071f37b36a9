//! **A host simulation of the ACL / aclnn C ABI — not CANN.**
//!
//! [`api`] is an [`AclApi`] of `burn-ascend-cann` whose entries are `extern "C"` functions
//! of this crate: "device" memory is host memory, streams are synchronous, nnopbase handles are
//! boxed Rust values, and each aclnn op decodes the descriptors it was handed (dims, strides,
//! offset, dtype, format, storage) and runs the kernels crate's CPU kernels. It exists so CI,
//! which has no NPU, exercises the dispatch code path byte for byte: a wrong argument order,
//! stride or dtype in `burn_ascend_cann::acl::aclnn` or in the backend's call builders
//! (`burn_ascend_backend::attention::builders`) changes the simulated
//! result or is refused. [`runtime`] opens a `Runtime` over it.
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
//! The registration is generated from the cann crate's one table of ops
//! (`burn_ascend_cann::acl_api_table!`): every op listed there must have a first stage here,
//! `first_stage!(field, …)` in its module (e.g. `first_stage!(sin, …)`), over the op's parameter
//! struct, which the table's prototype generates with the C entry point; the launch stages are
//! generated ([`state::launch`] under the op's name). One module per family, as
//! `burn_ascend_kernels::reference`:
//! - `state`: runtime, streams, executors; `state::memory` (device memory), `state::handles`
//!   (tensors, int arrays, tensor lists, scalars);
//! - `varlen`, `prompt`, `incre`, `scatter`, `fia`: the attention ops (decoding helpers in `wire`);
//! - `math`: `aclnnAdd`, `aclnnSub`, `aclnnMul`, `aclnnDiv`, `aclnnMatmul`, `aclnnAdds`,
//!   `aclnnMuls`, `aclnnExp/Log/Sqrt/Abs/Tanh`, `aclnnReduceSum`, `aclnnMean`; unlike CANN they
//!   do not promote mixed dtypes (161002);
//! - `elementwise`: comparisons, `aclnnSWhere`, masked fill, logic, cast (`compare`),
//!   Amax/Amin/ArgMax/ArgMin/MaxDim/MinDim (`reduce`), activations and pow/clamp (`unary`),
//!   random fills (`random`), validated the same way;
//! - `index`: the indexing and layout ops.
//!
//! It does not model: layouts other than TND for varlen, rope, padding masks, int8 Q/K/V
//! (full quantisation), NHSD / 4-D scatter; those return 161002 with an "unsupported in the
//! simulation" message. A kernel panic becomes 561000 (`ACLNN_ERR_INNER`), never an unwind
//! across the C boundary.
//!
//! Devices: one (index 0) unless [`set_device_count`] or `$BURN_ASCEND_SIM_DEVICES` asks for
//! more; each has its own streams (one worker thread each), and all share one host memory
//! pool. [`hccl_api`] is a **simulated HCCL (not CANN's)** over them: communicators in one
//! process, or across processes of one machine (one per rank, joined through the root info
//! over a per-job Unix socket), and collectives queued on the device streams, reduced in rank
//! order (module `hccl`).
//!
//! [`inject_fault`] makes the calling thread's next `aclrtMalloc` (207001), a chosen aclnn
//! launch (361001 at execute) or `aclrtSynchronizeStream` (507015) fail, for error-path tests.
//!
//! Graph capture (`aclmdlRICaptureBegin` … `aclmdlRIExecuteAsync`, task groups and their
//! updates) is modelled as CANN does it (`state::capture`): a capturing stream records its
//! tasks instead of running them; a replay runs them in order as one launch; a
//! synchronisation, a synchronous copy, an allocation or a host copy on the capturing stream
//! during a capture is refused (107030) and invalidates it. [`graph_tasks`] lists a graph's
//! recorded tasks.
//!
//! [`set_compute`] turns the kernels off (everything else still runs) so the host overhead of a
//! dispatched call can be measured ([`bench`]).
//!
//! [`cost`] models the device time an Atlas A2 NPU would need for each queued task (a roofline
//! from the FLOPs and HBM bytes of the shapes the first stage decoded), when
//! [`set_cost_model`] turns it on.
//!
//! `unsafe` is confined to the `extern "C"` side: `state` (+ `state::memory`,
//! `state::handles`) and the first stages of the op modules, each block with a `// SAFETY:`
//! line.

#[macro_use]
mod first_stage;
pub mod bench;
pub mod cost;
mod elementwise;
mod fia;
mod fused;
mod grouped_matmul;
mod hccl;
mod incre;
mod index;
mod math;
mod moe_gating;
mod optim;
mod prompt;
mod release;
mod scatter;
mod state;
mod varlen;
mod wire;

pub use cost::{
    cost_model_enabled, modelled_device_time, reset_modelled_device_time, set_cost_model,
    ModelledOp, OpCost,
};
pub use fia::last_learnable_sink_dtype;
pub use hccl::{hccl_api, live_communicators, set_connect_timeout, set_exec_timeout};
pub use release::{cann_release, set_cann_release, set_process_cann_release, CANN_RELEASE_ENV};
pub use state::capture::{graph_attention, graph_tasks};
pub use state::{
    clear_faults, device_count, device_time, faults_fired, inject_fault, launches, live_handles,
    memory_in_use, reset_device_time, set_compute, set_device_count, set_memory_limit,
    set_stream_delay, Fault, LiveHandles, SIM_ACL_VERSION, SIM_HAZARD_STATUS,
    SIM_STREAM_FAULT_STATUS,
};

use std::ffi::c_void;

use burn_ascend_cann::acl::ffi::{func, op, AclOpExecutor, AclStatus, AclrtStream, OpFns};
use burn_ascend_cann::acl::{AclApi, ApiKind, Result, Runtime};

/// The simulation as the implementer of every function of the tables: `first_stage!`,
/// `runtime_fn!` and `hccl_fn!` in each module.
pub(crate) struct Sim;

/// The simulation's table from the cann crate's table: each runtime, nnopbase and
/// graph-capture function and each op's first stage the C entry of its prototype over
/// [`Sim`]'s [`Implements`](burn_ascend_cann::prototype::Implements), each op's launch stage
/// generated here.
macro_rules! register {
    (
        runtime { $($rf:ident: $rc:ident($rp:ty)),* }
        graph { $($gf:ident: $gc:ident($gp:ty)),* }
        ops { $($(#[$a:meta])* $f:ident: $c:ident($p:ty)),* }
    ) => {
        /// The launch stage of every op: [`state::launch`] under the op's C name.
        mod launch {
            use super::*;
            $(
                pub(crate) unsafe extern "C" fn $f(
                    ws: *mut c_void,
                    size: u64,
                    ex: *mut AclOpExecutor,
                    stream: AclrtStream,
                ) -> AclStatus {
                    state::launch(stringify!($c), ws, size, ex, stream)
                }
            )*
        }

        static API: AclApi = AclApi {
            kind: ApiKind::Simulation,
            $($rf: <$rp>::entry::<func::$rf, Sim>,)*
            $($gf: Some(<$gp>::entry::<func::$gf, Sim>),)*
            $($f: Some(OpFns {
                workspace: <$p>::entry::<op::$f, Sim>,
                launch: launch::$f,
            }),)*
        };

        /// The table without the ops (or graph functions) whose C names are in `missing`.
        fn table_without(missing: &[&str]) -> AclApi {
            #[allow(unused_mut)]
            let mut api = AclApi { ..API };
            $(
                if missing.contains(&stringify!($gc)) {
                    api.$gf = None;
                }
            )*
            $(
                if missing.contains(&stringify!($c)) {
                    api.$f = None;
                }
            )*
            api
        }
    };
}

burn_ascend_cann::acl_api_table!(register);

/// Runs `f` under the guard every simulated entry point runs under; returns the status and
/// the recent-error message. For the guard's tests only.
#[doc(hidden)]
pub use state::{first_stage_read_for_tests, guarded_for_tests};

/// The uniform draw's bound helpers, for the integration tests (the library has no unit tests:
/// `test = false`, so tests inside it would never be built).
#[doc(hidden)]
pub mod random_bounds_for_tests {
    pub use crate::elementwise::random::{largest_below, round_to};
}

/// The simulation's function table.
pub fn api() -> &'static AclApi {
    &API
}

/// A runtime over the simulation's device 0: device memory is host memory and each aclnn op
/// runs the kernels crate's CPU kernels.
pub fn runtime() -> Result<Runtime> {
    Runtime::with_api(api(), 0)
}

/// A runtime over simulated device `device` (`0..device_count()`; see [`set_device_count`]),
/// with its own stream.
pub fn runtime_on(device: i32) -> Result<Runtime> {
    Runtime::with_api(api(), device)
}

/// The simulation's table with some ops removed, to exercise the loader's fallbacks (V5 → base
/// varlen, PFA V3 → V1) the way an older CANN would present them.
pub fn api_without(varlen_v5: bool, pfa_v3: bool) -> &'static AclApi {
    let mut missing = Vec::new();
    if varlen_v5 {
        missing.push(burn_ascend_cann::acl::ffi::names::varlen_fwd_v5);
    }
    if pfa_v3 {
        missing.push(burn_ascend_cann::acl::ffi::names::pfa_v3);
    }
    api_without_ops(&missing)
}

/// The simulation's table without the ops whose C names are listed (e.g.
/// `aclnnFlashAttentionUnpaddingScoreGrad`), as a CANN build lacking them presents itself.
/// One table per distinct list, kept for the process (tests ask for a handful).
pub fn api_without_ops(missing: &[&str]) -> &'static AclApi {
    use std::collections::HashMap;
    use std::sync::Mutex;
    static VARIANTS: Mutex<Option<HashMap<Vec<String>, &'static AclApi>>> = Mutex::new(None);
    let mut key: Vec<String> = missing.iter().map(|s| s.to_string()).collect();
    key.sort();
    key.dedup();
    let mut guard = VARIANTS.lock().unwrap_or_else(|e| e.into_inner());
    let map = guard.get_or_insert_with(HashMap::new);
    map.entry(key)
        .or_insert_with(|| Box::leak(Box::new(table_without(missing))))
}
