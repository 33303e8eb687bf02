//! Every committed golden, token-exact on CPU in f32 (whole-prompt and chunked prefill, the
//! per-layer table on the device and in host memory), and the same goldens in bf16 with their
//! top-1 agreement reported.

use candle_core::{DType, Device};
use g4::golden::{self, GoldenFile};
use g4::model::config::Fp8Activations;
use g4::model::ple::PlePlacement;
use g4::model::session::DecodePath;
use g4::model::source::ModelSource;
use g4::model::Gemma4;
use std::path::{Path, PathBuf};

fn committed_goldens() -> Vec<PathBuf> {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("golden");
    let files = golden::discover(&[root]).expect("committed goldens");
    assert!(
        files.len() >= 4,
        "expected at least four golden variants, found {}",
        files.len()
    );
    files
}

fn load(path: &Path, dtype: DType, ple: PlePlacement) -> (GoldenFile, Gemma4) {
    let golden = GoldenFile::load(path).unwrap();
    let model = Gemma4::load(&golden.model_dir(path), &Device::Cpu, dtype, ple)
        .unwrap_or_else(|e| panic!("{}: {e:#}", path.display()));
    (golden, model)
}

/// Graph decode steps (device-held positions, whole-buffer masks, MoE routing on the device)
/// are checked on every golden; on CPU they run uncaptured, which proves their arithmetic. A
/// per-layer table in host memory goes through the same gathers and copies as on a GPU.
#[test]
fn every_golden_is_token_exact_in_f32() {
    let mut host_tables = 0;
    for (path, ple) in committed_goldens()
        .into_iter()
        .flat_map(|p| [(p.clone(), PlePlacement::Device), (p, PlePlacement::Host)])
    {
        let (golden, model) = load(&path, DType::F32, ple);
        match model.ple_placement() {
            None if ple == PlePlacement::Host => continue,
            Some(placed) => assert_eq!(placed, ple, "{}", path.display()),
            None => {}
        }
        host_tables += usize::from(ple == PlePlacement::Host);
        let paths = [DecodePath::Eager, DecodePath::Graph];
        for case in &golden.cases {
            for (chunk, &decode) in [None, Some(3), Some(8)]
                .into_iter()
                .flat_map(|c| paths.iter().map(move |p| (c, p)))
            {
                let result = golden::run_case(&model, case, chunk, decode).unwrap();
                assert!(
                    result.token_exact(),
                    "{} / {} (prefill chunk {chunk:?}, {decode:?} decode, PLE {ple:?}): {}/{} then {:?}",
                    path.display(),
                    case.name,
                    result.matched,
                    result.total,
                    result.divergence
                );
            }
        }
    }
    assert!(
        host_tables >= 4,
        "expected at least four goldens with a per-layer table, found {host_tables}"
    );
}

/// Every golden token-exact in f32 with the model split by tensor parallelism over 2 and 4
/// ranks on the CPU (the same split and all-reduces as over GPUs, summed in host memory), with
/// chunked prefill, graph decode steps (run uncaptured here) and the per-layer table in host
/// memory too; a golden whose heads do not split
/// over 4 is skipped at 4 only, and at least four goldens must run at each size.
#[test]
fn every_golden_is_token_exact_split_over_cpu_ranks() {
    for ranks in [2, 4] {
        let devices = vec![Device::Cpu; ranks];
        let mut ran = 0;
        for path in committed_goldens() {
            let golden = GoldenFile::load(&path).unwrap();
            let source = ModelSource::Dir(golden.model_dir(&path));
            let config = source.config().unwrap();
            if ranks == 4 && !config.num_attention_heads.is_multiple_of(4) {
                continue;
            }
            if config.fp8_activations == Fp8Activations::DynamicPerToken {
                let refused = Gemma4::load_on(
                    &source,
                    config,
                    &devices,
                    DType::F32,
                    PlePlacement::Host,
                    None,
                );
                let error = format!("{:#}", refused.err().expect("FP8_DYNAMIC split over ranks"));
                assert!(error.contains("run on one device"), "{error}");
                continue;
            }
            for ple in [PlePlacement::Device, PlePlacement::Host] {
                let model =
                    Gemma4::load_on(&source, config.clone(), &devices, DType::F32, ple, None)
                        .unwrap_or_else(|e| panic!("{} on {ranks} ranks: {e:#}", path.display()));
                assert!(model.is_parallel());
                for case in &golden.cases {
                    for (chunk, decode) in [
                        (None, DecodePath::Eager),
                        (Some(5), DecodePath::Eager),
                        (None, DecodePath::Graph),
                    ] {
                        let result = golden::run_case(&model, case, chunk, decode).unwrap();
                        assert!(
                            result.token_exact(),
                            "{} / {} on {ranks} ranks (chunk {chunk:?}, {decode:?} decode, PLE {ple:?}): {}/{} then {:?}",
                            path.display(),
                            case.name,
                            result.matched,
                            result.total,
                            result.divergence
                        );
                    }
                }
            }
            ran += 1;
        }
        assert!(ran >= 4, "{ran} goldens split over {ranks} ranks");
    }
}

/// Per golden, the lowest bf16 top-1 agreement (teacher-forced, against the f32 reference)
/// accepted: about 0.15 under what each measured when its floor was set (CPU, 2026-11-30:
/// kjv-tiny 1.00, chat-fixture 0.90, e2b 0.89, e4b 0.90, fp8-moe 0.81, released-combo 0.64,
/// moe-keqv 0.58). A golden not listed needs `DEFAULT_BF16_FLOOR`.
const BF16_FLOORS: [(&str, f64); 7] = [
    ("kjv-tiny", 0.95),
    ("chat-fixture", 0.75),
    ("e2b-style", 0.75),
    ("e4b-style-bf16", 0.75),
    ("fp8-moe", 0.65),
    ("released-combo", 0.5),
    ("moe-keqv", 0.45),
];
const DEFAULT_BF16_FLOOR: f64 = 0.75;

/// Goldens whose bf16 agreement says nothing about g4: the FP8_DYNAMIC goldens round every
/// projection's input to e4m3, which turns bf16's rounding into whole e4m3 steps. transformers'
/// own bf16 agrees with its f32 on 6 of 72 teacher-forced steps of fp8-dynamic (g4's: 4) and on
/// 11 of 72 of fp8-dynamic-moe (g4's: 9). Their bf16 arithmetic is checked op by op instead
/// (`round_rows_e4m3`'s and `moe_experts_fp8_dynamic`'s contracts in bf16).
const BF16_UNJUDGED: [&str; 2] = ["fp8-dynamic", "fp8-dynamic-moe"];

/// bf16 is not expected to be token-exact against an f32 reference on random tiny models, whose
/// logits are unusually sensitive; a broken bf16 path (wrong rounding of the embedding scale,
/// softmax in bf16, a broken MoE branch, …) drops far below its golden's floor. Each golden is
/// judged on its own, so one variant breaking cannot hide behind the others.
#[test]
fn bf16_top1_agreement_is_reported_and_stays_above_each_goldens_floor() {
    let mut low = Vec::new();
    for path in committed_goldens() {
        let name = path
            .parent()
            .unwrap()
            .file_name()
            .unwrap()
            .to_string_lossy()
            .into_owned();
        if BF16_UNJUDGED.contains(&name.as_str()) {
            eprintln!("bf16 {name}: not judged (BF16_UNJUDGED)");
            continue;
        }
        let (golden, model) = load(&path, DType::BF16, PlePlacement::Host);
        let (mut agreed, mut total) = (0, 0);
        for case in &golden.cases {
            let result = golden::run_case(&model, case, None, DecodePath::Eager).unwrap();
            eprintln!(
                "bf16 {name} / {}: top-1 agreement {}/{}, greedy matches {} steps",
                case.name, result.top1_agreement, result.total, result.matched
            );
            // Each teacher-forced step either agrees or is listed, and the first listed is
            // where free-running greedy left the reference.
            assert_eq!(
                result.top1_agreement + result.disagreements.len(),
                result.total
            );
            assert_eq!(
                result.disagreements.first(),
                result.divergence.as_ref().map(|d| &d.step)
            );
            agreed += result.top1_agreement;
            total += result.total;
        }
        let fraction = agreed as f64 / total as f64;
        let floor = BF16_FLOORS
            .iter()
            .find(|(golden, _)| *golden == name)
            .map_or(DEFAULT_BF16_FLOOR, |&(_, floor)| floor);
        eprintln!("bf16 {name}: top-1 agreement {agreed}/{total} = {fraction:.3} (floor {floor})");
        if fraction < floor {
            low.push(format!("{name} {fraction:.3} < {floor}"));
        }
    }
    assert!(
        low.is_empty(),
        "bf16 top-1 agreement fell: {}",
        low.join(", ")
    );
}
