//! The simulated inference attention ops and the KV-cache scatter refuse FLOAT as CANN's Atlas
//! A2/A3 op definitions do (cannmirror/ops-transformer `attention/<op>/op_host/<op>_def.cpp`,
//! the default `Input("query")` / `keyDataType` lists): ACLNN_ERR_PARAM_INVALID from the first
//! stage, naming the parameter and the dtypes allowed, through the call builders the `Ascend`
//! backend uses.

use burn_ascend_backend::attention::builders;
use burn_ascend_backend::attention::fia::fused_infer_attention;
use burn_ascend_cann::acl::ffi::ACLNN_ERR_PARAM_INVALID;
use burn_ascend_cann::acl::{AclError, Runtime};
use burn_ascend_contract::fia::{FiaInputs, FiaKv, FiaOutputs, FiaSpec};
use burn_ascend_contract::incre::{IfaLayout, IncreInputs, IncreKv, IncreSpec};
use burn_ascend_contract::prompt::{PfaLayout, PromptInputs, PromptSpec};
use burn_ascend_contract::scatter::{ScatterInputs, ScatterSpec};

use super::attention::{up, zeros};

/// BSND `[1, 2, 2, 16]` FLOAT query, key, value and output.
const QKV: [usize; 4] = [1, 2, 2, 16];

fn refused(err: AclError, op: &str, param: &str, allowed: &str) {
    assert_eq!(err.status(), Some(ACLNN_ERR_PARAM_INVALID), "{op}: {err}");
    let msg = err.to_string();
    assert!(
        msg.contains(&format!("{param}: dtype must be {allowed}")) && msg.contains("Float"),
        "{op}: {msg}"
    );
}

fn prompt(rt: &Runtime) -> Result<(), AclError> {
    let v = vec![0.25f32; 64];
    let (q, k, vv, o) = (
        up(rt, &QKV, &v),
        up(rt, &QKV, &v),
        up(rt, &QKV, &v),
        zeros(rt, &QKV),
    );
    let x = PromptInputs {
        query: q.handle()?,
        key: k.handle()?,
        value: vv.handle()?,
        atten_mask: None,
        pse_shift: None,
    };
    let spec = PromptSpec::new(2, 0.25, PfaLayout::Bsnd);
    let oh = o.handle()?;
    builders::prompt(rt, &spec, &x.as_ref(), &oh)
}

fn incre(rt: &Runtime) -> Result<(), AclError> {
    let v = vec![0.25f32; 64];
    let q = up(rt, &[1, 1, 2, 16], &v[..32]);
    let o = zeros(rt, &[1, 1, 2, 16]);
    let (k, vv) = (up(rt, &QKV, &v), up(rt, &QKV, &v));
    let spec = IncreSpec::new(2, 0.25, IfaLayout::Bsnd);
    let x = IncreInputs::new(
        q.handle()?,
        IncreKv::Contiguous {
            key: k.handle()?,
            value: vv.handle()?,
        },
    );
    let oh = o.handle()?;
    builders::incre(rt, &spec, x, &oh)
}

fn fia(rt: &Runtime) -> Result<(), AclError> {
    let v = vec![0.25f32; 64];
    let (q, o) = (up(rt, &QKV, &v), zeros(rt, &QKV));
    let (k, vv) = (up(rt, &QKV, &v), up(rt, &QKV, &v));
    let spec = FiaSpec::new(2, 0.25, PfaLayout::Bsnd);
    let x = FiaInputs::new(
        q.handle()?,
        FiaKv::Contiguous {
            key: k.handle()?,
            value: vv.handle()?,
        },
        None,
    );
    let oh = o.handle()?;
    let out = FiaOutputs {
        attention_out: &oh,
        softmax_lse: None,
    };
    fused_infer_attention(rt, &spec, x, out)
}

fn scatter(rt: &Runtime) -> Result<(), AclError> {
    let key = up(rt, &[2, 1, 8], &[0.5; 16]);
    let cache = zeros(rt, &[2, 4, 1, 8]);
    let spec = ScatterSpec::new(vec![0, 5]);
    let (kh, ch) = (key.handle()?, cache.handle()?);
    let x = ScatterInputs {
        key: &kh,
        key_cache: &ch,
        value: None,
        value_cache: None,
    };
    builders::scatter(rt, &spec, &x)
}

#[test]
fn a_float_query_or_key_is_refused_naming_it_and_the_dtypes_cann_lists() {
    let rt = burn_ascend_acl_sim::runtime().unwrap();
    let f16_bf16_int8 = "FLOAT16, BFLOAT16 or INT8";
    refused(
        prompt(&rt).unwrap_err(),
        "aclnnPromptFlashAttentionV3",
        "query",
        f16_bf16_int8,
    );
    refused(
        incre(&rt).unwrap_err(),
        "aclnnIncreFlashAttentionV4",
        "query",
        "FLOAT16 or BFLOAT16",
    );
    refused(
        fia(&rt).unwrap_err(),
        "aclnnFusedInferAttentionScoreV4",
        "query",
        f16_bf16_int8,
    );
    refused(
        scatter(&rt).unwrap_err(),
        "aclnnScatterPaKvCache",
        "key",
        f16_bf16_int8,
    );
}
