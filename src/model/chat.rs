//! Chat prompts: conversations and tool declarations read from JSON, rendered by the
//! checkpoint's chat template the way transformers renders it: jinja2 with `trim_blocks` and
//! `lstrip_blocks`, Python's string and dict methods, `raise_exception`, `strftime_now` and
//! Python's `json.dumps` behind `tojson`. A template that loops without end runs out of fuel
//! instead of hanging.

use anyhow::{bail, Result};
use minijinja::value::{Kwargs, ValueKind};
use minijinja::{Environment, Error, ErrorKind, State, Value};
use serde_json::Value as Json;
use std::fmt::Write;

/// Template instructions one rendering may execute: the official Gemma-4 template spends
/// about 2,000 on a short conversation with tools, so this leaves room for conversations
/// thousands of turns long and still stops a runaway loop within a few seconds.
pub const TEMPLATE_FUEL: u64 = 50_000_000;

/// Roles a message may have; the template decides how each is rendered.
const ROLES: [&str; 5] = ["system", "developer", "user", "assistant", "tool"];

/// Everything the template is given besides the tokenizer's special tokens.
pub struct Chat {
    /// Messages as JSON objects, passed to the template unchanged (`tool_calls`,
    /// `reasoning` and other fields a template may read included).
    pub messages: Vec<Json>,
    pub tools: Option<Vec<Json>>,
    /// `None` leaves `enable_thinking` undefined, so the template's own default applies.
    pub enable_thinking: Option<bool>,
}

/// A single user turn, after an optional system turn.
pub fn prompt_messages(system: Option<&str>, user: &str) -> Vec<Json> {
    let mut messages = Vec::new();
    if let Some(system) = system {
        messages.push(serde_json::json!({"role": "system", "content": system}));
    }
    messages.push(serde_json::json!({"role": "user", "content": user}));
    messages
}

/// Reads a JSON list of chat messages; `what` names the file in errors, which also name the
/// message index and field.
pub fn messages_from_json(what: &str, text: &str) -> Result<Vec<Json>> {
    let value: Json =
        serde_json::from_str(text).map_err(|e| anyhow::anyhow!("{what}: not valid JSON: {e}"))?;
    let Json::Array(messages) = value else {
        bail!(
            "{what}: expected a JSON list of messages, found {}",
            json_kind(&value)
        );
    };
    if messages.is_empty() {
        bail!("{what}: the list of messages is empty");
    }
    for (i, message) in messages.iter().enumerate() {
        let at = format!("{what}: messages[{i}]");
        let Json::Object(fields) = message else {
            bail!("{at}: expected an object, found {}", json_kind(message));
        };
        let role = match fields.get("role") {
            Some(Json::String(role)) => role.as_str(),
            Some(other) => bail!("{at}.role: expected a string, found {}", json_kind(other)),
            None => bail!("{at}: has no \"role\""),
        };
        if !ROLES.contains(&role) {
            bail!("{at}.role: \"{role}\" is not one of {}", ROLES.join(", "));
        }
        match fields.get("content") {
            Some(Json::String(_)) => {}
            Some(Json::Array(parts)) => check_parts(&at, parts)?,
            // An assistant turn that only calls tools has no content.
            None | Some(Json::Null) if role == "assistant" && fields.contains_key("tool_calls") => {
            }
            None => bail!("{at}: has no \"content\""),
            Some(other) => bail!(
                "{at}.content: expected a string or a list of parts, found {}",
                json_kind(other)
            ),
        }
    }
    Ok(messages)
}

fn check_parts(at: &str, parts: &[Json]) -> Result<()> {
    for (j, part) in parts.iter().enumerate() {
        let at = format!("{at}.content[{j}]");
        let Json::Object(fields) = part else {
            bail!("{at}: expected an object, found {}", json_kind(part));
        };
        match fields.get("type").and_then(Json::as_str) {
            Some("text") => match fields.get("text") {
                Some(Json::String(_)) => {}
                Some(other) => bail!("{at}.text: expected a string, found {}", json_kind(other)),
                None => bail!("{at}: a text part has no \"text\""),
            },
            Some(other) => bail!(
                "{at}.type: \"{other}\" parts are not supported (g4 runs text only; use \"text\")"
            ),
            None => bail!("{at}: has no string \"type\""),
        }
    }
    Ok(())
}

/// Reads a JSON list of tool declarations (`{"type": "function", "function": {"name": …}}`).
pub fn tools_from_json(what: &str, text: &str) -> Result<Vec<Json>> {
    let value: Json =
        serde_json::from_str(text).map_err(|e| anyhow::anyhow!("{what}: not valid JSON: {e}"))?;
    let Json::Array(tools) = value else {
        bail!(
            "{what}: expected a JSON list of tool declarations, found {}",
            json_kind(&value)
        );
    };
    for (i, tool) in tools.iter().enumerate() {
        let at = format!("{what}: tools[{i}]");
        match tool.get("function") {
            Some(Json::Object(function)) => match function.get("name") {
                Some(Json::String(_)) => {}
                _ => bail!("{at}.function.name: missing or not a string"),
            },
            Some(other) => bail!(
                "{at}.function: expected an object, found {}",
                json_kind(other)
            ),
            None => bail!("{at}: has no \"function\" object"),
        }
    }
    Ok(tools)
}

fn json_kind(value: &Json) -> &'static str {
    match value {
        Json::Null => "null",
        Json::Bool(_) => "a boolean",
        Json::Number(_) => "a number",
        Json::String(_) => "a string",
        Json::Array(_) => "a list",
        Json::Object(_) => "an object",
    }
}

/// A checkpoint's chat template (Jinja source).
pub struct ChatTemplate {
    source: String,
}

impl ChatTemplate {
    pub fn new(source: String) -> ChatTemplate {
        ChatTemplate { source }
    }

    /// What `chat` asks of the template that the template never reads (`enable_thinking`,
    /// `tools`): such a request renders, but changes nothing.
    pub fn unread_requests(&self, chat: &Chat) -> Vec<&'static str> {
        let mut unread = Vec::new();
        if chat.enable_thinking.is_some() && !self.source.contains("enable_thinking") {
            unread.push("enable_thinking (--think)");
        }
        if chat.tools.is_some() && !self.source.contains("tools") {
            unread.push("tools (--tools)");
        }
        unread
    }

    /// Renders `chat` with a generation prompt; `special_tokens` are the tokenizer's named
    /// tokens (`bos_token`, `eos_token`, …) as transformers passes them.
    pub fn render(&self, chat: &Chat, special_tokens: &[(String, String)]) -> Result<String> {
        let env = python_compatible_environment();
        let template = env
            .template_from_str(&self.source)
            .map_err(|e| anyhow::anyhow!("cannot parse the chat template: {}", describe(&e)))?;
        let messages: Vec<Json> = chat
            .messages
            .iter()
            .map(as_transformers_passes_it)
            .collect();
        let mut context: Vec<(&str, Value)> = vec![
            ("messages", Value::from_serialize(&messages)),
            ("tools", Value::from_serialize(&chat.tools)),
            ("documents", Value::from(())),
            ("add_generation_prompt", Value::from(true)),
        ];
        if let Some(think) = chat.enable_thinking {
            context.push(("enable_thinking", Value::from(think)));
        }
        for (name, token) in special_tokens {
            context.push((name.as_str(), Value::from(token.as_str())));
        }
        let context: Value = context.into_iter().collect();
        template
            .render(context)
            .map_err(|e| anyhow::anyhow!("cannot render the chat template: {}", describe(&e)))
    }
}

/// A message as transformers hands it to the template: keys whose value is null dropped, and
/// the reasoning copied under each of its names (`thinking` first, `reasoning_content` last).
fn as_transformers_passes_it(message: &Json) -> Json {
    let Json::Object(fields) = message else {
        return message.clone();
    };
    let mut fields: serde_json::Map<String, Json> = fields
        .iter()
        .filter(|(_, v)| !v.is_null())
        .map(|(k, v)| (k.clone(), v.clone()))
        .collect();
    let reasoning = ["reasoning_content", "thinking", "reasoning"]
        .iter()
        .find_map(|key| fields.get(*key).cloned());
    if let Some(reasoning) = reasoning {
        if !fields.contains_key("thinking") {
            fields.shift_insert(0, "thinking".to_string(), reasoning.clone());
        }
        fields.insert("reasoning_content".to_string(), reasoning);
    }
    Json::Object(fields)
}

/// A minijinja environment that behaves like transformers' jinja2 sandbox for chat templates.
fn python_compatible_environment() -> Environment<'static> {
    let mut env = Environment::new();
    env.set_trim_blocks(true);
    env.set_lstrip_blocks(true);
    env.set_fuel(Some(TEMPLATE_FUEL));
    env.set_unknown_method_callback(python_methods);
    // jinja2 prints and converts values with Python's str(): None, True, ['a', 1].
    env.set_formatter(|out, _state, value| {
        out.write_str(&python_str(value))
            .map_err(|_| Error::new(ErrorKind::WriteFailure, "cannot write template output"))
    });
    env.add_filter("string", |value: &Value| python_str(value));
    env.add_filter("upper", |value: &Value| python_str(value).to_uppercase());
    env.add_filter("lower", |value: &Value| python_str(value).to_lowercase());
    env.add_filter("trim", |value: &Value, chars: Option<&str>| {
        python_strip(&python_str(value), chars, true, true).to_string()
    });
    env.add_filter("tojson", python_tojson);
    env.add_function("raise_exception", raise_exception);
    env.add_function("strftime_now", strftime_now);
    env
}

/// Python's `str(value)`, as jinja2 prints a value (undefined prints nothing).
fn python_str(value: &Value) -> String {
    match value.kind() {
        ValueKind::String => value.as_str().unwrap_or_default().to_string(),
        _ => python_repr(value),
    }
}

/// Python's `repr(value)` for the values a template sees.
fn python_repr(value: &Value) -> String {
    match value.kind() {
        ValueKind::Undefined => String::new(),
        ValueKind::None => "None".to_string(),
        ValueKind::Bool => if value.is_true() { "True" } else { "False" }.to_string(),
        ValueKind::Number if !value.is_integer() => {
            let x = f64::try_from(value.clone()).unwrap_or(f64::NAN);
            if x.is_finite() && x.fract() == 0.0 && x.abs() < 1e16 {
                format!("{x:.1}")
            } else {
                x.to_string()
            }
        }
        ValueKind::String => {
            let s = value.as_str().unwrap_or_default();
            if s.contains('\'') && !s.contains('"') {
                format!("\"{s}\"")
            } else {
                format!("'{}'", s.replace('\\', "\\\\").replace('\'', "\\'"))
            }
        }
        ValueKind::Seq | ValueKind::Iterable => {
            let items: Vec<String> = value
                .try_iter()
                .map(|iter| iter.map(|item| python_repr(&item)).collect())
                .unwrap_or_default();
            format!("[{}]", items.join(", "))
        }
        ValueKind::Map => {
            let items: Vec<String> = value
                .try_iter()
                .map(|keys| {
                    keys.map(|key| {
                        let item = value.get_item(&key).unwrap_or_default();
                        format!("{}: {}", python_repr(&key), python_repr(&item))
                    })
                    .collect()
                })
                .unwrap_or_default();
            format!("{{{}}}", items.join(", "))
        }
        _ => value.to_string(),
    }
}

/// One line: minijinja's message with the template line it points at.
fn describe(error: &Error) -> String {
    if error.kind() == ErrorKind::OutOfFuel {
        return format!(
            "it ran longer than {TEMPLATE_FUEL} steps (a loop that never ends?), stopped"
        );
    }
    let mut text = error.to_string();
    let mut source = std::error::Error::source(error);
    while let Some(cause) = source {
        let _ = write!(text, ": {cause}");
        source = cause.source();
    }
    text
}

fn raise_exception(message: String) -> Result<String, Error> {
    Err(Error::new(
        ErrorKind::InvalidOperation,
        format!("the template raised an exception: {message}"),
    ))
}

fn strftime_now(format: &str) -> Result<String, Error> {
    use chrono::format::{Item, StrftimeItems};
    let items: Vec<Item> = StrftimeItems::new(format).collect();
    if items.iter().any(|item| matches!(item, Item::Error)) {
        return Err(Error::new(
            ErrorKind::InvalidOperation,
            format!("strftime_now: invalid format '{format}'"),
        ));
    }
    let mut out = String::new();
    write!(
        out,
        "{}",
        chrono::Local::now().format_with_items(items.iter())
    )
    .map_err(|_| Error::new(ErrorKind::InvalidOperation, "strftime_now failed"))?;
    Ok(out)
}

/// Python's `str.isspace`: Rust's whitespace plus the ASCII separators U+001C–U+001F.
fn is_python_space(c: char) -> bool {
    c.is_whitespace() || ('\u{1c}'..='\u{1f}').contains(&c)
}

/// Python's `str.strip`/`lstrip`/`rstrip`: whitespace by default, else any of `chars`.
fn python_strip<'a>(s: &'a str, chars: Option<&str>, start: bool, end: bool) -> &'a str {
    let strip = |c: char| match chars {
        Some(set) => set.contains(c),
        None => is_python_space(c),
    };
    let s = if start {
        s.trim_start_matches(strip)
    } else {
        s
    };
    if end {
        s.trim_end_matches(strip)
    } else {
        s
    }
}

/// Python's string and dict methods (minijinja-contrib's pycompat), with Python's notion of
/// whitespace for the strip family.
fn python_methods(
    state: &State,
    value: &Value,
    method: &str,
    args: &[Value],
) -> Result<Value, Error> {
    if let (Some(s), "strip" | "lstrip" | "rstrip") = (value.as_str(), method) {
        let (chars,): (Option<&str>,) = minijinja::value::from_args(args)?;
        let (start, end) = (method != "rstrip", method != "lstrip");
        return Ok(Value::from(python_strip(s, chars, start, end)));
    }
    minijinja_contrib::pycompat::unknown_method_callback(state, value, method, args)
}

/// transformers' `tojson`: `json.dumps(x, ensure_ascii=False, indent=…, separators=…,
/// sort_keys=…)`, not HTML-escaped.
fn python_tojson(value: &Value, kwargs: Kwargs) -> Result<String, Error> {
    let indent: Option<usize> = kwargs.get("indent")?;
    let sort_keys: Option<bool> = kwargs.get("sort_keys")?;
    let separators: Option<Vec<String>> = kwargs.get("separators")?;
    let _: Option<bool> = kwargs.get("ensure_ascii")?;
    kwargs.assert_all_used()?;
    let (item_sep, key_sep) = match separators.as_deref() {
        Some([item, key]) => (item.clone(), key.clone()),
        Some(_) => {
            return Err(Error::new(
                ErrorKind::InvalidOperation,
                "tojson: separators must be a pair",
            ))
        }
        // Python's defaults: ", " without indent, "," with it.
        None if indent.is_some() => (",".to_string(), ": ".to_string()),
        None => (", ".to_string(), ": ".to_string()),
    };
    if value.kind() == ValueKind::Undefined {
        return Err(Error::new(
            ErrorKind::UndefinedError,
            "tojson of an undefined value",
        ));
    }
    let json = serde_json::to_value(value)
        .map_err(|e| Error::new(ErrorKind::InvalidOperation, format!("tojson: {e}")))?;
    let style = JsonStyle {
        indent,
        sort_keys: sort_keys.unwrap_or(false),
        item_sep,
        key_sep,
    };
    let mut out = String::new();
    style.write(&json, 0, &mut out);
    Ok(out)
}

struct JsonStyle {
    indent: Option<usize>,
    sort_keys: bool,
    item_sep: String,
    key_sep: String,
}

impl JsonStyle {
    fn write(&self, value: &Json, level: usize, out: &mut String) {
        match value {
            Json::Array(items) if !items.is_empty() => {
                out.push('[');
                for (i, item) in items.iter().enumerate() {
                    self.separate(i, level + 1, out);
                    self.write(item, level + 1, out);
                }
                self.close(level, out);
                out.push(']');
            }
            Json::Object(map) if !map.is_empty() => {
                let mut entries: Vec<(&String, &Json)> = map.iter().collect();
                if self.sort_keys {
                    entries.sort_by(|a, b| a.0.cmp(b.0));
                }
                out.push('{');
                for (i, (key, item)) in entries.into_iter().enumerate() {
                    self.separate(i, level + 1, out);
                    out.push_str(&Json::String(key.clone()).to_string());
                    out.push_str(&self.key_sep);
                    self.write(item, level + 1, out);
                }
                self.close(level, out);
                out.push('}');
            }
            other => out.push_str(&other.to_string()),
        }
    }

    fn separate(&self, index: usize, level: usize, out: &mut String) {
        if index > 0 {
            out.push_str(&self.item_sep);
        }
        if let Some(width) = self.indent {
            out.push('\n');
            out.push_str(&" ".repeat(width * level));
        }
    }

    fn close(&self, level: usize, out: &mut String) {
        if let Some(width) = self.indent {
            out.push('\n');
            out.push_str(&" ".repeat(width * level));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn render(source: &str, messages: Json) -> Result<String> {
        let chat = Chat {
            messages: serde_json::from_value(messages).unwrap(),
            tools: None,
            enable_thinking: None,
        };
        ChatTemplate::new(source.to_string()).render(&chat, &[])
    }

    #[test]
    fn blocks_are_trimmed_as_transformers_trims_them() {
        let source = "{% for m in messages %}\n  {% if m.role == 'user' %}\n[{{ m.content }}]\n  {% endif %}\n{% endfor %}";
        let out = render(
            source,
            serde_json::json!([{"role": "user", "content": "a"}]),
        )
        .unwrap();
        assert_eq!(out, "[a]\n");
    }

    #[test]
    fn python_methods_and_filters_render() {
        let source = "{{ messages[0].get('missing', 'dflt') }}|{{ messages[0].content.strip().upper() }}|\
{{ messages[0].content | trim }}|{% for k, v in messages[0].items() %}{{ k }}{% endfor %}|\
{{ 'a,b'.split(',') | length }}|{{ {'b': 1, 'a': [1, 'x']} | tojson }}|{{ messages[0].content.startswith('\u{1f} hi') }}|\
{{ none }} {{ true }} {{ 2.0 }} {{ ['a', 1, none] }} {{ ['x', 'y'] | upper }} {{ {'k': false} | string }}";
        let out = render(
            source,
            serde_json::json!([{"role": "user", "content": "\u{1f} hi \n"}]),
        )
        .unwrap();
        assert_eq!(
            out,
            "dflt|HI|hi|rolecontent|2|{\"b\": 1, \"a\": [1, \"x\"]}|True|None True 2.0 ['a', 1, None] ['X', 'Y'] {'k': False}"
        );
    }

    #[test]
    fn a_runaway_template_runs_out_of_fuel() {
        let source =
            "{% for i in range(100000) %}{% for j in range(100000) %}{% endfor %}{% endfor %}";
        let error = render(source, serde_json::json!([]))
            .unwrap_err()
            .to_string();
        assert!(error.contains("ran longer than"), "{error}");
    }

    #[test]
    fn requests_the_template_never_reads_are_named() {
        let chat = Chat {
            messages: vec![],
            tools: Some(vec![]),
            enable_thinking: Some(true),
        };
        let plain = ChatTemplate::new("{{ messages }}".to_string());
        assert_eq!(
            plain.unread_requests(&chat),
            ["enable_thinking (--think)", "tools (--tools)"]
        );
        let aware = ChatTemplate::new("{{ enable_thinking }}{{ tools }}".to_string());
        assert!(aware.unread_requests(&chat).is_empty());
    }

    #[test]
    fn raise_exception_is_an_error_with_its_message() {
        let error = render(
            "{{ raise_exception('roles must alternate') }}",
            serde_json::json!([]),
        )
        .unwrap_err()
        .to_string();
        assert!(error.contains("roles must alternate"), "{error}");
    }

    #[test]
    fn message_files_are_checked_field_by_field() {
        let cases = [
            ("{", "not valid JSON"),
            ("{}", "expected a JSON list of messages, found an object"),
            ("[]", "the list of messages is empty"),
            ("[{\"role\": \"user\"}]", "messages[0]: has no \"content\""),
            (
                "[{\"role\": \"user\", \"content\": \"a\"}, {\"role\": \"robot\", \"content\": \"b\"}]",
                "messages[1].role: \"robot\" is not one of",
            ),
            (
                "[{\"role\": \"user\", \"content\": [{\"type\": \"image\"}]}]",
                "messages[0].content[0].type: \"image\" parts are not supported",
            ),
            (
                "[{\"role\": \"user\", \"content\": [{\"type\": \"text\", \"text\": 3}]}]",
                "messages[0].content[0].text: expected a string, found a number",
            ),
            (
                "[{\"role\": 7, \"content\": \"a\"}]",
                "messages[0].role: expected a string, found a number",
            ),
        ];
        for (text, expected) in cases {
            let error = messages_from_json("m.json", text).unwrap_err().to_string();
            assert!(error.starts_with("m.json: "), "{error}");
            assert!(error.contains(expected), "{text}: {error}");
        }
        let ok = "[{\"role\": \"assistant\", \"tool_calls\": []}, {\"role\": \"user\", \"content\": [{\"type\": \"text\", \"text\": \"hi\"}]}]";
        assert_eq!(messages_from_json("m.json", ok).unwrap().len(), 2);
    }

    #[test]
    fn tool_files_need_a_named_function() {
        let error = tools_from_json("t.json", "[{\"type\": \"function\", \"function\": {}}]")
            .unwrap_err()
            .to_string();
        assert!(error.contains("tools[0].function.name"), "{error}");
        assert!(tools_from_json("t.json", "{}").is_err());
    }
}
