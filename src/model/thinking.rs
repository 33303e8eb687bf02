//! Which generated text is reasoning and which is the answer. Gemma-4 writes its reasoning
//! inside a channel, `<|channel>thought\n … <channel|>`, before the answer; the markers are
//! special tokens, so the split is made on token ids, and the channel's name line is dropped.

use super::tokenizer::ChannelMarkers;

/// Where a piece of generated text belongs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Channel {
    Reasoning,
    Answer,
}

#[derive(Clone, Debug, PartialEq, Eq)]
enum State {
    Answer,
    /// Inside a channel, before the end of its name line; holds the name read so far.
    Header(String),
    Reasoning,
}

/// A channel name longer than this without a newline is not a name: it is reasoning.
const MAX_HEADER_CHARS: usize = 64;

pub struct ChannelSplitter {
    markers: ChannelMarkers,
    state: State,
}

impl ChannelSplitter {
    /// Starts where the prompt leaves off: a prompt that ends inside an open channel (a
    /// template that prefills `<|channel>thought\n`) makes the first tokens reasoning.
    /// `text_after` decodes the prompt's tokens after a position (its last open marker).
    pub fn after_prompt(
        markers: ChannelMarkers,
        prompt_ids: &[u32],
        text_after: impl FnOnce(usize) -> anyhow::Result<String>,
    ) -> anyhow::Result<Self> {
        let mut splitter = ChannelSplitter {
            markers,
            state: State::Answer,
        };
        let last =
            |marker: Option<u32>| marker.and_then(|m| prompt_ids.iter().rposition(|&t| t == m));
        if let (Some(open), close) = (last(markers.open), last(markers.close)) {
            if close.is_none_or(|c| c < open) {
                splitter.state = State::Header(String::new());
                splitter.route(&text_after(open + 1)?);
            }
        }
        Ok(splitter)
    }

    /// Takes a generated token id after its text was routed: a channel marker switches state.
    pub fn on_token(&mut self, id: u32) {
        if Some(id) == self.markers.open {
            self.state = State::Header(String::new());
        } else if Some(id) == self.markers.close {
            self.state = State::Answer;
        }
    }

    /// The channel a piece of decoded text belongs to; `None` while it is (part of) the
    /// channel's name line, which is dropped.
    pub fn route(&mut self, piece: &str) -> Option<(Channel, String)> {
        let name = match &mut self.state {
            State::Answer => return Some((Channel::Answer, piece.to_string())),
            State::Reasoning => return Some((Channel::Reasoning, piece.to_string())),
            State::Header(name) => name,
        };
        name.push_str(piece);
        let rest = match name.find('\n') {
            Some(end) => name[end + 1..].to_string(),
            None if name.chars().count() > MAX_HEADER_CHARS => std::mem::take(name),
            None => return None,
        };
        self.state = State::Reasoning;
        (!rest.is_empty()).then_some((Channel::Reasoning, rest))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MARKERS: ChannelMarkers = ChannelMarkers {
        open: Some(100),
        close: Some(101),
    };

    fn splitter(markers: ChannelMarkers, prompt: &[u32], after_open: &str) -> ChannelSplitter {
        ChannelSplitter::after_prompt(markers, prompt, |_| Ok(after_open.to_string())).unwrap()
    }

    /// Feeds (token, decoded piece) pairs and collects what each channel received.
    fn run(splitter: &mut ChannelSplitter, steps: &[(u32, &str)]) -> (String, String) {
        let (mut reasoning, mut answer) = (String::new(), String::new());
        for &(id, piece) in steps {
            match splitter.route(piece) {
                Some((Channel::Reasoning, text)) => reasoning.push_str(&text),
                Some((Channel::Answer, text)) => answer.push_str(&text),
                None => {}
            }
            splitter.on_token(id);
        }
        (reasoning, answer)
    }

    #[test]
    fn a_thought_channel_is_reasoning_and_its_name_line_is_dropped() {
        let mut s = splitter(MARKERS, &[2, 105, 7], "");
        let steps = [
            (100, ""),
            (7, "thou"),
            (8, "ght\nLet"),
            (9, " me see."),
            (101, ""),
            (10, "The sea"),
            (11, " is wide."),
        ];
        assert_eq!(
            run(&mut s, &steps),
            ("Let me see.".into(), "The sea is wide.".into())
        );
    }

    #[test]
    fn a_prompt_ending_inside_a_channel_starts_in_reasoning() {
        let mut s = splitter(MARKERS, &[2, 100, 7, 8], "thought\n");
        let steps = [(9, "hmm"), (101, ""), (10, "yes")];
        assert_eq!(run(&mut s, &steps), ("hmm".into(), "yes".into()));
        let mut s = splitter(MARKERS, &[2, 100], "");
        let steps = [(7, "thought\n"), (9, "hmm"), (101, ""), (10, "yes")];
        assert_eq!(run(&mut s, &steps), ("hmm".into(), "yes".into()));
    }

    #[test]
    fn a_closed_channel_in_the_prompt_leaves_the_answer_open() {
        let mut s = splitter(MARKERS, &[2, 100, 7, 8, 101], "thought\n");
        assert_eq!(
            run(&mut s, &[(10, "Answer")]),
            (String::new(), "Answer".into())
        );
    }

    #[test]
    fn without_markers_everything_is_answer() {
        let mut s = splitter(ChannelMarkers::default(), &[2, 100], "");
        assert_eq!(
            run(&mut s, &[(100, "x"), (101, "y")]),
            (String::new(), "xy".into())
        );
    }

    #[test]
    fn a_name_without_a_newline_turns_into_reasoning() {
        let mut s = splitter(MARKERS, &[2], "");
        let long = "a".repeat(MAX_HEADER_CHARS + 1);
        assert_eq!(
            run(&mut s, &[(100, ""), (7, &long)]),
            (long.clone(), String::new())
        );
    }
}
