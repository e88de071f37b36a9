//! The ABI check of burn-ascend's FFI declarations against CANN's real headers: a wrong width
//! or order in a hand-copied prototype compiles and corrupts arguments at run time, so a C++
//! compiler compares every declaration with the headers.
//!
//! **What is compared.** The Rust side is read from the one machine-readable source there is,
//! the table [`burn_ascend_cann::acl_api_table!`]: this crate calls it with its own callback
//! ([`functions`]), so every runtime / nnopbase function and both stages of every aclnn op are
//! listed without a second list that could drift. Each prototype is turned into C++ types by
//! the *compiler's* view of the Rust type ([`CType`], [`CFn`]: `*const *const AclTensor` becomes
//! `aclTensor const * const *`, `u64` becomes `uint64_t`), not by parsing
//! `cann/src/acl/ffi/`, so type aliases (`T`, `IA`, `Ws`, …) are resolved exactly as rustc
//! resolves them. The enum values
//! and status codes are read from the same crate ([`constants`]): `ffi.rs`'s constants, every
//! `DataType` / `Format` variant (through `from_raw`), and every named code of `status_name`.
//!
//! **How.** [`check_source`] writes a C++17 file that, after the real headers (`run.sh` fetches
//! them), static-asserts for every function its arity, its return type and each parameter
//! type, and every constant's value. C++ and not C, and per-parameter `static_assert`s rather
//! than assigning each function to a transcribed pointer type under
//! `-Werror=incompatible-pointer-types`, because:
//! - nnopbase's own header (`aclnn/acl_meta.h`) is C++ only (`<cstdint>`, `constexpr`);
//! - the comparison must be exact on what the ABI sees and blind to what it does not: a
//!   pointee's `const` (`aclTensor *out` is passed as `*const AclTensor`), an enum parameter
//!   passed as `int32_t` (`aclDataType` is a 4-byte `int` enum) and `char` vs `int8_t` do not
//!   change a call, while a width, a signedness, an integer/float swap or a pointer level
//!   does. C's function-pointer compatibility flags the former and a C cast hides the latter;
//!   a C++ type trait normalises exactly those (`abi_t` in the generated file) and compares
//!   the rest with `std::is_same`;
//! - a failing assertion names the function, the parameter index and the Rust declaration, so
//!   the report is the diagnosis.
//!
//! A deliberately broken width must make the check fail: [`Mutation`] changes one parameter of
//! the transcription, and both `run.sh` (against the real headers) and this crate's tests
//! (against declarations generated from the same table) assert that the compiler then
//! rejects the file, naming the mutated function.

use std::ffi::c_void;
use std::fmt::Write as _;

use burn_ascend_cann::acl::ffi::{
    self, AclIntArray, AclOpExecutor, AclScalar, AclTensor, AclTensorList, DataType, Format,
};
use burn_ascend_cann::acl::status_name;
use burn_ascend_cann::hccl::ffi::{
    result_name as hccl_result_name, HcclDataType, HcclRootInfo, ReduceOp, HCCL_ROOT_INFO_BYTES,
};

/// A Rust type of the FFI spelled as the C++ type it stands for, east-const (`T const *`) so
/// that pointer levels compose by appending.
pub trait CType {
    /// The C++ spelling.
    fn c() -> String;
}

macro_rules! c_types {
    ($($t:ty => $c:literal),* $(,)?) => {
        $(impl CType for $t {
            fn c() -> String {
                $c.to_string()
            }
        })*
    };
}

// `c_char` and `c_int` are aliases of `i8` / `i32` (`u8` on AArch64 hosts): the generated
// file normalises `char` to the signed or unsigned byte of the target, so either matches.
c_types! {
    i8 => "int8_t", i16 => "int16_t", i32 => "int32_t", i64 => "int64_t",
    u8 => "uint8_t", u16 => "uint16_t", u32 => "uint32_t", u64 => "uint64_t",
    usize => "size_t", f32 => "float", f64 => "double", bool => "bool",
    () => "void", c_void => "void",
    AclTensor => "aclTensor", AclIntArray => "aclIntArray", AclTensorList => "aclTensorList",
    AclScalar => "aclScalar", AclOpExecutor => "aclOpExecutor",
    HcclRootInfo => "HcclRootInfo",
}

impl<T: CType> CType for *const T {
    fn c() -> String {
        format!("{} const *", T::c())
    }
}

impl<T: CType> CType for *mut T {
    fn c() -> String {
        format!("{} *", T::c())
    }
}

/// An `unsafe extern "C" fn` type of the FFI: its return and parameter types in C++.
pub trait CFn {
    /// The return type.
    fn ret() -> String;
    /// The parameter types, in order.
    fn params() -> Vec<String>;
}

macro_rules! c_fn {
    ($($a:ident),*) => {
        impl<R: CType, $($a: CType),*> CFn for unsafe extern "C" fn($($a),*) -> R {
            fn ret() -> String {
                R::c()
            }
            fn params() -> Vec<String> {
                vec![$($a::c()),*]
            }
        }
    };
}

/// Implements [`CFn`] for every arity up to the number of identifiers given.
macro_rules! c_fns {
    () => { c_fn!(); };
    ($h:ident $($t:ident)*) => {
        c_fn!($h $(, $t)*);
        c_fns!($($t)*);
    };
}

// The widest prototype (`aclnnFlashAttentionUnpaddingScoreGradV5GetWorkspaceSize`) has 39
// parameters; a wider one fails to compile here, which is the cue to extend the list.
c_fns!(
    A00 A01 A02 A03 A04 A05 A06 A07 A08 A09 A10 A11 A12 A13 A14 A15
    A16 A17 A18 A19 A20 A21 A22 A23 A24 A25 A26 A27 A28 A29 A30 A31
    A32 A33 A34 A35 A36 A37 A38 A39 A40 A41 A42 A43 A44 A45 A46 A47
);

/// Which part of the table an entry comes from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Group {
    /// ACL runtime or nnopbase (`runtime { … }` of the table): required.
    Runtime,
    /// One stage of the aclnn op named here.
    Op(&'static str),
    /// HCCL (`hccl_api_table!`, `hccl/hccl.h`).
    Hccl,
}

/// One C function as the Rust side declares it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Function {
    /// The C symbol (`aclnnAddGetWorkspaceSize`, `aclnnAdd`, `aclrtMalloc`).
    pub c_name: String,
    /// The Rust function type's name (`BinaryAlphaWs`, from `cann/src/acl/ffi/` or
    /// `cann/src/hccl/ffi.rs`).
    pub rust_type: String,
    /// Where in the table.
    pub group: Group,
    /// Return type, in C++.
    pub ret: String,
    /// Parameter types, in C++.
    pub params: Vec<String>,
}

impl Function {
    fn of<F: CFn>(c_name: &str, rust_type: &str, group: Group) -> Self {
        // `stringify!` of a `$crate::acl::ffi::X` path: keep the last segment.
        let rust_type = rust_type
            .rsplit("::")
            .next()
            .unwrap_or(rust_type)
            .trim()
            .to_string();
        Self {
            c_name: c_name.to_string(),
            rust_type,
            group,
            ret: F::ret(),
            params: F::params(),
        }
    }
}

impl Function {
    /// A function of a table, from its prototype (its parameter struct): the Rust name reported
    /// is the function type's (`AclrtMalloc`, `BinaryAlphaWs`).
    fn of_prototype<P: ffi::Prototype>(c_name: &str, group: Group) -> Self
    where
        P::FnPtr: CFn,
    {
        Self::of::<P::FnPtr>(c_name, P::FN_PTR, group)
    }
}

macro_rules! collect_functions {
    (
        runtime { $($rf:ident: $rc:ident($rp:ty)),* }
        graph { $($gf:ident: $gc:ident($gp:ty)),* }
        ops { $($(#[$a:meta])* $f:ident: $c:ident($p:ty)),* }
    ) => {
        /// Every C function of [`burn_ascend_cann::acl_api_table!`], in table order: the
        /// runtime and nnopbase entries, the graph-capture functions (optional at run time,
        /// declared in `acl/acl_rt.h` and checked like the rest), then per aclnn op its
        /// `GetWorkspaceSize` stage and its launch ([`ffi::AclnnLaunch`]).
        pub fn functions() -> Vec<Function> {
            let runtime = [
                $(Function::of_prototype::<$rp>(stringify!($rc), Group::Runtime),)*
                $(Function::of_prototype::<$gp>(stringify!($gc), Group::Runtime),)*
            ];
            let ops = [$([
                Function::of_prototype::<$p>(
                    concat!(stringify!($c), "GetWorkspaceSize"),
                    Group::Op(stringify!($c)),
                ),
                Function::of::<ffi::AclnnLaunch>(
                    stringify!($c),
                    "AclnnLaunch",
                    Group::Op(stringify!($c)),
                ),
            ]),*];
            runtime
                .into_iter()
                .chain(ops.into_iter().flatten())
                .chain(hccl_functions())
                .collect()
        }
    };
}

burn_ascend_cann::acl_api_table!(collect_functions);

macro_rules! collect_hccl {
    (fns { $($f:ident: $c:ident($p:ty)),* }) => {
        /// Every HCCL function of [`burn_ascend_cann::hccl_api_table!`], in table order.
        pub fn hccl_functions() -> Vec<Function> {
            vec![$(Function::of_prototype::<$p>(stringify!($c), Group::Hccl)),*]
        }
    };
}

burn_ascend_cann::hccl_api_table!(collect_hccl);

/// `HcclDataType`'s C enumerator for each variant.
pub fn hccl_data_type_c_name(t: HcclDataType) -> &'static str {
    match t {
        HcclDataType::Int8 => "HCCL_DATA_TYPE_INT8",
        HcclDataType::Int16 => "HCCL_DATA_TYPE_INT16",
        HcclDataType::Int32 => "HCCL_DATA_TYPE_INT32",
        HcclDataType::Fp16 => "HCCL_DATA_TYPE_FP16",
        HcclDataType::Fp32 => "HCCL_DATA_TYPE_FP32",
        HcclDataType::Int64 => "HCCL_DATA_TYPE_INT64",
        HcclDataType::Uint64 => "HCCL_DATA_TYPE_UINT64",
        HcclDataType::Uint8 => "HCCL_DATA_TYPE_UINT8",
        HcclDataType::Uint16 => "HCCL_DATA_TYPE_UINT16",
        HcclDataType::Uint32 => "HCCL_DATA_TYPE_UINT32",
        HcclDataType::Fp64 => "HCCL_DATA_TYPE_FP64",
        HcclDataType::Bfp16 => "HCCL_DATA_TYPE_BFP16",
    }
}

/// `HcclReduceOp`'s C enumerator for each variant.
pub fn hccl_reduce_op_c_name(op: ReduceOp) -> &'static str {
    match op {
        ReduceOp::Sum => "HCCL_REDUCE_SUM",
        ReduceOp::Prod => "HCCL_REDUCE_PROD",
        ReduceOp::Max => "HCCL_REDUCE_MAX",
        ReduceOp::Min => "HCCL_REDUCE_MIN",
    }
}

/// The structs passed by pointer whose size the Rust side fixes: `(C name, Rust size)`.
pub fn struct_sizes() -> Vec<(&'static str, usize)> {
    vec![("HcclRootInfo", std::mem::size_of::<HcclRootInfo>())]
}

/// The aclnn ops of the table, in table order.
pub fn ops() -> Vec<&'static str> {
    ffi::AclApi::OPS.to_vec()
}

/// One enum value or status code the project relies on.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Constant {
    /// The C name (`ACL_BF16`, `ACLNN_ERR_PARAM_NULLPTR`).
    pub c_name: String,
    /// The value the Rust side uses.
    pub value: i64,
    /// Where the Rust side states it.
    pub source: &'static str,
}

/// `aclDataType`'s C enumerator for each variant (a match, so a new variant cannot be left
/// out).
pub fn data_type_c_name(t: DataType) -> &'static str {
    match t {
        DataType::Float => "ACL_FLOAT",
        DataType::Float16 => "ACL_FLOAT16",
        DataType::Int8 => "ACL_INT8",
        DataType::Int32 => "ACL_INT32",
        DataType::Uint8 => "ACL_UINT8",
        DataType::Int16 => "ACL_INT16",
        DataType::Uint16 => "ACL_UINT16",
        DataType::Uint32 => "ACL_UINT32",
        DataType::Int64 => "ACL_INT64",
        DataType::Uint64 => "ACL_UINT64",
        DataType::Double => "ACL_DOUBLE",
        DataType::Bool => "ACL_BOOL",
        DataType::Bf16 => "ACL_BF16",
    }
}

/// `aclFormat`'s C enumerator for each variant.
pub fn format_c_name(f: Format) -> &'static str {
    match f {
        Format::Nchw => "ACL_FORMAT_NCHW",
        Format::Nhwc => "ACL_FORMAT_NHWC",
        Format::Nd => "ACL_FORMAT_ND",
        Format::FractalNz => "ACL_FORMAT_FRACTAL_NZ",
    }
}

/// The constants of `cann/src/acl/ffi.rs`, by their C names (a test checks this list
/// against the file's `pub const`s).
pub fn ffi_constants() -> Vec<(&'static str, i64)> {
    let c = |name, v: i32| (name, i64::from(v));
    vec![
        c("ACL_SUCCESS", ffi::ACL_SUCCESS),
        c("ACL_ERROR_INVALID_PARAM", ffi::ACL_ERROR_INVALID_PARAM),
        c(
            "ACL_ERROR_REPEAT_INITIALIZE",
            ffi::ACL_ERROR_REPEAT_INITIALIZE,
        ),
        c("ACL_ERROR_BAD_ALLOC", ffi::ACL_ERROR_BAD_ALLOC),
        c(
            "ACL_ERROR_RT_MEMORY_ALLOCATION",
            ffi::ACL_ERROR_RT_MEMORY_ALLOCATION,
        ),
        c("ACLNN_ERR_PARAM_NULLPTR", ffi::ACLNN_ERR_PARAM_NULLPTR),
        c("ACLNN_ERR_PARAM_INVALID", ffi::ACLNN_ERR_PARAM_INVALID),
        c("ACLNN_ERR_RUNTIME_ERROR", ffi::ACLNN_ERR_RUNTIME_ERROR),
        c("ACLNN_ERR_INNER", ffi::ACLNN_ERR_INNER),
        c(
            "ACLNN_ERR_INNER_TILING_ERROR",
            ffi::ACLNN_ERR_INNER_TILING_ERROR,
        ),
        c(
            "ACLNN_ERR_INNER_OPP_PATH_NOT_FOUND",
            ffi::ACLNN_ERR_INNER_OPP_PATH_NOT_FOUND,
        ),
        c("ACL_MEM_MALLOC_HUGE_FIRST", ffi::ACL_MEM_MALLOC_HUGE_FIRST),
        c("ACL_MEMCPY_HOST_TO_DEVICE", ffi::ACL_MEMCPY_HOST_TO_DEVICE),
        c("ACL_MEMCPY_DEVICE_TO_HOST", ffi::ACL_MEMCPY_DEVICE_TO_HOST),
        c(
            "ACL_MEMCPY_DEVICE_TO_DEVICE",
            ffi::ACL_MEMCPY_DEVICE_TO_DEVICE,
        ),
        c(
            "ACL_MODEL_RI_CAPTURE_MODE_GLOBAL",
            ffi::CaptureMode::Global.raw(),
        ),
        c(
            "ACL_MODEL_RI_CAPTURE_MODE_THREAD_LOCAL",
            ffi::CaptureMode::ThreadLocal.raw(),
        ),
        c(
            "ACL_MODEL_RI_CAPTURE_MODE_RELAXED",
            ffi::CaptureMode::Relaxed.raw(),
        ),
        c(
            "ACL_MODEL_RI_CAPTURE_STATUS_NONE",
            ffi::ACL_MODEL_RI_CAPTURE_STATUS_NONE,
        ),
        c(
            "ACL_MODEL_RI_CAPTURE_STATUS_ACTIVE",
            ffi::ACL_MODEL_RI_CAPTURE_STATUS_ACTIVE,
        ),
        c(
            "ACL_MODEL_RI_CAPTURE_STATUS_INVALIDATED",
            ffi::ACL_MODEL_RI_CAPTURE_STATUS_INVALIDATED,
        ),
        c(
            "ACL_ERROR_RT_STREAM_CAPTURED",
            ffi::ACL_ERROR_RT_STREAM_CAPTURED,
        ),
        c(
            "ACL_ERROR_RT_STREAM_NOT_CAPTURED",
            ffi::ACL_ERROR_RT_STREAM_NOT_CAPTURED,
        ),
        c(
            "ACL_ERROR_RT_CAPTURE_MODE_NOT_SUPPORT",
            ffi::ACL_ERROR_RT_CAPTURE_MODE_NOT_SUPPORT,
        ),
        c(
            "ACL_ERROR_RT_STREAM_CAPTURE_INVALIDATED",
            ffi::ACL_ERROR_RT_STREAM_CAPTURE_INVALIDATED,
        ),
    ]
}

/// The C enums whose values cross the ABI as the Rust side's `i32`: each must be 4 bytes.
pub const ENUMS_PASSED_AS_I32: &[&str] = &[
    "aclDataType",
    "aclFormat",
    "aclrtMemMallocPolicy",
    "aclrtMemcpyKind",
    "aclmdlRICaptureMode",
    "aclmdlRICaptureStatus",
    "HcclResult",
    "HcclDataType",
    "HcclReduceOp",
];

/// Every enum value and status code the Rust side uses: [`ffi_constants`], every
/// [`DataType`] and [`Format`] variant (found through `from_raw`, so the decoder is what is
/// checked), and every code `status_name` names (CANN's codes have six digits; the scan
/// covers seven).
pub fn constants() -> Vec<Constant> {
    let mut all: Vec<Constant> = ffi_constants()
        .into_iter()
        .map(|(c_name, value)| Constant {
            c_name: c_name.to_string(),
            value,
            source: "cann/src/acl/ffi.rs",
        })
        .collect();
    for raw in 0..=255 {
        if let Some(t) = DataType::from_raw(raw) {
            all.push(Constant {
                c_name: data_type_c_name(t).to_string(),
                value: i64::from(t.raw()),
                source: "contract/src/dtype.rs DataType",
            });
        }
        if let Some(f) = Format::from_raw(raw) {
            all.push(Constant {
                c_name: format_c_name(f).to_string(),
                value: i64::from(f.raw()),
                source: "cann/src/acl/ffi.rs Format",
            });
        }
    }
    all.push(Constant {
        c_name: "HCCL_ROOT_INFO_BYTES".into(),
        value: HCCL_ROOT_INFO_BYTES as i64,
        source: "cann/src/hccl/ffi.rs",
    });
    for raw in 0..=255 {
        if let Some(t) = HcclDataType::from_raw(raw) {
            all.push(Constant {
                c_name: hccl_data_type_c_name(t).to_string(),
                value: i64::from(t.raw()),
                source: "cann/src/hccl/ffi.rs HcclDataType",
            });
        }
        if let Some(op) = ReduceOp::from_raw(raw) {
            all.push(Constant {
                c_name: hccl_reduce_op_c_name(op).to_string(),
                value: i64::from(op.raw()),
                source: "cann/src/hccl/ffi.rs ReduceOp",
            });
        }
        let name = hccl_result_name(raw);
        if !name.is_empty() {
            all.push(Constant {
                c_name: name.to_string(),
                value: i64::from(raw),
                source: "cann/src/hccl/ffi.rs result_name",
            });
        }
    }
    for code in 0..10_000_000 {
        let name = status_name(code);
        if !name.is_empty() {
            all.push(Constant {
                c_name: name.to_string(),
                value: i64::from(code),
                source: "cann/src/acl/error.rs status_name",
            });
        }
    }
    all
}

/// One deliberate error in the transcription: parameter `index` of `function` declared as
/// `c_type` instead. The check must then fail.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Mutation {
    /// The C symbol.
    pub function: String,
    /// The parameter, from 0.
    pub index: usize,
    /// The wrong type, in C++.
    pub c_type: String,
}

impl Mutation {
    /// Parses `function:index:c_type` (`aclCreateTensor:1:uint32_t`).
    pub fn parse(s: &str) -> Result<Self, String> {
        let mut parts = s.splitn(3, ':');
        let (Some(function), Some(index), Some(c_type)) =
            (parts.next(), parts.next(), parts.next())
        else {
            return Err(format!("mutation `{s}`: expected function:index:c_type"));
        };
        let index = index
            .parse()
            .map_err(|_| format!("mutation `{s}`: `{index}` is not a parameter index"))?;
        Ok(Self {
            function: function.to_string(),
            index,
            c_type: c_type.to_string(),
        })
    }

    /// Applies the mutation; an error when it names no function or parameter, or changes
    /// nothing.
    pub fn apply(&self, functions: &mut [Function]) -> Result<(), String> {
        let f = functions
            .iter_mut()
            .find(|f| f.c_name == self.function)
            .ok_or_else(|| format!("mutation: no function `{}` in the table", self.function))?;
        let arity = f.params.len();
        let p = f.params.get_mut(self.index).ok_or_else(|| {
            format!(
                "mutation: `{}` has {arity} parameters, no index {}",
                self.function, self.index
            )
        })?;
        if *p == self.c_type {
            return Err(format!(
                "mutation: parameter {} of `{}` already is `{}`",
                self.index, self.function, self.c_type
            ));
        }
        *p = self.c_type.clone();
        Ok(())
    }

    /// The mutations `run.sh --self-check` and the tests apply, one at a time: a narrowed
    /// count (`uint64_t` → `uint32_t`), a narrowed pointee (`int64_t const *` →
    /// `int32_t const *`), a narrowed attribute of an attention op (`int64_t` → `int32_t`),
    /// a signedness flip and a float/double swap.
    pub fn self_check_set() -> Vec<Mutation> {
        let first_stage = |op: &str, rest: &str| format!("{op}GetWorkspaceSize:{rest}");
        [
            "aclCreateTensor:1:uint32_t".to_string(),
            "aclCreateIntArray:0:int32_t const *".to_string(),
            first_stage(ffi::names::varlen_fwd_v5, "17:int32_t"),
            first_stage(ffi::names::inplace_uniform, "3:int64_t"),
            first_stage(ffi::names::inplace_normal, "1:double"),
            "HcclAllReduce:2:uint32_t".to_string(),
        ]
        .iter()
        .map(|s| Mutation::parse(s).expect("a well-formed built-in mutation"))
        .collect()
    }
}

/// Where the declarations the check compares against come from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Prelude {
    /// Text placed first: the `#include`s of CANN's real headers (written by `run.sh`).
    Headers(String),
    /// Declarations generated from the table itself ([`self_declarations`]): the offline
    /// test of the generator (well-formed C++, and a mutation is caught).
    SelfDeclared,
}

/// `extern "C"` declarations of every function and `#define`s of every constant, made from
/// the Rust side itself: what the real headers would say if the transcription were exact.
pub fn self_declarations(functions: &[Function], constants: &[Constant]) -> String {
    let mut s = String::from(
        "// Declarations generated from the Rust table itself (offline self-test).\n\
         #include <cstdint>\n#include <cstddef>\n\
         typedef struct aclTensor aclTensor;\ntypedef struct aclIntArray aclIntArray;\n\
         typedef struct aclTensorList aclTensorList;\ntypedef struct aclScalar aclScalar;\n\
         typedef struct aclOpExecutor aclOpExecutor;\n",
    );
    for (name, size) in struct_sizes() {
        let _ = writeln!(s, "struct {name} {{ char internal[{size}]; }};");
    }
    for e in ENUMS_PASSED_AS_I32 {
        let _ = writeln!(s, "enum {e} {{ {e}_PLACEHOLDER = 0 }};");
    }
    let mut seen = std::collections::BTreeSet::new();
    for f in functions {
        if seen.insert(f.c_name.clone()) {
            let _ = writeln!(
                s,
                "extern \"C\" {} {}({});",
                f.ret,
                f.c_name,
                f.params.join(", ")
            );
        }
    }
    let mut seen = std::collections::BTreeSet::new();
    for c in constants {
        if seen.insert(c.c_name.clone()) {
            let _ = writeln!(s, "#define {} {}", c.c_name, c.value);
        }
    }
    s
}

/// The C++ helpers of the check: `abi_t` (what a type is to the ABI) and the function traits.
const TRAITS: &str = r#"
#include <cstddef>
#include <cstdint>
#include <tuple>
#include <type_traits>

namespace abi_check {
// What a type is to the calling convention: cv-qualifiers dropped at every pointer level
// (a pointee's const changes no call), an enum replaced by the signed integer of its size
// (the Rust side passes aclDataType & co. as int32_t), plain char by the byte of its
// signedness (Rust's c_char is i8 or u8). Everything else (width, signedness of integers,
// integer vs floating point, pointer depth, the pointee's type) is kept and compared.
template <class T, class = void> struct abi_of { using type = T; };
template <class T> using abi_t = typename abi_of<std::remove_cv_t<T>>::type;
template <class T> struct abi_of<T *, void> { using type = abi_t<T> *; };
template <class T> struct abi_of<T, std::enable_if_t<std::is_enum_v<T>>> {
  using type = std::make_signed_t<std::underlying_type_t<T>>;
};
template <> struct abi_of<char, void> {
  using type = std::conditional_t<std::is_signed_v<char>, signed char, unsigned char>;
};
template <class A, class B> constexpr bool same_abi = std::is_same_v<abi_t<A>, abi_t<B>>;

// A parameter the real function does not have.
struct no_such_parameter {};
template <class F> struct fn;
template <class R, class... A> struct fn<R (*)(A...)> {
  using ret = R;
  static constexpr std::size_t arity = sizeof...(A);
  template <std::size_t I, bool = (I < sizeof...(A))> struct arg { using type = no_such_parameter; };
  template <std::size_t I> struct arg<I, true> { using type = std::tuple_element_t<I, std::tuple<A...>>; };
};
template <class R, class... A> struct fn<R (*)(A...) noexcept> : fn<R (*)(A...)> {};
template <class F, std::size_t I> using arg_t = typename fn<F>::template arg<I>::type;
template <class F> using ret_t = typename fn<F>::ret;
}  // namespace abi_check
"#;

/// The C++17 source of the check: `prelude`, the helpers, then for every function of
/// `functions` its arity, return and parameter types, and for every constant its value,
/// each a `static_assert` whose message names the Rust declaration. `skip` lists aclnn ops
/// left out (their header was not found; `run.sh` reports them).
pub fn check_source(
    functions: &[Function],
    constants: &[Constant],
    prelude: &Prelude,
    skip: &[String],
) -> String {
    let mut s = String::from(
        "// Generated by tools/abi-check (burn-ascend): the Rust FFI declarations of\n\
         // cann/src/acl/ffi*.rs (acl_api_table!) against CANN's headers. Do not edit.\n",
    );
    match prelude {
        Prelude::Headers(text) => s.push_str(text),
        Prelude::SelfDeclared => s.push_str(&self_declarations(functions, constants)),
    }
    s.push_str(TRAITS);
    s.push_str("using namespace abi_check;\n\n// ---- functions\n");
    let skipped = |f: &Function| matches!(f.group, Group::Op(op) if skip.iter().any(|s| s == op));
    for f in functions.iter().filter(|f| !skipped(f)) {
        let id = format!("decltype(&::{})", f.c_name);
        let who = format!("{} (ffi.rs {})", f.c_name, f.rust_type);
        let _ = writeln!(
            s,
            "static_assert(fn<{id}>::arity == {n}, \"{who}: Rust declares {n} parameters\");",
            n = f.params.len()
        );
        let _ = writeln!(
            s,
            "static_assert(same_abi<ret_t<{id}>, {r}>, \"{who}: Rust returns `{r}`\");",
            r = f.ret
        );
        for (i, p) in f.params.iter().enumerate() {
            let _ = writeln!(
                s,
                "static_assert(same_abi<arg_t<{id}, {i}>, {p}>, \"{who}: parameter {i} is `{p}` in Rust\");"
            );
        }
    }
    s.push_str("\n// ---- enums crossing the ABI as int32_t\n");
    for e in ENUMS_PASSED_AS_I32 {
        let _ = writeln!(
            s,
            "static_assert(sizeof({e}) == sizeof(int32_t), \"{e} is not 4 bytes; Rust passes it as i32\");"
        );
    }
    s.push_str("\n// ---- structs passed by pointer\n");
    for (name, size) in struct_sizes() {
        let _ = writeln!(
            s,
            "static_assert(sizeof({name}) == {size}, \"{name}: Rust's struct has {size} bytes\");"
        );
    }
    s.push_str("\n// ---- enum values and status codes\n");
    let mut seen = std::collections::BTreeSet::new();
    for c in constants {
        if seen.insert((c.c_name.clone(), c.value)) {
            let _ = writeln!(
                s,
                "static_assert({n} == {v}, \"{n}: {src} says {v}\");",
                n = c.c_name,
                v = c.value,
                src = c.source
            );
        }
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::path::{Path, PathBuf};
    use std::process::Command;

    /// A C++ compiler: `$CXX`, else the first of `c++`, `g++`, `clang++` that runs.
    fn cxx() -> Option<String> {
        let candidates = std::env::var("CXX")
            .into_iter()
            .chain(["c++", "g++", "clang++"].map(String::from));
        candidates.into_iter().find(|c| {
            Command::new(c)
                .arg("--version")
                .output()
                .is_ok_and(|o| o.status.success())
        })
    }

    /// Compiles `source` with `-fsyntax-only`: `Ok(())` or the compiler's stderr.
    fn compile(cxx: &str, source: &str, name: &str) -> Result<(), String> {
        let dir =
            std::env::temp_dir().join(format!("burn-ascend-abi-check-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let file = dir.join(name);
        std::fs::write(&file, source).unwrap();
        let out = Command::new(cxx)
            .args(["-std=c++17", "-fsyntax-only", "-x", "c++"])
            .arg(&file)
            .output()
            .expect("the C++ compiler runs");
        let _ = std::fs::remove_file(&file);
        if out.status.success() {
            Ok(())
        } else {
            Err(String::from_utf8_lossy(&out.stderr).into_owned())
        }
    }

    fn repo_file(rel: &str) -> PathBuf {
        Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("../..")
            .join(rel)
    }

    #[test]
    fn the_generated_check_compiles_against_declarations_made_from_the_same_table() {
        let Some(cxx) = cxx() else {
            eprintln!("SKIPPED: no C++ compiler ($CXX, c++, g++, clang++) to compile the check");
            return;
        };
        let src = check_source(&functions(), &constants(), &Prelude::SelfDeclared, &[]);
        if let Err(e) = compile(&cxx, &src, "self.cpp") {
            panic!("the generated check is not well-formed C++:\n{e}");
        }
    }

    #[test]
    fn every_deliberately_broken_width_makes_the_generated_check_fail_naming_the_function() {
        let Some(cxx) = cxx() else {
            eprintln!("SKIPPED: no C++ compiler ($CXX, c++, g++, clang++) to compile the check");
            return;
        };
        let constants = constants();
        for m in Mutation::self_check_set() {
            let mut fns = functions();
            // The declarations stay those of the unmutated table: only the transcription is
            // wrong, as when a prototype in `cann/src/acl/ffi/` declares a wrong width.
            let prelude = Prelude::Headers(self_declarations(&fns, &constants));
            m.apply(&mut fns).unwrap();
            let src = check_source(&fns, &constants, &prelude, &[]);
            match compile(&cxx, &src, "mutant.cpp") {
                Ok(()) => panic!("mutation {m:?} was not caught"),
                Err(e) => assert!(
                    e.contains(&format!(
                        "{} (ffi.rs {}): parameter {} is `{}` in Rust",
                        m.function,
                        fns.iter()
                            .find(|f| f.c_name == m.function)
                            .unwrap()
                            .rust_type,
                        m.index,
                        m.c_type
                    )),
                    "mutation {m:?} failed for another reason:\n{e}"
                ),
            }
        }
    }

    #[test]
    fn a_wrong_status_code_makes_the_generated_check_fail() {
        let Some(cxx) = cxx() else {
            eprintln!("SKIPPED: no C++ compiler ($CXX, c++, g++, clang++) to compile the check");
            return;
        };
        let fns = functions();
        let mut constants = constants();
        let prelude = Prelude::Headers(self_declarations(&fns, &constants));
        let c = constants
            .iter_mut()
            .find(|c| c.c_name == "ACLNN_ERR_PARAM_NULLPTR")
            .unwrap();
        c.value += 1;
        let e = compile(
            &cxx,
            &check_source(&fns, &constants, &prelude, &[]),
            "code.cpp",
        )
        .expect_err("a wrong status code was not caught");
        assert!(
            e.contains("ACLNN_ERR_PARAM_NULLPTR: cann/src/acl/ffi.rs says 161002"),
            "{e}"
        );
    }

    #[test]
    fn both_stages_of_every_op_and_every_runtime_function_are_listed() {
        let fns = functions();
        for op in ops() {
            for name in [op.to_string(), format!("{op}GetWorkspaceSize")] {
                assert!(
                    fns.iter().any(|f| f.c_name == name),
                    "{name} is not checked"
                );
            }
        }
        for name in [
            "aclInit",
            "aclrtMalloc",
            "aclCreateTensor",
            "aclDestroyScalar",
        ] {
            assert!(
                fns.iter().any(|f| f.c_name == name),
                "{name} is not checked"
            );
        }
        let runtime = fns.iter().filter(|f| f.group == Group::Runtime).count();
        let hccl = fns.iter().filter(|f| f.group == Group::Hccl).count();
        assert_eq!(hccl, burn_ascend_cann::hccl::HcclApi::FUNCTIONS.len());
        assert_eq!(fns.len(), 2 * ops().len() + runtime + hccl);
    }

    #[test]
    fn prototypes_are_read_with_their_widths_constness_and_pointer_levels() {
        let fns = functions();
        let get = |n: &str| fns.iter().find(|f| f.c_name == n).unwrap().clone();
        let t = get("aclCreateTensor");
        assert_eq!(t.rust_type, "AclCreateTensor");
        assert_eq!(t.ret, "aclTensor *");
        assert_eq!(
            t.params,
            [
                "int64_t const *",
                "uint64_t",
                "int32_t",
                "int64_t const *",
                "int64_t",
                "int32_t",
                "int64_t const *",
                "uint64_t",
                "void *",
            ]
        );
        let l = get("aclCreateTensorList");
        assert_eq!(l.params, ["aclTensor const * const *", "uint64_t"]);
        let launch = get(ffi::names::add);
        assert_eq!(
            launch.params,
            ["void *", "uint64_t", "aclOpExecutor *", "void *"]
        );
        let ws = get(&format!("{}GetWorkspaceSize", ffi::names::add));
        assert_eq!(ws.params[4..], ["uint64_t *", "aclOpExecutor * *"]);
    }

    #[test]
    fn every_constant_of_ffi_rs_is_checked() {
        let text = std::fs::read_to_string(repo_file("cann/src/acl/ffi.rs")).unwrap();
        let listed: Vec<&str> = ffi_constants().iter().map(|(n, _)| *n).collect();
        let declared: Vec<&str> = text
            .lines()
            // Top-level items only: not the indented `pub const`s `declare_api` generates.
            .filter_map(|l| l.strip_prefix("pub const "))
            .filter_map(|l| l.split(':').next())
            .collect();
        assert!(!declared.is_empty());
        for name in &declared {
            assert!(
                listed.contains(name),
                "ffi.rs's {name} is not in ffi_constants()"
            );
        }
    }

    #[test]
    fn every_data_type_format_and_named_status_code_is_checked() {
        let c = constants();
        let has = |n: &str, v: i64| c.iter().any(|k| k.c_name == n && k.value == v);
        assert!(has("ACL_BF16", 27));
        assert!(has("ACL_FORMAT_FRACTAL_NZ", 29));
        assert!(has("ACLNN_ERR_INNER_OPP_KERNEL_PKG_NOT_FOUND", 561_112));
        assert!(has("ACL_ERROR_RT_CONTEXT_NULL", 107_002));
        assert!(has("ACL_INT64", 9) && has("ACL_FLOAT16", 1) && has("ACL_BOOL", 12));
    }

    #[test]
    fn a_mutation_that_names_nothing_or_changes_nothing_is_refused() {
        let mut fns = functions();
        assert!(Mutation::parse("aclNope:0:int")
            .unwrap()
            .apply(&mut fns)
            .is_err());
        assert!(Mutation::parse("aclInit:5:int")
            .unwrap()
            .apply(&mut fns)
            .is_err());
        assert!(Mutation::parse("aclrtSetDevice:0:int32_t")
            .unwrap()
            .apply(&mut fns)
            .is_err());
        assert!(Mutation::parse("aclInit").is_err());
    }
}
