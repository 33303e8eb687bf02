//! Graph decode steps against eager ones over sequences long enough to make the graph path
//! re-reserve its cache (256 → 512 → 768 → 1024 positions) and to wrap the sliding rings many
//! times, after prompts that end before and after a reservation boundary, and after one whose
//! prefill pieces grew the cache past the graph's first capacity (1024 slots, 768 attended). Eager decoding is the path the
//! goldens prove token-exact; here both see the same tokens and must give the same logits.

use candle_core::{DType, Device, Tensor};
use g4::model::ple::PlePlacement;
use g4::model::session::{DecodePath, Session};
use g4::model::source::ModelSource;
use g4::model::Gemma4;

/// f32 logits of two decode paths differ only by summation order over masked slots.
const MAX_LOGIT_DIFFERENCE: f32 = 1e-3;

fn embedded_model() -> Gemma4 {
    let source = ModelSource::Embedded;
    let checkpoint = source.checkpoint(&Device::Cpu, DType::F32).unwrap();
    Gemma4::from_checkpoint(source.config().unwrap(), &checkpoint, PlePlacement::Device).unwrap()
}

/// The embedded model split over two CPU ranks (tensor parallelism): both of its sessions below
/// run on both ranks at once, interleaved.
fn embedded_model_split() -> Gemma4 {
    let source = ModelSource::Embedded;
    let devices = [Device::Cpu, Device::Cpu];
    let config = source.config().unwrap();
    Gemma4::load_on(
        &source,
        config,
        &devices,
        DType::F32,
        PlePlacement::Device,
        None,
    )
    .unwrap()
}

fn max_difference(a: &Tensor, b: &Tensor) -> f32 {
    (a - b)
        .unwrap()
        .abs()
        .unwrap()
        .max(0)
        .unwrap()
        .to_scalar::<f32>()
        .unwrap()
}

#[test]
fn graph_steps_match_eager_steps_across_cache_growth() {
    for model in [embedded_model(), embedded_model_split()] {
        graph_steps_match_eager_steps(&model);
    }
}

fn graph_steps_match_eager_steps(model: &Gemma4) {
    let context = model.config().max_position_embeddings;
    for prompt_len in [5usize, 300, 600] {
        let prompt: Vec<u32> = (0..prompt_len)
            .map(|i| 3 + (i * 7919 % 500) as u32)
            .collect();
        let mut eager = Session::new(model, DecodePath::Eager);
        let mut graph = Session::new(model, DecodePath::Graph);
        let mut next = g4::model::sampling::greedy(eager.prefill(&prompt).unwrap()).unwrap();
        graph.prefill(&prompt).unwrap();
        for position in prompt_len..context {
            let expected = eager.decode(next).unwrap().clone();
            let got = graph.decode(next).unwrap();
            let difference = max_difference(&expected, got);
            assert!(
                difference <= MAX_LOGIT_DIFFERENCE,
                "prompt {prompt_len}, position {position}: logits differ by {difference}"
            );
            next = g4::model::sampling::greedy(&expected).unwrap();
        }
        assert_eq!(graph.len(), context);
        assert!(
            graph.decode(next).is_err(),
            "a step past the context must be refused"
        );
    }
}

/// A prompt longer than `PREFILL_PIECE` is prefilled in pieces within one call; the logits
/// after it, and after further tokens (which attend to every cached position, across the seam
/// and the sliding window), must be those of feeding the same tokens one at a time.
#[test]
fn a_prompt_prefilled_in_pieces_gives_the_logits_of_one_token_at_a_time() {
    use g4::model::session::PREFILL_PIECE;
    let model = embedded_model();
    let length = 2 * PREFILL_PIECE - 100;
    assert!(length + 8 < model.config().max_position_embeddings);
    let prompt: Vec<u32> = (0..length).map(|i| 3 + (i * 7919 % 500) as u32).collect();
    let mut pieces = Session::new(&model, DecodePath::Eager);
    let mut one_by_one = Session::new(&model, DecodePath::Eager);
    let mut got = pieces.prefill(&prompt).unwrap().clone();
    let mut expected = None;
    for &token in &prompt {
        expected = Some(one_by_one.decode(token).unwrap().clone());
    }
    for step in 0..8 {
        let expected_logits = expected.unwrap();
        let difference = max_difference(&expected_logits, &got);
        assert!(
            difference <= MAX_LOGIT_DIFFERENCE,
            "{step} tokens after the prompt: logits differ by {difference}"
        );
        let next = g4::model::sampling::greedy(&expected_logits).unwrap();
        got = pieces.decode(next).unwrap().clone();
        expected = Some(one_by_one.decode(next).unwrap().clone());
    }
}
