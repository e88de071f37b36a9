//! The prototypes of the ACL runtime functions this crate calls (`libascendcl.so`,
//! `acl/acl_rt.h`): initialisation, devices, streams, memory and copies, the recent error
//! message and the interface version.

use std::ffi::{c_char, c_int, c_void};

use super::{AclStatus, AclrtStream};

c_prototype! {
    /// `aclError aclInit(const char *configPath)`.
    AclInit, AclInitParams(
        config_path: *const c_char,
    ) -> AclStatus
}

c_prototype! {
    /// `aclError aclFinalize()`.
    AclFinalize, AclFinalizeParams(
    ) -> AclStatus
}

c_prototype! {
    /// `aclError aclrtSetDevice(int32_t)` / `aclrtResetDevice(int32_t)`.
    AclrtDevice, AclrtDeviceParams(
        device_id: i32,
    ) -> AclStatus
}

c_prototype! {
    /// `aclError aclrtGetDeviceCount(uint32_t *count)`.
    AclrtGetDeviceCount, AclrtGetDeviceCountParams(
        count: *mut u32,
    ) -> AclStatus
}

c_prototype! {
    /// `aclError aclrtCreateStream(aclrtStream *stream)`.
    AclrtCreateStream, AclrtCreateStreamParams(
        stream: *mut AclrtStream,
    ) -> AclStatus
}

c_prototype! {
    /// `aclError aclrtDestroyStream(aclrtStream)` / `aclrtSynchronizeStream(aclrtStream)`.
    AclrtStreamFn, AclrtStreamFnParams(
        stream: AclrtStream,
    ) -> AclStatus
}

c_prototype! {
    /// `aclError aclrtMalloc(void **devPtr, size_t size, aclrtMemMallocPolicy policy)`.
    AclrtMalloc, AclrtMallocParams(
        dev_ptr: *mut *mut c_void,
        size: usize,
        policy: c_int,
    ) -> AclStatus
}

c_prototype! {
    /// `aclError aclrtFree(void *devPtr)`.
    AclrtFree, AclrtFreeParams(
        dev_ptr: *mut c_void,
    ) -> AclStatus
}

c_prototype! {
    /// `aclError aclrtMemcpy(void *dst, size_t destMax, const void *src, size_t count,
    /// aclrtMemcpyKind kind)`.
    AclrtMemcpy, AclrtMemcpyParams(
        dst: *mut c_void,
        dest_max: usize,
        src: *const c_void,
        count: usize,
        kind: c_int,
    ) -> AclStatus
}

c_prototype! {
    /// `const char *aclGetRecentErrMsg()`.
    AclGetRecentErrMsg, AclGetRecentErrMsgParams(
    ) -> *const c_char
}

c_prototype! {
    /// `aclError aclrtMallocHost(void **hostPtr, size_t size)`: page-locked host memory, which the
    /// host side of `aclrtMemcpyAsync` needs.
    AclrtMallocHost, AclrtMallocHostParams(
        host_ptr: *mut *mut c_void,
        size: usize,
    ) -> AclStatus
}

c_prototype! {
    /// `aclError aclrtFreeHost(void *hostPtr)`.
    AclrtFreeHost, AclrtFreeHostParams(
        host_ptr: *mut c_void,
    ) -> AclStatus
}

c_prototype! {
    /// `aclError aclrtMemcpyAsync(void *dst, size_t destMax, const void *src, size_t count,
    /// aclrtMemcpyKind kind, aclrtStream stream)`.
    AclrtMemcpyAsync, AclrtMemcpyAsyncParams(
        dst: *mut c_void,
        dest_max: usize,
        src: *const c_void,
        count: usize,
        kind: c_int,
        stream: AclrtStream,
    ) -> AclStatus
}

c_prototype! {
    /// `aclError aclrtMemsetAsync(void *devPtr, size_t maxCount, int32_t value, size_t count,
    /// aclrtStream stream)`.
    AclrtMemsetAsync, AclrtMemsetAsyncParams(
        dev_ptr: *mut c_void,
        max_count: usize,
        value: i32,
        count: usize,
        stream: AclrtStream,
    ) -> AclStatus
}

c_prototype! {
    /// `aclError aclrtGetVersion(int32_t *majorVersion, int32_t *minorVersion,
    /// int32_t *patchVersion)` (`acl/acl_rt.h`): the ACL interface version, not the CANN package's.
    AclrtGetVersion, AclrtGetVersionParams(
        major: *mut i32,
        minor: *mut i32,
        patch: *mut i32,
    ) -> AclStatus
}
