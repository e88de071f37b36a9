//! Layout ops shared by the float, int and bool tensors: moves between devices and the
//! zero-copy views (reshape of a contiguous tensor, permute, swap_dims, expand, positive-step
//! slice).

use burn_backend::{Shape, Slice, TensorMetadata};

use crate::device::AscendDevice;
use crate::fallback::count;
use crate::tensor::{contiguous_strides, AscendTensor};

/// Copies `t` to `device` (device → host → device); the same tensor if already there.
pub(crate) fn to_device(t: AscendTensor, device: &AscendDevice) -> AscendTensor {
    if t.device() == *device {
        return t;
    }
    AscendTensor::from_data(t.to_data(), device)
}

/// A contiguous copy of a strided view: `aclnnInplaceCopy` from the view into a fresh tensor
/// (`native_index::contiguous`); dtypes without an `aclDataType` or rank > 8 go through the
/// host, counted as the fallback `contiguous`.
pub(crate) fn contiguous(t: AscendTensor) -> AscendTensor {
    if t.is_contiguous() {
        return t;
    }
    if let Some(c) = super::native_index::contiguous(&t) {
        return c;
    }
    count("contiguous");
    let device = t.device();
    AscendTensor::from_data(t.to_data(), &device)
}

/// Reshape: a view when the tensor is contiguous, else a contiguous copy first.
pub(crate) fn reshape(t: AscendTensor, shape: Shape) -> AscendTensor {
    assert_eq!(
        t.shape.num_elements(),
        shape.num_elements(),
        "reshape: {:?} has {} elements, {:?} has {}",
        t.shape,
        t.shape.num_elements(),
        shape,
        shape.num_elements()
    );
    let t = contiguous(t);
    let strides = contiguous_strides(&shape);
    let offset = t.offset;
    t.view(shape, strides, offset)
}

/// Permute: strides permuted (no copy).
pub(crate) fn permute(t: AscendTensor, axes: &[usize]) -> AscendTensor {
    assert_eq!(
        axes.len(),
        t.shape.num_dims(),
        "permute: axes {axes:?} for shape {:?}",
        t.shape
    );
    let dims: Vec<usize> = axes.iter().map(|&a| t.shape[a]).collect();
    let strides = axes.iter().map(|&a| t.strides[a]).collect();
    let offset = t.offset;
    t.view(Shape::from(dims), strides, offset)
}

/// Swap two dims (no copy).
pub(crate) fn swap_dims(t: AscendTensor, a: usize, b: usize) -> AscendTensor {
    let mut axes: Vec<usize> = (0..t.shape.num_dims()).collect();
    axes.swap(a, b);
    permute(t, &axes)
}

/// Expand (broadcast): stride 0 on broadcast dims (no copy).
pub(crate) fn expand(t: AscendTensor, shape: Shape) -> AscendTensor {
    let (old, new) = (t.shape.num_dims(), shape.num_dims());
    assert!(
        new >= old,
        "expand: cannot expand {:?} to the lower rank {:?}",
        t.shape(),
        shape
    );
    let lead = new - old;
    let mut strides = vec![0usize; new];
    for i in 0..old {
        let (from, to) = (t.shape[i], shape[lead + i]);
        strides[lead + i] = if from == to {
            t.strides[i]
        } else if from == 1 {
            0
        } else {
            panic!(
                "expand: dim {i} of {:?} cannot broadcast to {:?}",
                t.shape(),
                shape
            )
        };
    }
    let offset = t.offset;
    t.view(shape, strides, offset)
}

/// Slice: a view for positive steps, `None` for negative ones (the caller falls back).
pub(crate) fn slice_view(t: &AscendTensor, slices: &[Slice]) -> Option<AscendTensor> {
    if slices.iter().any(|s| s.step <= 0) {
        return None;
    }
    let mut dims: Vec<usize> = t.shape.iter().copied().collect();
    let mut strides = t.strides.clone();
    let mut offset = t.offset;
    for (i, s) in slices.iter().enumerate() {
        let size = t.shape[i];
        let r = s.to_range(size);
        let n = s.output_size(size);
        if n > 0 {
            offset += r.start * t.strides[i];
        }
        dims[i] = n;
        strides[i] = t.strides[i] * s.step as usize;
    }
    Some(t.view(Shape::from(dims), strides, offset))
}
