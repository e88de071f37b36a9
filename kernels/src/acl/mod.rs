//! Ascend dispatch: CANN's attention operators called through aclnn, with CANN's libraries
//! opened at **run time** (nothing of CANN is needed to build).
//!
//! Layers, bottom up:
//! - [`ffi`]: the C ABI — opaque handles, `aclDataType` / `aclFormat` values, status codes,
//!   and [`AclApi`], a table of `unsafe extern "C"` function pointers;
//! - [`loader`]: finds the toolkit (`$ASCEND_TOOLKIT_HOME`, `$ASCEND_HOME_PATH`,
//!   `/usr/local/Ascend/ascend-toolkit/latest`; `lib64/`), opens `libascendcl.so`,
//!   `libnnopbase.so`, `libopapi.so` (+ `libopapi_transformer.so` where present) and resolves
//!   the table; without CANN it fails with one line naming every path tried;
//! - [`sim`]: **a host simulation of the same ABI (not CANN)**, the second way to fill the
//!   table, which CI runs;
//! - [`tensor`]: descriptor building in one place ([`TensorDesc`]) and RAII handles;
//! - [`runtime`]: device, stream, caching workspace allocator;
//! - [`ops`]: one function per aclnn op over handles, the two-stage call in [`ops::two_stage`];
//! - [`host`]: host buffers in, host buffers out — what the CLI's `--device sim|npu` calls;
//! - [`bench`]: the host overhead of one dispatched call.
//!
//! `unsafe` is confined to `loader`, `tensor`, `runtime`, `ops` and `sim/state` + `sim/ops` +
//! `sim/math` + `sim/elementwise`
//! (the `extern "C"` side), each block with a `// SAFETY:` line.

pub mod bench;
mod error;
pub mod ffi;
pub mod host;
pub mod loader;
pub mod ops;
pub mod runtime;
pub mod sim;
pub mod tensor;

pub use error::{status_name, AclError, Result};
pub use ffi::{AclApi, ApiKind, DataType, Format};
pub use runtime::{default_device_id, device_count, Runtime};
pub use tensor::{
    DeviceBuffer, DeviceTensor, IntArray, Scalar, Stream, Tensor, TensorDesc, TensorList,
};
