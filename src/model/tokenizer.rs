//! The checkpoint's tokenizer (tokenizer.json) and chat template (chat_template.jinja or
//! tokenizer_config.json's `chat_template`), rendered with minijinja.

use anyhow::{bail, Context, Result};
use std::path::Path;

pub struct TextTokenizer {
    inner: tokenizers::Tokenizer,
    chat_template: Option<String>,
    bos_token: String,
    eos_token: String,
}

pub struct Message {
    pub role: String,
    pub content: String,
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
        let config = std::fs::read_to_string(dir.join("tokenizer_config.json")).ok();
        let template = std::fs::read_to_string(dir.join("chat_template.jinja")).ok();
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
        let token = |key: &str, default: &str| -> String {
            match config.get(key) {
                Some(serde_json::Value::String(s)) => s.clone(),
                Some(v) => v
                    .get("content")
                    .and_then(|c| c.as_str())
                    .unwrap_or(default)
                    .to_string(),
                None => default.to_string(),
            }
        };
        let chat_template = chat_template.or_else(|| {
            config
                .get("chat_template")
                .and_then(|t| t.as_str())
                .map(str::to_string)
        });
        Ok(TextTokenizer {
            bos_token: token("bos_token", "<bos>"),
            eos_token: token("eos_token", "<eos>"),
            inner,
            chat_template,
        })
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

    /// Renders the checkpoint's chat template with a generation prompt.
    pub fn apply_chat_template(&self, messages: &[Message]) -> Result<String> {
        let template = self
            .chat_template
            .as_deref()
            .context("the checkpoint has no chat template (chat_template.jinja or tokenizer_config.json) for --chat")?;
        let mut env = minijinja::Environment::new();
        env.add_function(
            "raise_exception",
            |msg: String| -> Result<String, minijinja::Error> {
                Err(minijinja::Error::new(
                    minijinja::ErrorKind::InvalidOperation,
                    msg,
                ))
            },
        );
        env.add_template("chat", template)
            .context("cannot parse the chat template")?;
        let messages: Vec<minijinja::Value> = messages
            .iter()
            .map(|m| minijinja::context! { role => m.role.clone(), content => m.content.clone() })
            .collect();
        env.get_template("chat")?
            .render(minijinja::context! {
                messages => messages,
                bos_token => self.bos_token.clone(),
                eos_token => self.eos_token.clone(),
                add_generation_prompt => true,
            })
            .context("cannot render the chat template")
    }
}
