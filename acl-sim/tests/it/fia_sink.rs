//! `learnableSink`'s dtype on the simulated FIA (it follows the path and release): the simulation
//! takes the sink as the CANN release it pretends to be does — BFLOAT16 on FIA v3 whatever the
//! query, the query's on 9.x's TND split-fuse path — and refuses the rest in the first stage,
//! naming `learnableSink`, the path and the release. The expected answers are written out here from
//! CANN's sources (see `contract/src/fia/sink.rs`), not computed by the contract.

use burn_ascend_acl_sim as sim;
use burn_ascend_backend::attention::fia::fused_infer_attention;
use burn_ascend_cann::acl::{AclError, DataType, DeviceTensor, Runtime, TensorDesc};
use burn_ascend_contract::fia::{CannRelease, FiaInputs, FiaKv, FiaOutputs, FiaSpec, PfaLayout};
use burn_ascend_contract::incre::BlockTable;

use DataType::{Bf16, Float, Float16};

/// A call's shape: layout, heads, D of query/key and of value, and a paged TND cache's block
/// size (0: contiguous).
#[derive(Clone, Copy)]
struct Case {
    layout: PfaLayout,
    n: usize,
    nkv: usize,
    d: usize,
    dv: usize,
    block: usize,
    inner_precise: i64,
}

const fn case(layout: PfaLayout, d: usize) -> Case {
    Case {
        layout,
        n: 2,
        nkv: 2,
        d,
        dv: d,
        block: 0,
        inner_precise: 0,
    }
}

fn zeros(rt: &Runtime, dims: &[usize], dt: DataType) -> DeviceTensor {
    rt.zeros(TensorDesc::contiguous(dims, dt).unwrap()).unwrap()
}

/// One call (4 query and 4 KV tokens, zeros) with a query of `q` and a sink sent in `sink`, on
/// the simulation pretending to be `release`.
fn call(release: CannRelease, c: Case, q: DataType, sink: DataType) -> Result<(), AclError> {
    sim::set_cann_release(Some(release));
    let rt = sim::runtime().unwrap();
    let s = 4usize;
    let shape = |heads: usize, d: usize| match c.layout {
        PfaLayout::Bsh => vec![1, s, heads * d],
        PfaLayout::Bsnd => vec![1, s, heads, d],
        PfaLayout::Bnsd | PfaLayout::BnsdBsnd => vec![1, heads, s, d],
        PfaLayout::Tnd => vec![s, heads, d],
    };
    let mut spec = FiaSpec::new(c.n, 0.125, c.layout);
    spec.num_key_value_heads = c.nkv;
    spec.inner_precise = c.inner_precise;
    let (kd, vd) = if c.block > 0 {
        spec.block_size = c.block;
        spec.block_table = Some(BlockTable {
            data: vec![0i32].into(),
            shape: vec![1, 1],
        });
        (
            vec![1, c.block, c.nkv * c.d],
            vec![1, c.block, c.nkv * c.dv],
        )
    } else {
        (shape(c.nkv, c.d), shape(c.nkv, c.dv))
    };
    if c.layout == PfaLayout::Tnd {
        spec.actual_seq_lengths = Some(vec![s as i64]);
        spec.actual_seq_lengths_kv = Some(vec![s as i64]);
    } else if c.block > 0 {
        spec.actual_seq_lengths_kv = Some(vec![s as i64]);
    }
    let out_shape = match c.layout {
        PfaLayout::BnsdBsnd => vec![1, s, c.n, c.dv],
        _ => shape(c.n, c.dv),
    };
    let (qt, kt, vt) = (
        zeros(&rt, &shape(c.n, c.d), q),
        zeros(&rt, &kd, q),
        zeros(&rt, &vd, q),
    );
    let o = zeros(&rt, &out_shape, q);
    let st = zeros(&rt, &[c.n], sink);
    let r = {
        fused_infer_attention(
            &rt,
            &spec,
            FiaInputs::new(
                qt.handle()?,
                FiaKv::Contiguous {
                    key: kt.handle()?,
                    value: vt.handle()?,
                },
                Some(st.handle()?),
            ),
            FiaOutputs {
                attention_out: &o.handle()?,
                softmax_lse: None,
            },
        )
    };
    rt.synchronize()?;
    sim::set_cann_release(None);
    r
}

/// Asserts `call` was refused in the first stage naming `learnableSink`, `path` and `release`.
fn assert_refused(r: Result<(), AclError>, path: &str, release: &str, what: &str) {
    match r {
        Err(AclError::Status { call, message, .. }) => {
            assert!(call.ends_with("GetWorkspaceSize"), "{what}: {call}");
            for want in ["learnableSink", path, release] {
                assert!(message.contains(want), "{what}: {message:?} lacks {want:?}");
            }
        }
        other => panic!("{what}: expected a first-stage refusal, got {other:?}"),
    }
}

const LAYOUTS: [PfaLayout; 4] = [
    PfaLayout::Bsh,
    PfaLayout::Bsnd,
    PfaLayout::Bnsd,
    PfaLayout::BnsdBsnd,
];

#[test]
fn outside_tnd_every_release_takes_a_bf16_sink_and_refuses_an_f16_one_whatever_the_query() {
    for release in CannRelease::KNOWN {
        for layout in LAYOUTS {
            for q in [Float16, Bf16] {
                let what = format!("{release:?} {layout:?} {q:?} query");
                call(release, case(layout, 128), q, Bf16)
                    .unwrap_or_else(|e| panic!("{what}, BF16 sink: {e}"));
                assert_refused(
                    call(release, case(layout, 128), q, Float16),
                    "FIA v3",
                    &release.label(),
                    &format!("{what}, F16 sink"),
                );
                assert_refused(
                    call(release, case(layout, 64), q, Float),
                    "FIA v3",
                    &release.label(),
                    &format!("{what}, FLOAT sink"),
                );
            }
        }
    }
}

#[test]
fn cann_8_5_takes_only_a_bf16_sink_in_tnd_too() {
    for release in [CannRelease::V8_5_0Beta1, CannRelease::V8_5_0] {
        for c in [case(PfaLayout::Tnd, 64), case(PfaLayout::Tnd, 128)] {
            for q in [Float16, Bf16] {
                call(release, c, q, Bf16).unwrap();
                assert_refused(
                    call(release, c, q, Float16),
                    "FIA v3",
                    &release.label(),
                    &format!("D {} {q:?} query", c.d),
                );
            }
        }
    }
}

#[test]
fn cann_9_tnd_split_fuse_takes_the_sink_in_the_query_dtype() {
    for release in [CannRelease::V9_0_0, CannRelease::V9_1_0] {
        let gqa = Case {
            n: 4,
            ..case(PfaLayout::Tnd, 128)
        };
        let paged = Case {
            block: 512,
            ..case(PfaLayout::Tnd, 128)
        };
        for c in [case(PfaLayout::Tnd, 128), gqa, paged] {
            let what = format!("N {} Nkv {} block {}", c.n, c.nkv, c.block);
            call(release, c, Float16, Float16).unwrap_or_else(|e| panic!("{what}: {e}"));
            call(release, c, Bf16, Bf16).unwrap_or_else(|e| panic!("{what}: {e}"));
            assert_refused(
                call(release, c, Float16, Bf16),
                "split-fuse",
                &release.label(),
                &what,
            );
            assert_refused(
                call(release, c, Bf16, Float16),
                "split-fuse",
                &release.label(),
                &what,
            );
        }
    }
}

#[test]
fn cann_9_sends_a_bf16_sink_with_head_dim_64_to_fia_v3_and_an_f16_one_to_split_fuse() {
    for release in [CannRelease::V9_0_0, CannRelease::V9_1_0] {
        let c = case(PfaLayout::Tnd, 64);
        // F16 query: BF16 → FIA v3 (accepted), F16 → split-fuse (the query's: accepted).
        call(release, c, Float16, Bf16).unwrap();
        call(release, c, Float16, Float16).unwrap();
        // BF16 query: BF16 → FIA v3; F16 → split-fuse, which wants BF16.
        call(release, c, Bf16, Bf16).unwrap();
        assert_refused(
            call(release, c, Bf16, Float16),
            "split-fuse",
            &release.label(),
            "D 64 BF16 query",
        );
    }
}

#[test]
fn cann_9_tnd_outside_split_fuse_is_fia_v3_and_takes_only_bf16() {
    for release in [CannRelease::V9_0_0, CannRelease::V9_1_0] {
        // Unequal head dims, a page over 512 tokens, BF16 MHA with innerPrecise 1: FIA v3.
        let cases = [
            Case {
                dv: 128,
                ..case(PfaLayout::Tnd, 192)
            },
            Case {
                block: 1024,
                ..case(PfaLayout::Tnd, 128)
            },
        ];
        for c in cases {
            for q in [Float16, Bf16] {
                let what = format!("D {}/{} block {} {q:?}", c.d, c.dv, c.block);
                call(release, c, q, Bf16).unwrap_or_else(|e| panic!("{what}: {e}"));
                assert_refused(
                    call(release, c, q, Float16),
                    "FIA v3",
                    &release.label(),
                    &what,
                );
            }
        }
        let precise = Case {
            inner_precise: 1,
            ..case(PfaLayout::Tnd, 128)
        };
        call(release, precise, Bf16, Bf16).unwrap();
        assert_refused(
            call(release, precise, Bf16, Float16),
            "FIA v3",
            &release.label(),
            "BF16 innerPrecise 1",
        );
    }
}

#[test]
fn the_simulation_follows_the_newest_release_read_unless_told_otherwise() {
    assert_eq!(CannRelease::NEWEST, CannRelease::V9_1_0);
    assert_eq!(sim::cann_release().unwrap(), CannRelease::NEWEST);
    sim::set_cann_release(Some(CannRelease::V8_5_0));
    assert_eq!(sim::cann_release().unwrap(), CannRelease::V8_5_0);
    sim::set_cann_release(None);
    assert_eq!(sim::cann_release().unwrap(), CannRelease::NEWEST);
}

#[test]
fn package_versions_map_to_the_sink_rule_of_their_release() {
    // (version, release, whether the FIA sink follows the path: 9.x from `20ea81afa`)
    for (v, want, per_path) in [
        ("8.5.0", CannRelease::V8_5_0, false),
        ("8.5.0-beta.1", CannRelease::V8_5_0Beta1, false),
        ("8.3.RC1", CannRelease::V8_5_0Beta1, false),
        ("8.0.RC3.alpha002", CannRelease::V8_5_0Beta1, false),
        ("9.0.0-beta.1", CannRelease::V8_5_0, false),
        ("9.0.0-beta.2", CannRelease::V9_0_0, true),
        ("9.0.0", CannRelease::V9_0_0, true),
        ("9.1.0", CannRelease::V9_1_0, true),
        ("9.2.0", CannRelease::V9_1_0, true),
    ] {
        assert_eq!(CannRelease::from_package_version(v), Some(want), "{v}");
        assert_eq!(want.fia_sink_per_path(), per_path, "{v}");
    }
    assert_eq!(CannRelease::from_package_version("latest"), None);
}

#[test]
fn release_names_parse_and_an_unknown_one_names_its_source_and_the_known() {
    for (text, want) in [
        ("9.1.0", CannRelease::V9_1_0),
        ("9.1", CannRelease::V9_1_0),
        (" 8.5 ", CannRelease::V8_5_0),
        ("9.0", CannRelease::V9_0_0),
        ("8.5.0-BETA.1", CannRelease::V8_5_0Beta1),
    ] {
        assert_eq!(
            CannRelease::parse(text, "--cann-release").unwrap(),
            want,
            "{text}"
        );
    }
    for bad in ["9", "8.4", "latest", ""] {
        let e = CannRelease::parse(bad, "SOME_VARIABLE")
            .unwrap_err()
            .to_string();
        assert!(
            e.starts_with("invalid SOME_VARIABLE: unknown CANN release")
                && e.contains("known: 8.5.0-beta.1, 8.5.0, 9.0.0, 9.1.0"),
            "{bad}: {e}"
        );
    }
}
