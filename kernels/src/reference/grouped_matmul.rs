//! The grouped matmul of `aclnnGroupedMatmulV4` (splitItem 3), plain loops in f64: the oracle of
//! the composite, the `Autodiff` backward and the simulation. Group sizes come validated by the
//! contract (`GroupedMatmulSpec::sizes`).

/// groupType 0 (M axis): `x [M, K]`, `weight [g, K, N]`, `bias [g, N]`; the rows of group `i`
/// (the `sizes[i]` rows after the earlier groups') are `x_i · weight_i + bias_i`. Returns
/// `[M, N]`.
pub fn grouped_matmul_m(
    x: &[f64],
    weight: &[f64],
    bias: Option<&[f64]>,
    sizes: &[usize],
    k: usize,
    n: usize,
) -> Vec<f64> {
    let m: usize = sizes.iter().sum();
    assert_eq!(x.len(), m * k, "x must be [M, K]");
    assert_eq!(
        weight.len(),
        sizes.len() * k * n,
        "weight must be [g, K, N]"
    );
    let mut out = vec![0.0; m * n];
    let mut row = 0;
    for (g, &size) in sizes.iter().enumerate() {
        let w = &weight[g * k * n..(g + 1) * k * n];
        for r in row..row + size {
            for j in 0..n {
                let mut acc = bias.map_or(0.0, |b| b[g * n + j]);
                for p in 0..k {
                    acc += x[r * k + p] * w[p * n + j];
                }
                out[r * n + j] = acc;
            }
        }
        row += size;
    }
    out
}

/// groupType 2 (K axis): `x [M, K]`, `weight [K, N]`; `out_i = x[:, K_i] · weight[K_i, :]`
/// over group `i`'s slice `K_i` of the shared axis (zero for an empty group). Returns
/// `[g, M, N]`.
pub fn grouped_matmul_k(
    x: &[f64],
    weight: &[f64],
    sizes: &[usize],
    m: usize,
    n: usize,
) -> Vec<f64> {
    let k: usize = sizes.iter().sum();
    assert_eq!(x.len(), m * k, "x must be [M, K]");
    assert_eq!(weight.len(), k * n, "weight must be [K, N]");
    let mut out = vec![0.0; sizes.len() * m * n];
    let mut at = 0;
    for (g, &size) in sizes.iter().enumerate() {
        let o = &mut out[g * m * n..(g + 1) * m * n];
        for i in 0..m {
            for j in 0..n {
                o[i * n + j] = (at..at + size)
                    .map(|p| x[i * k + p] * weight[p * n + j])
                    .sum();
            }
        }
        at += size;
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_group_of_rows_meets_its_own_expert_and_an_empty_group_writes_nothing() {
        // Two rows to expert 0 (identity), none to 1, one to 2 (doubling), K = N = 2.
        let x = [1.0, 2.0, 3.0, 4.0, 5.0, 6.0];
        let w = [1.0, 0.0, 0.0, 1.0, 9.0, 9.0, 9.0, 9.0, 2.0, 0.0, 0.0, 2.0];
        let b = [0.5, 0.5, 7.0, 7.0, -1.0, 1.0];
        let y = grouped_matmul_m(&x, &w, Some(&b), &[2, 0, 1], 2, 2);
        assert_eq!(y, vec![1.5, 2.5, 3.5, 4.5, 9.0, 13.0]);
    }

    #[test]
    fn the_k_split_product_is_the_per_group_transposed_product() {
        // x [M=1, K=3], weight [3, 1]; groups {0}, {}, {1, 2}.
        let y = grouped_matmul_k(&[1.0, 2.0, 3.0], &[4.0, 5.0, 6.0], &[1, 0, 2], 1, 1);
        assert_eq!(y, vec![4.0, 0.0, 28.0]);
    }
}
