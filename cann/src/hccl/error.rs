//! HCCL's typed error: the call, the rank, the `HcclResult` and what went wrong.

use super::ffi::result_name;
use crate::acl::AclError;

/// Why a collective, a communicator or the rendezvous failed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum HcclError {
    /// `libhccl.so` was not found or could not be opened; the message names every path tried.
    #[error("{0}")]
    NotFound(String),
    /// An HCCL call returned a non-zero `HcclResult`, or a queued collective failed on the
    /// device stream (then `call` is the collective and `status` its HCCL status when the
    /// runtime reported one, else the stream's ACL status).
    #[error("{call}{} failed with status {status}{}", on_rank(*.rank), status_details(*.status, .message))]
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
    #[error("invalid {param}: {rule}")]
    Invalid {
        /// The argument (or environment variable).
        param: String,
        /// The broken rule.
        rule: String,
    },
    /// The torchrun-style rendezvous (root info exchange over TCP) failed.
    #[error("rendezvous: {0}")]
    Rendezvous(String),
    /// What the installed CANN (or the simulation) does not do.
    #[error("unsupported: {0}")]
    Unsupported(String),
    /// A runtime (ACL) call around the collective failed: binding the device, synchronising.
    // Not `#[from]`: the conversion below is written out, and `source` stays unset so that a
    // chain printer does not repeat the ACL message the display already holds.
    #[error("device: {0}")]
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

/// ` on rank R` when the rank is known.
fn on_rank(rank: Option<u32>) -> String {
    rank.map_or_else(String::new, |r| format!(" on rank {r}"))
}

/// What follows `failed with status N`: HCCL's name of the status (HCCL's codes are small),
/// else ACL's name of it (a stream's status), then the message on one line.
fn status_details(status: i32, message: &str) -> String {
    let mut s = String::new();
    let name = result_name(status);
    if !name.is_empty() && status < 1000 {
        s.push_str(&format!(" ({name})"));
    } else {
        let acl = crate::acl::status_name(status);
        if !acl.is_empty() {
            s.push_str(&format!(" ({acl})"));
        }
    }
    let msg = message.split_whitespace().collect::<Vec<_>>().join(" ");
    if !msg.is_empty() {
        s.push_str(&format!(": {msg}"));
    }
    s
}

impl From<AclError> for HcclError {
    fn from(e: AclError) -> Self {
        Self::Device(e)
    }
}

#[cfg(test)]
mod tests {
    use super::HcclError;
    use crate::acl::AclError;

    // The messages as the hand-written `Display` wrote them before thiserror: callers and
    // tests match on them.
    #[test]
    fn messages_name_the_call_the_rank_and_the_status() {
        let e = HcclError::Status {
            call: "HcclAllReduce".into(),
            rank: Some(1),
            status: 1,
            message: "bad\n  count".into(),
        };
        assert_eq!(
            e.to_string(),
            "HcclAllReduce on rank 1 failed with status 1 (HCCL_E_PARA): bad count"
        );
        // A stream's ACL status: ACL's name for it.
        let e = HcclError::Status {
            call: "HcclAllReduce".into(),
            rank: None,
            status: 207_001,
            message: String::new(),
        };
        assert_eq!(
            e.to_string(),
            "HcclAllReduce failed with status 207001 (ACL_ERROR_RT_MEMORY_ALLOCATION)"
        );
        let acl = AclError::NotFound("no libascendcl.so".into());
        assert_eq!(
            HcclError::from(acl).to_string(),
            "device: no libascendcl.so"
        );
        assert_eq!(
            HcclError::Rendezvous("x".into()).to_string(),
            "rendezvous: x"
        );
        assert_eq!(HcclError::invalid("p", "r").to_string(), "invalid p: r");
    }
}
