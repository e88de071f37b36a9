//! A safetensors file read one tensor at a time: the header is parsed and checked as the
//! `safetensors` crate checks it (offsets inside the data, each tensor's byte count its shape
//! times its dtype's size, no two tensors overlapping), then each tensor's bytes are read into
//! one reused buffer and handed over. Reading the whole file first would hold every weight
//! twice while they are converted (the file's bytes and the model's f32 values): a loaded
//! model's peak memory is then its weights plus its largest tensor.

use std::fs::File;
use std::io::{Read, Seek, SeekFrom};
use std::path::Path;

use safetensors::Dtype;

use burn_ascend::AttnError;

/// The safetensors format's cap on the header (100 MB), as the crate enforces it.
const MAX_HEADER: u64 = 100_000_000;

fn bad(path: &Path, rule: impl std::fmt::Display) -> AttnError {
    AttnError::invalid("checkpoint", format!("{}: {rule}", path.display()))
}

/// One tensor's entry in the header.
struct Entry {
    name: String,
    dtype: Dtype,
    shape: Vec<usize>,
    start: u64,
    end: u64,
}

/// The dtypes a checkpoint's tensors come in (anything else is named in the refusal).
fn dtype_of(name: &str) -> Option<(Dtype, usize)> {
    Some(match name {
        "F64" => (Dtype::F64, 8),
        "F32" => (Dtype::F32, 4),
        "F16" => (Dtype::F16, 2),
        "BF16" => (Dtype::BF16, 2),
        "I64" => (Dtype::I64, 8),
        "I32" => (Dtype::I32, 4),
        "I16" => (Dtype::I16, 2),
        "I8" => (Dtype::I8, 1),
        "U8" => (Dtype::U8, 1),
        "BOOL" => (Dtype::BOOL, 1),
        _ => return None,
    })
}

/// The entries of `header` (the file's JSON header) for a data section of `data_len` bytes,
/// in file order, each checked.
fn entries(path: &Path, header: &[u8], data_len: u64) -> Result<Vec<Entry>, AttnError> {
    let json: serde_json::Value =
        serde_json::from_slice(header).map_err(|e| bad(path, format!("header: {e}")))?;
    let map = json
        .as_object()
        .ok_or_else(|| bad(path, "header: not a JSON object"))?;
    let mut out = Vec::with_capacity(map.len());
    for (name, info) in map {
        if name == "__metadata__" {
            continue;
        }
        let field = |key: &str| {
            info.get(key)
                .ok_or_else(|| bad(path, format!("tensor '{name}' has no {key}")))
        };
        let dtype_name = field("dtype")?.as_str().unwrap_or_default();
        let (dtype, size) = dtype_of(dtype_name).ok_or_else(|| {
            AttnError::Unsupported(format!("tensor {name} has dtype {dtype_name:?}"))
        })?;
        let numbers = |key: &str| -> Result<Vec<u64>, AttnError> {
            field(key)?
                .as_array()
                .and_then(|a| a.iter().map(serde_json::Value::as_u64).collect())
                .ok_or_else(|| {
                    bad(
                        path,
                        format!("tensor '{name}': {key} is not a list of sizes"),
                    )
                })
        };
        let shape: Vec<usize> = numbers("shape")?.into_iter().map(|d| d as usize).collect();
        let offsets = numbers("data_offsets")?;
        let [start, end] = offsets[..] else {
            return Err(bad(
                path,
                format!("tensor '{name}': data_offsets needs two entries"),
            ));
        };
        let bytes = shape
            .iter()
            .try_fold(size as u64, |acc, &d| acc.checked_mul(d as u64));
        if start > end || end > data_len || bytes != Some(end - start) {
            return Err(bad(
                path,
                format!(
                    "tensor '{name}': data_offsets [{start}, {end}] do not hold {shape:?} \
                     {dtype_name} inside the {data_len} data bytes"
                ),
            ));
        }
        out.push(Entry {
            name: name.clone(),
            dtype,
            shape,
            start,
            end,
        });
    }
    out.sort_by_key(|e| (e.start, e.end));
    for pair in out.windows(2) {
        if pair[1].start < pair[0].end {
            return Err(bad(
                path,
                format!("tensors '{}' and '{}' overlap", pair[0].name, pair[1].name),
            ));
        }
    }
    Ok(out)
}

/// The file at `path` opened, with its checked header entries (in file order) and the offset
/// of its data section: what [`for_each_tensor`] reads and the config check looks at.
pub(crate) struct Header {
    file: File,
    data_start: u64,
    /// The tensors, in file order.
    entries: Vec<Entry>,
}

impl Header {
    /// Reads and checks the header alone (the first 8 + n bytes of the file).
    pub(crate) fn read(path: &Path) -> Result<Self, AttnError> {
        let io = |e: std::io::Error| bad(path, e);
        let mut file = File::open(path).map_err(io)?;
        let file_len = file.metadata().map_err(io)?.len();
        let mut n = [0u8; 8];
        file.read_exact(&mut n)
            .map_err(|e| bad(path, format!("no safetensors header: {e}")))?;
        let n = u64::from_le_bytes(n);
        if n > file_len.saturating_sub(8) || n > MAX_HEADER {
            return Err(bad(
                path,
                format!("header of {n} bytes in a file of {file_len} bytes"),
            ));
        }
        let mut header = vec![0u8; n as usize];
        file.read_exact(&mut header).map_err(io)?;
        let data_start = 8 + n;
        let entries = entries(path, &header, file_len - data_start)?;
        Ok(Self {
            file,
            data_start,
            entries,
        })
    }

    /// Every tensor's name and shape.
    pub(crate) fn shapes(&self) -> impl Iterator<Item = (&str, &[usize])> {
        self.entries.iter().map(|e| (e.name.as_str(), &e.shape[..]))
    }
}

/// Calls `each(name, dtype, shape, bytes)` for every tensor of the safetensors file at `path`,
/// in file order, reading one tensor's bytes at a time.
pub(crate) fn for_each_tensor(
    path: &Path,
    mut each: impl FnMut(String, Dtype, Vec<usize>, &[u8]) -> Result<(), AttnError>,
) -> Result<(), AttnError> {
    let io = |e: std::io::Error| bad(path, e);
    let Header {
        mut file,
        data_start,
        entries,
    } = Header::read(path)?;
    let mut buf = Vec::new();
    for e in entries {
        buf.resize((e.end - e.start) as usize, 0);
        file.seek(SeekFrom::Start(data_start + e.start))
            .map_err(io)?;
        file.read_exact(&mut buf).map_err(io)?;
        each(e.name, e.dtype, e.shape, &buf)?;
    }
    Ok(())
}
