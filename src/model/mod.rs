//! The Gemma-4 model: configuration, checkpoint loading, the decoder and its KV cache, the
//! tokenizer and chat template, sampling and the generation loop.

pub mod chat;
pub mod config;
pub mod device_step;
pub mod gemma4;
pub mod generation;
pub mod kv_cache;
pub mod ple;
pub mod projection;
pub mod sampling;
pub mod session;
pub mod source;
pub mod tensor_parallel;
pub mod thinking;
pub mod tokenizer;
pub mod weights;

pub use config::Config;
pub use gemma4::Gemma4;
pub use kv_cache::KvCache;
