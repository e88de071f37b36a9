//! Incremental attention: every validation rule names its parameter.

use super::incre::*;
use super::*;
use burn_ascend::IncreKvFromTensors;

#[test]
fn incre_every_rule_names_its_parameter() {
    type Mutate = Box<dyn Fn(&mut IncreSpec, &mut IncreShapes)>;
    let base = || {
        let c = icase("base", IfaLayout::Bnsd, 2, 4, 2, 32, 8, 50);
        let shapes = IncreShapes {
            query: c.q_shape.clone(),
            kv: IncreKvShapes::Contiguous {
                key: vec![2, 2, 32, 8],
                value: vec![2, 2, 32, 8],
            },
            kv_int8: false,
            atten_mask: None,
            pse_shift: None,
            antiquant_scale: None,
            antiquant_offset: None,
        };
        (c.spec, shapes)
    };
    let paged = |s: &mut IncreSpec, sh: &mut IncreShapes| {
        s.block_size = 16;
        s.actual_seq_lengths = Some(vec![20, 5]);
        s.block_table = Some(BlockTable {
            data: vec![0, 1, 2, 3].into(),
            shape: vec![2, 2],
        });
        sh.kv = IncreKvShapes::Paged {
            key_cache: vec![4, 16, 16],
            value_cache: vec![4, 16, 16],
        };
    };
    let list = |sh: &mut IncreShapes| {
        sh.kv = IncreKvShapes::List {
            key: vec![vec![1, 2, 32, 8]; 2],
            value: vec![vec![1, 2, 32, 8]; 2],
        }
    };
    let cases: Vec<(&str, Mutate, &str)> = vec![
        ("heads 0", Box::new(|s, _| s.num_heads = 0), "numHeads"),
        (
            "heads mismatch",
            Box::new(|s, _| s.num_heads = 2),
            "numHeads",
        ),
        (
            "query S",
            Box::new(|_, sh| sh.query = vec![2, 4, 2, 8]),
            "query",
        ),
        (
            "query D",
            Box::new(|_, sh| sh.query = vec![2, 4, 1, 513]),
            "query",
        ),
        (
            "bsh H",
            Box::new(|s, sh| {
                s.input_layout = IfaLayout::Bsh;
                sh.query = vec![2, 1, 30];
            }),
            "query",
        ),
        (
            "nkv divides",
            Box::new(|s, _| s.num_key_value_heads = 3),
            "numKeyValueHeads",
        ),
        (
            "nkv vs key",
            Box::new(|s, _| s.num_key_value_heads = 4),
            "numKeyValueHeads",
        ),
        (
            "scale",
            Box::new(|s, _| s.scale_value = f64::INFINITY),
            "scaleValue",
        ),
        (
            "innerPrecise",
            Box::new(|s, _| s.inner_precise = 2),
            "innerPrecise",
        ),
        (
            "key rank",
            Box::new(|_, sh| {
                sh.kv = IncreKvShapes::Contiguous {
                    key: vec![2, 32, 16],
                    value: vec![2, 32, 16],
                }
            }),
            "key",
        ),
        (
            "key B",
            Box::new(|_, sh| {
                sh.kv = IncreKvShapes::Contiguous {
                    key: vec![1, 2, 32, 8],
                    value: vec![1, 2, 32, 8],
                }
            }),
            "key",
        ),
        (
            "key D",
            Box::new(|_, sh| {
                sh.kv = IncreKvShapes::Contiguous {
                    key: vec![2, 2, 32, 4],
                    value: vec![2, 2, 32, 4],
                }
            }),
            "key",
        ),
        (
            "value shape",
            Box::new(|_, sh| {
                sh.kv = IncreKvShapes::Contiguous {
                    key: vec![2, 2, 32, 8],
                    value: vec![2, 2, 31, 8],
                }
            }),
            "value",
        ),
        (
            "list len",
            Box::new(|_, sh| {
                sh.kv = IncreKvShapes::List {
                    key: vec![vec![1, 2, 32, 8]],
                    value: vec![vec![1, 2, 32, 8]],
                }
            }),
            "key",
        ),
        (
            "list batch",
            Box::new(|_, sh| {
                sh.kv = IncreKvShapes::List {
                    key: vec![vec![2, 2, 32, 8]; 2],
                    value: vec![vec![2, 2, 32, 8]; 2],
                }
            }),
            "key",
        ),
        (
            "list value",
            Box::new(move |_, sh| {
                list(sh);
                if let IncreKvShapes::List { value, .. } = &mut sh.kv {
                    value[1][2] = 5;
                }
            }),
            "value",
        ),
        (
            "list only S differs",
            Box::new(move |s, sh| {
                s.num_key_value_heads = 0;
                s.num_heads = 4;
                sh.kv = IncreKvShapes::List {
                    key: vec![vec![1, 4, 32, 8], vec![1, 2, 32, 8]],
                    value: vec![vec![1, 4, 32, 8], vec![1, 2, 32, 8]],
                };
            }),
            "numKeyValueHeads",
        ),
        (
            "list value count",
            Box::new(|_, sh| {
                sh.kv = IncreKvShapes::List {
                    key: vec![vec![1, 2, 32, 8]; 2],
                    value: vec![vec![1, 2, 32, 8]],
                }
            }),
            "value",
        ),
        (
            "blocktable without pages",
            Box::new(|s, _| {
                s.block_table = Some(BlockTable {
                    data: vec![0].into(),
                    shape: vec![1, 1],
                })
            }),
            "blocktable",
        ),
        (
            "pages without blocktable",
            Box::new(move |s, sh| {
                paged(s, sh);
                s.block_table = None;
            }),
            "blocktable",
        ),
        (
            "blockSize 0",
            Box::new(move |s, sh| {
                paged(s, sh);
                s.block_size = 0;
            }),
            "blockSize",
        ),
        (
            "blockSize unaligned",
            Box::new(move |s, sh| {
                paged(s, sh);
                s.block_size = 24;
            }),
            "blockSize",
        ),
        (
            "blockSize int8",
            Box::new(move |s, sh| {
                paged(s, sh);
                sh.kv_int8 = true;
                sh.antiquant_scale = Some(vec![2]);
            }),
            "blockSize",
        ),
        (
            "blockSize > 512",
            Box::new(move |s, sh| {
                paged(s, sh);
                s.block_size = 528;
            }),
            "blockSize",
        ),
        (
            "cache shape",
            Box::new(move |s, sh| {
                paged(s, sh);
                sh.kv = IncreKvShapes::Paged {
                    key_cache: vec![4, 16, 8],
                    value_cache: vec![4, 16, 8],
                };
            }),
            "key",
        ),
        (
            "cache rank",
            Box::new(move |s, sh| {
                paged(s, sh);
                sh.kv = IncreKvShapes::Paged {
                    key_cache: vec![4, 256],
                    value_cache: vec![4, 256],
                };
            }),
            "key",
        ),
        (
            "nz cache needs BNSD",
            Box::new(move |s, sh| {
                paged(s, sh);
                s.input_layout = IfaLayout::Bsnd;
                sh.query = vec![2, 1, 4, 8];
                sh.kv = IncreKvShapes::Paged {
                    key_cache: vec![4, 2, 16, 8],
                    value_cache: vec![4, 2, 16, 8],
                };
            }),
            "key",
        ),
        (
            "value cache",
            Box::new(move |s, sh| {
                paged(s, sh);
                sh.kv = IncreKvShapes::Paged {
                    key_cache: vec![4, 16, 16],
                    value_cache: vec![5, 16, 16],
                };
            }),
            "value",
        ),
        (
            "blocktable rank",
            Box::new(move |s, sh| {
                paged(s, sh);
                s.block_table = Some(BlockTable {
                    data: vec![0, 1, 2, 3].into(),
                    shape: vec![4],
                });
            }),
            "blocktable",
        ),
        (
            "blocktable B",
            Box::new(move |s, sh| {
                paged(s, sh);
                s.block_table = Some(BlockTable {
                    data: vec![0, 1, 2, 3].into(),
                    shape: vec![1, 4],
                });
            }),
            "blocktable",
        ),
        (
            "blocktable data",
            Box::new(move |s, sh| {
                paged(s, sh);
                s.block_table = Some(BlockTable {
                    data: vec![0, 1, 2].into(),
                    shape: vec![2, 2],
                });
            }),
            "blocktable",
        ),
        (
            "blocktable id",
            Box::new(move |s, sh| {
                paged(s, sh);
                s.block_table = Some(BlockTable {
                    data: vec![0, 9, 2, 3].into(),
                    shape: vec![2, 2],
                });
            }),
            "blocktable",
        ),
        (
            "blocktable too few",
            Box::new(move |s, sh| {
                paged(s, sh);
                s.block_table = Some(BlockTable {
                    data: vec![0, 1].into(),
                    shape: vec![2, 1],
                });
            }),
            "actualSeqLengths",
        ),
        (
            "paged no lengths",
            Box::new(move |s, sh| {
                paged(s, sh);
                s.actual_seq_lengths = None;
            }),
            "actualSeqLengths",
        ),
        (
            "lengths count",
            Box::new(|s, _| s.actual_seq_lengths = Some(vec![1, 2, 3])),
            "actualSeqLengths",
        ),
        (
            "length > S",
            Box::new(|s, _| s.actual_seq_lengths = Some(vec![33])),
            "actualSeqLengths",
        ),
        (
            "length < 0",
            Box::new(|s, _| s.actual_seq_lengths = Some(vec![-1, 3])),
            "actualSeqLengths",
        ),
        (
            "padding window",
            Box::new(|s, _| {
                s.actual_seq_lengths = Some(vec![30]);
                s.kv_padding_size = Some(3);
            }),
            "actualSeqLengths",
        ),
        (
            "mask shape",
            Box::new(|_, sh| sh.atten_mask = Some(vec![2, 2, 32])),
            "attenMask",
        ),
        (
            "mask batch",
            Box::new(|_, sh| sh.atten_mask = Some(vec![1, 32])),
            "attenMask",
        ),
        (
            "mask short",
            Box::new(|_, sh| sh.atten_mask = Some(vec![2, 31])),
            "attenMask",
        ),
        (
            "mask paged short",
            Box::new(move |s, sh| {
                paged(s, sh);
                sh.atten_mask = Some(vec![2, 20]);
            }),
            "attenMask",
        ),
        (
            "pse rank",
            Box::new(|_, sh| sh.pse_shift = Some(vec![4, 32])),
            "pseShift",
        ),
        (
            "pse heads",
            Box::new(|_, sh| sh.pse_shift = Some(vec![1, 2, 1, 32])),
            "pseShift",
        ),
        (
            "pse short",
            Box::new(|_, sh| sh.pse_shift = Some(vec![1, 4, 1, 31])),
            "pseShift",
        ),
        (
            "int8 without antiquant",
            Box::new(|_, sh| sh.kv_int8 = true),
            "antiquantScale",
        ),
        (
            "antiquant on float",
            Box::new(|_, sh| sh.antiquant_scale = Some(vec![2])),
            "antiquantScale",
        ),
        (
            "antiquant shape",
            Box::new(|_, sh| {
                sh.kv_int8 = true;
                sh.antiquant_scale = Some(vec![2, 2, 8]);
            }),
            "antiquantScale",
        ),
        (
            "antiquant offset",
            Box::new(|_, sh| {
                sh.kv_int8 = true;
                sh.antiquant_scale = Some(vec![2]);
                sh.antiquant_offset = Some(vec![1]);
            }),
            "antiquantOffset",
        ),
        (
            "antiquant offset without scale",
            Box::new(|_, sh| sh.antiquant_offset = Some(vec![2])),
            "antiquantOffset",
        ),
        (
            "quant scale",
            Box::new(|s, _| {
                s.post_quant = Some(PostQuantSpec {
                    scale: vec![1.0; 5].into(),
                    offset: None,
                })
            }),
            "quantScale2",
        ),
        (
            "quant offset",
            Box::new(|s, _| {
                s.post_quant = Some(PostQuantSpec {
                    scale: vec![1.0; 32].into(),
                    offset: Some(vec![0.0].into()),
                })
            }),
            "quantOffset2",
        ),
    ];
    let (s, sh) = base();
    s.validate(&sh).expect("base is valid");
    let (mut s, mut sh) = base();
    paged(&mut s, &mut sh);
    s.validate(&sh).expect("paged base is valid");
    let (s, mut sh) = base();
    list(&mut sh);
    s.validate(&sh).expect("list base is valid");
    for (name, mutate, param) in cases {
        let (mut s, mut sh) = base();
        mutate(&mut s, &mut sh);
        expect_param(name, s.validate(&sh), param);
    }
}

/// CANN applies `kvPaddingSize` only with one batch-continuous K/V tensor, `actualSeqLengths`
/// and no block table, and otherwise ignores it without an error
/// (`incre_flash_attention_tiling_check.cpp`, `CheckSupportKVLeftPadding`): the contract does
/// the same (the CLI replays CANN), the Burn API refuses.
#[test]
fn kv_padding_that_cann_ignores_is_ignored_by_the_contract_and_refused_by_the_burn_api() {
    let c = icase("pad", IfaLayout::Bnsd, 2, 4, 2, 32, 8, 51);
    let contiguous = IncreKvShapes::Contiguous {
        key: vec![2, 2, 32, 8],
        value: vec![2, 2, 32, 8],
    };
    let shapes = |kv: IncreKvShapes| IncreShapes {
        query: c.q_shape.clone(),
        kv,
        kv_int8: false,
        atten_mask: None,
        pse_shift: None,
        antiquant_scale: None,
        antiquant_offset: None,
    };
    // Applied: contiguous with lengths.
    let mut s = c.spec.clone();
    s.actual_seq_lengths = Some(vec![20, 5]);
    s.kv_padding_size = Some(3);
    let dims = s.validate(&shapes(contiguous.clone())).unwrap();
    assert_eq!(
        (s.left_padding(&dims), s.window(&dims, 1)),
        (Some(3), (24, 5))
    );
    s.check_left_padding_applies(&dims).unwrap();
    // Ignored: no lengths (a padding larger than S is then no error either).
    let mut s = c.spec.clone();
    s.kv_padding_size = Some(40);
    let dims = s.validate(&shapes(contiguous.clone())).unwrap();
    assert_eq!((s.left_padding(&dims), s.window(&dims, 0)), (None, (0, 32)));
    expect_param(
        "no lengths",
        s.check_left_padding_applies(&dims),
        "kvPaddingSize",
    );
    // Ignored: a list of two tensors.
    let mut s = c.spec.clone();
    s.actual_seq_lengths = Some(vec![20, 5]);
    s.kv_padding_size = Some(3);
    let list = IncreKvShapes::List {
        key: vec![vec![1, 2, 32, 8]; 2],
        value: vec![vec![1, 2, 32, 8]; 2],
    };
    let dims = s.validate(&shapes(list)).unwrap();
    assert_eq!(s.window(&dims, 0), (0, 20));
    expect_param("list", s.check_left_padding_applies(&dims), "kvPaddingSize");
    // Ignored: paged.
    s.block_size = 16;
    s.block_table = Some(BlockTable {
        data: vec![0, 1, 2, 3].into(),
        shape: vec![2, 2],
    });
    let paged = IncreKvShapes::Paged {
        key_cache: vec![4, 16, 16],
        value_cache: vec![4, 16, 16],
    };
    let dims = s.validate(&shapes(paged)).unwrap();
    assert_eq!(s.window(&dims, 1), (0, 5));
    expect_param(
        "paged",
        s.check_left_padding_applies(&dims),
        "kvPaddingSize",
    );

    // The functional API refuses what CANN would ignore, and runs what it applies.
    let d = Default::default();
    let h = super::incre::host_kv(&mut c.clone(), &super::incre::Form::Contiguous);
    let t = |x: &Vec<f32>, shape: Vec<usize>| {
        Tensor::<B, 4>::from_data(TensorData::new(x.clone(), shape), &d)
    };
    let ks = vec![c.b, c.nkv, c.s, c.d];
    let kv = || IncreKv::contiguous(t(&h.k[0], ks.clone()), t(&h.v[0], ks.clone()));
    let mut ignored = c.spec.clone();
    ignored.kv_padding_size = Some(1);
    expect_param(
        "api without lengths",
        incre_api(t(&c.q, c.q_shape.clone()), kv(), &ignored).map(|o| o.dims()),
        "kvPaddingSize",
    );
    ignored.actual_seq_lengths = Some(vec![20, 5]);
    incre_api(t(&c.q, c.q_shape.clone()), kv(), &ignored).expect("applied padding runs");
}

#[test]
fn an_empty_query_huge_tables_and_f32_overflowing_scales_are_typed_errors() {
    let base = || {
        let c = icase("base", IfaLayout::Bnsd, 2, 4, 2, 32, 8, 50);
        let shapes = IncreShapes {
            query: c.q_shape.clone(),
            kv: IncreKvShapes::Contiguous {
                key: vec![2, 2, 32, 8],
                value: vec![2, 2, 32, 8],
            },
            kv_int8: false,
            atten_mask: None,
            pse_shift: None,
            antiquant_scale: None,
            antiquant_offset: None,
        };
        (c.spec, shapes)
    };
    let (spec, shapes) = base();
    spec.validate(&shapes).expect("base is valid");

    let (mut spec, shapes) = base();
    spec.scale_value = 1e300;
    expect_param("scale 1e300", spec.validate(&shapes), "scaleValue");

    // Batch 0: CANN's IFA tiling refuses an empty query; every device must agree.
    let (spec, mut shapes) = base();
    shapes.query[0] = 0;
    shapes.kv = IncreKvShapes::Contiguous {
        key: vec![0, 2, 32, 8],
        value: vec![0, 2, 32, 8],
    };
    expect_param("batch 0", spec.validate(&shapes), "query");

    // A block table whose width times blockSize overflows: a typed error, not a wrap.
    let (mut spec, mut shapes) = base();
    spec.block_size = 16;
    spec.actual_seq_lengths = Some(vec![20, 5]);
    spec.block_table = Some(BlockTable {
        data: vec![].into(),
        shape: vec![2, usize::MAX / 8],
    });
    shapes.kv = IncreKvShapes::Paged {
        key_cache: vec![4, 16, 16],
        value_cache: vec![4, 16, 16],
    };
    expect_param("huge table", spec.validate(&shapes), "blocktable");
}

/// Block tables may share blocks (forks, prefix caching): the docs ask blocknum to cover the
/// sum of every batch's blocks, but the tiling does not check it, so the contract checks only
/// that each id a token uses is a block of the cache.
#[test]
fn block_tables_that_share_blocks_are_accepted_and_ids_outside_the_cache_are_not() {
    let c = icase("shared", IfaLayout::Bnsd, 2, 4, 2, 32, 8, 52);
    let mut s = c.spec.clone();
    s.block_size = 16;
    s.actual_seq_lengths = Some(vec![20, 17]);
    s.block_table = Some(BlockTable {
        data: vec![0, 1, 0, 1].into(),
        shape: vec![2, 2],
    });
    let shapes = IncreShapes {
        query: c.q_shape.clone(),
        kv: IncreKvShapes::Paged {
            key_cache: vec![2, 16, 16],
            value_cache: vec![2, 16, 16],
        },
        kv_int8: false,
        atten_mask: None,
        pse_shift: None,
        antiquant_scale: None,
        antiquant_offset: None,
    };
    s.validate(&shapes)
        .expect("two sequences sharing both blocks");
    s.block_table = Some(BlockTable {
        data: vec![0, 1, 0, 2].into(),
        shape: vec![2, 2],
    });
    expect_param("id 2 of 2 blocks", s.validate(&shapes), "blocktable");
}
