//! Software prefetch of the decode kernel's next sub-chunk (in-place AVX-512 path): the
//! cache lines of the next sub-chunk's K / V rows, merged into runs of contiguous lines
//! ([`Lines`], built once per sub-chunk), handed out a few at a time while the current
//! sub-chunk is computed ([`PrefetchCursor`]), so the memory reads overlap the arithmetic.
//!
//! Why runs: the rows of a paged cache are contiguous within a block (a token's `Nkv·D`
//! elements follow the previous token's), so a sub-chunk is a few long runs, and the cursor
//! costs a compare and an add per line instead of an address computation per line and row.
//! Why spread: a burst of prefetches would hold the core's line fill buffers and stall the
//! arithmetic behind it.

use super::decode_avx512::prefetch_line;

/// The cache lines (64-byte aligned addresses) of a set of rows, as runs `[start, end)` of
/// contiguous lines, in the rows' order. Addresses only: they are prefetch hints, never read.
#[derive(Default)]
pub(super) struct Lines {
    runs: Vec<(usize, usize)>,
    /// Lines in all runs.
    total: usize,
}

impl Lines {
    /// Rebuilds the runs for `row_elems` elements of `buf` from each element offset in
    /// `rows` (rows that start inside or right after the previous run extend it).
    pub fn build<T>(&mut self, buf: &[T], rows: &[usize], row_elems: usize) {
        let sz = std::mem::size_of::<T>();
        let base = buf.as_ptr() as usize;
        self.runs.clear();
        self.total = 0;
        for &o in rows {
            let start = (base + o * sz) & !63;
            let end = (base + (o + row_elems) * sz).next_multiple_of(64);
            match self.runs.last_mut() {
                Some(last) if start >= last.0 && start <= last.1 => {
                    if end > last.1 {
                        self.total += (end - last.1) / 64;
                        last.1 = end;
                    }
                }
                _ => {
                    self.total += (end - start) / 64;
                    self.runs.push((start, end));
                }
            }
        }
    }

    /// Share `i` of `n` (by lines, in order) as a [`Prefetch`].
    pub fn share(&self, i: usize, n: usize) -> Prefetch<'_> {
        let (a, b) = (i * self.total / n, (i + 1) * self.total / n);
        Prefetch {
            runs: &self.runs,
            skip: a,
            count: b - a,
        }
    }
}

/// `count` lines of some [`Lines`], after its first `skip`.
#[derive(Clone, Copy)]
pub(super) struct Prefetch<'a> {
    runs: &'a [(usize, usize)],
    skip: usize,
    count: usize,
}

impl Prefetch<'_> {
    pub fn none() -> Self {
        Self {
            runs: &[],
            skip: 0,
            count: 0,
        }
    }
}

/// Fixed-point scale of the cursor's pace (lines per step, times 2^16).
const ONE: usize = 1 << 16;

/// Position in a [`Prefetch`] spread over `steps` loop steps: after `k` steps, about
/// `count · k / steps` lines are out (rounded up, in 16-bit fixed point), the rest by
/// [`Self::finish`].
pub(super) struct PrefetchCursor<'a> {
    runs: &'a [(usize, usize)],
    /// Run of the next line, the next line and its run's end.
    run: usize,
    at: usize,
    end: usize,
    left: usize,
    /// Lines per step, times [`ONE`], and the fraction not handed out yet.
    rate: usize,
    frac: usize,
}

impl<'a> PrefetchCursor<'a> {
    pub fn new(pf: Prefetch<'a>, steps: usize) -> Self {
        let mut c = Self {
            runs: pf.runs,
            run: 0,
            at: 0,
            end: 0,
            left: pf.count,
            rate: (pf.count * ONE).div_ceil(steps.max(1)),
            frac: 0,
        };
        // Skip whole runs, then lines of the run the share starts in.
        let mut skip = pf.skip;
        while c.left > 0 {
            let (s, e) = c.runs[c.run];
            let n = (e - s) / 64;
            if skip < n {
                (c.at, c.end) = (s + skip * 64, e);
                break;
            }
            skip -= n;
            c.run += 1;
        }
        c
    }

    /// `k` more loop steps done.
    #[inline(always)]
    pub fn step(&mut self, k: usize) {
        self.step_with(k, prefetch_line);
    }

    /// The lines not prefetched yet.
    pub fn finish(&mut self) {
        self.finish_with(prefetch_line);
    }

    /// [`Self::step`], handing each line's address to `f`.
    #[inline(always)]
    fn step_with(&mut self, k: usize, mut f: impl FnMut(usize)) {
        if self.left == 0 {
            return;
        }
        self.frac += k * self.rate;
        let n = (self.frac / ONE).min(self.left);
        self.frac %= ONE;
        for _ in 0..n {
            self.one(&mut f);
        }
    }

    fn finish_with(&mut self, mut f: impl FnMut(usize)) {
        while self.left > 0 {
            self.one(&mut f);
        }
    }

    #[inline(always)]
    fn one(&mut self, f: &mut impl FnMut(usize)) {
        f(self.at);
        self.left -= 1;
        self.at += 64;
        if self.at == self.end && self.left > 0 {
            self.run += 1;
            (self.at, self.end) = self.runs[self.run];
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The shares of a [`Lines`] hand out, together and in order, exactly the lines covering
    /// every byte of every row (each once), each share paced by its steps (never more than
    /// `⌈count · k / steps⌉` after `k` steps); `finish` hands out the rest.
    #[test]
    fn prefetch_shares_cover_every_row_once_in_order_at_their_pace() {
        let buf = vec![0u16; 8192];
        let base = buf.as_ptr() as usize;
        // Contiguous rows (merged into runs), gaps, an unaligned start, a repeated row.
        for (rows, row_elems) in [
            (vec![0usize, 64, 128, 192, 1024, 1088, 4000], 64usize),
            (vec![3, 700, 1500, 1525], 50),
            (vec![5, 5, 900], 40),
            (vec![], 32),
        ] {
            let mut lines = Lines::default();
            lines.build(&buf, &rows, row_elems);
            let mut want: Vec<usize> = Vec::new();
            for &r in &rows {
                for byte in base + r * 2..base + (r + row_elems) * 2 {
                    let l = byte & !63;
                    if !want.contains(&l) {
                        want.push(l);
                    }
                }
            }
            for n in [1usize, 3, 8] {
                for (steps, sizes) in [(64usize, vec![4usize; 16]), (40, vec![1, 7, 3, 13, 2])] {
                    let mut got = Vec::new();
                    for i in 0..n {
                        let pf = lines.share(i, n);
                        let mut cur = PrefetchCursor::new(pf, steps);
                        let (start, mut done) = (got.len(), 0);
                        for &k in &sizes {
                            cur.step_with(k, |p| got.push(p));
                            done += k;
                            let cap = (pf.count * done).div_ceil(steps);
                            assert!(got.len() - start <= cap, "share {i}/{n}: ahead of pace");
                        }
                        cur.finish_with(|p| got.push(p));
                        assert_eq!(got.len() - start, pf.count, "share {i}/{n}");
                    }
                    assert_eq!(got, want, "rows {rows:?}, {n} shares");
                }
            }
        }
    }
}
