//! The bad-input campaign: valid inputs of every op, mutated at random — tensors dropped,
//! renamed, reshaped, retyped, truncated; lengths, block tables, slots and offsets set to 0,
//! −1, i64::MIN / MAX, huge; attributes set to extremes, NaN / inf, garbage, misspelt; whole
//! safetensors files truncated or corrupted — run through the op-replay CLI's in-process entry
//! (`cli::run_op` on `reference`, `cpu` and `sim`, and `Bundle::from_bytes`) and through
//! `scatter_checked`. Asserted for every case: no panic (a typed error or a success), a
//! refused scatter leaves the caches bit-identical, and an accepted call whose inputs are all
//! finite returns finite outputs.
//!
//! The generator is the project's seeded splitmix64 `Rng` rather than `proptest`: the cases
//! are structured mutations of a handful of valid inputs (no shrinking needed: each failure
//! names its seed, case and mutations, and reruns exactly), and it keeps the dependency tree
//! and the 2-core CI build unchanged. An abort or hang would take the whole test binary down,
//! so the campaign runs in a child process of this binary under a time limit.
//!
//! Bounded in `cargo test` (a few seconds); the long run:
//! `BURN_ASCEND_CAMPAIGN_CASES=100000 cargo test --release --test it campaign -- --nocapture`
//! (`BURN_ASCEND_CAMPAIGN_SEED` picks another seed).

use std::panic::{catch_unwind, AssertUnwindSafe};
use std::time::{Duration, Instant};

use crate::common::{Case, Rng};
use burn_ascend::ops::scatter::{
    scatter_checked, CacheMode, ScatterKind, ScatterShapes, ScatterSpec,
};
use burn_ascend_cann::acl::DataType;
use burn_ascend_cli::io::{Bundle, HostTensor};
use burn_ascend_cli::{run_op, Device};
use safetensors::Dtype;

/// Set in the child process that runs a campaign.
const CHILD: &str = "BURN_ASCEND_CAMPAIGN_CHILD";

fn env_or(name: &str, default: u64) -> u64 {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

/// In the test process: runs test `name` alone in a child process of this binary (killed
/// after `limit`), checks it passed and returns `false`; in the child: returns `true`.
fn in_child(name: &str, limit: Duration) -> bool {
    if std::env::var_os(CHILD).is_some() {
        return true;
    }
    let dir = tempfile::tempdir().unwrap();
    let log_path = dir.path().join("log");
    let log = std::fs::File::create(&log_path).unwrap();
    let mut child = std::process::Command::new(std::env::current_exe().unwrap())
        .args([name, "--exact", "--test-threads=1", "--nocapture"])
        .env(CHILD, "1")
        .stdout(log.try_clone().unwrap())
        .stderr(log)
        .spawn()
        .unwrap();
    let start = Instant::now();
    let status = loop {
        if let Some(st) = child.try_wait().unwrap() {
            break Some(st);
        }
        if start.elapsed() > limit {
            child.kill().unwrap();
            child.wait().unwrap();
            break None;
        }
        std::thread::sleep(Duration::from_millis(50));
    };
    let text = std::fs::read_to_string(&log_path).unwrap_or_default();
    let tail: String = {
        let lines: Vec<&str> = text.lines().collect();
        lines[lines.len().saturating_sub(40)..].join("\n")
    };
    match status {
        None => panic!("{name} hung (over {limit:?}); the last case it started:\n{tail}"),
        Some(st) => assert!(
            st.success() && text.contains("1 passed"),
            "{name} failed or aborted ({st}):\n{tail}"
        ),
    }
    false
}

// ---- valid inputs ----------------------------------------------------------------------

fn meta(b: &mut Bundle, kv: &[(&str, &str)]) {
    for (k, v) in kv {
        b.metadata.insert(k.to_string(), v.to_string());
    }
}

fn varlen_fwd() -> Bundle {
    let c = Case::new("campaign", &[3, 5, 0, 2], &[4, 5, 2, 2], 4, 2, 8, 21)
        .with_sink()
        .mode(burn_ascend::SparseMode::Band, 2, 1);
    // The CLI tests' forward bundle (sparse mode 4, preTokens 2, nextTokens 1, sink, TND).
    crate::cli_varlen::fwd_bundle(&c)
}

/// The backward's input: the forward's bundle, its outputs and a `dy`.
fn varlen_bwd(rng: &mut Rng) -> Bundle {
    let mut b = varlen_fwd();
    let out = run_op("varlen-fwd", &b, Device::Reference).unwrap();
    let o = &out.tensors["attentionOut"];
    let dy = rng.vec_f32(o.shape.iter().product(), 1.0);
    b.insert("dy", HostTensor::from_values(&dy, o.shape.clone()));
    b.insert("attentionIn", o.clone());
    b.insert("softmaxMax", out.tensors["softmaxMax"].clone());
    b.insert("softmaxSum", out.tensors["softmaxSum"].clone());
    b
}

fn prompt(rng: &mut Rng) -> Bundle {
    let (b, s, skv, n, nkv, d) = (2, 3, 5, 4, 2, 8);
    let mut x = Bundle::default();
    x.insert(
        "query",
        HostTensor::from_values(&rng.vec_f32(b * s * n * d, 1.0), vec![b, s, n, d]),
    );
    x.insert(
        "key",
        HostTensor::from_values(&rng.vec_f32(b * skv * nkv * d, 1.0), vec![b, skv, nkv, d]),
    );
    x.insert(
        "value",
        HostTensor::from_values(&rng.vec_f32(b * skv * nkv * d, 1.0), vec![b, skv, nkv, d]),
    );
    let mask: Vec<u8> = (0..s * skv).map(|e| (e % 5 == 3) as u8).collect();
    x.insert(
        "attenMask",
        HostTensor::from_u8(mask, vec![s, skv], Dtype::BOOL),
    );
    x.insert("actualSeqLengthsKv", HostTensor::from_i64(&[5, 4], vec![2]));
    meta(
        &mut x,
        &[
            ("numHeads", "4"),
            ("numKeyValueHeads", "2"),
            ("scaleValue", "0.35"),
            ("inputLayout", "BSND"),
            ("preTokens", "2"),
            ("nextTokens", "1"),
        ],
    );
    x
}

fn incre_contiguous(rng: &mut Rng) -> Bundle {
    let (b, n, nkv, s, d) = (2, 4, 2, 32, 8);
    let mut x = Bundle::default();
    x.insert(
        "query",
        HostTensor::from_values(&rng.vec_f32(b * n * d, 1.0), vec![b, n, 1, d]),
    );
    x.insert(
        "key",
        HostTensor::from_values(&rng.vec_f32(b * nkv * s * d, 1.0), vec![b, nkv, s, d]),
    );
    x.insert(
        "value",
        HostTensor::from_values(&rng.vec_f32(b * nkv * s * d, 1.0), vec![b, nkv, s, d]),
    );
    x.insert("actualSeqLengths", HostTensor::from_i64(&[30, 7], vec![2]));
    meta(
        &mut x,
        &[
            ("numHeads", "4"),
            ("numKeyValueHeads", "2"),
            ("scaleValue", "0.3"),
            ("inputLayout", "BNSD"),
        ],
    );
    x
}

fn incre_paged(rng: &mut Rng) -> Bundle {
    // Caches [blocknum, blockSize, H] (BSH), two sequences of 20 and 5 tokens in 16-token
    // blocks, tables [[2, 0], [1, -1]].
    let (b, n, d, nb, bs) = (2, 2, 8, 4, 16);
    let mut x = Bundle::default();
    x.insert(
        "query",
        HostTensor::from_values(&rng.vec_f32(b * n * d, 1.0), vec![b, 1, n * d]),
    );
    x.insert(
        "key",
        HostTensor::from_values(&rng.vec_f32(nb * bs * n * d, 1.0), vec![nb, bs, n * d]),
    );
    x.insert(
        "value",
        HostTensor::from_values(&rng.vec_f32(nb * bs * n * d, 1.0), vec![nb, bs, n * d]),
    );
    x.insert("actualSeqLengths", HostTensor::from_i64(&[20, 5], vec![2]));
    x.insert(
        "blocktable",
        HostTensor::from_i32(&[2, 0, 1, -1], vec![2, 2]),
    );
    meta(
        &mut x,
        &[
            ("numHeads", "2"),
            ("scaleValue", "0.25"),
            ("inputLayout", "BSH"),
            ("blockSize", "16"),
        ],
    );
    x
}

fn scatter(rng: &mut Rng) -> Bundle {
    let (t, n, d, nb, bs) = (4, 2, 8, 3, 16);
    let mut x = Bundle::default();
    x.insert(
        "key",
        HostTensor::from_values(&rng.vec_f32(t * n * d, 1.0), vec![t, n, d]),
    );
    x.insert(
        "value",
        HostTensor::from_values(&rng.vec_f32(t * n * d, 1.0), vec![t, n, d]),
    );
    let kc = vec![0.5f32; nb * bs * n * d];
    x.insert("keyCache", HostTensor::from_values(&kc, vec![nb, bs, n, d]));
    x.insert(
        "valueCache",
        HostTensor::from_values(&kc, vec![nb, bs, n, d]),
    );
    x.insert(
        "slotMapping",
        HostTensor::from_i32(&[17, -1, 0, 40], vec![t]),
    );
    meta(&mut x, &[("cacheMode", "Norm"), ("scatterMode", "None")]);
    x
}

/// Every op's valid inputs: (op, bundle).
fn valid_inputs(rng: &mut Rng) -> Vec<(&'static str, Bundle)> {
    vec![
        ("varlen-fwd", varlen_fwd()),
        ("varlen-bwd", varlen_bwd(rng)),
        ("prompt", prompt(rng)),
        ("incre", incre_contiguous(rng)),
        ("incre", incre_paged(rng)),
        ("scatter", scatter(rng)),
    ]
}

// ---- mutations -------------------------------------------------------------------------

const EXTREME_INTS: &[i64] = &[
    0,
    1,
    -1,
    2,
    15,
    16,
    17,
    i32::MAX as i64,
    i32::MIN as i64,
    i32::MAX as i64 + 1,
    1 << 40,
    i64::MAX,
    i64::MIN,
    i64::MAX - 1,
    i64::MIN + 1,
];

const EXTREME_ATTRS: &[&str] = &[
    "0",
    "-1",
    "1",
    "2",
    "3",
    "4",
    "8",
    "2147483647",
    "-2147483648",
    "2147483648",
    "9223372036854775807",
    "-9223372036854775808",
    "99999999999999999999",
    "1e300",
    "-1e300",
    "5e-324",
    "1e-45",
    "3.5e38",
    "NaN",
    "inf",
    "-inf",
    "0.5",
    "",
    " ",
    "abc",
    "BSH",
    "BNSD",
    "BSND",
    "TND",
    "Norm",
    "PA_NZ",
    "Nct",
    "Alibi",
    "Rope",
    "None",
    "[1, 2]",
    "1,2",
    "-1,-1",
    "9223372036854775807,1",
];

const DTYPES: &[Dtype] = &[
    Dtype::F32,
    Dtype::F16,
    Dtype::BF16,
    Dtype::F64,
    Dtype::I64,
    Dtype::I32,
    Dtype::I8,
    Dtype::U8,
    Dtype::BOOL,
];

fn is_int(d: Dtype) -> bool {
    matches!(d, Dtype::I64 | Dtype::I32)
}

/// Rewrites integer element `i` of an I64 / I32 tensor.
fn set_int(t: &mut HostTensor, i: usize, v: i64) {
    match t.dtype {
        Dtype::I64 => t.bytes[i * 8..i * 8 + 8].copy_from_slice(&v.to_le_bytes()),
        Dtype::I32 => t.bytes[i * 4..i * 4 + 4].copy_from_slice(&(v as i32).to_le_bytes()),
        _ => {}
    }
}

/// Applies one random mutation to `b`; returns what it did.
fn mutate(rng: &mut Rng, b: &mut Bundle) -> String {
    let names: Vec<String> = b.tensors.keys().cloned().collect();
    // Sorted: the metadata is a HashMap, and the campaign must replay from its seed.
    let mut attrs: Vec<String> = b.metadata.keys().cloned().collect();
    attrs.sort();
    let name = names[rng.below(names.len())].clone();
    match rng.below(12) {
        0 => {
            b.tensors.remove(&name);
            format!("drop {name}")
        }
        1 => {
            // Misspell: flip the case of one letter, or drop a character.
            let t = b.tensors.remove(&name).unwrap();
            let mut chars: Vec<char> = name.chars().collect();
            let i = rng.below(chars.len());
            if rng.chance(0.5) {
                chars[i] = if chars[i].is_uppercase() {
                    chars[i].to_ascii_lowercase()
                } else {
                    chars[i].to_ascii_uppercase()
                };
            } else {
                chars.remove(i);
            }
            let new: String = chars.into_iter().collect();
            b.tensors.insert(new.clone(), t);
            format!("rename {name} -> {new}")
        }
        2 => {
            // One dimension to an extreme, the bytes unchanged.
            let t = b.tensors.get_mut(&name).unwrap();
            if t.shape.is_empty() {
                t.shape.push(0);
            } else {
                let i = rng.below(t.shape.len());
                t.shape[i] = rng.pick(&[0usize, 1, 2, 3, 1 << 20, 1 << 40, usize::MAX]);
            }
            format!("shape of {name} -> {:?}", t.shape)
        }
        3 => {
            // A consistent reshape: same bytes, another factorisation or rank.
            let t = b.tensors.get_mut(&name).unwrap();
            let n = t.bytes.len() / (t.dtype.bitsize() / 8).max(1);
            t.shape = match rng.below(4) {
                0 => vec![n],
                1 => vec![1, n],
                2 => t.shape.iter().rev().copied().collect(),
                _ => {
                    let mut s = t.shape.clone();
                    s.push(1);
                    s
                }
            };
            format!("reshape {name} -> {:?}", t.shape)
        }
        4 => {
            let t = b.tensors.get_mut(&name).unwrap();
            let d = rng.pick(DTYPES);
            // Keep the byte count consistent half of the time (so the dtype, not the
            // length, is what is wrong).
            let size = d.bitsize() / 8;
            let n = t.shape.iter().try_fold(1usize, |a, &x| a.checked_mul(x));
            match n.and_then(|n| n.checked_mul(size)) {
                Some(bytes) if bytes < 1 << 24 && rng.chance(0.5) => t.bytes.resize(bytes, 0),
                _ => {}
            }
            t.dtype = d;
            format!("dtype of {name} -> {d:?}")
        }
        5 => {
            let t = b.tensors.get_mut(&name).unwrap();
            let keep = rng.below(t.bytes.len() + 1);
            t.bytes.truncate(keep);
            format!("truncate {name} to {keep} bytes")
        }
        6 | 7 => {
            // Integer inputs (lengths, block tables, slots): an element to an extreme.
            let ints: Vec<String> = names
                .iter()
                .filter(|n| is_int(b.tensors[*n].dtype))
                .cloned()
                .collect();
            if ints.is_empty() {
                return "no integer tensor".into();
            }
            let name = ints[rng.below(ints.len())].clone();
            let t = b.tensors.get_mut(&name).unwrap();
            let n = t.bytes.len() / (t.dtype.bitsize() / 8);
            if n == 0 {
                return format!("{name} is empty");
            }
            let i = rng.below(n);
            let v = if rng.chance(0.7) {
                rng.pick(EXTREME_INTS)
            } else {
                rng.below(80) as i64 - 8
            };
            set_int(t, i, v);
            format!("{name}[{i}] = {v}")
        }
        8 | 9 => {
            // An attribute to an extreme (or a misspelt / unknown one added).
            let v = rng.pick(EXTREME_ATTRS).to_string();
            let key = if attrs.is_empty() || rng.chance(0.15) {
                rng.pick(&[
                    "scalevalue",
                    "sparse_mode",
                    "numHeads",
                    "numKeyValueHeads",
                    "blockSize",
                    "keepProb",
                    "innerPrecise",
                    "strides",
                    "offsets",
                    "cacheMode",
                    "scatterMode",
                    "sparseMode",
                    "pseType",
                    "inputLayout",
                ])
                .to_string()
            } else {
                attrs[rng.below(attrs.len())].clone()
            };
            b.metadata.insert(key.clone(), v.clone());
            format!("attr {key} = {v:?}")
        }
        10 => {
            if attrs.is_empty() {
                return "no attribute".into();
            }
            let key = attrs[rng.below(attrs.len())].clone();
            b.metadata.remove(&key);
            format!("drop attr {key}")
        }
        _ => {
            // A float element to NaN / inf (the finite-output check is then off).
            let t = b.tensors.get_mut(&name).unwrap();
            if t.dtype != Dtype::F32 || t.bytes.len() < 4 {
                return format!("{name} is not f32");
            }
            let i = rng.below(t.bytes.len() / 4);
            let v = rng.pick(&[f32::NAN, f32::INFINITY, f32::NEG_INFINITY, f32::MAX]);
            t.bytes[i * 4..i * 4 + 4].copy_from_slice(&v.to_le_bytes());
            format!("{name}[{i}] = {v}")
        }
    }
}

/// The devices a mutated bundle runs on: every one (a tensor shorter than its shape is a typed
/// error on the host devices too, `HostTensor::check_bytes`).
fn devices_for(_: &Bundle) -> &'static [Device] {
    &[Device::Reference, Device::Cpu, Device::Sim]
}

/// Whether every float tensor of `b` holds only finite values (undecodable counts as not).
fn all_finite(b: &Bundle) -> bool {
    b.tensors.values().all(|t| match t.dtype {
        Dtype::F32 | Dtype::F16 | Dtype::BF16 => t
            .f32_values("t")
            .is_ok_and(|v| v.iter().all(|x| x.is_finite())),
        Dtype::F64 => t
            .bytes
            .chunks(8)
            .all(|c| c.len() == 8 && f64::from_le_bytes(c.try_into().unwrap()).is_finite()),
        _ => true,
    })
}

/// Attributes the device computes in f32 whose value is not finite there (the contract does not
/// refuse them yet: until its numeric rules do, an accepted call with such a value may return
/// NaN, so the finite-output check skips these cases).
fn f32_unrepresentable_attr(b: &Bundle) -> bool {
    ["scaleValue", "keepProb"].iter().any(|k| {
        b.metadata.get(*k).is_some_and(|v| {
            v.trim().parse::<f64>().is_ok_and(|x| {
                let f = x as f32;
                !f.is_finite() || (x != 0.0 && f == 0.0) || !(1.0 / f).is_finite()
            })
        })
    })
}

/// Whether `b`'s float inputs and `scaleValue` are moderate (|x| ≤ 1e3): there a finite
/// output is owed. Extreme but finite values (an `f32::MAX` query, `scaleValue = 2^31`)
/// overflow the f32 arithmetic itself (as on CANN), so those cases only owe no panic.
fn moderate(b: &Bundle) -> bool {
    let small = |x: f64| x.is_finite() && x.abs() <= 1e3;
    b.tensors.values().all(|t| match t.dtype {
        Dtype::F32 | Dtype::F16 | Dtype::BF16 => t
            .f32_values("t")
            .is_ok_and(|v| v.iter().all(|&x| small(x as f64))),
        Dtype::F64 => false,
        _ => true,
    }) && b
        .metadata
        .get("scaleValue")
        .is_none_or(|v| v.trim().parse::<f64>().is_ok_and(small))
}

thread_local! {
    /// Where the last panic on this thread happened (`file:line`), set by [`quiet_hook`].
    static PANIC_AT: std::cell::RefCell<String> = const { std::cell::RefCell::new(String::new()) };
}

/// A panic hook recording the location instead of printing (the campaign catches panics and
/// reports them with their case).
fn quiet_hook() {
    std::panic::set_hook(Box::new(|info| {
        let at = info
            .location()
            .map(|l| format!("{}:{}", l.file(), l.line()))
            .unwrap_or_default();
        PANIC_AT.with(|p| *p.borrow_mut() = at);
    }));
}

/// One run of `op` on `b` on `device`: `Err(description)` on a panic or a non-finite output of
/// finite in-contract input.
fn check_one(op: &str, b: &Bundle, device: Device) -> Result<bool, String> {
    let got = match catch_unwind(AssertUnwindSafe(|| run_op(op, b, device))) {
        Ok(got) => got,
        Err(p) => {
            let what = p
                .downcast_ref::<String>()
                .cloned()
                .or_else(|| p.downcast_ref::<&str>().map(|s| s.to_string()))
                .unwrap_or_else(|| "panic".into());
            let at = PANIC_AT.with(|p| p.borrow().clone());
            return Err(format!("{device:?} panicked at {at}: {what}"));
        }
    };
    match got {
        Ok(out) => {
            if moderate(b) && !f32_unrepresentable_attr(b) && !all_finite(&out) {
                return Err(format!(
                    "{device:?} accepted finite input and returned a non-finite output"
                ));
            }
            Ok(true)
        }
        Err(e) => {
            let msg = e.to_string();
            if msg.trim().is_empty() {
                return Err(format!("{device:?}: an empty error"));
            }
            Ok(false)
        }
    }
}

#[test]
fn campaign_mutated_cli_inputs_of_every_op_get_a_typed_error_or_a_finite_success() {
    let cases = env_or("BURN_ASCEND_CAMPAIGN_CASES", 400);
    let seed = env_or("BURN_ASCEND_CAMPAIGN_SEED", 17);
    let limit = Duration::from_secs(120 + cases / 10);
    if !in_child(
        "campaign::campaign_mutated_cli_inputs_of_every_op_get_a_typed_error_or_a_finite_success",
        limit,
    ) {
        return;
    }
    quiet_hook();
    let mut rng = Rng(seed);
    let valid = valid_inputs(&mut rng);
    // The valid inputs pass everywhere with finite outputs (else the mutations prove nothing).
    for (op, b) in &valid {
        for device in [Device::Reference, Device::Cpu, Device::Sim] {
            assert_eq!(
                check_one(op, b, device),
                Ok(true),
                "valid {op} on {device:?}"
            );
        }
    }
    let mut failures = Vec::new();
    let (mut accepted, mut refused, mut disagree) = (0usize, 0usize, 0usize);
    for case in 0..cases {
        let (op, base) = &valid[rng.below(valid.len())];
        let mut b = base.clone();
        let what: Vec<String> = (0..1 + rng.below(3))
            .map(|_| mutate(&mut rng, &mut b))
            .collect();
        // Printed before running, so an abort or a hang names its case.
        eprintln!("case {case} (seed {seed}): {op}: {}", what.join("; "));
        let mut outcomes = Vec::new();
        for &device in devices_for(&b) {
            match check_one(op, &b, device) {
                Ok(ok) => outcomes.push(ok),
                Err(e) => failures.push(format!("case {case}: {op}: {}: {e}", what.join("; "))),
            }
        }
        if outcomes.iter().all(|&o| o) {
            accepted += 1;
        } else {
            refused += 1;
        }
        // The devices need not agree yet on every mutated input (some checks still run on one
        // device's path only): disagreements are counted here, not asserted.
        if outcomes.windows(2).any(|w| w[0] != w[1]) {
            disagree += 1;
        }
    }
    drop(std::panic::take_hook()); // the default hook again: the asserts below print
    eprintln!(
        "campaign: {cases} cases: {accepted} accepted everywhere, {refused} refused, \
         {disagree} with devices disagreeing"
    );
    assert!(
        failures.is_empty(),
        "{} failures:\n{}",
        failures.len(),
        failures.join("\n")
    );
    assert!(
        refused > 0 && accepted > 0,
        "the mutations must both break and keep inputs"
    );
}

#[test]
fn campaign_truncated_or_corrupted_safetensors_files_are_refused_or_run_without_panic() {
    let cases = env_or("BURN_ASCEND_CAMPAIGN_CASES", 400);
    let seed = env_or("BURN_ASCEND_CAMPAIGN_SEED", 17);
    if !in_child(
        "campaign::campaign_truncated_or_corrupted_safetensors_files_are_refused_or_run_without_panic",
        Duration::from_secs(120 + cases / 10),
    ) {
        return;
    }
    quiet_hook();
    let mut rng = Rng(seed ^ 0xF11E);
    let valid = valid_inputs(&mut rng);
    let mut failures = Vec::new();
    let mut parsed = 0usize;
    for case in 0..cases {
        let (op, base) = &valid[rng.below(valid.len())];
        let mut bytes = base.to_bytes().unwrap();
        let what = match rng.below(4) {
            0 => {
                let keep = rng.below(bytes.len());
                bytes.truncate(keep);
                format!("truncated to {keep}")
            }
            1 => {
                // The 8-byte header length, to an extreme.
                let v = rng.pick(&[0u64, 1, 7, u64::MAX, 1 << 40, bytes.len() as u64]);
                bytes[..8].copy_from_slice(&v.to_le_bytes());
                format!("header length {v}")
            }
            2 => {
                // Bytes of the JSON header flipped (offsets, shapes, dtypes).
                let hl = (u64::from_le_bytes(bytes[..8].try_into().unwrap()) as usize)
                    .min(bytes.len() - 8);
                for _ in 0..1 + rng.below(4) {
                    let i = 8 + rng.below(hl.max(1));
                    bytes[i] = rng.pick(b"0123456789,[]{}\":-9eE ");
                }
                "header bytes changed".into()
            }
            _ => {
                let i = rng.below(bytes.len());
                bytes[i] ^= 1 << rng.below(8);
                format!("bit flip at {i}")
            }
        };
        eprintln!("file case {case} (seed {seed}): {op}: {what}");
        let got = catch_unwind(AssertUnwindSafe(|| Bundle::from_bytes(&bytes)));
        match got {
            Err(_) => failures.push(format!("case {case}: {op}: {what}: from_bytes panicked")),
            Ok(Err(e)) => assert!(!e.is_empty()),
            Ok(Ok(b)) => {
                parsed += 1;
                for device in [Device::Reference, Device::Cpu, Device::Sim] {
                    if let Err(e) = check_one(op, &b, device) {
                        failures.push(format!("case {case}: {op}: {what}: {e}"));
                    }
                }
            }
        }
    }
    drop(std::panic::take_hook()); // the default hook again: the asserts below print
    eprintln!("files: {cases} cases, {parsed} still parsed");
    assert!(
        failures.is_empty(),
        "{} failures:\n{}",
        failures.len(),
        failures.join("\n")
    );
}

#[test]
fn campaign_a_refused_host_scatter_leaves_both_caches_bit_identical() {
    let cases = env_or("BURN_ASCEND_CAMPAIGN_CASES", 400) * 5;
    let seed = env_or("BURN_ASCEND_CAMPAIGN_SEED", 17);
    if !in_child(
        "campaign::campaign_a_refused_host_scatter_leaves_both_caches_bit_identical",
        Duration::from_secs(120 + cases / 50),
    ) {
        return;
    }
    let mut rng = Rng(seed ^ 0x5CA7);
    let (mut refused, mut accepted) = (0usize, 0usize);
    for case in 0..cases {
        // A valid Norm scatter first, then 1–3 mutations of the spec and the shapes; the
        // buffers keep the valid sizes (their lengths are checked too).
        let (t, n, d, nb, bs) = (1 + rng.below(6), 1 + rng.below(2), 16, 2 + rng.below(3), 16);
        let slots: Vec<i64> = (0..t).map(|i| (i * 3) as i64).collect();
        let mut spec = ScatterSpec::new(slots);
        let mut shapes = ScatterShapes {
            key: vec![t, n, d],
            value: Some(vec![t, n, d]),
            key_cache: vec![nb, bs, n, d],
            value_cache: Some(vec![nb, bs, n, d]),
            dtypes: [Some(DataType::Float); 4],
        };
        let mut what = Vec::new();
        for _ in 0..1 + rng.below(3) {
            let x = rng.pick(EXTREME_INTS);
            match rng.below(10) {
                0 => {
                    let mut s = spec.slot_mapping.to_vec();
                    let i = rng.below(s.len());
                    s[i] = if rng.chance(0.5) {
                        x
                    } else {
                        s[(i + 1) % s.len()]
                    };
                    spec.slot_mapping = s.into();
                    what.push(format!("slot[{i}]"));
                }
                1 => {
                    spec.cache_mode =
                        rng.pick(&[CacheMode::Norm, CacheMode::PaNz, CacheMode::Nhsd]);
                    what.push(format!("{:?}", spec.cache_mode));
                }
                2 => {
                    spec.scatter_mode = rng.pick(&[
                        ScatterKind::None,
                        ScatterKind::Nct,
                        ScatterKind::Alibi,
                        ScatterKind::Rope,
                    ]);
                    what.push(format!("{:?}", spec.scatter_mode));
                }
                3 => {
                    spec.strides = Some(vec![x, rng.pick(EXTREME_INTS)]);
                    what.push(format!("strides {:?}", spec.strides));
                }
                4 => {
                    spec.offsets = Some(vec![x, rng.pick(EXTREME_INTS)]);
                    what.push(format!("offsets {:?}", spec.offsets));
                }
                5 => {
                    let b = 1 + rng.below(3);
                    spec.seq_lens = Some((0..b).map(|_| rng.pick(EXTREME_INTS)).collect());
                    spec.compress_lens = Some((0..b * n).map(|_| rng.pick(EXTREME_INTS)).collect());
                    spec.compress_seq_offset =
                        Some((0..b * n).map(|_| rng.pick(EXTREME_INTS)).collect());
                    what.push(format!(
                        "seqLens {:?} compressLens {:?} offsets {:?}",
                        spec.seq_lens, spec.compress_lens, spec.compress_seq_offset
                    ));
                }
                6 => {
                    let dims = rng.pick(&[0usize, 1, 3, 1 << 20, 1 << 40, usize::MAX]);
                    let which = rng.below(4);
                    let s = match which {
                        0 => Some(&mut shapes.key),
                        1 => shapes.value.as_mut(),
                        2 => Some(&mut shapes.key_cache),
                        _ => shapes.value_cache.as_mut(),
                    };
                    if let Some(s) = s {
                        let i = rng.below(s.len());
                        s[i] = dims;
                    }
                    what.push(format!("shape {which} gets {dims}"));
                }
                7 => {
                    let i = rng.below(4);
                    shapes.dtypes[i] =
                        Some(rng.pick(&[DataType::Float16, DataType::Int8, DataType::Int64]));
                    what.push(format!("dtype {i}"));
                }
                8 => {
                    shapes.value = None;
                    what.push("no value".into());
                }
                _ => {
                    spec.slot_mapping_shape = vec![rng.pick(&[0usize, 1, t + 1, usize::MAX])];
                    what.push(format!("slot shape {:?}", spec.slot_mapping_shape));
                }
            }
        }
        let key: Vec<f32> = rng.vec_f32(t * n * d, 1.0);
        let value: Vec<f32> = rng.vec_f32(t * n * d, 1.0);
        let kc0: Vec<f32> = rng.vec_f32(nb * bs * n * d, 1.0);
        let vc0: Vec<f32> = rng.vec_f32(nb * bs * n * d, 1.0);
        let (mut kc, mut vc) = (kc0.clone(), vc0.clone());
        let desc = format!("case {case} (seed {seed}): {}", what.join("; "));
        eprintln!("scatter {desc}");
        let got = catch_unwind(AssertUnwindSafe(|| {
            scatter_checked(&spec, &shapes, &key, Some(&value), &mut kc, Some(&mut vc))
        }));
        match got {
            Err(_) => panic!("scatter_checked panicked: {desc}"),
            Ok(Ok(_)) => accepted += 1,
            Ok(Err(e)) => {
                refused += 1;
                assert!(!e.to_string().is_empty());
                let same =
                    |a: &[f32], b: &[f32]| a.iter().zip(b).all(|(x, y)| x.to_bits() == y.to_bits());
                assert!(
                    same(&kc, &kc0) && same(&vc, &vc0),
                    "a refused scatter ({e}) changed the caches: {desc}"
                );
            }
        }
    }
    eprintln!("scatter: {cases} cases: {accepted} accepted, {refused} refused");
    assert!(accepted > 0 && refused > 0);
}

#[test]
fn campaign_in_memory_tensors_shorter_than_their_shape_are_refused_on_host_devices() {
    let mut rng = Rng(env_or("BURN_ASCEND_CAMPAIGN_SEED", 17));
    let valid = valid_inputs(&mut rng);
    let mut failures = Vec::new();
    for (op, base) in &valid {
        for name in base.tensors.keys() {
            let mut b = base.clone();
            let t = b.tensors.get_mut(name).unwrap();
            let keep = rng.below(t.bytes.len().max(1));
            t.bytes.truncate(keep);
            for device in [Device::Reference, Device::Cpu] {
                if let Err(e) = check_one(op, &b, device) {
                    failures.push(format!("{op}: {name} truncated to {keep} bytes: {e}"));
                }
            }
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}
