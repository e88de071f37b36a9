//! Prototypes of the fused transformer ops (RMSNorm, rotary embedding, SwiGLU, cross-entropy), from
//! CANN's `aclnnop` headers as the docs of `hicann/ops-nn` give them
//! (`norm/rms_norm/docs/aclnnRmsNorm.md`, `norm/rms_norm_grad/docs/aclnnRmsNormGrad.md`,
//! `aclnnSwiGlu.md`, `aclnnSwiGluGrad.md`,
//! `loss/cross_entropy_loss*/docs/aclnnCrossEntropyLoss*.md`; cannmirror/ops-transformer's
//! `posembedding/rotary_position_embedding*/docs/aclnnRotaryPositionEmbedding*.md`); every integer
//! has the header's width, checked against the headers by `tools/abi-check`.

use super::prototype::*;

aclnn_prototype! {
    /// `aclnnRmsNormGetWorkspaceSize(const aclTensor *x, const aclTensor *gamma, double epsilon,
    /// const aclTensor *yOut, const aclTensor *rstdOut, …)`. `rstdOut` is required (CANN rejects
    /// a null one).
    RmsNormWs, RmsNormParams(
        x: T,
        gamma: T,
        epsilon: f64,
        y_out: T,
        rstd_out: T,
        workspace_size: Ws,
        executor: Ex,
    )
}

aclnn_prototype! {
    /// `aclnnRmsNormGradGetWorkspaceSize(const aclTensor *dy, const aclTensor *x,
    /// const aclTensor *rstd, const aclTensor *gamma, const aclTensor *dxOut,
    /// const aclTensor *dgammaOut, …)`.
    RmsNormGradWs, RmsNormGradParams(
        dy: T,
        x: T,
        rstd: T,
        gamma: T,
        dx_out: T,
        dgamma_out: T,
        workspace_size: Ws,
        executor: Ex,
    )
}

aclnn_prototype! {
    /// `aclnnRotaryPositionEmbeddingGetWorkspaceSize(const aclTensor *x, const aclTensor *cos,
    /// const aclTensor *sin, int64_t mode, aclTensor *out, …)`: `mode` 0 half, 1 interleave.
    RotaryPositionEmbeddingWs, RotaryPositionEmbeddingParams(
        x: T,
        cos: T,
        sin: T,
        mode: i64,
        out: T,
        workspace_size: Ws,
        executor: Ex,
    )
}

aclnn_prototype! {
    /// `aclnnRotaryPositionEmbeddingGradGetWorkspaceSize(const aclTensor *dy, const aclTensor *cos,
    /// const aclTensor *sin, const aclTensor *xOptional, int64_t mode, const aclTensor *dxOut,
    /// const aclTensor *dcosOut, const aclTensor *dsinOut, …)`: a null `xOptional` computes no
    /// `dcosOut` / `dsinOut` (both still required: empty tensors then, as the docs' example).
    RotaryPositionEmbeddingGradWs, RotaryPositionEmbeddingGradParams(
        dy: T,
        cos: T,
        sin: T,
        x_optional: T,
        mode: i64,
        dx_out: T,
        dcos_out: T,
        dsin_out: T,
        workspace_size: Ws,
        executor: Ex,
    )
}

aclnn_prototype! {
    /// `aclnnSwiGluGetWorkspaceSize(const aclTensor *x, int64_t dimOptional, const aclTensor *out,
    /// …)`: the first half of `x` along `dimOptional` is the gate.
    SwiGluWs, SwiGluParams(
        x: T,
        dim_optional: i64,
        out: T,
        workspace_size: Ws,
        executor: Ex,
    )
}

aclnn_prototype! {
    /// `aclnnSwiGluGradGetWorkspaceSize(const aclTensor *yGrad, const aclTensor *x,
    /// int64_t dimOptional, const aclTensor *out, …)`.
    SwiGluGradWs, SwiGluGradParams(
        y_grad: T,
        x: T,
        dim_optional: i64,
        out: T,
        workspace_size: Ws,
        executor: Ex,
    )
}

aclnn_prototype! {
    /// `aclnnCrossEntropyLossGetWorkspaceSize(const aclTensor *input, const aclTensor *target,
    /// const aclTensor *weightOptional, char *reductionOptional, int64_t ignoreIndex,
    /// double labelSmoothing, double lseSquareScaleForZloss, bool returnZloss,
    /// const aclTensor *lossOut, const aclTensor *logProbOut, const aclTensor *zlossOut,
    /// const aclTensor *lseForZlossOut, …)`. All four outputs are required.
    CrossEntropyLossWs, CrossEntropyLossParams(
        input: T,
        target: T,
        weight_optional: T,
        reduction_optional: *mut c_char,
        ignore_index: i64,
        label_smoothing: f64,
        lse_square_scale_for_zloss: f64,
        return_zloss: bool,
        loss_out: T,
        log_prob_out: T,
        zloss_out: T,
        lse_for_zloss_out: T,
        workspace_size: Ws,
        executor: Ex,
    )
}

aclnn_prototype! {
    /// `aclnnCrossEntropyLossGradGetWorkspaceSize(const aclTensor *gradLoss,
    /// const aclTensor *logProb, const aclTensor *target, const aclTensor *weightOptional,
    /// const aclTensor *gradZlossOptional, const aclTensor *lseForZlossOptional,
    /// char *reductionOptional, int64_t ignoreIndex, double labelSmoothing,
    /// double lseSquareScaleForZloss, const aclTensor *out, …)`.
    CrossEntropyLossGradWs, CrossEntropyLossGradParams(
        grad_loss: T,
        log_prob: T,
        target: T,
        weight_optional: T,
        grad_zloss_optional: T,
        lse_for_zloss_optional: T,
        reduction_optional: *mut c_char,
        ignore_index: i64,
        label_smoothing: f64,
        lse_square_scale_for_zloss: f64,
        out: T,
        workspace_size: Ws,
        executor: Ex,
    )
}
