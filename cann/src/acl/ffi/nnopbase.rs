//! The prototypes of the nnopbase functions this crate calls (`libnnopbase.so`,
//! `aclnn/acl_meta.h`): creating and destroying the tensor, int array, tensor list and scalar
//! handles the aclnn ops take.

use std::ffi::c_void;

use super::{AclIntArray, AclScalar, AclStatus, AclTensor, AclTensorList};

c_prototype! {
    /// `aclTensor *aclCreateTensor(const int64_t *viewDims, uint64_t viewDimsNum,
    /// aclDataType dataType, const int64_t *stride, int64_t offset, aclFormat format,
    /// const int64_t *storageDims, uint64_t storageDimsNum, void *tensorData)`.
    AclCreateTensor, AclCreateTensorParams(
        view_dims: *const i64,
        view_dims_num: u64,
        data_type: i32,
        stride: *const i64,
        offset: i64,
        format: i32,
        storage_dims: *const i64,
        storage_dims_num: u64,
        tensor_data: *mut c_void,
    ) -> *mut AclTensor
}

c_prototype! {
    /// `aclnnStatus aclDestroyTensor(const aclTensor *)`.
    AclDestroyTensor, AclDestroyTensorParams(
        tensor: *const AclTensor,
    ) -> AclStatus
}

c_prototype! {
    /// `aclIntArray *aclCreateIntArray(const int64_t *value, uint64_t size)`.
    AclCreateIntArray, AclCreateIntArrayParams(
        value: *const i64,
        size: u64,
    ) -> *mut AclIntArray
}

c_prototype! {
    /// `aclnnStatus aclDestroyIntArray(const aclIntArray *)`.
    AclDestroyIntArray, AclDestroyIntArrayParams(
        array: *const AclIntArray,
    ) -> AclStatus
}

c_prototype! {
    /// `aclTensorList *aclCreateTensorList(const aclTensor *const *value, uint64_t size)`.
    AclCreateTensorList, AclCreateTensorListParams(
        value: *const *const AclTensor,
        size: u64,
    ) -> *mut AclTensorList
}

c_prototype! {
    /// `aclnnStatus aclDestroyTensorList(const aclTensorList *)` — also destroys the tensors in it.
    AclDestroyTensorList, AclDestroyTensorListParams(
        list: *const AclTensorList,
    ) -> AclStatus
}

c_prototype! {
    /// `aclScalar *aclCreateScalar(void *value, aclDataType dataType)` (nnopbase copies the value).
    AclCreateScalar, AclCreateScalarParams(
        value: *mut c_void,
        data_type: i32,
    ) -> *mut AclScalar
}

c_prototype! {
    /// `aclnnStatus aclDestroyScalar(const aclScalar *scalar)`.
    AclDestroyScalar, AclDestroyScalarParams(
        scalar: *const AclScalar,
    ) -> AclStatus
}
