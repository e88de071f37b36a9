//! Simulated nnopbase handles: `aclTensor` (decoded into [`SimTensor`], read and written
//! through its view), `aclIntArray`, `aclTensorList` and `aclScalar`, each a registry of live
//! ids, and the lookups the ops use.

use std::collections::HashMap;
use std::ffi::c_char;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Mutex;

use burn_ascend_cann::acl::ffi::*;
use half::{bf16, f16};

use super::{device_range_ok, guard, guard_ptr, invalid, lock, next_id, read_device};
use super::{with_device_mut, SimErr, SimResult};

/// A decoded `aclTensor`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct SimTensor {
    pub dims: Vec<usize>,
    pub strides: Vec<usize>,
    pub offset: usize,
    pub dtype: DataType,
    pub format: Format,
    pub storage_dims: Vec<usize>,
    pub data: usize,
}

impl SimTensor {
    pub fn numel(&self) -> usize {
        self.dims.iter().product()
    }

    fn storage_bytes(&self) -> usize {
        self.storage_dims.iter().product::<usize>() * self.dtype.size()
    }

    /// Checks that the storage lies inside one live allocation (the view was checked against
    /// the storage at creation).
    pub fn check_memory(&self, name: &str) -> SimResult<()> {
        if self.numel() == 0 {
            return Ok(());
        }
        if !device_range_ok(self.data, self.storage_bytes()) {
            return invalid(format!(
                "{name}: storage {:?} of {:?} ({} bytes at {:#x}) is not inside one device allocation",
                self.storage_dims,
                self.dtype,
                self.storage_bytes(),
                self.data
            ));
        }
        Ok(())
    }

    /// Element offsets of the view in row-major order.
    fn element_offsets(&self) -> Vec<usize> {
        let n = self.numel();
        let mut out = Vec::with_capacity(n);
        if n == 0 {
            return out;
        }
        let rank = self.dims.len();
        let mut idx = vec![0usize; rank];
        for _ in 0..n {
            out.push(
                self.offset
                    + idx
                        .iter()
                        .zip(&self.strides)
                        .map(|(i, s)| i * s)
                        .sum::<usize>(),
            );
            for d in (0..rank).rev() {
                idx[d] += 1;
                if idx[d] < self.dims[d] {
                    break;
                }
                idx[d] = 0;
            }
        }
        out
    }

    /// The view's elements, gathered into row-major order, as little-endian bytes.
    pub fn read(&self, name: &str) -> SimResult<Vec<u8>> {
        first_stage_cannot_touch(name)?;
        if self.numel() == 0 {
            return Ok(Vec::new());
        }
        let es = self.dtype.size();
        let storage = read_device(self.data, self.storage_bytes(), name)?;
        let mut out = Vec::with_capacity(self.numel() * es);
        for e in self.element_offsets() {
            out.extend_from_slice(&storage[e * es..(e + 1) * es]);
        }
        Ok(out)
    }

    /// Writes row-major elements (little-endian bytes) through the view.
    pub fn write(&self, name: &str, bytes: &[u8]) -> SimResult<()> {
        first_stage_cannot_touch(name)?;
        let es = self.dtype.size();
        if bytes.len() != self.numel() * es {
            return Err(SimErr(
                ACLNN_ERR_INNER,
                format!(
                    "{name}: writing {} bytes to a view of {} elements",
                    bytes.len(),
                    self.numel()
                ),
            ));
        }
        if self.numel() == 0 {
            return Ok(());
        }
        let offsets = self.element_offsets();
        with_device_mut(self.data, self.storage_bytes(), name, |storage| {
            for (k, e) in offsets.into_iter().enumerate() {
                storage[e * es..(e + 1) * es].copy_from_slice(&bytes[k * es..(k + 1) * es]);
            }
        })
    }
}

pub(super) static TENSORS: Mutex<Option<HashMap<usize, SimTensor>>> = Mutex::new(None);
pub(super) static INT_ARRAYS: Mutex<Option<HashMap<usize, Vec<i64>>>> = Mutex::new(None);
pub(super) static LISTS: Mutex<Option<HashMap<usize, Vec<usize>>>> = Mutex::new(None);

/// Reads `n` values from a C array, `None` for a null pointer with `n > 0`.
///
/// # Safety
/// A non-null `p` must be valid for `n` reads.
unsafe fn c_array<T: Copy>(p: *const T, n: u64) -> Option<Vec<T>> {
    if n == 0 {
        return Some(Vec::new());
    }
    if p.is_null() {
        return None;
    }
    // SAFETY: the caller's contract.
    Some(unsafe { std::slice::from_raw_parts(p, n as usize) }.to_vec())
}

runtime_fn!(create_tensor, |p| {
    let (data_type, offset, format) = (p.data_type, p.offset, p.format);
    guard_ptr(|| {
        if p.view_dims_num > 8 || p.storage_dims_num > 8 {
            return invalid("aclCreateTensor: rank must be <= 8");
        }
        // SAFETY: aclCreateTensor's contract: each array holds its count of int64 values
        // (strides as many as the view dims).
        let (dims, strides, storage) = unsafe {
            (
                c_array(p.view_dims, p.view_dims_num),
                c_array(p.stride, p.view_dims_num),
                c_array(p.storage_dims, p.storage_dims_num),
            )
        };
        let (Some(dims), Some(strides), Some(storage)) = (dims, strides, storage) else {
            return Err(SimErr(
                ACLNN_ERR_PARAM_NULLPTR,
                "aclCreateTensor: null dims, strides or storage dims".into(),
            ));
        };
        let dtype = DataType::from_raw(data_type).ok_or_else(|| {
            SimErr(
                ACLNN_ERR_PARAM_INVALID,
                format!("aclCreateTensor: unknown aclDataType {data_type}"),
            )
        })?;
        let format = Format::from_raw(format).ok_or_else(|| {
            SimErr(
                ACLNN_ERR_PARAM_INVALID,
                format!("aclCreateTensor: unknown aclFormat {format}"),
            )
        })?;
        let nonneg = |v: &[i64]| v.iter().all(|&x| x >= 0);
        if !nonneg(&dims) || !nonneg(&strides) || !nonneg(&storage) || offset < 0 {
            return invalid(format!(
                "aclCreateTensor: negative dims {dims:?}, strides {strides:?}, storage {storage:?} or offset {offset}"
            ));
        }
        let u = |v: Vec<i64>| v.into_iter().map(|x| x as usize).collect::<Vec<_>>();
        let t = SimTensor {
            dims: u(dims),
            strides: u(strides),
            offset: offset as usize,
            dtype,
            format,
            storage_dims: u(storage),
            data: p.tensor_data as usize,
        };
        if t.numel() > 0 {
            let extent = t.offset
                + t.dims
                    .iter()
                    .zip(&t.strides)
                    .map(|(d, s)| (d - 1) * s)
                    .sum::<usize>()
                + 1;
            let storage_elems: usize = t.storage_dims.iter().product();
            if extent > storage_elems {
                return invalid(format!(
                    "aclCreateTensor: view dims {:?} strides {:?} offset {} reach element {extent}, beyond storage {:?}",
                    t.dims, t.strides, t.offset, t.storage_dims
                ));
            }
            if p.tensor_data.is_null() {
                return Err(SimErr(
                    ACLNN_ERR_PARAM_NULLPTR,
                    "aclCreateTensor: null data for a non-empty tensor".into(),
                ));
            }
        }
        let id = next_id();
        lock(&TENSORS)
            .get_or_insert_with(HashMap::new)
            .insert(id, t);
        Ok(id)
    })
});

runtime_fn!(destroy_tensor, |p| {
    let tensor = p.tensor;
    guard(|| {
        match lock(&TENSORS)
            .as_mut()
            .and_then(|m| m.remove(&(tensor as usize)))
        {
            Some(_) => Ok(()),
            None => invalid(format!("aclDestroyTensor: {tensor:p} is not a live tensor")),
        }
    })
});

runtime_fn!(create_int_array, |p| {
    guard_ptr(|| {
        // SAFETY: aclCreateIntArray's contract: `value` holds `size` values.
        let Some(v) = (unsafe { c_array(p.value, p.size) }) else {
            return Err(SimErr(
                ACLNN_ERR_PARAM_NULLPTR,
                "aclCreateIntArray: null values".into(),
            ));
        };
        let id = next_id();
        lock(&INT_ARRAYS)
            .get_or_insert_with(HashMap::new)
            .insert(id, v);
        Ok(id)
    })
});

runtime_fn!(destroy_int_array, |p| {
    let array = p.array;
    guard(|| {
        match lock(&INT_ARRAYS)
            .as_mut()
            .and_then(|m| m.remove(&(array as usize)))
        {
            Some(_) => Ok(()),
            None => invalid(format!(
                "aclDestroyIntArray: {array:p} is not a live int array"
            )),
        }
    })
});

runtime_fn!(create_tensor_list, |params| {
    guard_ptr(|| {
        // SAFETY: aclCreateTensorList's contract: `value` holds `size` tensor handles.
        let Some(v) = (unsafe { c_array(params.value, params.size) }) else {
            return Err(SimErr(
                ACLNN_ERR_PARAM_NULLPTR,
                "aclCreateTensorList: null values".into(),
            ));
        };
        let ids: Vec<usize> = v.into_iter().map(|p| p as usize).collect();
        {
            let tensors = lock(&TENSORS);
            if let Some(bad) = ids
                .iter()
                .find(|id| !tensors.as_ref().is_some_and(|m| m.contains_key(id)))
            {
                return invalid(format!(
                    "aclCreateTensorList: {bad:#x} is not a live tensor"
                ));
            }
        }
        let id = next_id();
        lock(&LISTS)
            .get_or_insert_with(HashMap::new)
            .insert(id, ids);
        Ok(id)
    })
});

runtime_fn!(destroy_tensor_list, |p| {
    let list = p.list;
    guard(|| {
        let Some(ids) = lock(&LISTS)
            .as_mut()
            .and_then(|m| m.remove(&(list as usize)))
        else {
            return invalid(format!(
                "aclDestroyTensorList: {list:p} is not a live tensor list"
            ));
        };
        // As in nnopbase, destroying the list destroys its tensors.
        let mut tensors = lock(&TENSORS);
        for id in ids {
            tensors.as_mut().and_then(|m| m.remove(&id));
        }
        Ok(())
    })
});

/// The tensor behind a handle: `Ok(None)` for null, 161002 for a dead or foreign handle.
pub(crate) fn tensor(p: *const AclTensor, name: &str) -> SimResult<Option<SimTensor>> {
    if p.is_null() {
        return Ok(None);
    }
    let t = lock(&TENSORS)
        .as_ref()
        .and_then(|m| m.get(&(p as usize)).cloned());
    match t {
        Some(t) => {
            t.check_memory(name)?;
            if t.numel() > 0 {
                super::note_touched(t.data, t.storage_bytes());
            }
            crate::cost::note_operand(&t.dims, t.dtype);
            Ok(Some(t))
        }
        None => invalid(format!("{name}: {p:p} is not a live aclTensor")),
    }
}

/// A required tensor: null → 161001 naming it.
pub(crate) fn required(p: *const AclTensor, name: &str) -> SimResult<SimTensor> {
    tensor(p, name)?.ok_or_else(|| SimErr(ACLNN_ERR_PARAM_NULLPTR, format!("{name} is null")))
}

/// An int array's values (`None` for null).
pub(crate) fn int_array(p: *const AclIntArray, name: &str) -> SimResult<Option<Vec<i64>>> {
    if p.is_null() {
        return Ok(None);
    }
    match lock(&INT_ARRAYS)
        .as_ref()
        .and_then(|m| m.get(&(p as usize)).cloned())
    {
        Some(v) => Ok(Some(v)),
        None => invalid(format!("{name}: {p:p} is not a live aclIntArray")),
    }
}

/// A tensor list's tensors (`None` for null).
pub(crate) fn tensor_list(
    p: *const AclTensorList,
    name: &str,
) -> SimResult<Option<Vec<SimTensor>>> {
    if p.is_null() {
        return Ok(None);
    }
    let Some(ids) = lock(&LISTS)
        .as_ref()
        .and_then(|m| m.get(&(p as usize)).cloned())
    else {
        return invalid(format!("{name}: {p:p} is not a live aclTensorList"));
    };
    ids.into_iter()
        .enumerate()
        .map(|(i, id)| required(id as *const AclTensor, &format!("{name}[{i}]")))
        .collect::<SimResult<Vec<_>>>()
        .map(Some)
}

/// A C string attribute (`None` for null).
///
/// # Safety
/// A non-null `p` must point to a NUL-terminated string.
pub(crate) unsafe fn c_str(p: *const c_char, name: &str) -> SimResult<Option<String>> {
    if p.is_null() {
        return Ok(None);
    }
    // SAFETY: the caller's contract.
    let s = unsafe { std::ffi::CStr::from_ptr(p) };
    s.to_str()
        .map(|s| Some(s.to_string()))
        .or_else(|_| invalid(format!("{name}: not UTF-8")))
}

// ---- aclScalar ------------------------------------------------------------------------------

static SCALARS: Mutex<Option<HashMap<usize, f64>>> = Mutex::new(None);
static NEXT_SCALAR: AtomicUsize = AtomicUsize::new(0x5C_0000);

fn scalars() -> std::sync::MutexGuard<'static, Option<HashMap<usize, f64>>> {
    SCALARS.lock().unwrap_or_else(|e| e.into_inner())
}

runtime_fn!(create_scalar, |params| {
    let data_type = params.data_type;
    let mut id = 0usize;
    let st = guard(|| {
        if params.value.is_null() {
            return Err(SimErr(
                ACLNN_ERR_PARAM_NULLPTR,
                "aclCreateScalar: value is null".into(),
            ));
        }
        let p = params.value.cast_const().cast::<u8>();
        let dt = DataType::from_raw(data_type);
        // SAFETY: aclCreateScalar's contract: `value` points to one element of `dataType`; the
        // bytes are copied out unaligned.
        let v = unsafe {
            match dt {
                Some(DataType::Float) => f64::from(p.cast::<f32>().read_unaligned()),
                Some(DataType::Double) => p.cast::<f64>().read_unaligned(),
                Some(DataType::Float16) => f64::from(p.cast::<f16>().read_unaligned()),
                Some(DataType::Bf16) => f64::from(p.cast::<bf16>().read_unaligned()),
                Some(DataType::Int32) => f64::from(p.cast::<i32>().read_unaligned()),
                Some(DataType::Int64) => p.cast::<i64>().read_unaligned() as f64,
                _ => {
                    return invalid(format!(
                        "aclCreateScalar: dataType {data_type} is not simulated"
                    ))
                }
            }
        };
        id = NEXT_SCALAR.fetch_add(16, Ordering::Relaxed);
        scalars().get_or_insert_with(HashMap::new).insert(id, v);
        Ok(())
    });
    if st == ACL_SUCCESS {
        id as *mut AclScalar
    } else {
        std::ptr::null_mut()
    }
});

runtime_fn!(destroy_scalar, |p| {
    let scalar = p.scalar;
    guard(|| {
        match scalars()
            .as_mut()
            .and_then(|m| m.remove(&(scalar as usize)))
        {
            Some(_) => Ok(()),
            None => invalid(format!(
                "aclDestroyScalar: {scalar:p} is not a live aclScalar"
            )),
        }
    })
});

pub(crate) fn scalar(p: *const AclScalar, name: &str) -> SimResult<f64> {
    if p.is_null() {
        return Err(SimErr(ACLNN_ERR_PARAM_NULLPTR, format!("{name} is null")));
    }
    scalars()
        .as_ref()
        .and_then(|m| m.get(&(p as usize)).copied())
        .ok_or_else(|| {
            SimErr(
                ACLNN_ERR_PARAM_INVALID,
                format!("{name}: {p:p} is not a live aclScalar"),
            )
        })
}

/// CANN's first stage (`…GetWorkspaceSize`, the tiling) sees a tensor's shape, dtype and
/// address, never its data: the data is read by the kernel when the launch runs, after the
/// queued work before it. A simulated op that read (or wrote) data in its first stage would
/// see memory that queued uploads have not filled yet, racily; so the simulation refuses it
/// deterministically, and only the stream's worker touches tensor data.
fn first_stage_cannot_touch(name: &str) -> SimResult<()> {
    if super::streams::on_worker() {
        return Ok(());
    }
    Err(SimErr(
        ACLNN_ERR_INNER,
        format!(
            "simulation: {name}: tensor data touched outside a launch (CANN's first stage sees \
             shapes and dtypes only; the kernel reads the data when the launch runs)"
        ),
    ))
}
