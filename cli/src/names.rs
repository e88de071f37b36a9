//! The tensor and attribute names each op reads, declared once per op, and the check that
//! refuses any other name before anything else runs (on every device): a misspelled optional
//! input (`attnMask`, `scalevalue`, `sparse_mode`) would otherwise be ignored and the op would
//! run without it.

use super::io::Bundle;
use super::CliError;

/// The names one op reads from a bundle.
#[derive(Debug, Clone, Copy)]
pub struct OpNames {
    /// Tensor names (aclnn parameter names without `Optional`).
    pub tensors: &'static [&'static str],
    /// Tensor-list prefixes: `key` accepts `key.0`, `key.1`, … (incre's tensor-list form).
    pub tensor_lists: &'static [&'static str],
    /// Attribute names (keys of the safetensors `__metadata__`).
    pub attributes: &'static [&'static str],
}

/// Metadata keys any bundle may carry and no op reads: `format` is the key safetensors'
/// own writers add (`{"format": "pt"}` from `save_pretrained`), not an op attribute.
const CONTAINER_KEYS: &[&str] = &["format"];

const VARLEN_COMMON_TENSORS: [&str; 13] = [
    "query",
    "key",
    "value",
    "sink",
    "attenMask",
    "realShift",
    "pseShift",
    "dropMask",
    "prefix",
    "qStartIdx",
    "kvStartIdx",
    "actualSeqQLen",
    "actualSeqKvLen",
];

const VARLEN_COMMON_ATTRS: [&str; 9] = [
    "inputLayout",
    "headNum",
    "scaleValue",
    "keepProb",
    "preTokens",
    "nextTokens",
    "innerPrecise",
    "sparseMode",
    "pseType",
];

const fn concat<const A: usize, const B: usize, const N: usize>(
    a: [&'static str; A],
    b: [&'static str; B],
) -> [&'static str; N] {
    assert!(A + B == N);
    let mut out = [""; N];
    let mut i = 0;
    while i < A {
        out[i] = a[i];
        i += 1;
    }
    while i < N {
        out[i] = b[i - A];
        i += 1;
    }
    out
}

const VARLEN_FWD_TENSORS: [&str; 13] = VARLEN_COMMON_TENSORS;
// Both softmax layouts in both directions: a bundle dumped from a training step carries the
// forward's `softmaxOutLayout` and the backward's `softmaxInLayout`; `varlen.rs` refuses the
// pair when they disagree, so neither is ignored.
const VARLEN_LAYOUT_ATTRS: [&str; 11] =
    concat(VARLEN_COMMON_ATTRS, ["softmaxOutLayout", "softmaxInLayout"]);
const VARLEN_FWD_ATTRS: [&str; 11] = VARLEN_LAYOUT_ATTRS;
const VARLEN_BWD_TENSORS: [&str; 18] = concat(
    VARLEN_COMMON_TENSORS,
    ["dy", "attentionIn", "softmaxMax", "softmaxSum", "sinkIn"],
);
const VARLEN_BWD_ATTRS: [&str; 11] = VARLEN_LAYOUT_ATTRS;

/// `varlen-fwd`: `aclnnFlashAttentionVarLenScoreV5`.
pub const VARLEN_FWD: OpNames = OpNames {
    tensors: &VARLEN_FWD_TENSORS,
    tensor_lists: &[],
    attributes: &VARLEN_FWD_ATTRS,
};

/// `varlen-bwd`: `aclnnFlashAttentionUnpaddingScoreGradV5`.
pub const VARLEN_BWD: OpNames = OpNames {
    tensors: &VARLEN_BWD_TENSORS,
    tensor_lists: &[],
    attributes: &VARLEN_BWD_ATTRS,
};

/// `prompt`: `aclnnPromptFlashAttentionV3`. The full-quantisation scales are known so that
/// they get their "unsupported" error rather than "unknown".
pub const PROMPT: OpNames = OpNames {
    tensors: &[
        "query",
        "key",
        "value",
        "attenMask",
        "pseShift",
        "actualSeqLengths",
        "actualSeqLengthsKv",
        "quantScale2",
        "quantOffset2",
        "deqScale1",
        "quantScale1",
        "deqScale2",
    ],
    tensor_lists: &[],
    attributes: &[
        "inputLayout",
        "numHeads",
        "scaleValue",
        "numKeyValueHeads",
        "preTokens",
        "nextTokens",
        "sparseMode",
        "innerPrecise",
    ],
};

/// `incre`: `aclnnIncreFlashAttentionV4`.
pub const INCRE: OpNames = OpNames {
    tensors: &[
        "query",
        "key",
        "value",
        "attenMask",
        "pseShift",
        "actualSeqLengths",
        "kvPaddingSize",
        "blocktable",
        "antiquantScale",
        "antiquantOffset",
        "quantScale2",
        "quantOffset2",
        "dequantScale1",
        "quantScale1",
        "dequantScale2",
    ],
    tensor_lists: &["key", "value"],
    attributes: &[
        "inputLayout",
        "numHeads",
        "scaleValue",
        "numKeyValueHeads",
        "blockSize",
        "innerPrecise",
    ],
};

/// `fia`: `aclnnFusedInferAttentionScoreV4`. The inputs left out (quantisation, shared
/// prefix, rope) are known so that they get their "unsupported" error rather than "unknown".
pub const FIA: OpNames = OpNames {
    tensors: &[
        "query",
        "key",
        "value",
        "pseShift",
        "attenMask",
        "actualSeqLengths",
        "actualSeqLengthsKv",
        "blockTable",
        "queryPaddingSize",
        "kvPaddingSize",
        "antiquantScale",
        "antiquantOffset",
        "keyAntiquantScale",
        "keyAntiquantOffset",
        "valueAntiquantScale",
        "valueAntiquantOffset",
        "learnableSink",
        "deqScale1",
        "quantScale1",
        "deqScale2",
        "quantScale2",
        "quantOffset2",
        "keySharedPrefix",
        "valueSharedPrefix",
        "actualSharedPrefixLen",
        "queryRope",
        "keyRope",
        "keyRopeAntiquantScale",
        "dequantScaleQuery",
    ],
    tensor_lists: &[],
    attributes: &[
        "numHeads",
        "scaleValue",
        "preTokens",
        "nextTokens",
        "inputLayout",
        "numKeyValueHeads",
        "sparseMode",
        "innerPrecise",
        "blockSize",
        "antiquantMode",
        "softmaxLseFlag",
        "keyAntiquantMode",
        "valueAntiquantMode",
    ],
};

/// `scatter`: `aclnnScatterPaKvCache`.
pub const SCATTER: OpNames = OpNames {
    tensors: &[
        "key",
        "value",
        "keyCache",
        "valueCache",
        "slotMapping",
        "compressLens",
        "compressSeqOffset",
        "seqLens",
    ],
    tensor_lists: &[],
    attributes: &["cacheMode", "scatterMode", "strides", "offsets"],
};

/// The names `op` reads, if `op` is known.
pub fn of(op: &str) -> Option<OpNames> {
    Some(match op {
        "varlen-fwd" => VARLEN_FWD,
        "varlen-bwd" => VARLEN_BWD,
        "prompt" => PROMPT,
        "incre" => INCRE,
        "fia" => FIA,
        "scatter" => SCATTER,
        _ => return None,
    })
}

impl OpNames {
    fn is_tensor(&self, name: &str) -> bool {
        self.tensors.contains(&name)
            || self.tensor_lists.iter().any(|p| {
                name.strip_prefix(p)
                    .and_then(|r| r.strip_prefix('.'))
                    .is_some_and(|i| !i.is_empty() && i.bytes().all(|b| b.is_ascii_digit()))
            })
    }

    /// Refuses the first (in name order) tensor or attribute `op` does not read, naming the
    /// closest known one.
    pub fn check(&self, op: &str, b: &Bundle) -> Result<(), CliError> {
        // Tensors are a BTreeMap (sorted); sort the metadata keys too so the error names the
        // same key on every run and every device.
        if let Some(name) = b.tensors.keys().find(|n| !self.is_tensor(n)) {
            let hint = if self.attributes.contains(&name.as_str()) {
                format!(" — `{name}` is an attribute: put it in the __metadata__")
            } else {
                hint(op, name, self.tensors)
            };
            return Err(CliError::Unknown(format!("unknown tensor `{name}`{hint}")));
        }
        let mut keys: Vec<&String> = b.metadata.keys().collect();
        keys.sort();
        let known = |k: &str| self.attributes.contains(&k) || CONTAINER_KEYS.contains(&k);
        if let Some(name) = keys.into_iter().find(|k| !known(k)) {
            let hint = if self.is_tensor(name) {
                format!(" — `{name}` is a tensor: store it as one, not in the __metadata__")
            } else {
                hint(op, name, self.attributes)
            };
            return Err(CliError::Unknown(format!(
                "unknown attribute `{name}`{hint}"
            )));
        }
        Ok(())
    }
}

/// " — did you mean `x`?" for the closest known name (Levenshtein distance, ASCII case and
/// `_`/`-` ignored first), else the list of known names.
fn hint(op: &str, name: &str, known: &[&str]) -> String {
    let fold = |s: &str| -> String {
        s.chars()
            .filter(|c| !matches!(c, '_' | '-'))
            .map(|c| c.to_ascii_lowercase())
            .collect()
    };
    let folded = fold(name);
    let best = known
        .iter()
        .map(|k| {
            let d = strsim::levenshtein(&folded, &fold(k));
            (d, strsim::levenshtein(name, k), *k)
        })
        .min();
    match best {
        // Close enough to be a typo: at most a third of the name's length, at least 2 edits.
        Some((d, _, k)) if d <= (k.len() / 3).max(2) => format!(" — did you mean `{k}`?"),
        _ => format!(" ({op} reads: {})", known.join(", ")),
    }
}
