//! The KV cache scatter: every validation rule names its parameter.

use super::scatter::*;
use super::*;

#[test]
fn scatter_every_rule_names_its_parameter() {
    type Mutate = Box<dyn Fn(&mut ScatterSpec, &mut ScatterShapes)>;
    let cases_ = scatter_cases();
    let (norm, nz, nct, alibi, rope) = (&cases_[0], &cases_[1], &cases_[3], &cases_[4], &cases_[5]);
    let cases: Vec<(&str, &SCase, Mutate, &str)> = vec![
        (
            "key dtype",
            norm,
            Box::new(|_, s| {
                s.dtypes = [
                    Some(DataType::Int32),
                    Some(DataType::Int32),
                    Some(DataType::Int32),
                    Some(DataType::Int32),
                ]
            }),
            "key",
        ),
        ("key rank", norm, Box::new(|_, s| s.key = vec![5, 8]), "key"),
        (
            "int8 Nct",
            nct,
            Box::new(|_, s| s.dtypes = [Some(DataType::Int8); 4]),
            "scatterMode",
        ),
        (
            "int8 Rope",
            rope,
            Box::new(|_, s| s.dtypes = [Some(DataType::Int8); 4]),
            "scatterMode",
        ),
        (
            "value without cache",
            norm,
            Box::new(|_, s| s.value_cache = None),
            "valueCache",
        ),
        (
            "key cache dtype",
            norm,
            Box::new(|_, s| s.dtypes[2] = Some(DataType::Float16)),
            "keyCache",
        ),
        (
            "value dtype",
            norm,
            Box::new(|_, s| s.dtypes[1] = Some(DataType::Float16)),
            "value",
        ),
        (
            "value cache dtype",
            norm,
            Box::new(|_, s| s.dtypes[3] = Some(DataType::Float16)),
            "valueCache",
        ),
        (
            "key cache rank",
            norm,
            Box::new(|_, s| s.key_cache = vec![12, 2, 4]),
            "keyCache",
        ),
        (
            "value cache rank",
            norm,
            Box::new(|_, s| s.value_cache = Some(vec![12, 2, 8])),
            "valueCache",
        ),
        (
            "compressLens on None",
            norm,
            Box::new(|p, _| p.compress_lens = Some(vec![1])),
            "compressLens",
        ),
        (
            "seqLens on None",
            norm,
            Box::new(|p, _| p.seq_lens = Some(vec![1])),
            "seqLens",
        ),
        (
            "offset on None",
            norm,
            Box::new(|p, _| p.compress_seq_offset = Some(vec![1])),
            "compressSeqOffset",
        ),
        (
            "nct with nz",
            nz,
            Box::new(|p, _| {
                p.scatter_mode = ScatterKind::Nct;
                p.strides = Some(vec![8, 16]);
                p.offsets = Some(vec![0, 0]);
            }),
            "scatterMode",
        ),
        (
            "nz last dim",
            nz,
            Box::new(|_, s| s.key_cache = vec![3, 2, 4, 4]),
            "keyCache",
        ),
        (
            "nz N·D",
            nz,
            Box::new(|_, s| s.key_cache = vec![3, 2, 4, 8]),
            "keyCache",
        ),
        (
            "nz value cache",
            nz,
            Box::new(|_, s| s.value_cache = Some(vec![3, 1, 4, 8])),
            "valueCache",
        ),
        (
            "nz bytes",
            nz,
            Box::new(|_, s| {
                s.key = vec![5, 1, 4];
                s.value = Some(vec![5, 1, 8]);
                s.key_cache = vec![3, 0, 4, 8];
                s.value_cache = Some(vec![3, 1, 4, 8]);
            }),
            "keyCache",
        ),
        (
            "slot shape",
            norm,
            Box::new(|p, _| p.slot_mapping_shape = vec![5, 1]),
            "slotMapping",
        ),
        (
            "slot count",
            norm,
            Box::new(|p, _| {
                p.slot_mapping = vec![0, 1].into();
                p.slot_mapping_shape = vec![2];
            }),
            "slotMapping",
        ),
        (
            "cache N",
            norm,
            Box::new(|_, s| s.key_cache = vec![3, 4, 1, 4]),
            "keyCache",
        ),
        (
            "cache zero",
            norm,
            Box::new(|_, s| s.key_cache = vec![0, 4, 2, 4]),
            "keyCache",
        ),
        (
            "value dims",
            norm,
            Box::new(|_, s| s.value = Some(vec![5, 1, 8])),
            "value",
        ),
        (
            "value rank",
            norm,
            Box::new(|_, s| s.value = Some(vec![5, 16])),
            "value",
        ),
        (
            "value cache dims",
            norm,
            Box::new(|_, s| s.value_cache = Some(vec![3, 4, 1, 8])),
            "valueCache",
        ),
        (
            "value cache D",
            norm,
            Box::new(|_, s| s.value_cache = Some(vec![3, 4, 2, 6])),
            "valueCache",
        ),
        (
            "slot range",
            norm,
            Box::new(|p, _| p.slot_mapping = vec![5, -1, 0, 12, 6].into()),
            "slotMapping",
        ),
        (
            "slot duplicate",
            norm,
            Box::new(|p, _| p.slot_mapping = vec![5, -1, 5, 11, 6].into()),
            "slotMapping",
        ),
        (
            "nct strides missing",
            norm,
            Box::new(|p, _| {
                p.scatter_mode = ScatterKind::Nct;
                p.offsets = Some(vec![0, 0]);
            }),
            "strides",
        ),
        (
            "nct strides zero",
            norm,
            Box::new(|p, _| {
                p.scatter_mode = ScatterKind::Nct;
                p.strides = Some(vec![0, 16]);
                p.offsets = Some(vec![0, 0]);
            }),
            "strides",
        ),
        (
            "nct offsets len",
            norm,
            Box::new(|p, _| {
                p.scatter_mode = ScatterKind::Nct;
                p.strides = Some(vec![8, 16]);
                p.offsets = Some(vec![0]);
            }),
            "offsets",
        ),
        (
            "nct storage",
            norm,
            Box::new(|p, _| {
                p.scatter_mode = ScatterKind::Nct;
                p.strides = Some(vec![9, 16]);
                p.offsets = Some(vec![0, 0]);
            }),
            "key",
        ),
        (
            "nct key N·D",
            nct,
            Box::new(|_, s| s.key = vec![56, 1, 16]),
            "key",
        ),
        (
            "nct value N·D",
            nct,
            Box::new(|_, s| s.value = Some(vec![16, 1, 16])),
            "value",
        ),
        (
            "nct value storage strided by strides[0]",
            nct,
            Box::new(|p, s| {
                p.strides = Some(vec![30, 1]);
                s.key = vec![17, 2, 4]; // 4·30 + 3 + 8 = 131 ≤ 136
            }),
            "value",
        ),
        (
            "nct stride overflow",
            nct,
            Box::new(|p, _| p.strides = Some(vec![i64::MAX, 1])),
            "key",
        ),
        (
            "nct offset overflow",
            nct,
            Box::new(|p, _| p.offsets = Some(vec![i64::MAX, 1])),
            "key",
        ),
        (
            "key dims overflow",
            norm,
            Box::new(|_, s| s.key = vec![0, 1 << 40, 1 << 40]),
            "key",
        ),
        (
            "cache dims overflow",
            norm,
            Box::new(|_, s| s.key_cache = vec![1 << 40, 1 << 40, 2, 4]),
            "keyCache",
        ),
        (
            "cache holds the tokens",
            norm,
            Box::new(|_, s| {
                s.key_cache = vec![1, 4, 2, 4];
                s.value_cache = Some(vec![1, 4, 2, 8]);
            }),
            "keyCache",
        ),
        (
            "seqLens sum overflow",
            alibi,
            Box::new(|p, _| p.seq_lens = Some(vec![i64::MAX, 2])),
            "seqLens",
        ),
        (
            "compressLens i64::MAX",
            alibi,
            Box::new(|p, _| p.compress_lens = Some(vec![i64::MAX, 1, 3, 2])),
            "compressLens",
        ),
        (
            "alibi window beyond the sequence",
            alibi,
            Box::new(|p, _| p.compress_lens = Some(vec![5, 1, 3, 2])),
            "compressLens",
        ),
        (
            "rope offset beyond the sequence",
            rope,
            Box::new(|p, _| p.compress_seq_offset = Some(vec![5, 0, 0, 1])),
            "compressSeqOffset",
        ),
        (
            "rope window beyond the sequence",
            rope,
            Box::new(|p, _| p.compress_lens = Some(vec![4, 3, 1, 2])),
            "compressLens",
        ),
        (
            "omni window i64::MAX",
            rope,
            Box::new(|p, _| {
                p.scatter_mode = ScatterKind::Omni;
                p.compress_lens = Some(vec![i64::MAX, 3, 1, 2]);
            }),
            "compressLens",
        ),
        (
            "compressed nz",
            alibi,
            Box::new(|p, _| p.cache_mode = CacheMode::PaNz),
            "cacheMode",
        ),
        (
            "compressed cache",
            alibi,
            Box::new(|_, s| s.key_cache = vec![4, 4, 2, 4]),
            "keyCache",
        ),
        (
            "compressed value",
            alibi,
            Box::new(|_, s| s.value = Some(vec![7, 1, 8])),
            "value",
        ),
        (
            "compressed value cache",
            alibi,
            Box::new(|_, s| s.value_cache = Some(vec![4, 4, 1, 4])),
            "valueCache",
        ),
        (
            "seqLens negative",
            alibi,
            Box::new(|p, _| p.seq_lens = Some(vec![8, -1])),
            "seqLens",
        ),
        (
            "seqLens sum",
            alibi,
            Box::new(|p, _| p.seq_lens = Some(vec![4, 2])),
            "seqLens",
        ),
        (
            "compressed slots",
            alibi,
            Box::new(|p, _| {
                p.slot_mapping = vec![0, 4, 8].into();
                p.slot_mapping_shape = vec![3];
            }),
            "slotMapping",
        ),
        (
            "compressLens missing",
            alibi,
            Box::new(|p, _| p.compress_lens = None),
            "compressLens",
        ),
        (
            "compressLens negative",
            alibi,
            Box::new(|p, _| p.compress_lens = Some(vec![2, 1, -3, 2])),
            "compressLens",
        ),
        (
            "alibi offset",
            alibi,
            Box::new(|p, _| p.compress_seq_offset = Some(vec![0; 4])),
            "compressSeqOffset",
        ),
        (
            "rope offset missing",
            rope,
            Box::new(|p, _| p.compress_seq_offset = None),
            "compressSeqOffset",
        ),
        (
            "rope offset len",
            rope,
            Box::new(|p, _| p.compress_seq_offset = Some(vec![0; 3])),
            "compressSeqOffset",
        ),
        (
            "compressed overlap",
            alibi,
            Box::new(|p, _| p.slot_mapping = vec![0, 1, 8, -1].into()),
            "slotMapping",
        ),
        (
            "compressed range",
            alibi,
            Box::new(|p, _| p.slot_mapping = vec![0, 4, 14, -1].into()),
            "slotMapping",
        ),
    ];
    for (name, c, mutate, param) in cases {
        c.spec
            .validate(&c.shapes())
            .unwrap_or_else(|e| panic!("{name} base: {e}"));
        let (mut p, mut s) = (c.spec.clone(), c.shapes());
        mutate(&mut p, &mut s);
        expect_param(name, p.validate(&s), param);
    }
    // Unsupported, not invalid: the 950-only 4-D key and compressed without seqLens.
    let mut s = norm.shapes();
    s.key = vec![5, 1, 2, 4];
    assert!(matches!(
        norm.spec.validate(&s),
        Err(AttnError::Unsupported(_))
    ));
    let mut p = alibi.spec.clone();
    p.seq_lens = None;
    assert!(matches!(
        p.validate(&alibi.shapes()),
        Err(AttnError::Unsupported(_))
    ));
    let _ = Arc::<[u8]>::from(vec![]);
}
