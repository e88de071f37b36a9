//! safetensors bundles: named host tensors plus string attributes.

use std::collections::{BTreeMap, HashMap};
use std::path::Path;

use half::{bf16, f16};
use safetensors::{Dtype, SafeTensors};

use super::CliError;
use burn_ascend::contract::Element;
use burn_ascend::AttnError;

/// One tensor as raw little-endian bytes.
#[derive(Debug, Clone, PartialEq)]
pub struct HostTensor {
    /// Element type.
    pub dtype: Dtype,
    /// Shape.
    pub shape: Vec<usize>,
    /// Little-endian element bytes.
    pub bytes: Vec<u8>,
}

/// A float element type that travels in safetensors.
pub trait WireFloat: Element {
    /// Its safetensors dtype.
    const DTYPE: Dtype;
    /// Decodes one element.
    fn from_le(b: &[u8]) -> Self;
    /// Appends one element.
    fn push_le(self, out: &mut Vec<u8>);
}

/// `WireFloat` for `$t`, safetensors dtype `$dtype`: its bytes are its own little-endian ones.
macro_rules! wire_float {
    ($t:ty, $dtype:ident) => {
        impl WireFloat for $t {
            const DTYPE: Dtype = Dtype::$dtype;
            fn from_le(b: &[u8]) -> Self {
                <$t>::from_le_bytes(b.try_into().expect("one element's bytes"))
            }
            fn push_le(self, out: &mut Vec<u8>) {
                out.extend_from_slice(&self.to_le_bytes());
            }
        }
    };
}
wire_float!(f32, F32);
wire_float!(f16, F16);
wire_float!(bf16, BF16);

impl HostTensor {
    /// A tensor from typed values.
    pub fn from_values<T: WireFloat>(values: &[T], shape: Vec<usize>) -> Self {
        let mut bytes = Vec::with_capacity(values.len() * T::DTYPE.bitsize() / 8);
        values.iter().for_each(|v| v.push_le(&mut bytes));
        Self {
            dtype: T::DTYPE,
            shape,
            bytes,
        }
    }

    /// An I64 tensor.
    pub fn from_i64(values: &[i64], shape: Vec<usize>) -> Self {
        Self {
            dtype: Dtype::I64,
            shape,
            bytes: values.iter().flat_map(|v| v.to_le_bytes()).collect(),
        }
    }

    /// An I32 tensor.
    pub fn from_i32(values: &[i32], shape: Vec<usize>) -> Self {
        Self {
            dtype: Dtype::I32,
            shape,
            bytes: values.iter().flat_map(|v| v.to_le_bytes()).collect(),
        }
    }

    /// An I8 tensor.
    pub fn from_i8(values: &[i8], shape: Vec<usize>) -> Self {
        Self {
            dtype: Dtype::I8,
            shape,
            bytes: values.iter().map(|&v| v as u8).collect(),
        }
    }

    /// f64 values rounded (nearest-even) to a float dtype (F32, F16 or BF16).
    pub fn from_f64_as(values: &[f64], shape: Vec<usize>, dtype: Dtype) -> Self {
        fn enc<T: WireFloat>(v: &[f64], shape: Vec<usize>) -> HostTensor {
            let t: Vec<T> = v.iter().map(|&x| T::from_f64(x)).collect();
            HostTensor::from_values(&t, shape)
        }
        match dtype {
            Dtype::F16 => enc::<f16>(values, shape),
            Dtype::BF16 => enc::<bf16>(values, shape),
            _ => enc::<f32>(values, shape),
        }
    }

    /// I8 values.
    pub fn i8_values(&self, name: &'static str) -> Result<Vec<i8>, AttnError> {
        self.check_bytes(name)?;
        if self.dtype != Dtype::I8 {
            return Err(AttnError::invalid(
                name,
                format!("dtype must be I8, got {:?}", self.dtype),
            ));
        }
        Ok(self.bytes.iter().map(|&b| b as i8).collect())
    }

    /// Float or int8 values widened to f32 (int8 exactly).
    pub fn f32_or_i8_values(&self, name: &'static str) -> Result<Vec<f32>, AttnError> {
        match self.dtype {
            Dtype::I8 => Ok(self.i8_values(name)?.into_iter().map(f32::from).collect()),
            _ => self.f32_values(name),
        }
    }

    /// A 0/1 mask: BOOL, INT8 or UINT8, every value 0 or 1.
    pub fn mask01_values(&self, name: &'static str) -> Result<Vec<u8>, AttnError> {
        self.check_bytes(name)?;
        match self.dtype {
            Dtype::BOOL | Dtype::U8 | Dtype::I8 => {
                if let Some(i) = self.bytes.iter().position(|&x| x > 1) {
                    return Err(AttnError::invalid(
                        name,
                        format!(
                            "values must be 0 or 1, element {i} is {}",
                            self.bytes[i] as i8
                        ),
                    ));
                }
                Ok(self.bytes.clone())
            }
            other => Err(AttnError::invalid(
                name,
                format!("dtype must be BOOL, INT8 or UINT8, got {other:?}"),
            )),
        }
    }

    /// A U8 or BOOL tensor.
    pub fn from_u8(values: Vec<u8>, shape: Vec<usize>, dtype: Dtype) -> Self {
        Self {
            dtype,
            shape,
            bytes: values,
        }
    }

    /// Number of elements: 0 when a dim is 0, even if the others multiply past `usize`
    /// (`[0, 2^40, 2^40]` is a legal empty safetensors shape), saturating otherwise (the
    /// bytes already bound the product of a non-empty shape).
    pub fn len(&self) -> usize {
        if self.shape.contains(&0) {
            return 0;
        }
        self.shape
            .iter()
            .try_fold(1usize, |acc, &d| acc.checked_mul(d))
            .unwrap_or(usize::MAX)
    }

    /// Whether it has no elements.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The bytes must hold exactly the shape's elements: a file's tensors are checked when
    /// read (`Bundle::from_bytes`), this also covers bundles built in memory, before any
    /// value reaches a kernel.
    fn check_bytes(&self, name: &'static str) -> Result<(), AttnError> {
        let need = self.len().checked_mul(self.dtype.bitsize() / 8);
        if need == Some(self.bytes.len()) {
            Ok(())
        } else {
            Err(AttnError::invalid(
                name,
                format!(
                    "holds {} bytes, its shape {:?} of {:?} needs {}",
                    self.bytes.len(),
                    self.shape,
                    self.dtype,
                    need.map_or("more than usize".into(), |n| n.to_string())
                ),
            ))
        }
    }

    /// The values as `T` (the dtype must be `T`'s).
    pub fn values<T: WireFloat>(&self, name: &'static str) -> Result<Vec<T>, AttnError> {
        self.check_bytes(name)?;
        if self.dtype != T::DTYPE {
            return Err(AttnError::invalid(
                name,
                format!("dtype must be {:?}, got {:?}", T::DTYPE, self.dtype),
            ));
        }
        Ok(self
            .bytes
            .chunks_exact(T::DTYPE.bitsize() / 8)
            .map(T::from_le)
            .collect())
    }

    /// Float values (F32, F16, BF16 or F64) widened to f32.
    pub fn f32_values(&self, name: &'static str) -> Result<Vec<f32>, AttnError> {
        self.check_bytes(name)?;
        let conv = |x: f64| x as f32;
        Ok(match self.dtype {
            Dtype::F32 => self.values::<f32>(name)?,
            Dtype::F16 => self
                .values::<f16>(name)?
                .into_iter()
                .map(|x| conv(x.to_f64()))
                .collect(),
            Dtype::BF16 => self
                .values::<bf16>(name)?
                .into_iter()
                .map(|x| conv(x.to_f64()))
                .collect(),
            Dtype::F64 => self
                .bytes
                .chunks_exact(8)
                .map(|b| conv(f64::from_le_bytes(b.try_into().expect("8"))))
                .collect(),
            other => {
                return Err(AttnError::invalid(
                    name,
                    format!("dtype must be a float type, got {other:?}"),
                ))
            }
        })
    }

    /// Integer values (I64 or I32).
    pub fn i64_values(&self, name: &'static str) -> Result<Vec<i64>, AttnError> {
        self.check_bytes(name)?;
        Ok(match self.dtype {
            Dtype::I64 => self
                .bytes
                .chunks_exact(8)
                .map(|b| i64::from_le_bytes(b.try_into().expect("8")))
                .collect(),
            Dtype::I32 => self
                .bytes
                .chunks_exact(4)
                .map(|b| i32::from_le_bytes(b.try_into().expect("4")) as i64)
                .collect(),
            other => {
                return Err(AttnError::invalid(
                    name,
                    format!("dtype must be I64, got {other:?}"),
                ))
            }
        })
    }

    /// Mask bytes (BOOL or U8; non-zero = set).
    pub fn mask_values(&self, name: &'static str) -> Result<Vec<u8>, AttnError> {
        self.check_bytes(name)?;
        match self.dtype {
            Dtype::BOOL | Dtype::U8 => Ok(self.bytes.clone()),
            other => Err(AttnError::invalid(
                name,
                format!("dtype must be BOOL or U8, got {other:?}"),
            )),
        }
    }
}

/// Named tensors and string attributes: one safetensors file.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Bundle {
    /// Tensors by aclnn name.
    pub tensors: BTreeMap<String, HostTensor>,
    /// Attributes by aclnn name.
    pub metadata: HashMap<String, String>,
}

impl Bundle {
    /// Reads a safetensors file.
    pub fn read(path: &Path) -> Result<Self, CliError> {
        let bytes =
            std::fs::read(path).map_err(|e| CliError::Io(format!("{}: {e}", path.display())))?;
        Self::from_bytes(&bytes).map_err(|e| CliError::Io(format!("{}: {e}", path.display())))
    }

    /// Parses safetensors bytes.
    pub fn from_bytes(bytes: &[u8]) -> Result<Self, String> {
        let st =
            SafeTensors::deserialize(bytes).map_err(|e| format!("not a safetensors file: {e}"))?;
        let (_, meta) = SafeTensors::read_metadata(bytes).map_err(|e| e.to_string())?;
        let tensors = st
            .tensors()
            .into_iter()
            .map(|(name, view)| {
                let t = HostTensor {
                    dtype: view.dtype(),
                    shape: view.shape().to_vec(),
                    bytes: view.data().to_vec(),
                };
                (name, t)
            })
            .collect();
        Ok(Self {
            tensors,
            metadata: meta.metadata().clone().unwrap_or_default(),
        })
    }

    /// Serialises to safetensors bytes.
    pub fn to_bytes(&self) -> Result<Vec<u8>, String> {
        let views: Vec<(String, safetensors::tensor::TensorView<'_>)> = self
            .tensors
            .iter()
            .map(|(n, t)| {
                let view = safetensors::tensor::TensorView::new(t.dtype, t.shape.clone(), &t.bytes)
                    .map_err(|e| format!("{n}: {e}"))?;
                Ok((n.clone(), view))
            })
            .collect::<Result<_, String>>()?;
        let meta = (!self.metadata.is_empty()).then(|| self.metadata.clone());
        safetensors::serialize(views, meta).map_err(|e| e.to_string())
    }

    /// Writes a safetensors file.
    pub fn write(&self, path: &Path) -> Result<(), CliError> {
        let bytes = self.to_bytes().map_err(CliError::Io)?;
        std::fs::write(path, bytes).map_err(|e| CliError::Io(format!("{}: {e}", path.display())))
    }

    /// A bundle of these tensors and no attributes: an op's outputs.
    pub fn of<const N: usize>(tensors: [(&str, HostTensor); N]) -> Self {
        let mut b = Self::default();
        for (name, t) in tensors {
            b.insert(name, t);
        }
        b
    }

    /// Adds a tensor.
    pub fn insert(&mut self, name: &str, t: HostTensor) {
        self.tensors.insert(name.to_string(), t);
    }

    /// A required tensor.
    pub fn required(&self, name: &'static str) -> Result<&HostTensor, AttnError> {
        self.tensors
            .get(name)
            .ok_or_else(|| AttnError::invalid(name, "required tensor is missing"))
    }

    /// An optional tensor, looked up under several names (e.g. `realShift` / `pseShift`).
    pub fn optional(&self, names: &[&str]) -> Option<&HostTensor> {
        names.iter().find_map(|n| self.tensors.get(*n))
    }

    /// A string attribute, or `default`.
    pub fn attr_str<'a>(&'a self, name: &str, default: &'a str) -> &'a str {
        self.metadata.get(name).map_or(default, String::as_str)
    }

    /// A required numeric attribute.
    pub fn attr_required<T: std::str::FromStr>(&self, name: &'static str) -> Result<T, AttnError> {
        let s = self
            .metadata
            .get(name)
            .ok_or_else(|| AttnError::invalid(name, "required attribute is missing"))?;
        s.trim()
            .parse()
            .map_err(|_| AttnError::invalid(name, format!("attribute '{s}' is not a valid number")))
    }

    /// An integer-list attribute (`"[a, b]"` or `"a,b"`), if present.
    pub fn attr_list(&self, name: &'static str) -> Result<Option<Vec<i64>>, AttnError> {
        let Some(s) = self.metadata.get(name) else {
            return Ok(None);
        };
        let inner = s.trim().trim_start_matches('[').trim_end_matches(']');
        if inner.trim().is_empty() {
            return Ok(Some(Vec::new()));
        }
        inner
            .split(',')
            .map(|x| x.trim().parse::<i64>())
            .collect::<Result<Vec<_>, _>>()
            .map(Some)
            .map_err(|_| AttnError::invalid(name, format!("must be a list of integers, got '{s}'")))
    }

    /// An optional INT64 tensor's values.
    pub fn opt_i64(&self, name: &'static str) -> Result<Option<Vec<i64>>, AttnError> {
        match self.tensors.get(name) {
            None => Ok(None),
            Some(t) if t.dtype != Dtype::I64 => Err(AttnError::invalid(
                name,
                format!("dtype must be INT64, got {:?}", t.dtype),
            )),
            Some(t) => Ok(Some(t.i64_values(name)?)),
        }
    }

    /// A numeric attribute, or `default`; a value that does not parse is an error naming it.
    pub fn attr<T: std::str::FromStr>(
        &self,
        name: &'static str,
        default: T,
    ) -> Result<T, AttnError> {
        match self.metadata.get(name) {
            None => Ok(default),
            Some(s) => s.trim().parse().map_err(|_| {
                AttnError::invalid(name, format!("attribute '{s}' is not a valid number"))
            }),
        }
    }
}

/// The rank-3 shape of a tensor, or an error naming it.
pub fn rank3(t: &HostTensor, name: &'static str) -> Result<[usize; 3], AttnError> {
    t.shape.as_slice().try_into().map_err(|_| {
        AttnError::invalid(
            name,
            format!("must be rank 3 (TND), got shape {:?}", t.shape),
        )
    })
}
