//! Typed errors: every rule a caller can break names the parameter (by its aclnn name) and the rule.

/// Why an attention op refused its input or could not run.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum AttnError {
    /// A parameter broke a documented constraint.
    #[error("invalid {param}: {rule}")]
    Invalid {
        /// The aclnn parameter name (`query`, `actualSeqQLen`, `keepProb`, …).
        param: &'static str,
        /// The rule it broke, with the offending values.
        rule: String,
    },
    /// A valid CANN feature this build does not implement.
    #[error("unsupported: {0}")]
    Unsupported(String),
    /// The paged KV cache has too few free blocks for a request.
    #[error("out of KV cache blocks: need {needed}, {free} free")]
    OutOfBlocks {
        /// Blocks the request needs.
        needed: usize,
        /// Blocks free.
        free: usize,
    },
    /// The input was valid but the device failed the call: a runtime or aclnn status (device
    /// memory exhausted, a kernel fault at execute, a stream error).
    #[error("device: {op}: {call} failed{}{}", with_status(*.status), after_colon(.message))]
    Device {
        /// The op that failed (`prompt_flash_attention`, …).
        op: String,
        /// The C function that returned the status (`aclrtMalloc`, `aclnnScatterPaKvCache`, …).
        call: String,
        /// Its status, when it returned one.
        status: Option<i32>,
        /// The device's message (`aclGetRecentErrMsg`).
        message: String,
    },
}

impl AttnError {
    /// An [`AttnError::Invalid`].
    pub fn invalid(param: &'static str, rule: impl Into<String>) -> Self {
        Self::Invalid {
            param,
            rule: rule.into(),
        }
    }

    /// The parameter named by an [`AttnError::Invalid`].
    pub fn param(&self) -> Option<&'static str> {
        match self {
            Self::Invalid { param, .. } => Some(param),
            Self::Unsupported(_) | Self::OutOfBlocks { .. } | Self::Device { .. } => None,
        }
    }
}

/// ` with status N` when the device returned a status; nothing otherwise.
fn with_status(status: Option<i32>) -> String {
    status.map_or_else(String::new, |st| format!(" with status {st}"))
}

/// `: message` when the device said something; nothing otherwise (no dangling colon).
fn after_colon(message: &str) -> String {
    if message.is_empty() {
        String::new()
    } else {
        format!(": {message}")
    }
}

/// Shorthand for results of this crate.
pub type Result<T, E = AttnError> = std::result::Result<T, E>;

/// `Err(AttnError::invalid(param, format!(...)))` unless `cond`.
#[macro_export]
macro_rules! ensure {
    ($cond:expr, $param:expr, $($fmt:tt)+) => {
        if !$cond {
            return Err($crate::error::AttnError::invalid($param, format!($($fmt)+)));
        }
    };
}
pub use crate::ensure;
