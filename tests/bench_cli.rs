//! `g4 bench` end to end on the embedded model: tests at several context depths, one row each
//! (prompt tests with the share of their time the host spent queuing them), and a depth past
//! the model's context refused before anything runs.

mod common;
use common::g4;

#[test]
fn every_test_runs_at_every_depth() {
    let out = g4(&[
        "bench", "--tests", "pp8,tg4", "--depth", "0,40", "-r", "1", "--json",
    ]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let report: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let rows: Vec<(String, u64)> = report["results"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| {
            let m = &r["measurement"];
            assert!(m["tokens_per_s_mean"].as_f64().unwrap() > 0.0, "{m}");
            // How much of a prompt's forward the host spent queuing it: a share, pp tests only.
            let share = m["host_queued_share"].as_f64();
            match m["test"].as_str().unwrap().starts_with("pp") {
                true => assert!(share.is_some_and(|s| s > 0.0 && s <= 1.0), "{m}"),
                false => assert!(m["host_queued_share"].is_null(), "{m}"),
            }
            (
                m["test"].as_str().unwrap().to_string(),
                m["depth"].as_u64().unwrap(),
            )
        })
        .collect();
    let expected = [("pp8", 0), ("pp8 @ d40", 40), ("tg4", 0), ("tg4 @ d40", 40)];
    assert_eq!(
        rows,
        expected.map(|(t, d)| (t.to_string(), d)).to_vec(),
        "one row per test and depth, in that order"
    );
}

#[test]
fn a_depth_past_the_context_is_refused() {
    // The embedded model's context is 1024 positions: 1020 + tg4's 5 do not fit.
    let out = g4(&["bench", "--tests", "tg4", "--depth", "1020", "-r", "1"]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success());
    assert!(
        stderr.contains("tg4 at depth 1020") && stderr.contains("1025 positions"),
        "{stderr}"
    );
    assert_eq!(stderr.trim().lines().count(), 1, "{stderr}");
}

/// Counts too large to add up must be refused like any other, not wrap round.
#[test]
fn counts_past_any_context_are_refused_without_wrapping() {
    let max = usize::MAX.to_string();
    for (tests, depth) in [("tg4", max.as_str()), (&*format!("tg{max}"), "0")] {
        let out = g4(&["bench", "--tests", tests, "--depth", depth, "-r", "1"]);
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success());
        assert!(
            stderr.contains("but the model's context is 1024"),
            "{stderr}"
        );
        assert_eq!(stderr.trim().lines().count(), 1, "{stderr}");
    }
}
