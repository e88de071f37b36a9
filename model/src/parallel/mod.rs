//! The training loop on several ranks: data parallelism over HCCL ([`ddp`]), ZeRO's sharded
//! state ([`zero`]), one thread per rank in one process ([`ranks`]), context parallelism
//! ([`cp`]), and the memory plan of one rank under any of them ([`plan`]).

pub mod cp;
pub mod ddp;
pub mod plan;
pub mod ranks;
pub mod zero;
