//! HCCL's typed error: the call, the rank, the `HcclResult` and what went wrong.

use std::fmt;

use super::ffi::result_name;
use crate::acl::AclError;

/// Why a collective, a communicator or the rendezvous failed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum HcclError {
    /// `libhccl.so` was not found or could not be opened; the message names every path tried.
    NotFound(String),
    /// An HCCL call returned a non-zero `HcclResult`, or a queued collective failed on the
    /// device stream (then `call` is the collective and `status` its HCCL status when the
    /// runtime reported one, else the stream's ACL status).
    Status {
        /// The C function (`HcclAllReduce`, `HcclCommInitRootInfo`, …).
        call: String,
        /// The rank that saw it (`None` before a rank is known, e.g. `HcclGetRootInfo`).
        rank: Option<u32>,
        /// The `HcclResult` (or ACL status, see above).
        status: i32,
        /// `HcclGetErrorString` and `aclGetRecentErrMsg()` right after the failure.
        message: String,
    },
    /// The safe layer refused an argument before calling into C.
    Invalid {
        /// The argument (or environment variable).
        param: String,
        /// The broken rule.
        rule: String,
    },
    /// The torchrun-style rendezvous (root info exchange over TCP) failed.
    Rendezvous(String),
    /// What the installed CANN (or the simulation) does not do.
    Unsupported(String),
    /// A runtime (ACL) call around the collective failed: binding the device, synchronising.
    Device(AclError),
}

impl HcclError {
    pub(crate) fn invalid(param: impl Into<String>, rule: impl Into<String>) -> Self {
        Self::Invalid {
            param: param.into(),
            rule: rule.into(),
        }
    }

    /// The HCCL status, if this error carries one.
    pub fn status(&self) -> Option<i32> {
        match self {
            Self::Status { status, .. } => Some(*status),
            Self::Device(e) => e.status(),
            _ => None,
        }
    }

    /// The rank that reported it, if known.
    pub fn rank(&self) -> Option<u32> {
        match self {
            Self::Status { rank, .. } => *rank,
            _ => None,
        }
    }
}

impl fmt::Display for HcclError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::NotFound(m) => write!(f, "{m}"),
            Self::Status {
                call,
                rank,
                status,
                message,
            } => {
                write!(f, "{call}")?;
                if let Some(r) = rank {
                    write!(f, " on rank {r}")?;
                }
                write!(f, " failed with status {status}")?;
                let name = result_name(*status);
                if !name.is_empty() && *status < 1000 {
                    write!(f, " ({name})")?;
                } else {
                    let acl = crate::acl::status_name(*status);
                    if !acl.is_empty() {
                        write!(f, " ({acl})")?;
                    }
                }
                let msg = message.split_whitespace().collect::<Vec<_>>().join(" ");
                if !msg.is_empty() {
                    write!(f, ": {msg}")?;
                }
                Ok(())
            }
            Self::Invalid { param, rule } => write!(f, "invalid {param}: {rule}"),
            Self::Rendezvous(m) => write!(f, "rendezvous: {m}"),
            Self::Unsupported(m) => write!(f, "unsupported: {m}"),
            Self::Device(e) => write!(f, "device: {e}"),
        }
    }
}

impl std::error::Error for HcclError {}

impl From<AclError> for HcclError {
    fn from(e: AclError) -> Self {
        Self::Device(e)
    }
}
