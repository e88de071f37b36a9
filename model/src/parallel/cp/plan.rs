//! The host-side plan of a context-parallel step: which packed tokens each rank owns
//! ([`CpLayout`]) and, per attention window, which keys each rank sends and which rows of its
//! key pool each of its query pieces attends over ([`KeyPlan`]). Pure index arithmetic, no
//! tensors: every rank computes the same plan from the step's `cu_seqlens`, so the collectives
//! agree without exchanging it.

use burn_ascend::AttnError;

/// A contiguous run of one sequence's tokens owned by one rank.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Piece {
    /// Index of the sequence in the step's `cu_seqlens`.
    pub seq: usize,
    /// First packed (global) token index of the sequence.
    pub seq_start: usize,
    /// First packed token index of the piece.
    pub start: usize,
    /// Tokens in the piece.
    pub len: usize,
}

/// Which packed tokens each of `ranks` ranks owns.
///
/// A sequence of `L ≥ 2·ranks` tokens is cut into `2·ranks` chunks as even as possible
/// (the first `L mod 2·ranks` one token longer) and rank `r` takes chunk `r` (a head) and
/// chunk `2·ranks − 1 − r` (a tail): under a causal mask chunk `c` attends over about
/// `c + ½` chunks of keys, so every rank's pair costs about the same (`2·ranks` chunk-pairs
/// of work each). A sequence shorter than `2·ranks` tokens — shorter than one token per chunk
/// — is not cut: it goes whole to the rank holding the fewest tokens so far (the lowest
/// such rank), after every long sequence is placed, so its keys are never exchanged.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CpLayout {
    /// Ranks.
    pub ranks: usize,
    /// Tokens of the step.
    pub total: usize,
    /// Each rank's pieces in packed order (its local tokens are their concatenation).
    pub pieces: Vec<Vec<Piece>>,
}

impl CpLayout {
    /// The layout of a step of packed sequences `cu_seqlens` (B + 1 entries from 0) over
    /// `ranks` ranks. Refused (naming `--cp`) when a rank would get no token.
    pub fn new(cu_seqlens: &[i64], ranks: usize) -> Result<Self, AttnError> {
        if ranks == 0 {
            return Err(AttnError::invalid("--cp", "must be at least 1"));
        }
        if cu_seqlens.first() != Some(&0) || cu_seqlens.windows(2).any(|w| w[1] < w[0]) {
            return Err(AttnError::invalid(
                "cu_seqlens",
                format!("must start at 0 and never decrease, got {cu_seqlens:?}"),
            ));
        }
        let total = *cu_seqlens.last().expect("starts with 0") as usize;
        let chunks = 2 * ranks;
        let mut pieces: Vec<Vec<Piece>> = vec![Vec::new(); ranks];
        let mut load = vec![0usize; ranks];
        let seqs: Vec<(usize, usize, usize)> = cu_seqlens
            .windows(2)
            .enumerate()
            .map(|(b, w)| (b, w[0] as usize, (w[1] - w[0]) as usize))
            .filter(|&(_, _, len)| len > 0)
            .collect();
        for &(seq, start, len) in seqs.iter().filter(|s| s.2 >= chunks) {
            let (base, extra) = (len / chunks, len % chunks);
            let mut at = start;
            for c in 0..chunks {
                let n = base + usize::from(c < extra);
                let rank = if c < ranks { c } else { chunks - 1 - c };
                pieces[rank].push(Piece {
                    seq,
                    seq_start: start,
                    start: at,
                    len: n,
                });
                load[rank] += n;
                at += n;
            }
        }
        for &(seq, start, len) in seqs.iter().filter(|s| s.2 < chunks) {
            let rank = (0..ranks).min_by_key(|&r| (load[r], r)).expect("ranks > 0");
            pieces[rank].push(Piece {
                seq,
                seq_start: start,
                start,
                len,
            });
            load[rank] += len;
        }
        for (r, p) in pieces.iter_mut().enumerate() {
            p.sort_by_key(|p| p.start);
            if p.is_empty() {
                return Err(AttnError::invalid(
                    "--cp",
                    format!(
                        "{ranks} ranks leave rank {r} without tokens: the step's {total} tokens in {} sequence(s) have no sequence of 2·{ranks} = {chunks} tokens or more and fewer sequences than ranks",
                        seqs.len()
                    ),
                ));
            }
        }
        Ok(Self {
            ranks,
            total,
            pieces,
        })
    }

    /// The packed token indices rank `r` owns, in its local order.
    pub fn tokens(&self, r: usize) -> Vec<usize> {
        self.pieces[r]
            .iter()
            .flat_map(|p| p.start..p.start + p.len)
            .collect()
    }

    /// Position within its sequence of each of rank `r`'s tokens (for RoPE).
    pub fn positions(&self, r: usize) -> Vec<usize> {
        self.pieces[r]
            .iter()
            .flat_map(|p| p.start - p.seq_start..p.start - p.seq_start + p.len)
            .collect()
    }

    /// `(owner rank, local index)` of every packed token.
    pub fn owners(&self) -> Vec<(usize, usize)> {
        let mut out = vec![(usize::MAX, 0); self.total];
        for r in 0..self.ranks {
            for (i, g) in self.tokens(r).into_iter().enumerate() {
                out[g] = (r, i);
            }
        }
        out
    }

    /// The plan of one attention window (`None`: full causal).
    pub fn key_plan(&self, window: Option<usize>) -> KeyPlan {
        KeyPlan::new(self, window)
    }
}

/// Which keys a window's attention needs across ranks, and how each rank reads them.
///
/// Key `g` of a sequence is seen by queries `g ..= g + W − 1` of that sequence (`W` = ∞ for
/// a causal layer). A rank sends only its keys that some query *of another rank* sees —
/// for a window layer, the last `W − 1` keys before each of its chunks' ends at most; for a
/// causal layer every chunk but the last of each sequence. `HcclAllGather` takes one count
/// from every rank, so each rank's block is padded to the largest (`send_rows`); the padding
/// rows are never read and receive no gradient.
///
/// Rank `r`'s key pool is `[its own keys (local order); the gathered blocks]`; piece `p`
/// (queries `[a, b)` of a sequence starting at `s`) attends over the pool rows of keys
/// `[max(s, a − W + 1), b)` — packed as one varlen "sequence" with `Sq = b − a ≤ Skv`, so
/// CANN's bottom-right causal (sparse mode 3) or band (mode 4, `preTokens = W − 1`,
/// `nextTokens = 0`) masks of the varlen op give exactly the single-device mask.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct KeyPlan {
    /// Each rank's local indices of the keys it sends, in order.
    pub send: Vec<Vec<usize>>,
    /// Rows of each rank's block of the all-gather (the largest `send`; 0: no exchange).
    pub send_rows: usize,
    /// Per rank: the pool rows its key tensor is gathered from, piece by piece.
    pub key_rows: Vec<Vec<usize>>,
    /// Per rank: cumulative query lengths of its pieces (from 0, flash-attn style).
    pub cu_q: Vec<Vec<i64>>,
    /// Per rank: cumulative key lengths of its pieces (from 0).
    pub cu_k: Vec<Vec<i64>>,
}

impl KeyPlan {
    fn new(layout: &CpLayout, window: Option<usize>) -> Self {
        let n = layout.ranks;
        let owners = layout.owners();
        let first_key = |p: &Piece| match window {
            Some(w) => p.seq_start.max((p.start + 1).saturating_sub(w.max(1))),
            None => p.seq_start,
        };
        // What each rank needs from the others.
        let mut needed: Vec<Vec<bool>> = layout
            .pieces
            .iter()
            .map(|p| vec![false; p.iter().map(|p| p.len).sum()])
            .collect();
        for (r, pieces) in layout.pieces.iter().enumerate() {
            for p in pieces {
                for &(o, i) in &owners[first_key(p)..p.start + p.len] {
                    if o != r {
                        needed[o][i] = true;
                    }
                }
            }
        }
        let send: Vec<Vec<usize>> = needed
            .iter()
            .map(|v| (0..v.len()).filter(|&i| v[i]).collect())
            .collect();
        let send_rows = send.iter().map(Vec::len).max().unwrap_or(0);
        // Where each sent key lands in the gathered buffer.
        let mut slot = vec![Vec::new(); n];
        for (o, s) in send.iter().enumerate() {
            slot[o] = vec![usize::MAX; needed[o].len()];
            for (k, &i) in s.iter().enumerate() {
                slot[o][i] = o * send_rows + k;
            }
        }
        let mut key_rows = Vec::with_capacity(n);
        let mut cu_q = Vec::with_capacity(n);
        let mut cu_k = Vec::with_capacity(n);
        for (r, pieces) in layout.pieces.iter().enumerate() {
            let local = needed[r].len();
            let mut rows = Vec::new();
            let (mut q, mut k) = (vec![0i64], vec![0i64]);
            for p in pieces {
                let lo = first_key(p);
                for &(o, i) in &owners[lo..p.start + p.len] {
                    rows.push(if o == r { i } else { local + slot[o][i] });
                }
                q.push(q.last().expect("non-empty") + p.len as i64);
                k.push(k.last().expect("non-empty") + (p.start + p.len - lo) as i64);
            }
            key_rows.push(rows);
            cu_q.push(q);
            cu_k.push(k);
        }
        Self {
            send,
            send_rows,
            key_rows,
            cu_q,
            cu_k,
        }
    }

    /// Rows rank `r` sends, padded to [`Self::send_rows`] by repeating its first row (never
    /// read back).
    pub fn padded_send(&self, r: usize) -> Vec<usize> {
        let s = &self.send[r];
        let pad = s.first().copied().unwrap_or(0);
        (0..self.send_rows)
            .map(|k| s.get(k).copied().unwrap_or(pad))
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The keys query `g` sees on one device, as packed indices.
    fn single_device_keys(cu: &[i64], g: usize, window: Option<usize>) -> Vec<usize> {
        let b = cu.windows(2).position(|w| (g as i64) < w[1]).unwrap();
        let s = cu[b] as usize;
        let lo = window.map_or(s, |w| s.max(g + 1 - w.min(g + 1)));
        (lo..=g).collect()
    }

    #[test]
    fn every_rank_sees_exactly_the_single_device_keys_of_each_of_its_queries() {
        let cu = [0i64, 3, 40, 41, 77, 100];
        for ranks in [1, 2, 3, 4] {
            let layout = CpLayout::new(&cu, ranks).unwrap();
            // Every token owned once.
            let mut all: Vec<usize> = (0..ranks).flat_map(|r| layout.tokens(r)).collect();
            all.sort();
            assert_eq!(all, (0..100).collect::<Vec<_>>());
            for window in [None, Some(1), Some(5), Some(16)] {
                let plan = layout.key_plan(window);
                // The gathered buffer as every rank sees it: packed ids of the sent keys.
                let mut gathered = vec![usize::MAX; ranks * plan.send_rows];
                for o in 0..ranks {
                    let toks = layout.tokens(o);
                    for (k, &i) in plan.send[o].iter().enumerate() {
                        gathered[o * plan.send_rows + k] = toks[i];
                    }
                }
                for r in 0..ranks {
                    let toks = layout.tokens(r);
                    let pool: Vec<usize> = toks.iter().copied().chain(gathered.clone()).collect();
                    let (cq, ck) = (&plan.cu_q[r], &plan.cu_k[r]);
                    for (pi, p) in layout.pieces[r].iter().enumerate() {
                        let keys: Vec<usize> = plan.key_rows[r]
                            [ck[pi] as usize..ck[pi + 1] as usize]
                            .iter()
                            .map(|&row| pool[row])
                            .collect();
                        let (sq, skv) = ((cq[pi + 1] - cq[pi]) as usize, keys.len());
                        assert_eq!(sq, p.len);
                        // Bottom-right alignment: query i sees key j iff j − i ∈
                        // [Skv − Sq − (W − 1), Skv − Sq].
                        for i in 0..sq {
                            let g = p.start + i;
                            let delta = (skv - sq) as i64;
                            let lo = window.map_or(i64::MIN, |w| delta - (w as i64 - 1));
                            let seen: Vec<usize> = (0..skv)
                                .filter(|&j| {
                                    let d = j as i64 - i as i64;
                                    d <= delta && d >= lo
                                })
                                .map(|j| keys[j])
                                .collect();
                            assert_eq!(
                                seen,
                                single_device_keys(&cu, g, window),
                                "ranks {ranks} window {window:?} rank {r} query {g}"
                            );
                        }
                    }
                }
            }
        }
    }

    #[test]
    fn long_sequences_give_each_rank_a_head_and_a_tail_chunk_and_short_ones_go_whole() {
        let layout = CpLayout::new(&[0, 16, 19, 21], 2).unwrap();
        let starts: Vec<Vec<(usize, usize)>> = layout
            .pieces
            .iter()
            .map(|p| p.iter().map(|p| (p.start, p.len)).collect())
            .collect();
        // 16 tokens in 4 chunks of 4: rank 0 chunks 0 and 3, rank 1 chunks 1 and 2; the
        // 3-token sequence (< 4) goes to rank 0 (a tie, the lower rank), the 2-token one
        // then to rank 1.
        assert_eq!(starts[0], vec![(0, 4), (12, 4), (16, 3)]);
        assert_eq!(starts[1], vec![(4, 4), (8, 4), (19, 2)]);
        assert_eq!(layout.positions(1)[..4], [4, 5, 6, 7]);
    }

    #[test]
    fn a_window_layer_sends_only_the_keys_other_ranks_queries_can_see() {
        let layout = CpLayout::new(&[0, 64], 2).unwrap();
        // Chunks of 16 (rank 0: 0..16 and 48..64, rank 1: 16..48): a window of 4 needs the 3
        // keys before a boundary between ranks — rank 0 sends 13..16, rank 1 sends 45..48.
        let plan = layout.key_plan(Some(4));
        assert_eq!(plan.send, vec![vec![13, 14, 15], vec![29, 30, 31]]);
        assert_eq!(plan.send_rows, 3);
        let causal = layout.key_plan(None);
        // Causal: rank 0 sends chunk 0 (16), rank 1 chunks 1 and 2 (32).
        assert_eq!(causal.send_rows, 32);
    }

    #[test]
    fn a_step_that_leaves_a_rank_without_tokens_is_refused_naming_the_flag() {
        let e = CpLayout::new(&[0, 3], 2).unwrap_err().to_string();
        assert!(
            e.contains("--cp") && e.contains("rank 1 without tokens"),
            "{e}"
        );
    }
}
