//! The dispatch layer's error: Burn-free, so the `ops` crate and the CLI convert it to their own.

/// Why an Ascend (or simulated) call failed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum AclError {
    /// CANN's libraries were not found or could not be opened; the message names every path
    /// that was tried.
    #[error("{0}")]
    NotFound(String),
    /// A runtime or aclnn call returned a non-zero status.
    #[error("{call} failed with status {status}{}", status_details(*.status, .message))]
    Status {
        /// The C function that failed (e.g. `aclnnPromptFlashAttentionV3GetWorkspaceSize`).
        call: String,
        /// Its status code (161001 null argument, 161002 invalid argument, …).
        status: i32,
        /// `aclGetRecentErrMsg()` right after the failure (may be empty).
        message: String,
    },
    /// The installed CANN (or the simulation) lacks what the call needs.
    #[error("unsupported: {0}")]
    Unsupported(String),
    /// The safe layer refused an argument before calling into C.
    #[error("invalid {param}: {rule}")]
    Invalid {
        /// The argument.
        param: String,
        /// What was wrong.
        rule: String,
    },
}

impl AclError {
    pub(crate) fn invalid(param: impl Into<String>, rule: impl Into<String>) -> Self {
        Self::Invalid {
            param: param.into(),
            rule: rule.into(),
        }
    }

    /// The aclnn / ACL status, if this error carries one.
    pub fn status(&self) -> Option<i32> {
        match self {
            Self::Status { status, .. } => Some(*status),
            _ => None,
        }
    }
}

/// The symbolic name of a status code, where it has one.
pub fn status_name(status: i32) -> &'static str {
    match status {
        0 => "ACLNN_SUCCESS",
        100_000 => "ACL_ERROR_INVALID_PARAM",
        100_002 => "ACL_ERROR_REPEAT_INITIALIZE",
        107_002 => "ACL_ERROR_RT_CONTEXT_NULL",
        107_027 => "ACL_ERROR_RT_STREAM_CAPTURED",
        107_029 => "ACL_ERROR_RT_STREAM_NOT_CAPTURED",
        107_030 => "ACL_ERROR_RT_CAPTURE_MODE_NOT_SUPPORT",
        507_903 => "ACL_ERROR_RT_STREAM_CAPTURE_INVALIDATED",
        200_000 => "ACL_ERROR_BAD_ALLOC",
        207_001 => "ACL_ERROR_RT_MEMORY_ALLOCATION",
        161_001 => "ACLNN_ERR_PARAM_NULLPTR",
        161_002 => "ACLNN_ERR_PARAM_INVALID",
        361_001 => "ACLNN_ERR_RUNTIME_ERROR",
        561_000 => "ACLNN_ERR_INNER",
        561_001 => "ACLNN_ERR_INNER_INFERSHAPE_ERROR",
        561_002 => "ACLNN_ERR_INNER_TILING_ERROR",
        561_003 => "ACLNN_ERR_INNER_FIND_KERNEL_ERROR",
        561_107 => "ACLNN_ERR_INNER_OPP_PATH_NOT_FOUND",
        561_112 => "ACLNN_ERR_INNER_OPP_KERNEL_PKG_NOT_FOUND",
        _ => "",
    }
}

/// What follows `<call> failed with status N`: the status's symbolic name, CANN's message on
/// one line (its messages may span several), and for a missing operator package the variable
/// that fixes it.
fn status_details(status: i32, message: &str) -> String {
    let mut s = String::new();
    let name = status_name(status);
    if !name.is_empty() {
        s.push_str(&format!(" ({name})"));
    }
    let msg = message.split_whitespace().collect::<Vec<_>>().join(" ");
    if !msg.is_empty() {
        s.push_str(&format!(": {msg}"));
    }
    if status == 561_107 {
        s.push_str(" (set ASCEND_OPP_PATH, e.g. by sourcing CANN's set_env.sh)");
    }
    s
}

/// Result alias of the dispatch layer.
pub type Result<T, E = AclError> = std::result::Result<T, E>;

#[cfg(test)]
mod tests {
    use super::AclError;

    // The messages as the hand-written `Display` wrote them before thiserror: callers and
    // tests match on them.
    #[test]
    fn messages_are_one_line_with_the_status_name_and_the_opp_hint() {
        let e = AclError::Status {
            call: "opFooGetWorkspaceSize".into(),
            status: 161_002,
            message: "EZ9999: bad\n   shape  [2]".into(),
        };
        assert_eq!(
            e.to_string(),
            "opFooGetWorkspaceSize failed with status 161002 (ACLNN_ERR_PARAM_INVALID): EZ9999: bad shape [2]"
        );
        let e = AclError::Status {
            call: "opFoo".into(),
            status: 561_107,
            message: String::new(),
        };
        assert_eq!(
            e.to_string(),
            "opFoo failed with status 561107 (ACLNN_ERR_INNER_OPP_PATH_NOT_FOUND) (set ASCEND_OPP_PATH, e.g. by sourcing CANN's set_env.sh)"
        );
        let e = AclError::Status {
            call: "aclrtMalloc".into(),
            status: 12,
            message: " ".into(),
        };
        assert_eq!(e.to_string(), "aclrtMalloc failed with status 12");
        assert_eq!(AclError::NotFound("x".into()).to_string(), "x");
        assert_eq!(
            AclError::Unsupported("x".into()).to_string(),
            "unsupported: x"
        );
        assert_eq!(AclError::invalid("p", "r").to_string(), "invalid p: r");
    }
}
