//! What `g4 probe-ops` reports: for each op, every arm's availability (with the reason when it
//! cannot run), the arm [`arm_for`] selects, and numerical checks of the selected and composed
//! arms. The report is built from the same predicate the model's dispatch uses.

use super::check::{self, CheckResult, Perf};
use super::contract::{ModelUse, ShapePath};
use super::{arm_for, native_status, Arm, Backend, Op};
use anyhow::Result;
use candle_core::{DType, Device};
use serde::Serialize;

#[derive(Clone, Debug, Serialize)]
pub struct ArmCheck {
    pub ok: bool,
    pub nmse: f64,
    pub max_abs: f64,
    pub by_dtype: Vec<CheckResult>,
}

#[derive(Clone, Debug, Serialize)]
pub struct ArmReport {
    pub backend: String,
    pub kind: &'static str,
    pub status: &'static str,
    pub reason_kind: Option<&'static str>,
    pub reason: Option<String>,
    /// Dtypes this arm can run here.
    pub dtypes: Vec<String>,
    pub check: Option<ArmCheck>,
    pub perf: Vec<Perf>,
}

#[derive(Clone, Debug, Serialize)]
pub struct OpReport {
    pub op: &'static str,
    pub selected_arm: String,
    /// Every dtype's selected arm passed its check in that dtype.
    pub selected_ok: bool,
    /// Whether the model calls the op (and if not, where it is meant to be used).
    pub model_use: ModelUse,
    /// Shapes the native arm hands to another path, each covered by a check case.
    pub shape_paths: &'static [ShapePath],
    /// Set when none of the requested dtypes applies to the op (e.g. argmax runs on f32
    /// logits only): nothing was checked, and that is not a failure.
    pub not_applicable: Option<String>,
    pub arms: Vec<ArmReport>,
}

impl OpReport {
    /// The selected arm passed its check and the op has an arm that runs here.
    pub fn ok(&self) -> bool {
        self.not_applicable.is_some()
            || self.selected_ok && self.arms.iter().any(|a| a.status == "available")
    }
}

pub struct ProbeOptions {
    pub dtypes: Vec<DType>,
    pub seed: u64,
    pub perf: bool,
}

pub fn probe(op: Op, device: &Device, options: &ProbeOptions) -> Result<OpReport> {
    let dtypes: Vec<DType> = options
        .dtypes
        .iter()
        .copied()
        .filter(|d| op.contract().spec.dtypes.contains(d))
        .collect();
    let contract = op.contract();
    if dtypes.is_empty() {
        let names: Vec<&str> = contract
            .spec
            .dtypes
            .iter()
            .map(|&d| crate::device::dtype_name(d))
            .collect();
        return Ok(OpReport {
            op: op.name(),
            selected_arm: "none".to_string(),
            selected_ok: true,
            model_use: contract.spec.model_use,
            shape_paths: contract.spec.shape_paths,
            not_applicable: Some(format!("{} runs in {} only", op.name(), names.join(", "))),
            arms: Vec::new(),
        });
    }
    let mut arms = Vec::new();
    for backend in Backend::ALL {
        let statuses: Vec<(DType, Result<(), super::Unavailable>)> = dtypes
            .iter()
            .map(|&d| (d, native_status(op, backend, device, d)))
            .collect();
        let runnable: Vec<DType> = statuses
            .iter()
            .filter(|(_, s)| s.is_ok())
            .map(|(d, _)| *d)
            .collect();
        let first_reason = statuses.iter().find_map(|(_, s)| s.clone().err());
        arms.push(report_arm(
            op,
            Arm::Native(backend),
            device,
            &runnable,
            first_reason,
            options,
        )?);
    }
    arms.push(report_arm(
        op,
        Arm::Composed,
        device,
        &dtypes,
        None,
        options,
    )?);

    let mut selected: Vec<(String, Vec<&'static str>)> = Vec::new();
    for &dtype in &dtypes {
        let arm = arm_for(op, device, dtype).name();
        match selected.iter_mut().find(|(a, _)| *a == arm) {
            Some((_, ds)) => ds.push(crate::device::dtype_name(dtype)),
            None => selected.push((arm, vec![crate::device::dtype_name(dtype)])),
        }
    }
    let selected_arm = if selected.len() == 1 {
        selected[0].0.clone()
    } else {
        selected
            .iter()
            .map(|(a, ds)| format!("{a} ({})", ds.join(",")))
            .collect::<Vec<_>>()
            .join(", ")
    };
    let selected_ok = dtypes.iter().all(|&dtype| {
        let arm = arm_for(op, device, dtype).name();
        let dtype = crate::device::dtype_name(dtype);
        arms.iter()
            .filter(|a| a.backend == arm)
            .filter_map(|a| a.check.as_ref())
            .flat_map(|c| &c.by_dtype)
            .any(|c| c.dtype == dtype && c.ok)
    });
    Ok(OpReport {
        op: op.name(),
        selected_arm,
        selected_ok,
        model_use: contract.spec.model_use,
        shape_paths: contract.spec.shape_paths,
        not_applicable: None,
        arms,
    })
}

fn report_arm(
    op: Op,
    arm: Arm,
    device: &Device,
    dtypes: &[DType],
    reason: Option<super::Unavailable>,
    options: &ProbeOptions,
) -> Result<ArmReport> {
    let kind = if arm == Arm::Composed {
        "composed"
    } else {
        "native"
    };
    if dtypes.is_empty() {
        let reason = reason.unwrap_or(super::Unavailable::NoKernel {
            detail: "no requested dtype applies".to_string(),
        });
        return Ok(ArmReport {
            backend: arm.name(),
            kind,
            status: "unavailable",
            reason_kind: Some(reason.kind()),
            reason: Some(reason.to_string()),
            dtypes: vec![],
            check: None,
            perf: vec![],
        });
    }
    let by_dtype = dtypes
        .iter()
        .map(|&d| check::check_arm(op, arm, device, d, options.seed))
        .collect::<candle_core::Result<Vec<_>>>()?;
    // Timing only what passed: a failing arm has nothing worth timing.
    let perf = if options.perf {
        dtypes
            .iter()
            .zip(&by_dtype)
            .filter(|(_, c)| c.ok)
            .filter_map(|(&d, _)| check::time_arm(op, arm, device, d, options.seed).ok())
            .collect()
    } else {
        vec![]
    };
    Ok(ArmReport {
        backend: arm.name(),
        kind,
        status: "available",
        reason_kind: None,
        reason: None,
        dtypes: dtypes
            .iter()
            .map(|&d| crate::device::dtype_name(d).to_string())
            .collect(),
        check: Some(ArmCheck {
            ok: by_dtype.iter().all(|c| c.ok),
            nmse: by_dtype.iter().map(|c| c.nmse).fold(0.0, f64::max),
            max_abs: by_dtype.iter().map(|c| c.max_abs).fold(0.0, f64::max),
            by_dtype,
        }),
        perf,
    })
}
