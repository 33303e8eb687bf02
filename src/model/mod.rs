//! The Gemma-4 model: configuration, checkpoint loading, the decoder and its KV cache.

pub mod config;
pub mod gemma4;
pub mod kv_cache;
pub mod weights;

pub use config::Config;
pub use gemma4::Gemma4;
pub use kv_cache::KvCache;
