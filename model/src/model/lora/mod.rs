//! LoRA (Hu et al., 2021) as PEFT implements it: the adapter layers the transformer's
//! projections hold (`adapter.rs`) and what is done to a whole model with them (`attach.rs`:
//! attach, freeze the base, merge). Their files in PEFT's format are [`crate::model::peft`]'s.

pub mod adapter;
pub mod attach;

pub use adapter::{
    adapted, adapter_param_id, AttentionAdapters, LoraAdapter, LoraSettings, LoraTarget,
    MlpAdapters,
};
pub use attach::{adapters, attach, freeze_base, merge, set_adapter, settings};
