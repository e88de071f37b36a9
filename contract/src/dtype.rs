//! `aclDataType`, the element types of the op vocabulary: values as CANN's `acl_base.h`
//! numbers them, so the contract, the reference and the bindings speak of one enum.

/// `aclDataType` values (spec §7).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[repr(i32)]
pub enum DataType {
    Float = 0,
    Float16 = 1,
    Int8 = 2,
    Int32 = 3,
    Uint8 = 4,
    Int16 = 6,
    Uint16 = 7,
    Uint32 = 8,
    Int64 = 9,
    Uint64 = 10,
    Double = 11,
    Bool = 12,
    Bf16 = 27,
}

impl DataType {
    /// Bytes per element.
    pub fn size(self) -> usize {
        match self {
            Self::Int8 | Self::Uint8 | Self::Bool => 1,
            Self::Float16 | Self::Bf16 | Self::Int16 | Self::Uint16 => 2,
            Self::Float | Self::Int32 | Self::Uint32 => 4,
            Self::Int64 | Self::Uint64 | Self::Double => 8,
        }
    }

    /// The enum value as passed through the C ABI.
    pub fn raw(self) -> i32 {
        self as i32
    }

    /// Decodes a raw `aclDataType`; `None` for values this crate does not move.
    pub fn from_raw(v: i32) -> Option<Self> {
        Some(match v {
            0 => Self::Float,
            1 => Self::Float16,
            2 => Self::Int8,
            3 => Self::Int32,
            4 => Self::Uint8,
            6 => Self::Int16,
            7 => Self::Uint16,
            8 => Self::Uint32,
            9 => Self::Int64,
            10 => Self::Uint64,
            11 => Self::Double,
            12 => Self::Bool,
            27 => Self::Bf16,
            _ => return None,
        })
    }
}
