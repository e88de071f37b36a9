//! Tokenizers: bytes (vocabulary 256, nothing to download) or a Hugging Face `tokenizer.json`
//! through the `tokenizers` crate for checkpoints that bring their own.

use std::path::Path;

use burn_ascend::AttnError;

/// Token ids with each token's byte range in the encoded text.
pub type IdsWithOffsets = (Vec<u32>, Vec<(usize, usize)>);

/// Text ↔ token ids.
#[derive(Debug, Clone)]
pub enum Tokenizer {
    /// One token per UTF-8 byte.
    Bytes,
    /// A Hugging Face tokenizer.
    Hf(Box<tokenizers::Tokenizer>),
}

impl Tokenizer {
    /// Loads `tokenizer.json`.
    pub fn from_file(path: &Path) -> Result<Self, AttnError> {
        tokenizers::Tokenizer::from_file(path)
            .map(|t| Self::Hf(Box::new(t)))
            .map_err(|e| AttnError::invalid("tokenizer.json", format!("{}: {e}", path.display())))
    }

    /// Token ids of `text` (no special tokens added).
    pub fn encode(&self, text: &str) -> Result<Vec<u32>, AttnError> {
        match self {
            Self::Bytes => Ok(text.bytes().map(u32::from).collect()),
            Self::Hf(t) => t
                .encode(text, false)
                .map(|e| e.get_ids().to_vec())
                .map_err(|e| AttnError::invalid("text", format!("tokenizer failed: {e}"))),
        }
    }

    /// Token ids of `text` (no special tokens added) with each token's byte range in `text`
    /// (for a chat's assistant mask: the tokens whose range overlaps the assistant's text).
    pub fn encode_with_offsets(&self, text: &str) -> Result<IdsWithOffsets, AttnError> {
        match self {
            Self::Bytes => Ok((
                text.bytes().map(u32::from).collect(),
                (0..text.len()).map(|i| (i, i + 1)).collect(),
            )),
            Self::Hf(t) => t
                .encode(text, false)
                .map(|e| (e.get_ids().to_vec(), e.get_offsets().to_vec()))
                .map_err(|e| AttnError::invalid("text", format!("tokenizer failed: {e}"))),
        }
    }

    /// The id of one token (a special token such as `<|eot_id|>`); bytes have no named tokens.
    pub fn token_id(&self, token: &str) -> Option<u32> {
        match self {
            Self::Bytes => None,
            Self::Hf(t) => t.token_to_id(token),
        }
    }

    /// Text of `ids` (bytes that are not valid UTF-8 become U+FFFD).
    pub fn decode(&self, ids: &[u32]) -> String {
        match self {
            Self::Bytes => {
                let bytes: Vec<u8> = ids.iter().map(|&i| i.min(255) as u8).collect();
                String::from_utf8_lossy(&bytes).into_owned()
            }
            Self::Hf(t) => t.decode(ids, false).unwrap_or_default(),
        }
    }

    /// Vocabulary size the ids fall in.
    pub fn vocab_size(&self) -> usize {
        match self {
            Self::Bytes => 256,
            Self::Hf(t) => t.get_vocab_size(true),
        }
    }
}
