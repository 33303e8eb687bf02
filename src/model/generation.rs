//! The generation loop: prefill, then one token at a time with the KV cache, streaming text as
//! it becomes final, stopping on eos ids, stop strings, the token budget or the context end.

use super::sampling::Sampler;
use super::session::{DecodePath, Session};
use super::thinking::{Channel, ChannelSplitter};
use super::tokenizer::TextTokenizer;
use super::Gemma4;
use anyhow::{bail, Context, Result};
use serde::Serialize;
use std::time::{Duration, Instant};

pub struct Request {
    pub prompt_ids: Vec<u32>,
    pub max_tokens: usize,
    pub eos_ids: Vec<u32>,
    pub stop_strings: Vec<String>,
    pub decode: DecodePath,
    /// Report each generated token's log-probability and this many top alternatives.
    pub logprobs: Option<usize>,
}

/// One generated token's log-probability under the model, and the most likely alternatives.
#[derive(Clone, Debug, Serialize)]
pub struct TokenLogprobs {
    pub token: u32,
    pub logprob: f32,
    pub top: Vec<(u32, f32)>,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum StopReason {
    Eos,
    StopString,
    MaxTokens,
    ContextFull,
}

impl StopReason {
    pub fn name(self) -> &'static str {
        match self {
            StopReason::Eos => "eos",
            StopReason::StopString => "stop-string",
            StopReason::MaxTokens => "max-tokens",
            StopReason::ContextFull => "context-full",
        }
    }
}

pub struct Generation {
    /// The answer: generated text outside reasoning channels.
    pub text: String,
    /// Text the model wrote inside reasoning channels (`<|channel>thought\n … <channel|>`).
    pub reasoning: String,
    pub token_ids: Vec<u32>,
    pub stop_reason: StopReason,
    pub prefill: Duration,
    pub decode: Duration,
    /// Per generated token, when the request asked for log-probabilities.
    pub logprobs: Vec<TokenLogprobs>,
}

/// Generates from `request`, calling `on_text` with each piece of final text and its channel.
/// Stop strings apply to the answer only.
pub fn generate(
    model: &Gemma4,
    tokenizer: &TextTokenizer,
    sampler: &mut Sampler,
    request: &Request,
    on_text: &mut dyn FnMut(Channel, &str),
) -> Result<Generation> {
    let context = model.config().max_position_embeddings;
    if request.prompt_ids.is_empty() {
        bail!("the prompt is empty");
    }
    if request.prompt_ids.len() >= context {
        bail!(
            "the prompt has {} tokens but the model's context is {context} positions (max_position_embeddings)",
            request.prompt_ids.len()
        );
    }
    let mut session = Session::new(model, request.decode);
    let mut history = request.prompt_ids.clone();
    let mut stream = tokenizer.stream();
    let mut stops = StopMatcher::new(&request.stop_strings);
    let mut channels =
        ChannelSplitter::after_prompt(tokenizer.channel_markers(), &request.prompt_ids, |from| {
            tokenizer.decode(&request.prompt_ids[from..])
        })?;
    let mut text = String::new();
    let mut reasoning = String::new();
    let mut token_ids = Vec::new();

    let started = Instant::now();
    // Choosing the first token waits for the device, so the prefill time is real.
    let mut logprobs = Vec::new();
    let mut choose = |logits: &candle_core::Tensor, history: &[u32], step: usize| -> Result<u32> {
        let token = sampler
            .next(logits, history)
            .with_context(|| format!("generated token {step}"))?;
        if let Some(n) = request.logprobs {
            let all = super::sampling::log_probs(logits)?;
            logprobs.push(TokenLogprobs {
                token,
                logprob: all[token as usize],
                top: super::sampling::top_n(&all, n),
            });
        }
        Ok(token)
    };
    let mut next = choose(session.prefill(&request.prompt_ids)?, &history, 0)?;
    let prefill = started.elapsed();
    let decode_started = Instant::now();
    let mut stop_reason = StopReason::MaxTokens;
    while token_ids.len() < request.max_tokens {
        if request.eos_ids.contains(&next) {
            stop_reason = StopReason::Eos;
            break;
        }
        token_ids.push(next);
        history.push(next);
        let piece = stream
            .step(next)
            .map_err(|e| anyhow::anyhow!("cannot decode token {next}: {e}"))?;
        match channels.route(piece.as_deref().unwrap_or_default()) {
            Some((Channel::Reasoning, piece)) => {
                reasoning.push_str(&piece);
                on_text(Channel::Reasoning, &piece);
            }
            Some((Channel::Answer, piece)) => {
                let (ready, matched) = stops.push(&piece);
                text.push_str(&ready);
                on_text(Channel::Answer, &ready);
                if matched {
                    stop_reason = StopReason::StopString;
                    break;
                }
            }
            None => {}
        }
        channels.on_token(next);
        if token_ids.len() == request.max_tokens {
            break;
        }
        if session.len() + 1 > context {
            stop_reason = StopReason::ContextFull;
            break;
        }
        next = choose(session.decode(next)?, &history, token_ids.len())?;
    }
    // The step that chose an eos token produced no token.
    logprobs.truncate(token_ids.len());
    if stop_reason != StopReason::StopString {
        let rest = stops.flush();
        text.push_str(&rest);
        on_text(Channel::Answer, &rest);
    }
    Ok(Generation {
        text,
        reasoning,
        token_ids,
        stop_reason,
        prefill,
        decode: decode_started.elapsed(),
        logprobs,
    })
}

/// Holds back text that may be the start of a stop string, so that a stop string is never
/// printed, even when it arrives split across tokens.
struct StopMatcher<'a> {
    stops: Vec<&'a str>,
    pending: String,
}

impl<'a> StopMatcher<'a> {
    fn new(stops: &'a [String]) -> StopMatcher<'a> {
        StopMatcher {
            stops: stops
                .iter()
                .map(String::as_str)
                .filter(|s| !s.is_empty())
                .collect(),
            pending: String::new(),
        }
    }

    /// Adds text; returns what is safe to print and whether a stop string was reached.
    fn push(&mut self, piece: &str) -> (String, bool) {
        self.pending.push_str(piece);
        if let Some(at) = self.stops.iter().filter_map(|s| self.pending.find(s)).min() {
            let ready = self.pending[..at].to_string();
            self.pending.clear();
            return (ready, true);
        }
        let hold = self
            .pending
            .char_indices()
            .map(|(i, _)| i)
            .find(|&i| self.stops.iter().any(|s| s.starts_with(&self.pending[i..])))
            .unwrap_or(self.pending.len());
        let ready = self.pending[..hold].to_string();
        self.pending.drain(..hold);
        (ready, false)
    }

    fn flush(&mut self) -> String {
        std::mem::take(&mut self.pending)
    }
}

#[cfg(test)]
mod tests {
    use super::StopMatcher;

    #[test]
    fn a_stop_string_split_across_pieces_is_never_printed() {
        let stops = vec!["END".to_string()];
        let mut m = StopMatcher::new(&stops);
        assert_eq!(m.push("and so E"), ("and so ".to_string(), false));
        assert_eq!(m.push("N"), (String::new(), false));
        assert_eq!(m.push("D more"), (String::new(), true));
    }

    #[test]
    fn a_false_start_is_released() {
        let stops = vec!["END".to_string()];
        let mut m = StopMatcher::new(&stops);
        assert_eq!(m.push("E"), (String::new(), false));
        assert_eq!(m.push("ve"), ("Eve".to_string(), false));
        assert_eq!(m.flush(), "");
    }
}
