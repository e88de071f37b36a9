//! NumPy's broadcasting of two shapes, the rule aclnn's elementwise and batched ops follow:
//! right-aligned, each pair of sizes equal or one of them 1.

/// The shape `a` and `b` broadcast to; `None` when they do not broadcast.
pub fn broadcast_shapes(a: &[usize], b: &[usize]) -> Option<Vec<usize>> {
    let r = a.len().max(b.len());
    let size = |s: &[usize], i: usize| {
        if i + s.len() >= r {
            s[i + s.len() - r]
        } else {
            1
        }
    };
    (0..r)
        .map(|i| match (size(a, i), size(b, i)) {
            (x, y) if x == y => Some(x),
            (1, y) => Some(y),
            (x, 1) => Some(x),
            _ => None,
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::broadcast_shapes;

    #[test]
    fn shapes_broadcast_right_aligned_through_ones_and_mismatches_are_none() {
        assert_eq!(broadcast_shapes(&[2, 1, 4], &[3, 1]), Some(vec![2, 3, 4]));
        assert_eq!(broadcast_shapes(&[], &[5]), Some(vec![5]));
        assert_eq!(broadcast_shapes(&[1], &[1]), Some(vec![1]));
        assert_eq!(broadcast_shapes(&[2, 3], &[3, 3]), None);
        assert_eq!(broadcast_shapes(&[4], &[2, 0]), None);
        assert_eq!(broadcast_shapes(&[1, 0], &[3, 1]), Some(vec![3, 0]));
    }
}
