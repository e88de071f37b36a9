//! **The one list of the ACL functions and aclnn ops this crate calls**: each named once, with
//! its C name and its prototype (a type of [`super`]). Everything that must name them is
//! generated from it, so adding an op is one line here plus its simulation:
//! - the fields of [`super::AclApi`] and the C names in [`super::names`] (via
//!   [`crate::acl_api_table!`]`(declare_api)` in [`super`]);
//! - the symbol lookup of [`crate::acl::loader`] (`GetWorkspaceSize` + launch per op);
//! - the availability list, [`super::AclApi::presence`];
//! - the registration of the host simulation (crate `burn-ascend-acl-sim`), which must supply a
//!   first stage for every op listed here (a missing one does not compile).
//!
//! The shape is that of llama.cpp's `GGML_CANN_CALL_ACLNN_OP`: a callback macro receives the
//! whole table,
//!
//! ```text
//! runtime { <field>: <C name>(<fn type>), … }
//! graph   { <field>: <C name>(<fn type>), … }
//! ops     { $(#[attr])* <field>: <aclnn name>(<GetWorkspaceSize fn type>), … }
//! ```
//!
//! with every type a full path (`$crate::acl::ffi::…`), and emits what it needs per entry.
//! Runtime and nnopbase entries are required; the graph-capture functions (`aclmdlRI…`, newer
//! CANN only) are optional (`Option<fn>`), and so is each op (`Option<OpFns<_>>`).

/// Calls the macro `$m` with the table (see the [module docs](crate::acl::ffi::table)). `$m`
/// must accept
///
/// ```text
/// runtime { $($rf:ident: $rc:ident($rt:ty)),* }
/// graph { $($gf:ident: $gc:ident($gt:ty)),* }
/// ops { $($(#[$a:meta])* $f:ident: $c:ident($w:ty)),* }
/// ```
#[macro_export]
macro_rules! acl_api_table {
    ($m:ident) => {
        $crate::acl_api_table! { @emit $m
            runtime {
                // ---- runtime (libascendcl.so)
                acl_init: aclInit(AclInit),
                acl_finalize: aclFinalize(AclFinalize),
                set_device: aclrtSetDevice(AclrtDevice),
                reset_device: aclrtResetDevice(AclrtDevice),
                get_device_count: aclrtGetDeviceCount(AclrtGetDeviceCount),
                create_stream: aclrtCreateStream(AclrtCreateStream),
                destroy_stream: aclrtDestroyStream(AclrtStreamFn),
                synchronize_stream: aclrtSynchronizeStream(AclrtStreamFn),
                malloc: aclrtMalloc(AclrtMalloc),
                free: aclrtFree(AclrtFree),
                memcpy: aclrtMemcpy(AclrtMemcpy),
                malloc_host: aclrtMallocHost(AclrtMallocHost),
                free_host: aclrtFreeHost(AclrtFreeHost),
                memcpy_async: aclrtMemcpyAsync(AclrtMemcpyAsync),
                memset_async: aclrtMemsetAsync(AclrtMemsetAsync),
                get_recent_err_msg: aclGetRecentErrMsg(AclGetRecentErrMsg),
                get_version: aclrtGetVersion(AclrtGetVersion),
                // ---- nnopbase (libnnopbase.so)
                create_tensor: aclCreateTensor(AclCreateTensor),
                destroy_tensor: aclDestroyTensor(AclDestroyTensor),
                create_int_array: aclCreateIntArray(AclCreateIntArray),
                destroy_int_array: aclDestroyIntArray(AclDestroyIntArray),
                create_tensor_list: aclCreateTensorList(AclCreateTensorList),
                destroy_tensor_list: aclDestroyTensorList(AclDestroyTensorList),
                create_scalar: aclCreateScalar(AclCreateScalar),
                destroy_scalar: aclDestroyScalar(AclDestroyScalar),
            }
            graph {
                // ---- graph capture (libascendcl.so; optional: absent from older CANN)
                capture_begin: aclmdlRICaptureBegin(AclmdlRICaptureBegin),
                capture_get_info: aclmdlRICaptureGetInfo(AclmdlRICaptureGetInfo),
                capture_end: aclmdlRICaptureEnd(AclmdlRICaptureEnd),
                ri_execute_async: aclmdlRIExecuteAsync(AclmdlRIExecuteAsync),
                ri_destroy: aclmdlRIDestroy(AclmdlRIDestroy),
                task_grp_begin: aclmdlRICaptureTaskGrpBegin(AclrtStreamFn),
                task_grp_end: aclmdlRICaptureTaskGrpEnd(AclmdlRICaptureTaskGrpEnd),
                task_update_begin: aclmdlRICaptureTaskUpdateBegin(AclmdlRICaptureTaskUpdateBegin),
                task_update_end: aclmdlRICaptureTaskUpdateEnd(AclrtStreamFn),
            }
            ops {
                // ---- attention (libopapi.so / libopapi_transformer.so in split builds)
                varlen_fwd_v5: aclnnFlashAttentionVarLenScoreV5(VarlenFwdV5Ws),
                /// The no-sink forward (torch_npu's choice without a sink).
                varlen_fwd_base: aclnnFlashAttentionVarLenScore(VarlenFwdBaseWs),
                varlen_grad_v5: aclnnFlashAttentionUnpaddingScoreGradV5(VarlenGradV5Ws),
                /// The no-sink backward (torch_npu's choice without a sink).
                varlen_grad_base: aclnnFlashAttentionUnpaddingScoreGrad(VarlenGradBaseWs),
                pfa_v3: aclnnPromptFlashAttentionV3(PfaV3Ws),
                /// V1; the fallback when V3 is absent.
                pfa_v1: aclnnPromptFlashAttention(PfaV1Ws),
                ifa_v4: aclnnIncreFlashAttentionV4(IfaV4Ws),
                fia_v4: aclnnFusedInferAttentionScoreV4(FiaV4Ws),
                /// The base FIA; the fallback when V4 is absent (no sink, no separate K/V antiquant).
                fia_base: aclnnFusedInferAttentionScore(FiaWs),
                scatter_pa_kv_cache: aclnnScatterPaKvCache(ScatterPaKvCacheWs),
                // ---- mixture of experts (libopapi.so / libopapi_transformer.so)
                /// The version torch_npu's `npu_grouped_matmul` calls without V5's extras.
                grouped_matmul_v4: aclnnGroupedMatmulV4(GroupedMatmulV4Ws),
                // ---- fused transformer ops (issue 27)
                rms_norm: aclnnRmsNorm(RmsNormWs),
                rms_norm_grad: aclnnRmsNormGrad(RmsNormGradWs),
                /// torch_npu's `npu_rotary_mul` (mode 0) and `npu_rotary_position_embedding`.
                rotary_position_embedding: aclnnRotaryPositionEmbedding(RotaryPositionEmbeddingWs),
                rotary_position_embedding_grad: aclnnRotaryPositionEmbeddingGrad(RotaryPositionEmbeddingGradWs),
                swi_glu: aclnnSwiGlu(SwiGluWs),
                swi_glu_grad: aclnnSwiGluGrad(SwiGluGradWs),
                cross_entropy_loss: aclnnCrossEntropyLoss(CrossEntropyLossWs),
                cross_entropy_loss_grad: aclnnCrossEntropyLossGrad(CrossEntropyLossGradWs),
                // ---- optimizer (issue 27)
                apply_adam_w_v2: aclnnApplyAdamWV2(ApplyAdamWV2Ws),
                // ---- arithmetic, matmul, unary math, reductions
                add: aclnnAdd(BinaryAlphaWs),
                sub: aclnnSub(BinaryAlphaWs),
                mul: aclnnMul(BinaryWs),
                div: aclnnDiv(BinaryWs),
                matmul: aclnnMatmul(MatmulWs),
                adds: aclnnAdds(ScalarAlphaWs),
                muls: aclnnMuls(ScalarWs),
                divs: aclnnDivs(ScalarWs),
                exp: aclnnExp(UnaryWs),
                log: aclnnLog(UnaryWs),
                sqrt: aclnnSqrt(UnaryWs),
                abs: aclnnAbs(UnaryWs),
                tanh: aclnnTanh(UnaryWs),
                reduce_sum: aclnnReduceSum(ReduceWs),
                mean: aclnnMean(ReduceWs),
                // ---- indexing and layout
                index_select: aclnnIndexSelect(IndexDimWs),
                gather: aclnnGather(IndexDimWs),
                index_add: aclnnIndexAdd(IndexAddWs),
                scatter_add: aclnnScatterAdd(ScatterAddWs),
                cat: aclnnCat(CatWs),
                inplace_copy: aclnnInplaceCopy(InplaceCopyWs),
                repeat: aclnnRepeat(TensorIntArrayWs),
                flip: aclnnFlip(TensorIntArrayWs),
                // ---- comparisons, masks, logic, cast
                eq_tensor: aclnnEqTensor(BinaryWs),
                ne_tensor: aclnnNeTensor(BinaryWs),
                gt_tensor: aclnnGtTensor(BinaryWs),
                ge_tensor: aclnnGeTensor(BinaryWs),
                lt_tensor: aclnnLtTensor(BinaryWs),
                le_tensor: aclnnLeTensor(BinaryWs),
                eq_scalar: aclnnEqScalar(ScalarWs),
                ne_scalar: aclnnNeScalar(ScalarWs),
                gt_scalar: aclnnGtScalar(ScalarWs),
                ge_scalar: aclnnGeScalar(ScalarWs),
                lt_scalar: aclnnLtScalar(ScalarWs),
                le_scalar: aclnnLeScalar(ScalarWs),
                s_where: aclnnSWhere(SWhereWs),
                /// CANN has no out-of-place `aclnnMaskedFillScalar`.
                inplace_masked_fill_scalar: aclnnInplaceMaskedFillScalar(InplaceMaskedFillScalarWs),
                inplace_fill_scalar: aclnnInplaceFillScalar(InplaceFillScalarWs),
                logical_not: aclnnLogicalNot(UnaryWs),
                logical_and: aclnnLogicalAnd(BinaryWs),
                logical_or: aclnnLogicalOr(BinaryWs),
                cast: aclnnCast(CastWs),
                // ---- max / min
                max_dim: aclnnMaxDim(DimWithIndicesWs),
                min_dim: aclnnMinDim(DimWithIndicesWs),
                arg_max: aclnnArgMax(ArgWs),
                arg_min: aclnnArgMin(ArgWs),
                amax: aclnnAmax(AmaxWs),
                amin: aclnnAmin(AmaxWs),
                // ---- activations, pow / clamp by scalars
                relu: aclnnRelu(UnaryWs),
                gelu_v2: aclnnGeluV2(GeluV2Ws),
                sigmoid: aclnnSigmoid(UnaryWs),
                neg: aclnnNeg(UnaryWs),
                reciprocal: aclnnReciprocal(UnaryWs),
                sin: aclnnSin(UnaryWs),
                cos: aclnnCos(UnaryWs),
                erf: aclnnErf(UnaryWs),
                pow_tensor_scalar: aclnnPowTensorScalar(ScalarWs),
                clamp: aclnnClamp(ClampWs),
                clamp_min: aclnnClampMin(ScalarWs),
                clamp_max: aclnnClampMax(ScalarWs),
                // ---- random fills
                inplace_uniform: aclnnInplaceUniform(InplaceUniformWs),
                inplace_normal: aclnnInplaceNormal(InplaceNormalWs),
                inplace_bernoulli: aclnnInplaceBernoulli(InplaceBernoulliWs),
            }
        }
    };
    // Qualifies every type with `$crate` so the callback may live in any crate.
    (@emit $m:ident
        runtime { $($rf:ident: $rc:ident($rt:ident)),* $(,)? }
        graph { $($gf:ident: $gc:ident($gt:ident)),* $(,)? }
        ops { $($(#[$a:meta])* $f:ident: $c:ident($w:ident)),* $(,)? }
    ) => {
        $m! {
            runtime { $($rf: $rc($crate::acl::ffi::$rt)),* }
            graph { $($gf: $gc($crate::acl::ffi::$gt)),* }
            ops { $($(#[$a])* $f: $c($crate::acl::ffi::$w)),* }
        }
    };
}
