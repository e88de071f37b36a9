//! The C ABI of HCCL as this crate calls it: the handle, the enum values of `HcclResult`,
//! `HcclDataType` and `HcclReduceOp`, `HcclRootInfo`, the prototypes, and [`HcclApi`], a table
//! of `unsafe extern "C"` function pointers filled either from CANN's `libhccl.so`
//! ([`super::loader`]) or from the host simulation's HCCL (crate `burn-ascend-acl-sim`, **not
//! CANN**).
//!
//! Prototypes and values are those of CANN's `hccl/hccl.h` and `hccl/hccl_types.h` (the copies
//! in the torch-npu wheel, `torch_npu/include/third_party/hccl/inc/hccl/`); `HcclBarrier` and
//! `HcclGetErrorString` are not in torch-npu's trimmed copy and follow CANN's documented
//! prototypes (`HcclResult HcclBarrier(HcclComm comm, aclrtStream stream)`, `const char
//! *HcclGetErrorString(HcclResult code)`). Every integer has the header's width and every
//! pointer is one C pointer, so the table is ABI-compatible with CANN on LP64 Linux.
//! `tools/abi-check/run.sh` checks them against the real headers.

use std::ffi::{c_char, c_void};

use crate::acl::ffi::AclrtStream;
use crate::acl::DataType;
use crate::prototype::Prototype;

/// `HcclComm` (`void *`): an opaque communicator handle.
pub type HcclComm = *mut c_void;
/// `HcclResult` (a C enum: `int` on every platform CANN ships for).
pub type HcclResult = i32;

/// `HCCL_SUCCESS`.
pub const HCCL_SUCCESS: HcclResult = 0;
/// `HCCL_E_PARA`: a parameter error (count, dtype, rank, root, mismatch across ranks).
pub const HCCL_E_PARA: HcclResult = 1;
/// `HCCL_E_PTR`: a null pointer.
pub const HCCL_E_PTR: HcclResult = 2;
/// `HCCL_E_MEMORY`.
pub const HCCL_E_MEMORY: HcclResult = 3;
/// `HCCL_E_INTERNAL`.
pub const HCCL_E_INTERNAL: HcclResult = 4;
/// `HCCL_E_NOT_SUPPORT`.
pub const HCCL_E_NOT_SUPPORT: HcclResult = 5;
/// `HCCL_E_NOT_FOUND`.
pub const HCCL_E_NOT_FOUND: HcclResult = 6;
/// `HCCL_E_UNAVAIL`.
pub const HCCL_E_UNAVAIL: HcclResult = 7;
/// `HCCL_E_TIMEOUT`: `HCCL_CONNECT_TIMEOUT` or `HCCL_EXEC_TIMEOUT` passed.
pub const HCCL_E_TIMEOUT: HcclResult = 9;
/// `HCCL_E_TCP_CONNECT`.
pub const HCCL_E_TCP_CONNECT: HcclResult = 11;
/// `HCCL_E_RUNTIME`: a runtime (ACL) call inside HCCL failed.
pub const HCCL_E_RUNTIME: HcclResult = 15;
/// `HCCL_E_REMOTE`: the peer reported an error.
pub const HCCL_E_REMOTE: HcclResult = 21;

/// The symbolic name of an `HcclResult`.
pub fn result_name(code: HcclResult) -> &'static str {
    match code {
        0 => "HCCL_SUCCESS",
        1 => "HCCL_E_PARA",
        2 => "HCCL_E_PTR",
        3 => "HCCL_E_MEMORY",
        4 => "HCCL_E_INTERNAL",
        5 => "HCCL_E_NOT_SUPPORT",
        6 => "HCCL_E_NOT_FOUND",
        7 => "HCCL_E_UNAVAIL",
        8 => "HCCL_E_SYSCALL",
        9 => "HCCL_E_TIMEOUT",
        10 => "HCCL_E_OPEN_FILE_FAILURE",
        11 => "HCCL_E_TCP_CONNECT",
        12 => "HCCL_E_ROCE_CONNECT",
        13 => "HCCL_E_TCP_TRANSFER",
        14 => "HCCL_E_ROCE_TRANSFER",
        15 => "HCCL_E_RUNTIME",
        16 => "HCCL_E_DRV",
        17 => "HCCL_E_PROFILING",
        18 => "HCCL_E_CCE",
        19 => "HCCL_E_NETWORK",
        20 => "HCCL_E_AGAIN",
        21 => "HCCL_E_REMOTE",
        _ => "",
    }
}

/// `HcclReduceOp` values.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[repr(i32)]
pub enum ReduceOp {
    Sum = 0,
    Prod = 1,
    Max = 2,
    Min = 3,
}

impl ReduceOp {
    /// The enum value as passed through the C ABI.
    pub fn raw(self) -> i32 {
        self as i32
    }

    /// Decodes a raw `HcclReduceOp`.
    pub fn from_raw(v: i32) -> Option<Self> {
        Some(match v {
            0 => Self::Sum,
            1 => Self::Prod,
            2 => Self::Max,
            3 => Self::Min,
            _ => return None,
        })
    }
}

/// `HcclDataType` values (not `aclDataType`'s: HCCL numbers its types itself).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[repr(i32)]
pub enum HcclDataType {
    Int8 = 0,
    Int16 = 1,
    Int32 = 2,
    Fp16 = 3,
    Fp32 = 4,
    Int64 = 5,
    Uint64 = 6,
    Uint8 = 7,
    Uint16 = 8,
    Uint32 = 9,
    Fp64 = 10,
    Bfp16 = 11,
}

impl HcclDataType {
    /// The enum value as passed through the C ABI.
    pub fn raw(self) -> i32 {
        self as i32
    }

    /// Decodes a raw `HcclDataType`.
    pub fn from_raw(v: i32) -> Option<Self> {
        use HcclDataType::*;
        Some(match v {
            0 => Int8,
            1 => Int16,
            2 => Int32,
            3 => Fp16,
            4 => Fp32,
            5 => Int64,
            6 => Uint64,
            7 => Uint8,
            8 => Uint16,
            9 => Uint32,
            10 => Fp64,
            11 => Bfp16,
            _ => return None,
        })
    }

    /// Bytes per element.
    pub fn size(self) -> usize {
        use HcclDataType::*;
        match self {
            Int8 | Uint8 => 1,
            Int16 | Uint16 | Fp16 | Bfp16 => 2,
            Int32 | Uint32 | Fp32 => 4,
            Int64 | Uint64 | Fp64 => 8,
        }
    }

    /// HCCL's type for an `aclDataType` (`None` for bool, which HCCL does not reduce).
    pub fn from_acl(dt: DataType) -> Option<Self> {
        use HcclDataType::*;
        Some(match dt {
            DataType::Float => Fp32,
            DataType::Float16 => Fp16,
            DataType::Bf16 => Bfp16,
            DataType::Double => Fp64,
            DataType::Int8 => Int8,
            DataType::Int16 => Int16,
            DataType::Int32 => Int32,
            DataType::Int64 => Int64,
            DataType::Uint8 => Uint8,
            DataType::Uint16 => Uint16,
            DataType::Uint32 => Uint32,
            DataType::Uint64 => Uint64,
            DataType::Bool => return None,
        })
    }
}

/// `HCCL_ROOT_INFO_BYTES`: the size of [`HcclRootInfo`].
pub const HCCL_ROOT_INFO_BYTES: usize = 4108;

/// `HcclRootInfo`: what rank 0's `HcclGetRootInfo` writes and every rank passes to
/// `HcclCommInitRootInfo` (opaque bytes: the root's address and a unique id).
#[repr(C)]
#[derive(Clone)]
pub struct HcclRootInfo {
    /// `char internal[HCCL_ROOT_INFO_BYTES]`.
    pub internal: [u8; HCCL_ROOT_INFO_BYTES],
}

impl Default for HcclRootInfo {
    fn default() -> Self {
        Self {
            internal: [0; HCCL_ROOT_INFO_BYTES],
        }
    }
}

impl std::fmt::Debug for HcclRootInfo {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "HcclRootInfo({} bytes)", HCCL_ROOT_INFO_BYTES)
    }
}

c_prototype! {
    /// `HcclResult HcclGetRootInfo(HcclRootInfo *rootInfo)`.
    HcclGetRootInfoFn, HcclGetRootInfoParams(
        root_info: *mut HcclRootInfo,
    ) -> HcclResult
}

c_prototype! {
    /// `HcclResult HcclCommInitRootInfo(uint32_t nRanks, const HcclRootInfo *rootInfo, uint32_t
    /// rank, HcclComm *comm)`.
    HcclCommInitRootInfoFn, HcclCommInitRootInfoParams(
        n_ranks: u32,
        root_info: *const HcclRootInfo,
        rank: u32,
        comm: *mut HcclComm,
    ) -> HcclResult
}

c_prototype! {
    /// `HcclResult HcclCommInitAll(uint32_t ndev, int32_t *devices, HcclComm *comms)`.
    HcclCommInitAllFn, HcclCommInitAllParams(
        ndev: u32,
        devices: *mut i32,
        comms: *mut HcclComm,
    ) -> HcclResult
}

c_prototype! {
    /// `HcclResult HcclAllReduce(void *sendBuf, void *recvBuf, uint64_t count, HcclDataType
    /// dataType, HcclReduceOp op, HcclComm comm, aclrtStream stream)`.
    HcclAllReduceFn, HcclAllReduceParams(
        send_buf: *mut c_void,
        recv_buf: *mut c_void,
        count: u64,
        data_type: i32,
        op: i32,
        comm: HcclComm,
        stream: AclrtStream,
    ) -> HcclResult
}

c_prototype! {
    /// `HcclResult HcclBroadcast(void *buf, uint64_t count, HcclDataType dataType, uint32_t root,
    /// HcclComm comm, aclrtStream stream)`.
    HcclBroadcastFn, HcclBroadcastParams(
        buf: *mut c_void,
        count: u64,
        data_type: i32,
        root: u32,
        comm: HcclComm,
        stream: AclrtStream,
    ) -> HcclResult
}

c_prototype! {
    /// `HcclResult HcclAllGather(void *sendBuf, void *recvBuf, uint64_t sendCount, HcclDataType
    /// dataType, HcclComm comm, aclrtStream stream)`: every rank's `sendCount` elements, in rank
    /// order, into each rank's `recvBuf` (`rankSize × sendCount` elements).
    HcclAllGatherFn, HcclAllGatherParams(
        send_buf: *mut c_void,
        recv_buf: *mut c_void,
        send_count: u64,
        data_type: i32,
        comm: HcclComm,
        stream: AclrtStream,
    ) -> HcclResult
}

c_prototype! {
    /// `HcclResult HcclReduceScatter(void *sendBuf, void *recvBuf, uint64_t recvCount,
    /// HcclDataType dataType, HcclReduceOp op, HcclComm comm, aclrtStream stream)`: each rank's
    /// `sendBuf` holds `rankSize × recvCount` elements; rank `r` receives the reduction over ranks
    /// of block `r`.
    HcclReduceScatterFn, HcclReduceScatterParams(
        send_buf: *mut c_void,
        recv_buf: *mut c_void,
        recv_count: u64,
        data_type: i32,
        op: i32,
        comm: HcclComm,
        stream: AclrtStream,
    ) -> HcclResult
}

c_prototype! {
    /// `HcclResult HcclBarrier(HcclComm comm, aclrtStream stream)`.
    HcclBarrierFn, HcclBarrierParams(
        comm: HcclComm,
        stream: AclrtStream,
    ) -> HcclResult
}

c_prototype! {
    /// `HcclResult HcclCommDestroy(HcclComm comm)`.
    HcclCommDestroyFn, HcclCommDestroyParams(
        comm: HcclComm,
    ) -> HcclResult
}

c_prototype! {
    /// `const char *HcclGetErrorString(HcclResult code)`.
    HcclGetErrorStringFn, HcclGetErrorStringParams(
        code: HcclResult,
    ) -> *const c_char
}

/// Calls the macro `$m` with the one list of the HCCL functions this crate calls:
///
/// ```text
/// fns { $($f:ident: $c:ident($p:ty)),* }
/// ```
///
/// with each function's parameter struct (its prototype, declared once with `c_prototype!`
/// above). Everything that names them — [`HcclApi`], [`names`], the marker types of [`func`],
/// the loader's lookup, the simulation's registration and the ABI check — is generated from
/// it.
#[macro_export]
macro_rules! hccl_api_table {
    ($m:ident) => {
        $m! {
            fns {
                get_root_info: HcclGetRootInfo($crate::hccl::ffi::HcclGetRootInfoParams),
                comm_init_root_info: HcclCommInitRootInfo($crate::hccl::ffi::HcclCommInitRootInfoParams),
                comm_init_all: HcclCommInitAll($crate::hccl::ffi::HcclCommInitAllParams),
                all_reduce: HcclAllReduce($crate::hccl::ffi::HcclAllReduceParams),
                broadcast: HcclBroadcast($crate::hccl::ffi::HcclBroadcastParams),
                all_gather: HcclAllGather($crate::hccl::ffi::HcclAllGatherParams),
                reduce_scatter: HcclReduceScatter($crate::hccl::ffi::HcclReduceScatterParams),
                barrier: HcclBarrier($crate::hccl::ffi::HcclBarrierParams),
                comm_destroy: HcclCommDestroy($crate::hccl::ffi::HcclCommDestroyParams),
                get_error_string: HcclGetErrorString($crate::hccl::ffi::HcclGetErrorStringParams)
            }
        }
    };
}

macro_rules! declare_hccl_api {
    (fns { $($f:ident: $c:ident($p:ty)),* }) => {
        /// The HCCL function table, one field per entry of
        /// [`hccl_api_table!`](crate::hccl_api_table). Plain function pointers (`Copy`,
        /// `Send + Sync`); calling any of them is `unsafe`, the safe wrapper is
        /// [`super::Communicator`].
        #[derive(Clone, Copy)]
        pub struct HcclApi {
            /// CANN's `libhccl.so` or the simulation.
            pub kind: crate::acl::ApiKind,
            $(
                #[doc = concat!("`", stringify!($c), "`.")]
                pub $f: <$p as Prototype>::FnPtr,
            )*
        }

        /// The C name of every entry of [`HcclApi`], by field.
        #[allow(non_upper_case_globals)]
        pub mod names {
            $(
                #[doc = concat!("`", stringify!($c), "`.")]
                pub const $f: &str = stringify!($c);
            )*
        }

        /// One marker type per function of the table, named by its field: what ties a function
        /// to its parameter struct and C name ([`TableFn`](crate::prototype::TableFn)), e.g. for the simulation's
        /// [`Implements`](crate::prototype::Implements).
        pub mod func {
            table_markers! { $($f: $c($p)),* }
        }

        impl HcclApi {
            /// The C names of the table, in order.
            pub const FUNCTIONS: &'static [&'static str] = &[$(stringify!($c)),*];
        }
    };
}

crate::hccl_api_table!(declare_hccl_api);

impl std::fmt::Debug for HcclApi {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "HcclApi({:?})", self.kind)
    }
}
