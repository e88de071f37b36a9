//! Training data: documents from a text file (split at blank lines) or JSONL (`"text"` field),
//! or conversations from a chat JSONL (`"messages"`, see [`crate::load::chat::instruct`]) with the
//! loss on the assistant's tokens only, tokenized and packed into batches of variable-length
//! sequences without padding, with the flash-attn style cumulative lengths the varlen op takes.

use std::path::Path;

use crate::load::tokenizer::Tokenizer;
use burn_ascend::AttnError;

/// The bundled corpus: the opening 330 KB of Shakespeare's plays (public domain; the
/// "tinyshakespeare" selection of karpathy/char-rnn).
pub const BUNDLED_CORPUS: &str = include_str!("../../data/shakespeare.txt");

/// Splits text into documents at blank lines; each keeps a trailing blank line so the model
/// learns where a speech ends.
pub fn documents_from_text(text: &str) -> Vec<String> {
    text.split("\n\n")
        .map(str::trim)
        .filter(|d| !d.is_empty())
        .map(|d| format!("{d}\n\n"))
        .collect()
}

/// A line of a JSONL corpus; other keys (`id`, `meta`, …) are ignored.
#[derive(serde::Deserialize)]
struct JsonlDocument {
    text: String,
}

/// Documents of a text file, or of a JSONL file (one object per line with a `"text"` string)
/// when the name ends in `.jsonl`.
pub fn load_documents(path: &Path) -> Result<Vec<String>, AttnError> {
    let text = std::fs::read_to_string(path)
        .map_err(|e| AttnError::invalid("--data", format!("{}: {e}", path.display())))?;
    if path.extension().is_some_and(|e| e == "jsonl") {
        let mut docs = Vec::new();
        for (i, line) in text
            .lines()
            .enumerate()
            .filter(|(_, l)| !l.trim().is_empty())
        {
            let doc: JsonlDocument = serde_json::from_str(line).map_err(|e| {
                AttnError::invalid(
                    "--data",
                    format!(
                        "line {}: needs an object with a \"text\" string: {e}",
                        i + 1
                    ),
                )
            })?;
            docs.push(doc.text);
        }
        Ok(docs)
    } else {
        Ok(documents_from_text(&text))
    }
}

/// What a training file holds.
#[derive(Debug, Clone, PartialEq)]
pub enum Corpus {
    /// Plain documents (a text file, or JSONL `{"text": …}` records).
    Text(Vec<String>),
    /// Conversations (JSONL `{"messages": […]}` records), still to be rendered with a chat
    /// template ([`crate::load::chat::instruct::load_chat_examples`]).
    Chat(Vec<crate::load::chat::instruct::ChatRecord>),
}

/// The corpus of `path`: chat records when it is JSONL whose first record has `"messages"`,
/// else [`load_documents`]. Every record is checked here, before any training.
pub fn load_corpus(path: &Path) -> Result<Corpus, AttnError> {
    if path.extension().is_some_and(|e| e == "jsonl") {
        let text = std::fs::read_to_string(path)
            .map_err(|e| AttnError::invalid("--data", format!("{}: {e}", path.display())))?;
        if crate::load::chat::instruct::is_chat_jsonl(&text) {
            return crate::load::chat::instruct::parse_chat_jsonl(path, &text).map(Corpus::Chat);
        }
    }
    load_documents(path).map(Corpus::Text)
}

/// The packer of a fine-tuning run: `data` (the bundled corpus without it) tokenized with
/// `tokenizer`; chat records are rendered with the chat template of `checkpoint` (required for
/// them) and learned on the assistant's tokens only. Every record is checked and tokenized here,
/// before training starts.
pub fn training_packer(
    data: Option<&Path>,
    checkpoint: Option<&Path>,
    tokenizer: &Tokenizer,
    batch_tokens: usize,
    max_seq_len: usize,
    seed: u64,
) -> Result<Packer, AttnError> {
    let corpus = match data {
        Some(p) => load_corpus(p)?,
        None => Corpus::Text(documents_from_text(BUNDLED_CORPUS)),
    };
    match (corpus, data, checkpoint) {
        (Corpus::Text(docs), _, _) => {
            Packer::new(&docs, tokenizer, batch_tokens, max_seq_len, seed)
        }
        (Corpus::Chat(_), Some(path), Some(dir)) => {
            let template = crate::load::chat::ChatTemplate::from_dir(dir)?;
            let examples =
                crate::load::chat::instruct::load_chat_examples(path, &template, tokenizer)?;
            Packer::chat(examples, batch_tokens, max_seq_len, seed)
        }
        (Corpus::Chat(_), _, _) => Err(AttnError::invalid(
            "--data",
            "chat records ({\"messages\": …}) are rendered with a checkpoint's chat template: \
             pass --checkpoint DIR (with tokenizer_config.json or chat_template.jinja)",
        )),
    }
}

/// One packed batch: `tokens[i]` predicts `targets[i]`; sequences are delimited by
/// `cu_seqlens` (B + 1 entries from 0).
#[derive(Debug, Clone, PartialEq)]
pub struct PackedBatch {
    /// Input ids.
    pub tokens: Vec<i64>,
    /// Next-token ids.
    pub targets: Vec<i64>,
    /// Cumulative sequence lengths.
    pub cu_seqlens: Vec<i64>,
    /// Which targets the loss counts (chat data: the assistant's tokens); `None`: all of them.
    pub loss_mask: Option<Vec<bool>>,
}

impl PackedBatch {
    /// Sequence lengths.
    pub fn lengths(&self) -> Vec<usize> {
        self.cu_seqlens
            .windows(2)
            .map(|w| (w[1] - w[0]) as usize)
            .collect()
    }
}

/// splitmix64, so batches are reproducible from a seed (resume replays them).
#[derive(Debug, Clone)]
pub struct SplitMix(pub u64);

impl SplitMix {
    /// Next 64 random bits.
    pub fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    /// Uniform in `[0, n)` (`n > 0`).
    pub fn below(&mut self, n: usize) -> usize {
        (self.next_u64() % n as u64) as usize
    }

    /// Uniform in `[0, 1)`.
    pub fn unit(&mut self) -> f64 {
        (self.next_u64() >> 11) as f64 / (1u64 << 53) as f64
    }
}

/// Packs tokenized documents into batches of about `batch_tokens` tokens, each sequence at
/// most `max_seq_len` long: a document longer than that contributes a random window. The
/// document order is reshuffled every epoch; the stream is a function of the seed.
#[derive(Debug, Clone)]
pub struct Packer {
    docs: Vec<Vec<u32>>,
    /// Per document, which tokens are learned (chat data); `None` for plain text.
    masks: Option<Vec<Vec<bool>>>,
    order: Vec<usize>,
    cursor: usize,
    rng: SplitMix,
    /// Token budget of one batch.
    pub batch_tokens: usize,
    /// Longest sequence.
    pub max_seq_len: usize,
    /// Fixed-length rows ([`Packer::with_fixed_rows`]): where the stream stands in the
    /// current document.
    fixed: Option<usize>,
}

impl Packer {
    /// Tokenizes `docs`; documents shorter than two tokens are dropped.
    pub fn new(
        docs: &[String],
        tokenizer: &Tokenizer,
        batch_tokens: usize,
        max_seq_len: usize,
        seed: u64,
    ) -> Result<Self, AttnError> {
        let mut tokenized = Vec::with_capacity(docs.len());
        for d in docs {
            let ids = tokenizer.encode(d)?;
            if ids.len() >= 2 {
                tokenized.push(ids);
            }
        }
        Self::build(tokenized, None, batch_tokens, max_seq_len, seed)
    }

    /// Packs tokenized conversations; the loss counts a target only when it is one of the
    /// assistant's tokens, and a conversation longer than `max_seq_len` contributes a random
    /// window that holds at least one of them.
    pub fn chat(
        examples: Vec<crate::load::chat::instruct::ChatExample>,
        batch_tokens: usize,
        max_seq_len: usize,
        seed: u64,
    ) -> Result<Self, AttnError> {
        let (docs, masks): (Vec<_>, Vec<_>) = examples
            .into_iter()
            .filter(|e| e.ids.len() >= 2 && e.assistant.iter().skip(1).any(|&a| a))
            .map(|e| (e.ids, e.assistant))
            .unzip();
        Self::build(docs, Some(masks), batch_tokens, max_seq_len, seed)
    }

    fn build(
        tokenized: Vec<Vec<u32>>,
        masks: Option<Vec<Vec<bool>>>,
        batch_tokens: usize,
        max_seq_len: usize,
        seed: u64,
    ) -> Result<Self, AttnError> {
        if tokenized.is_empty() {
            return Err(AttnError::invalid(
                "--data",
                "holds no document of two or more tokens",
            ));
        }
        if batch_tokens == 0 || max_seq_len == 0 {
            return Err(AttnError::invalid(
                "batch_tokens",
                "batch size and sequence length must be positive",
            ));
        }
        let mut p = Self {
            order: Vec::new(),
            docs: tokenized,
            masks,
            cursor: 0,
            rng: SplitMix(seed),
            batch_tokens,
            max_seq_len,
            fixed: None,
        };
        p.shuffle();
        Ok(p)
    }

    /// Number of documents (conversations).
    pub fn documents(&self) -> usize {
        self.docs.len()
    }

    /// Number of tokens over all documents.
    pub fn corpus_tokens(&self) -> usize {
        self.docs.iter().map(Vec::len).sum()
    }

    fn shuffle(&mut self) {
        self.order = (0..self.docs.len()).collect();
        for i in (1..self.order.len()).rev() {
            let j = self.rng.below(i + 1);
            self.order.swap(i, j);
        }
        self.cursor = 0;
    }

    /// Batches of fixed shape (`finetune --pack fixed`, which `--graph` needs): every batch
    /// holds `max(1, batch_tokens / L)` rows of exactly `L = min(max_seq_len, batch_tokens)`
    /// tokens, each row its own sequence, so `cu_seqlens` is `0, L, 2L, …` at every step.
    /// The rows are consecutive windows of the documents concatenated in the shuffled order
    /// (GPT-style: a row may span a document boundary): a row takes `L + 1` tokens of the
    /// stream, its inputs the first `L` and its targets the last `L`. Chat data keeps its
    /// mask (a target counts when it is one of the assistant's tokens).
    pub fn with_fixed_rows(mut self) -> Self {
        self.fixed = Some(0);
        self
    }

    /// Whether batches are fixed rows ([`Self::with_fixed_rows`]).
    pub fn fixed_rows(&self) -> bool {
        self.fixed.is_some()
    }

    /// Whether batches carry a loss mask (chat data).
    pub fn has_loss_mask(&self) -> bool {
        self.masks.is_some()
    }

    /// The row length and row count of fixed-row batches.
    pub fn fixed_shape(&self) -> (usize, usize) {
        let len = self.max_seq_len.min(self.batch_tokens);
        (len, (self.batch_tokens / len).max(1))
    }

    /// The next token of the concatenated stream (fixed rows) with whether it is learned.
    fn stream_token(&mut self) -> (u32, bool) {
        loop {
            if self.cursor == self.order.len() {
                self.shuffle();
            }
            let index = self.order[self.cursor];
            let at = self.fixed.unwrap_or(0);
            if at < self.docs[index].len() {
                self.fixed = Some(at + 1);
                let learned = self.masks.as_ref().is_none_or(|m| m[index][at]);
                return (self.docs[index][at], learned);
            }
            self.cursor += 1;
            self.fixed = Some(0);
        }
    }

    fn next_fixed_batch(&mut self) -> PackedBatch {
        let (len, rows) = self.fixed_shape();
        let mut batch = PackedBatch {
            tokens: Vec::with_capacity(len * rows),
            targets: Vec::with_capacity(len * rows),
            cu_seqlens: (0..=rows).map(|r| (r * len) as i64).collect(),
            loss_mask: self.masks.as_ref().map(|_| Vec::with_capacity(len * rows)),
        };
        for _ in 0..rows {
            let row: Vec<(u32, bool)> = (0..=len).map(|_| self.stream_token()).collect();
            batch
                .tokens
                .extend(row[..len].iter().map(|&(t, _)| t as i64));
            batch
                .targets
                .extend(row[1..].iter().map(|&(t, _)| t as i64));
            if let Some(mask) = batch.loss_mask.as_mut() {
                mask.extend(row[1..].iter().map(|&(_, l)| l));
            }
        }
        batch
    }

    /// The next batch.
    pub fn next_batch(&mut self) -> PackedBatch {
        if self.fixed.is_some() {
            return self.next_fixed_batch();
        }
        let mut batch = PackedBatch {
            tokens: Vec::with_capacity(self.batch_tokens),
            targets: Vec::with_capacity(self.batch_tokens),
            cu_seqlens: vec![0],
            loss_mask: self.masks.as_ref().map(|_| Vec::new()),
        };
        while batch.tokens.len() < self.batch_tokens {
            if self.cursor == self.order.len() {
                self.shuffle();
            }
            let index = self.order[self.cursor];
            let doc = &self.docs[index];
            self.cursor += 1;
            let room = self.batch_tokens - batch.tokens.len();
            let len = (doc.len() - 1).min(self.max_seq_len).min(room);
            let start = match &self.masks {
                None => self.rng.below(doc.len() - len),
                Some(masks) => {
                    // Targets are tokens 1..: the window's targets are [start + 1, start + len].
                    // A learned target j drawn at random, then a window holding it.
                    let learned: Vec<usize> = (1..doc.len()).filter(|&j| masks[index][j]).collect();
                    let j = learned[self.rng.below(learned.len())];
                    let lo = j.saturating_sub(len);
                    let hi = (j - 1).min(doc.len() - 1 - len);
                    lo + self.rng.below(hi - lo + 1)
                }
            };
            if let (Some(masks), Some(out)) = (&self.masks, batch.loss_mask.as_mut()) {
                out.extend_from_slice(&masks[index][start + 1..start + len + 1]);
            }
            batch
                .tokens
                .extend(doc[start..start + len].iter().map(|&t| t as i64));
            batch
                .targets
                .extend(doc[start + 1..start + len + 1].iter().map(|&t| t as i64));
            batch.cu_seqlens.push(batch.tokens.len() as i64);
        }
        batch
    }
}

/// One packed batch holding `parts` one after the other (the global batch of a
/// data-parallel step, as one device sees it).
pub fn concat_batches(parts: &[PackedBatch]) -> PackedBatch {
    let mut out = PackedBatch {
        tokens: Vec::new(),
        targets: Vec::new(),
        cu_seqlens: vec![0],
        loss_mask: parts.iter().any(|p| p.loss_mask.is_some()).then(Vec::new),
    };
    for p in parts {
        if let Some(mask) = out.loss_mask.as_mut() {
            match &p.loss_mask {
                Some(m) => mask.extend_from_slice(m),
                None => mask.extend(std::iter::repeat_n(true, p.targets.len())),
            }
        }
        let base = out.tokens.len() as i64;
        out.tokens.extend_from_slice(&p.tokens);
        out.targets.extend_from_slice(&p.targets);
        out.cu_seqlens
            .extend(p.cu_seqlens.iter().skip(1).map(|c| c + base));
    }
    out
}
