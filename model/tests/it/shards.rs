//! ZeRO's sharded checkpoint on disk ([`burn_ascend_model::run_state::shards`]): a state saved
//! over one rank count and read back over another gives the same flat state bit for bit, and a
//! corrupted, truncated or missing shard, or a layout whose ranges do not tile a unit, is refused
//! naming the file and the broken rule.

use std::collections::BTreeMap;
use std::path::Path;

use burn_ascend_model::run_state::published::{Published, StepDir, MANIFEST};
use burn_ascend_model::run_state::shards::{owned_range, shard_file_name, ShardedState};

/// Per unit, the whole flat buffer of each of the 3 tensors.
type Whole = Vec<[Vec<f32>; 3]>;

const UNITS: [(&str, usize); 3] = [("embed_tokens", 10), ("layers.0", 7), ("head", 1)];

/// Values whose bits a conversion would change: signed zeros, subnormals, NaN payloads.
fn state() -> Whole {
    let mut bits = 0x9e37_79b9u32;
    UNITS
        .iter()
        .map(|&(_, n)| {
            std::array::from_fn(|_| {
                (0..n)
                    .map(|_| {
                        bits = bits.wrapping_mul(1_664_525).wrapping_add(1_013_904_223);
                        f32::from_bits(bits)
                    })
                    .collect()
            })
        })
        .collect()
}

fn units() -> Vec<(String, usize)> {
    UNITS.iter().map(|&(n, e)| (n.to_string(), e)).collect()
}

/// Publishes `whole` as the checkpoint of step 3 in `out` over `ranks` ranks, each rank
/// writing only its own ranges.
fn save(out: &Path, ranks: usize, whole: &Whole) {
    let zero = ShardedState::new(3, ranks, 3, &units());
    let step = StepDir::begin(out, 3).unwrap();
    let mut files = BTreeMap::new();
    for r in 0..ranks {
        let parts: Vec<[Vec<f32>; 3]> = whole
            .iter()
            .enumerate()
            .map(|(u, t)| {
                let [a, b] = zero.shards[r].ranges[u];
                std::array::from_fn(|i| t[i][a..b].to_vec())
            })
            .collect();
        let bytes = zero.encode(r, &parts).unwrap();
        let file = shard_file_name(r, ranks);
        files.insert(
            file.clone(),
            StepDir::write_into(&step.dir, &file, &bytes).unwrap(),
        );
    }
    step.publish(files, Some(zero)).unwrap();
}

/// What `ranks` ranks read of the published checkpoint in `out` (each its owned ranges),
/// put back together in rank order.
fn load(out: &Path, ranks: usize) -> Whole {
    let saved = Published::open(out).unwrap();
    let zero = saved.manifest.zero.as_ref().unwrap();
    UNITS
        .iter()
        .enumerate()
        .map(|(u, &(_, n))| {
            std::array::from_fn(|t| {
                (0..ranks)
                    .flat_map(|r| {
                        zero.read_range(&saved.dir, u, t, owned_range(n, ranks, r))
                            .unwrap()
                    })
                    .collect()
            })
        })
        .collect()
}

fn bits(w: &Whole) -> Vec<u32> {
    w.iter()
        .flat_map(|u| u.iter().flatten().map(|x| x.to_bits()))
        .collect()
}

#[test]
fn resharding_four_to_two_and_two_to_four_gives_the_same_flat_state_bit_for_bit() {
    let tmp = tempfile::tempdir().unwrap();
    let whole = state();
    let four = tmp.path().join("four");
    save(&four, 4, &whole);
    let on_two = load(&four, 2);
    assert_eq!(bits(&on_two), bits(&whole));
    let two = tmp.path().join("two");
    save(&two, 2, &on_two);
    let on_four = load(&two, 4);
    assert_eq!(bits(&on_four), bits(&whole));
    // One rank owning everything, and more ranks than a unit has elements (empty ranges).
    assert_eq!(bits(&load(&four, 1)), bits(&whole));
    assert_eq!(bits(&load(&two, 16)), bits(&whole));
    // Each shard holds its rank's ranges only: 3 tensors × 4 bytes × (3 + 2 + 1) elements
    // for rank 0 of 4 (10, 7 and 1 elements over 4 ranks: 3, 2, 1 for rank 0; 1, 1, 0
    // for rank 3).
    let saved = Published::open(&four).unwrap();
    assert_eq!(
        saved.manifest.files[&shard_file_name(0, 4)].bytes,
        3 * 4 * 6
    );
    assert_eq!(
        saved.manifest.files[&shard_file_name(3, 4)].bytes,
        3 * 4 * 2
    );
}

fn refusal(out: &Path) -> String {
    Published::open(out).unwrap_err().to_string()
}

#[test]
fn a_corrupted_truncated_or_missing_shard_is_refused_naming_the_file() {
    let tmp = tempfile::tempdir().unwrap();
    let out = tmp.path();
    save(out, 4, &state());
    let dir = Published::open(out).unwrap().dir;
    let shard = |r: usize| dir.join(shard_file_name(r, 4));
    // One bit flipped in rank 2's shard.
    let good = std::fs::read(shard(2)).unwrap();
    let mut bad = good.clone();
    bad[5] ^= 0x10;
    std::fs::write(shard(2), &bad).unwrap();
    let e = refusal(out);
    assert!(
        e.contains(&shard_file_name(2, 4)) && e.contains("CRC-32"),
        "{e}"
    );
    // Truncated.
    std::fs::write(shard(2), &good[..good.len() - 4]).unwrap();
    let e = refusal(out);
    assert!(
        e.contains(&shard_file_name(2, 4)) && e.contains("bytes but manifest.json says"),
        "{e}"
    );
    std::fs::write(shard(2), &good).unwrap();
    Published::open(out).unwrap();
    // Missing.
    std::fs::remove_file(shard(1)).unwrap();
    let e = refusal(out);
    assert!(e.contains(&shard_file_name(1, 4)), "{e}");
}

#[test]
fn a_layout_whose_ranges_do_not_tile_a_unit_or_whose_shard_is_unlisted_is_refused() {
    let tmp = tempfile::tempdir().unwrap();
    let out = tmp.path();
    save(out, 2, &state());
    let dir = Published::open(out).unwrap().dir;
    let manifest = dir.join(MANIFEST);
    let text = std::fs::read_to_string(&manifest).unwrap();
    let edit = |f: &dyn Fn(&mut serde_json::Value)| {
        let mut v: serde_json::Value = serde_json::from_str(&text).unwrap();
        f(&mut v);
        std::fs::write(&manifest, serde_json::to_vec(&v).unwrap()).unwrap();
        refusal(out)
    };
    // Rank 1's range of layers.0 starts one element late: a gap.
    let e = edit(&|v| v["zero"]["shards"][1]["ranges"][1][0] = 5.into());
    assert!(
        e.contains(&shard_file_name(1, 2)) && e.contains("a gap at element 4"),
        "{e}"
    );
    // Rank 1's shard not in the manifest's files.
    let e = edit(&|v| {
        v["files"]
            .as_object_mut()
            .unwrap()
            .remove(&shard_file_name(1, 2));
    });
    assert!(
        e.contains(&shard_file_name(1, 2)) && e.contains("missing from manifest.json"),
        "{e}"
    );
    // A shard too few for the ranks.
    let e = edit(&|v| v["zero"]["ranks"] = 3.into());
    assert!(e.contains("2 shard(s) for 3 rank(s)"), "{e}");
    std::fs::write(&manifest, &text).unwrap();
    Published::open(out).unwrap();
}
