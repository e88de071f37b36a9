//! **The one list of the ACL functions and aclnn ops this crate calls**: each named once, with
//! its C name and its prototype: the parameter struct declared once with `c_prototype!` (for an
//! aclnn op `aclnn_prototype!`, in the op's module of [`super`]), which also gives the function
//! type.
//! Everything that must name them is generated from it, so adding an op is one line here, its
//! prototype, and its simulation:
//! - the fields of [`super::AclApi`], the C names in [`super::names`] and the op marker types
//!   of [`super::op`] (via
//!   [`crate::acl_api_table!`]`(declare_api)` in [`super`]);
//! - the symbol lookup of [`crate::acl::loader`] (`GetWorkspaceSize` + launch per op);
//! - the availability list, [`super::AclApi::presence`];
//! - the registration of the host simulation (crate `burn-ascend-acl-sim`), which must implement
//!   [`super::Implements`] for every op listed here (a missing one does not compile);
//! - the functions the ABI check (`tools/abi-check`) compares with CANN's headers.
//!
//! The shape is that of llama.cpp's `GGML_CANN_CALL_ACLNN_OP`: a callback macro receives the
//! whole table,
//!
//! ```text
//! runtime { <field>: <C name>(<parameter struct>), … }
//! graph   { <field>: <C name>(<parameter struct>), … }
//! ops     { $(#[attr])* <field>: <aclnn name>(<parameter struct>), … }
//! ```
//!
//! with every type a full path (`$crate::acl::ffi::…`), and emits what it needs per entry.
//! Runtime and nnopbase entries are required; the graph-capture functions (`aclmdlRI…`, newer
//! CANN only) are optional (`Option<fn>`), and so is each op (`Option<OpFns<_>>`).

/// Calls the macro `$m` with the table (see the [module docs](crate::acl::ffi::table)). `$m`
/// must accept
///
/// ```text
/// runtime { $($rf:ident: $rc:ident($rp:ty)),* }
/// graph { $($gf:ident: $gc:ident($gp:ty)),* }
/// ops { $($(#[$a:meta])* $f:ident: $c:ident($p:ty)),* }
/// ```
#[macro_export]
macro_rules! acl_api_table {
    ($m:ident) => {
        $crate::acl_api_table! { @emit $m
            runtime {
                // ---- runtime (libascendcl.so)
                acl_init: aclInit(AclInitParams),
                acl_finalize: aclFinalize(AclFinalizeParams),
                set_device: aclrtSetDevice(AclrtDeviceParams),
                reset_device: aclrtResetDevice(AclrtDeviceParams),
                get_device_count: aclrtGetDeviceCount(AclrtGetDeviceCountParams),
                create_stream: aclrtCreateStream(AclrtCreateStreamParams),
                destroy_stream: aclrtDestroyStream(AclrtStreamFnParams),
                synchronize_stream: aclrtSynchronizeStream(AclrtStreamFnParams),
                malloc: aclrtMalloc(AclrtMallocParams),
                free: aclrtFree(AclrtFreeParams),
                memcpy: aclrtMemcpy(AclrtMemcpyParams),
                malloc_host: aclrtMallocHost(AclrtMallocHostParams),
                free_host: aclrtFreeHost(AclrtFreeHostParams),
                memcpy_async: aclrtMemcpyAsync(AclrtMemcpyAsyncParams),
                memset_async: aclrtMemsetAsync(AclrtMemsetAsyncParams),
                get_recent_err_msg: aclGetRecentErrMsg(AclGetRecentErrMsgParams),
                get_version: aclrtGetVersion(AclrtGetVersionParams),
                // ---- nnopbase (libnnopbase.so)
                create_tensor: aclCreateTensor(AclCreateTensorParams),
                destroy_tensor: aclDestroyTensor(AclDestroyTensorParams),
                create_int_array: aclCreateIntArray(AclCreateIntArrayParams),
                destroy_int_array: aclDestroyIntArray(AclDestroyIntArrayParams),
                create_tensor_list: aclCreateTensorList(AclCreateTensorListParams),
                destroy_tensor_list: aclDestroyTensorList(AclDestroyTensorListParams),
                create_scalar: aclCreateScalar(AclCreateScalarParams),
                destroy_scalar: aclDestroyScalar(AclDestroyScalarParams),
            }
            graph {
                // ---- graph capture (libascendcl.so; optional: absent from older CANN)
                capture_begin: aclmdlRICaptureBegin(AclmdlRICaptureBeginParams),
                capture_get_info: aclmdlRICaptureGetInfo(AclmdlRICaptureGetInfoParams),
                capture_end: aclmdlRICaptureEnd(AclmdlRICaptureEndParams),
                ri_execute_async: aclmdlRIExecuteAsync(AclmdlRIExecuteAsyncParams),
                ri_destroy: aclmdlRIDestroy(AclmdlRIDestroyParams),
                task_grp_begin: aclmdlRICaptureTaskGrpBegin(AclrtStreamFnParams),
                task_grp_end: aclmdlRICaptureTaskGrpEnd(AclmdlRICaptureTaskGrpEndParams),
                task_update_begin: aclmdlRICaptureTaskUpdateBegin(AclmdlRICaptureTaskUpdateBeginParams),
                task_update_end: aclmdlRICaptureTaskUpdateEnd(AclrtStreamFnParams),
            }
            ops {
                // ---- attention (libopapi.so / libopapi_transformer.so in split builds)
                varlen_fwd_v5: aclnnFlashAttentionVarLenScoreV5(VarlenFwdV5Params),
                /// The no-sink forward (torch_npu's choice without a sink).
                varlen_fwd_base: aclnnFlashAttentionVarLenScore(VarlenFwdBaseParams),
                varlen_grad_v5: aclnnFlashAttentionUnpaddingScoreGradV5(VarlenGradV5Params),
                /// The no-sink backward (torch_npu's choice without a sink).
                varlen_grad_base: aclnnFlashAttentionUnpaddingScoreGrad(VarlenGradBaseParams),
                pfa_v3: aclnnPromptFlashAttentionV3(PfaV3Params),
                /// V1; the fallback when V3 is absent.
                pfa_v1: aclnnPromptFlashAttention(PfaV1Params),
                ifa_v4: aclnnIncreFlashAttentionV4(IfaV4Params),
                fia_v4: aclnnFusedInferAttentionScoreV4(FiaV4Params),
                /// The base FIA; the fallback when V4 is absent (no sink, no separate K/V antiquant).
                fia_base: aclnnFusedInferAttentionScore(FiaParams),
                scatter_pa_kv_cache: aclnnScatterPaKvCache(ScatterPaKvCacheParams),
                // ---- mixture of experts (libopapi.so / libopapi_transformer.so)
                /// The version torch_npu's `npu_grouped_matmul` calls without V5's extras.
                grouped_matmul_v4: aclnnGroupedMatmulV4(GroupedMatmulV4Params),
                /// torch_npu's `npu_moe_gating_top_k_softmax_v2`: the router in one launch.
                moe_gating_top_k_softmax_v2: aclnnMoeGatingTopKSoftmaxV2(MoeGatingTopKSoftmaxV2Params),
                // ---- fused transformer-layer ops (norms, rotary embedding, SwiGLU, loss)
                rms_norm: aclnnRmsNorm(RmsNormParams),
                rms_norm_grad: aclnnRmsNormGrad(RmsNormGradParams),
                /// torch_npu's `npu_rotary_mul` (mode 0) and `npu_rotary_position_embedding`.
                rotary_position_embedding: aclnnRotaryPositionEmbedding(RotaryPositionEmbeddingParams),
                rotary_position_embedding_grad: aclnnRotaryPositionEmbeddingGrad(RotaryPositionEmbeddingGradParams),
                swi_glu: aclnnSwiGlu(SwiGluParams),
                swi_glu_grad: aclnnSwiGluGrad(SwiGluGradParams),
                cross_entropy_loss: aclnnCrossEntropyLoss(CrossEntropyLossParams),
                cross_entropy_loss_grad: aclnnCrossEntropyLossGrad(CrossEntropyLossGradParams),
                // ---- optimizer (the AdamW update in one launch)
                apply_adam_w_v2: aclnnApplyAdamWV2(ApplyAdamWV2Params),
                // ---- arithmetic, matmul, unary math, reductions
                add: aclnnAdd(BinaryAlphaParams),
                sub: aclnnSub(BinaryAlphaParams),
                mul: aclnnMul(BinaryParams),
                div: aclnnDiv(BinaryParams),
                matmul: aclnnMatmul(MatmulParams),
                adds: aclnnAdds(ScalarAlphaParams),
                muls: aclnnMuls(ScalarParams),
                divs: aclnnDivs(ScalarParams),
                exp: aclnnExp(UnaryParams),
                log: aclnnLog(UnaryParams),
                sqrt: aclnnSqrt(UnaryParams),
                abs: aclnnAbs(UnaryParams),
                tanh: aclnnTanh(UnaryParams),
                reduce_sum: aclnnReduceSum(ReduceParams),
                mean: aclnnMean(ReduceParams),
                // ---- indexing and layout
                index_select: aclnnIndexSelect(IndexDimParams),
                gather: aclnnGather(IndexDimParams),
                index_add: aclnnIndexAdd(IndexAddParams),
                scatter_add: aclnnScatterAdd(ScatterAddParams),
                cat: aclnnCat(CatParams),
                inplace_copy: aclnnInplaceCopy(InplaceCopyParams),
                repeat: aclnnRepeat(TensorIntArrayParams),
                flip: aclnnFlip(TensorIntArrayParams),
                // ---- comparisons, masks, logic, cast
                eq_tensor: aclnnEqTensor(BinaryParams),
                ne_tensor: aclnnNeTensor(BinaryParams),
                gt_tensor: aclnnGtTensor(BinaryParams),
                ge_tensor: aclnnGeTensor(BinaryParams),
                lt_tensor: aclnnLtTensor(BinaryParams),
                le_tensor: aclnnLeTensor(BinaryParams),
                eq_scalar: aclnnEqScalar(ScalarParams),
                ne_scalar: aclnnNeScalar(ScalarParams),
                gt_scalar: aclnnGtScalar(ScalarParams),
                ge_scalar: aclnnGeScalar(ScalarParams),
                lt_scalar: aclnnLtScalar(ScalarParams),
                le_scalar: aclnnLeScalar(ScalarParams),
                s_where: aclnnSWhere(SWhereParams),
                /// CANN has no out-of-place `aclnnMaskedFillScalar`.
                inplace_masked_fill_scalar: aclnnInplaceMaskedFillScalar(InplaceMaskedFillScalarParams),
                inplace_fill_scalar: aclnnInplaceFillScalar(InplaceFillScalarParams),
                logical_not: aclnnLogicalNot(UnaryParams),
                logical_and: aclnnLogicalAnd(BinaryParams),
                logical_or: aclnnLogicalOr(BinaryParams),
                cast: aclnnCast(CastParams),
                // ---- max / min
                max_dim: aclnnMaxDim(DimWithIndicesParams),
                min_dim: aclnnMinDim(DimWithIndicesParams),
                arg_max: aclnnArgMax(ArgParams),
                arg_min: aclnnArgMin(ArgParams),
                amax: aclnnAmax(AmaxParams),
                amin: aclnnAmin(AmaxParams),
                // ---- activations, pow / clamp by scalars
                relu: aclnnRelu(UnaryParams),
                gelu_v2: aclnnGeluV2(GeluV2Params),
                sigmoid: aclnnSigmoid(UnaryParams),
                neg: aclnnNeg(UnaryParams),
                reciprocal: aclnnReciprocal(UnaryParams),
                sin: aclnnSin(UnaryParams),
                cos: aclnnCos(UnaryParams),
                erf: aclnnErf(UnaryParams),
                pow_tensor_scalar: aclnnPowTensorScalar(ScalarParams),
                clamp: aclnnClamp(ClampParams),
                clamp_min: aclnnClampMin(ScalarParams),
                clamp_max: aclnnClampMax(ScalarParams),
                // ---- random fills
                inplace_uniform: aclnnInplaceUniform(InplaceUniformParams),
                inplace_normal: aclnnInplaceNormal(InplaceNormalParams),
                inplace_bernoulli: aclnnInplaceBernoulli(InplaceBernoulliParams),
            }
        }
    };
    // Qualifies every type with `$crate` so the callback may live in any crate.
    (@emit $m:ident
        runtime { $($rf:ident: $rc:ident($rp:ident)),* $(,)? }
        graph { $($gf:ident: $gc:ident($gp:ident)),* $(,)? }
        ops { $($(#[$a:meta])* $f:ident: $c:ident($p:ident)),* $(,)? }
    ) => {
        $m! {
            runtime { $($rf: $rc($crate::acl::ffi::$rp)),* }
            graph { $($gf: $gc($crate::acl::ffi::$gp)),* }
            ops { $($(#[$a])* $f: $c($crate::acl::ffi::$p)),* }
        }
    };
}
