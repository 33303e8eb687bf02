//! g4: Gemma-4 text models on candle, proven token-exact against the reference implementation,
//! with an honest account of which implementation of every fused op runs on this device.

pub mod bench;
pub mod device;
pub mod golden;
pub mod kernels;
pub mod model;
