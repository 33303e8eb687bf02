//! The checkpoint's tokenizer (tokenizer.json) and chat template (chat_template.jinja or
//! tokenizer_config.json's `chat_template`; rendered by `chat`).

use super::chat::{Chat, ChatTemplate};
use anyhow::{bail, Context, Result};
use std::path::Path;

pub struct TextTokenizer {
    inner: tokenizers::Tokenizer,
    chat_template: Option<ChatTemplate>,
    /// `bos_token`, `eos_token`, … as the template sees them.
    special_tokens: Vec<(String, String)>,
}

/// The special tokens that open and close a channel (`<|channel>thought\n … <channel|>`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ChannelMarkers {
    pub open: Option<u32>,
    pub close: Option<u32>,
}

impl TextTokenizer {
    /// Loads tokenizer.json and the chat template from a checkpoint directory.
    pub fn from_dir(dir: &Path) -> Result<TextTokenizer> {
        let path = dir.join("tokenizer.json");
        if !path.is_file() {
            bail!(
                "{}: tokenizer.json not found (g4 needs the checkpoint's tokenizer)",
                dir.display()
            );
        }
        let bytes =
            std::fs::read(&path).with_context(|| format!("cannot read {}", path.display()))?;
        let config = read_optional(&dir.join("tokenizer_config.json"))?;
        let template = read_optional(&dir.join("chat_template.jinja"))?;
        TextTokenizer::from_parts(
            &path.display().to_string(),
            &bytes,
            config.as_deref(),
            template,
        )
    }

    /// Builds the tokenizer from the contents of its files; `what` names them in errors.
    pub fn from_parts(
        what: &str,
        tokenizer_json: &[u8],
        tokenizer_config: Option<&str>,
        chat_template: Option<String>,
    ) -> Result<TextTokenizer> {
        let inner = tokenizers::Tokenizer::from_bytes(tokenizer_json)
            .map_err(|e| anyhow::anyhow!("{what}: not a valid tokenizer.json: {e}"))?;
        let config: serde_json::Value = match tokenizer_config {
            Some(text) => serde_json::from_str(text)
                .with_context(|| format!("{what}: tokenizer_config.json is not valid JSON"))?,
            None => serde_json::Value::Null,
        };
        let token = |key: &str| -> Option<String> {
            match config.get(key)? {
                serde_json::Value::String(s) => Some(s.clone()),
                v => v
                    .get("content")
                    .and_then(|c| c.as_str())
                    .map(str::to_string),
            }
        };
        let defaults = [
            ("bos_token", Some("<bos>")),
            ("eos_token", Some("<eos>")),
            ("unk_token", None),
            ("sep_token", None),
            ("pad_token", None),
            ("cls_token", None),
            ("mask_token", None),
        ];
        let special_tokens = defaults
            .into_iter()
            .filter_map(|(key, default)| {
                let value = token(key).or(default.map(str::to_string))?;
                Some((key.to_string(), value))
            })
            .collect();
        let chat_template = chat_template.or_else(|| {
            config
                .get("chat_template")
                .and_then(|t| t.as_str())
                .map(str::to_string)
        });
        Ok(TextTokenizer {
            inner,
            chat_template: chat_template.map(ChatTemplate::new),
            special_tokens,
        })
    }

    /// The channel markers, where the vocabulary has them as special tokens.
    pub fn channel_markers(&self) -> ChannelMarkers {
        let special = |content: &str| {
            let id = self.inner.token_to_id(content)?;
            self.inner
                .get_added_tokens_decoder()
                .get(&id)
                .filter(|t| t.special)
                .map(|_| id)
        };
        ChannelMarkers {
            open: special("<|channel>"),
            close: special("<channel|>"),
        }
    }

    /// Fails when the tokenizer can produce ids the model has no embedding for.
    pub fn check_vocab(&self, model_vocab: usize) -> Result<()> {
        let size = self.inner.get_vocab_size(true);
        if size > model_vocab {
            bail!("tokenizer.json has {size} tokens but the model's vocab_size is {model_vocab}: they do not belong together");
        }
        Ok(())
    }

    /// Encodes text as is: Gemma's tokenizer adds no BOS; callers add it (or the template does).
    pub fn encode(&self, text: &str) -> Result<Vec<u32>> {
        Ok(self
            .inner
            .encode(text, false)
            .map_err(|e| anyhow::anyhow!("cannot tokenize the prompt: {e}"))?
            .get_ids()
            .to_vec())
    }

    pub fn decode(&self, ids: &[u32]) -> Result<String> {
        self.inner
            .decode(ids, true)
            .map_err(|e| anyhow::anyhow!("cannot decode tokens: {e}"))
    }

    /// One token's text as the vocabulary has it (special tokens included), for reports.
    pub fn token_text(&self, id: u32) -> String {
        self.inner
            .decode(&[id], false)
            .unwrap_or_else(|_| format!("<{id}>"))
    }

    pub fn token_id(&self, token: &str) -> Option<u32> {
        self.inner.token_to_id(token)
    }

    /// Incremental detokenisation: text is released only once it is complete UTF-8 and no
    /// later token can change it.
    pub fn stream(
        &self,
    ) -> tokenizers::DecodeStream<
        '_,
        tokenizers::ModelWrapper,
        tokenizers::NormalizerWrapper,
        tokenizers::PreTokenizerWrapper,
        tokenizers::PostProcessorWrapper,
        tokenizers::DecoderWrapper,
    > {
        self.inner.decode_stream(true)
    }

    /// Renders the checkpoint's chat template with a generation prompt; also returns what the
    /// chat asked for that the template never reads.
    pub fn apply_chat_template(&self, chat: &Chat) -> Result<(String, Vec<&'static str>)> {
        let template = self
            .chat_template
            .as_ref()
            .context("the checkpoint has no chat template (chat_template.jinja or tokenizer_config.json) for --chat")?;
        Ok((
            template.render(chat, &self.special_tokens)?,
            template.unread_requests(chat),
        ))
    }
}

/// A file's text, `None` when it does not exist; unreadable or non-UTF-8 files are errors.
fn read_optional(path: &Path) -> Result<Option<String>> {
    match std::fs::read(path) {
        Ok(bytes) => String::from_utf8(bytes)
            .map(Some)
            .map_err(|e| anyhow::anyhow!("{}: not UTF-8 text ({e})", path.display())),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
        Err(e) => Err(e).with_context(|| format!("cannot read {}", path.display())),
    }
}
