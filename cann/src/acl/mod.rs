//! Ascend dispatch: CANN's attention operators called through aclnn, with CANN's libraries
//! opened at **run time** (nothing of CANN is needed to build).
//!
//! Layers, bottom up:
//! - [`ffi`]: the C ABI — opaque handles, `aclDataType` / `aclFormat` values, status codes,
//!   the prototypes, and [`AclApi`], a table of `unsafe extern "C"` function pointers. Every
//!   ACL function and aclnn op is listed once, in [`ffi::table`] ([`acl_api_table!`]), with its
//!   prototype, declared once (`c_prototype!`: the function type, the parameter struct, the C
//!   entry point the simulation registers): the table's fields, the C names ([`ffi::names`]),
//!   the loader's symbol lookup, the availability list ([`AclApi::presence`]), the simulation's
//!   registration and the ABI check's list are generated from it;
//! - [`loader`]: finds the toolkit (`$ASCEND_TOOLKIT_HOME`, `$ASCEND_HOME_PATH`,
//!   `/usr/local/Ascend/ascend-toolkit/latest`; `lib64/`), opens `libascendcl.so`,
//!   `libnnopbase.so` and the op libraries in torch_npu's order (custom packages, every
//!   `libopapi_*.so`, `libopapi.so`, `libaclnn_*.so`) and resolves the table; without CANN it
//!   fails with one line naming every path tried;
//! - [`tensor`]: descriptor building in one place ([`TensorDesc`]) and RAII handles;
//! - [`runtime`]: device, stream, caching workspace allocator;
//! - [`aclnn`]: one function per aclnn op over handles, the two-stage call in [`aclnn::two_stage`];
//! - [`graph`]: graph capture (`aclmdlRI…`, optional in the table) and [`ModelRi`].
//!
//! The attention ops' call builders (validated contract spec + device tensors → one aclnn
//! call) sit above this layer, in `burn_ascend_backend::attention::builders`, shared by the
//! `Ascend` backend and the CLI.
//!
//! The second way to fill the table, **a host simulation of the same ABI (not CANN)** that CI
//! runs, is its own crate, `burn-ascend-acl-sim` (`acl-sim/`): `burn_ascend_acl_sim::runtime()`
//! gives a [`Runtime`] over it, and its `bench` measures the host overhead of one dispatched
//! call.
//!
//! `unsafe` is confined to `loader`, `tensor`, `runtime`, `graph` and `ops` (the calls through the
//! table), each block with a `// SAFETY:` line.
//!
//! [`acl_api_table!`]: crate::acl_api_table

pub mod aclnn;
mod error;
pub mod ffi;
pub mod graph;
pub mod loader;
pub mod profile;
pub mod runtime;
pub mod tensor;

pub use error::{status_name, AclError, Result};
pub use ffi::{names, AclApi, ApiKind, CaptureMode, DataType, Format};
pub use graph::{capture_refusal, is_capture_refusal, ModelRi, TaskGroup};
pub use runtime::{
    default_device_id, device_count, thread_launches, Runtime, RuntimeCounters, StreamOrder,
};
pub use tensor::{
    DeviceBuffer, DeviceTensor, IntArray, Scalar, Stream, Tensor, TensorDesc, TensorList,
};

/// Mutation switches that remove a required piece of the asynchronous protocol, so tests can
/// prove that the simulation catches its absence (feature `test-hooks`; without it every
/// switch is off and compiled out).
pub mod test_hooks {
    #[cfg(feature = "test-hooks")]
    static READ_WAIT_DROPPED: std::sync::atomic::AtomicBool =
        std::sync::atomic::AtomicBool::new(false);

    /// Makes [`super::DeviceBuffer::read`] skip its wait for the stream (process-wide): a
    /// read then races the queued writer, which the simulation must report.
    #[cfg(feature = "test-hooks")]
    pub fn drop_read_wait(dropped: bool) {
        READ_WAIT_DROPPED.store(dropped, std::sync::atomic::Ordering::SeqCst);
    }

    pub(crate) fn read_wait_dropped() -> bool {
        #[cfg(feature = "test-hooks")]
        return READ_WAIT_DROPPED.load(std::sync::atomic::Ordering::SeqCst);
        #[cfg(not(feature = "test-hooks"))]
        false
    }
}
