//! The network: the decoder ([`transformer`]) with its rotary embedding ([`rope`]), mixture
//! of experts ([`moe`]) and LoRA adapters ([`lora_adapter`], attached by [`lora`]), and its
//! weights in Hugging Face's format ([`hf_checkpoint`], MXFP4 experts dequantized by
//! [`mxfp4`]) and LoRA adapters in PEFT's ([`peft`]).

pub mod hf_checkpoint;
pub mod lora;
pub mod lora_adapter;
pub mod moe;
pub mod mxfp4;
pub mod peft;
pub mod rope;
pub mod transformer;
