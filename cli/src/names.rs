//! The check that refuses any tensor or attribute name an op does not read (each op declares
//! its names once, beside its replay in `crate::op::<op>`) before anything else runs (on every
//! device): a misspelled optional input (`attnMask`, `scalevalue`, `sparse_mode`) would
//! otherwise be ignored and the op would run without it.

use crate::io::Bundle;
use crate::CliError;

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

/// `a` then `b`: the name lists ops build from a common part.
pub const fn concat<const A: usize, const B: usize, const N: usize>(
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
