"""Cost-model accuracy on unseen models: leave-one-model-family-out over the zoo, per target.

For each target kind in the profile and each zoo model family (``cnn`` with ``cnn-base``...), the
cost model is trained on the other families' kernels and predicts every kernel of the held-out
models (see :mod:`autoplace.cost_model.evaluate` for the split, the lookup-first variant and the
metrics). Prints a per-model table and writes, under ``experiments/results/<the profile folder's name>/``
(``--out``; the Zen 5's figures of sessions 1-13 lie in ``experiments/results/`` itself):

``cost_model_lofo_models.csv``   one row per (cost model, target, held-out model): MAPE, MdAPE,
                                 Spearman, end-to-end errors (pure model, lookup-first, oracle)
``cost_model_lofo_units.csv``    one row per held-out kernel: measured and predicted latency
``cost_model_by_op_class.csv``   error and share of time per anchor op class (where the error is)
``cost_model_learning_curve.csv`` accuracy vs number of training records
``cost_model_eval.json``         all of the above summarised, the acceptance checks, provenance
``cost_model_summary.md``        the tables in Markdown (for the README)

    python experiments/cost_model_eval.py [--profile profiles/<hardware id>] [--quick]

``--remeasure`` also times each zoo model end to end on this machine now (the profiler's own
``model_record``) and reports the predictions' error against those fresh timings as well.

Error bands, leaving one architecture out (``--bands-only`` runs just this part; the full run does it too):
every model family the profile holds (zoo models, the architecture suite, anything profiled; the
training-only sets ``grid-*``, ``ops-*`` and the sweep never held out) is held out in turn, the cost model is
trained on the rest *and calibrated on the rest alone* (nested leave-one-family-out), and every held-out
model is priced purely by prediction (no kernel of its family measured: ``measure="never"``). Written:

``cost_model_bands.csv``         one row per held-out model: Spearman, end-to-end error, kernel band
                                 coverage, end-to-end band under each combination rule
``cost_model_bands_units.csv``   one row per held-out kernel: prediction, band, measured, inside or not
``cost_model_bands.md``          the tables, the band variants and combination rules compared, acceptance

    python experiments/cost_model_eval.py --bands-only [--profile DIR]
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import platform
import time
import warnings

import numpy as np
import pandas as pd

from autoplace.cost_model import XGBCostModel, features
from autoplace.cost_model.cost_model import BAND_NOMINAL, NEVER_HELD_OUT
from autoplace.cost_model.evaluate import (
    by_op_class,
    learning_curve,
    leave_one_family_out,
    model_unit_keys,
    summarize,
)
from autoplace.cost_model.table import BAND_COMBINE, BAND_COMBINES, PREDICTED, plan_band
from autoplace.profile import ProfileStore

RESULTS = os.path.join(os.path.dirname(os.path.abspath(__file__)), "results")

def _no_grid(units: pd.DataFrame, fold: int) -> pd.DataFrame:
    """Training records without the stride grid's kernels (family ``grid``)."""
    return units[~units["model"].astype(str).str.startswith("grid-")]


#: Cost models compared: the default, ablations (what each feature group buys) and the baseline.
VARIANTS = {
    "xgb": ("xgb", {}),
    "xgb-no-mem-features": ("xgb", {"drop_features": ("mem_",)}),
    "xgb-no-work-margin": ("xgb", {"base_margin": None}),
    "xgb-op-name-features": ("xgb", {"op_features": True}),
    "roofline": ("roofline", {}),
    # The same model without the stride grid (`autoplace profile --zoo grid`) in its training data.
    "xgb-without-grid": ("xgb", {"train_filter": _no_grid}),
}

#: Acceptance (issue 11), one set for the leave-one-family-out check and the band evaluation: every held-out
#: model's pure end-to-end prediction within 15% of its measured latency, kernel Spearman >= 0.95 per held-out
#: model with at least 3 distinct kernels (until session 61 this check took 20% and 0.9, looser than the issue).
SPEARMAN_MIN = 0.95
E2E_MAX_ERR = 0.15


def _fmt(v, pct=False):
    if v is None or (isinstance(v, float) and not np.isfinite(v)):
        return "n/a"
    return f"{100 * v:+.1f}%" if pct else f"{v:.3f}"


def remeasure(records: pd.DataFrame, names, target: str = "llvm") -> pd.DataFrame:
    """Time zoo models end to end now, as the profiler does (``autoplace.profile.job.model_record``)."""
    from autoplace import op_graph, zoo
    from autoplace.profile import extract_units
    from autoplace.profile.job import model_record
    from autoplace.targets import TargetSet

    targets = TargetSet({"t": target})
    rows = []
    recorded = model_unit_keys(records, target)
    for name in names:
        model = zoo.parse(name)
        graph = op_graph(model)
        units = extract_units(model, targets["t"].target, graph=graph)
        rec = model_record(model, graph, units, targets, "t", target)
        same = [u.key for u in units] == recorded.get(name)
        rows.append(
            dict(target=target, model=name, e2e_fresh_us=rec.get("median_us", np.nan), same_kernels=same)
        )
        print(
            f"  re-measured {name}: {rec.get('median_us', float('nan')):.1f} us (kernels as profiled: {same})"
        )
    return pd.DataFrame(rows)


def markdown_table(df: pd.DataFrame) -> str:
    """A DataFrame as a Markdown table (floats to 3 decimals)."""

    def cell(v):
        if isinstance(v, (float, np.floating)):
            return "n/a" if not np.isfinite(v) else f"{v:.3f}"
        return str(v)

    rows = ["| " + " | ".join(map(str, df.columns)) + " |", "|" + "---|" * len(df.columns)]
    rows += ["| " + " | ".join(cell(v) for v in r) + " |" for r in df.itertuples(index=False)]
    return "\n".join(rows)


def _clean(value):
    """JSON-safe: NaN/inf -> None, numpy scalars -> Python, tuples -> lists."""
    if isinstance(value, dict):
        return {str(k): _clean(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_clean(v) for v in value]
    if isinstance(value, (np.floating, float)):
        return float(value) if np.isfinite(value) else None
    if isinstance(value, np.integer):
        return int(value)
    if isinstance(value, np.bool_):
        return bool(value)
    return value


def prior_params(prior: str | None) -> dict:
    """The XGBoost parameters of ``--prior`` (:class:`~autoplace.cost_model.XGBCostModel`'s ``prior``): none without."""
    return {"prior": prior} if prior else {}


def seed_spread(records: pd.DataFrame, seeds: int, target: str | None = None, prior: str | None = None) -> pd.DataFrame:
    """The default model's end-to-end error (pure) per held-out model for XGBoost seeds 0..seeds-1:
    one row per (target, model) with each seed's error, their mean and the worst (largest |error|)."""
    runs = []
    for seed in range(seeds):
        res = leave_one_family_out(records, "xgb", target=target, random_state=seed, **prior_params(prior))
        m = res["models"]
        if "e2e_pure_err" in m:
            runs.append(m.set_index(["target", "model"])["e2e_pure_err"].rename(f"seed{seed}"))
    if not runs:
        return pd.DataFrame()
    table = pd.concat(runs, axis=1)
    values = table.to_numpy()
    table["mean"] = values.mean(axis=1)
    table["worst"] = values[np.arange(len(values)), np.abs(values).argmax(axis=1)]
    return table.reset_index()


def retest_spearman(records: pd.DataFrame, units: pd.DataFrame) -> pd.DataFrame:
    """How alike two timings of the same kernels rank them: per held-out model and target, the Spearman
    correlation of its distinct kernels' first and second round medians (``round_medians_us`` of the
    records the cost model trains on; NaN with fewer than 4 such kernels). The ceiling of the kernel
    Spearman any cost model can reach against one profile."""
    from scipy.stats import spearmanr

    from autoplace.cost_model.cost_model import training_units

    latest = training_units(records)
    if "round_medians_us" not in latest:
        return pd.DataFrame(columns=["target", "model", "retest_spearman"])
    rounds = {(t, k): r for t, k, r in zip(latest["target"], latest["key"], latest["round_medians_us"])
              if isinstance(r, list) and len(r) >= 2}
    rows = []
    for (target, model), group in units.groupby(["target", "model"]):
        pairs = [rounds[(target, k)][:2] for k in dict.fromkeys(group["key"]) if (target, k) in rounds]
        rho = spearmanr(*zip(*pairs))[0] if len(pairs) >= 4 else np.nan
        rows.append(dict(target=target, model=model, retest_spearman=float(rho)))
    return pd.DataFrame(rows)


def check(models: pd.DataFrame, seeds: pd.DataFrame | None = None) -> dict:
    """Acceptance: Spearman >= :data:`SPEARMAN_MIN` for every held-out model with >= 3 distinct kernels, and the
    predicted end-to-end latency of every held-out model within :data:`E2E_MAX_ERR` (pure, lookup-first, oracle;
    and, with ``seeds``, the worst seed)."""
    out = {}
    pct = round(E2E_MAX_ERR * 100)
    for target, m in models.groupby("target"):
        ranked = m[m["distinct"] >= 3]
        entry = {
            "spearman_min": float(ranked["spearman"].min()),
            "spearman_ok": bool((ranked["spearman"] >= SPEARMAN_MIN).all()),
            "spearman_failing": ranked.loc[ranked["spearman"] < SPEARMAN_MIN, "model"].tolist(),
        }
        for col in (
            "e2e_pure_err",
            "e2e_lookup_err",
            "e2e_oracle_err",
            "e2e_pure_vs_oracle_err",
            "e2e_fresh_err",
        ):
            if col in m:
                bad = m.loc[m[col].abs() > E2E_MAX_ERR, "model"].tolist()
                entry[f"{col}_within_{pct}pct"] = int((m[col].abs() <= E2E_MAX_ERR).sum())
                entry[f"{col}_failing"] = bad
        if seeds is not None and not seeds.empty:
            worst = seeds[seeds["target"] == target]
            entry[f"e2e_pure_err_worst_seed_within_{pct}pct"] = int((worst["worst"].abs() <= E2E_MAX_ERR).sum())
            entry["e2e_pure_err_worst_seed_failing"] = worst.loc[worst["worst"].abs() > E2E_MAX_ERR, "model"].tolist()
        entry["models"] = len(m)
        out[target] = entry
    return out


def markdown(
    models: pd.DataFrame,
    summary: pd.DataFrame,
    classes: pd.DataFrame,
    curve: pd.DataFrame,
    variants: pd.DataFrame,
    seeds: pd.DataFrame | None = None,
) -> str:
    lines = [
        "### Cost model: leave-one-model-family-out",
        "",
        ("Held out: a model together with its size variants (strict family split). *pure*: the model never "
        "saw any kernel of the held-out family; *lookup*: kernels the held-out model shares with the "
        "training models use their measurement. *oracle*: measured kernel latencies in the same end-to-end "
        "sum (the error no cost model can remove). The stride grid (`autoplace profile --zoo grid`: "
        "single matmul and conv2d kernels over a fixed grid of sizes, `autoplace.zoo.regime_grid`) is "
        "training data in every fold and never held out; `xgb-without-grid` below is the same model "
        "without it."),
        "",
        ("Errors are predicted / measured - 1. MAPE, MdAPE and Spearman are over the held-out model's "
        "distinct kernels (pure model); `retest_spearman` ranks the same kernels by their first and "
        "second profiling rounds (how far measurement noise alone limits Spearman). `e2e_*_err` compare the predicted end-to-end latency (VM invocation "
        "+ launches + kernels, see `autoplace.cost_model.evaluate.end_to_end_us`) with the profile's "
        "`kind=\"model\"` record; `e2e_pure_vs_oracle_err` with the same sum over measured kernels; "
        "`e2e_fresh_err` (with `--remeasure`) with a fresh end-to-end timing on the machine running the "
        "script."),
        "",
    ]
    cols = [
        "model",
        "distinct",
        "mape",
        "mdape",
        "spearman",
        "retest_spearman",
        "lookup_measured",
        "e2e_measured_us",
        "e2e_pure_err",
        "e2e_lookup_err",
        "e2e_oracle_err",
        "e2e_pure_vs_oracle_err",
    ]
    if "e2e_fresh_err" in models:
        cols.append("e2e_fresh_err")
    for target, m in models.groupby("target"):
        lines += [f"Target `{target}`:", "", "| " + " | ".join(cols) + " |", "|" + "---|" * len(cols)]
        for _, r in m.iterrows():
            cells = []
            for c in cols:
                v = r.get(c)
                if c in ("model",):
                    cells.append(str(v))
                elif c in ("distinct", "lookup_measured"):
                    cells.append(str(int(v)))
                elif c == "e2e_measured_us":
                    cells.append("n/a" if pd.isna(v) else f"{v:.1f}")
                elif c.endswith("err"):
                    cells.append(_fmt(v, pct=True))
                elif c in ("mape", "mdape"):
                    cells.append(f"{100 * v:.0f}%")
                else:
                    cells.append(_fmt(v))
            lines.append("| " + " | ".join(cells) + " |")
        lines.append("")
    lines += [
        "Pooled over all held-out kernels:",
        "",
        markdown_table(summary),
        "",
        "Where the error is (anchor op class; time_share = share of held-out kernel time):",
        "",
        markdown_table(classes),
        "",
        "What was tried (pooled metrics of each variant):",
        "",
        markdown_table(variants),
        "",
    ]
    if seeds is not None and not seeds.empty:
        lines += [
            ("End-to-end error (pure model) of the default model over XGBoost seeds: changing only the seed "
             "moves single models by several points, so the acceptance check also takes the worst seed:"),
            "",
            markdown_table(seeds),
            "",
        ]
    if not curve.empty:
        agg = (
            curve.groupby(["target", "fraction"])
            .mean(numeric_only=True)
            .reset_index()
            .drop(columns=["repeat"])
        )
        lines += ["Learning curve (mean over repeats):", "", markdown_table(agg), ""]
    return "\n".join(lines)


# -- error bands, leaving one architecture out ------------------------------------------------------------

#: Band tables compared (keyword arguments of ``CostModel.calibrate``); the first is the default.
BAND_VARIANTS = {
    "size+class": {},
    "class only": {"size_scale": False},
    "size+class, plain quantiles": {"conformal": False},
}
#: Acceptance of the band evaluation (issue 11): pure prediction end to end within 15%, Spearman >= 0.95
#: per held-out model (>= 3 distinct kernels), nominal 80% kernel band covering 70-90% of held-out kernels.
BAND_E2E_MAX_ERR = E2E_MAX_ERR
BAND_SPEARMAN_MIN = SPEARMAN_MIN
BAND_COVERAGE_RANGE = (0.7, 0.9)


def subplan_coverage(units: pd.DataFrame, draws: int = 200, seed: int = 0) -> pd.DataFrame:
    """How often the measured kernel time of a random part of a held-out model falls inside the predicted
    band of that part, per combination rule: what a placement does (each device runs a part of the model).

    For each held-out model, ``draws`` times: every distinct kernel is in the part with probability 1/2
    (with all its launches); the part's band is :func:`plan_band` of its kernels' pure predictions and bands
    (kernel time only, no overheads: this checks the combination rule, not the VM's costs).
    """
    rng = np.random.default_rng(seed)
    rows = []
    for (target, model), g in units.groupby(["target", "model"]):
        g = g[np.isfinite(g["pure_lo_us"])]
        if g.empty:
            continue
        counts = g["count"].to_numpy(int)
        for draw in range(draws):
            take = rng.random(len(g)) < 0.5
            if not take.any():
                continue
            part = g[take]
            n = counts[take]
            launches = pd.DataFrame(dict(
                key=np.repeat(part["key"].to_numpy(), n),
                op_class=np.repeat(part["band_class"].to_numpy(), n),
                latency_us=np.repeat(part["pure_us"].to_numpy(float), n),
                band_lo_us=np.repeat(part["pure_lo_us"].to_numpy(float), n),
                band_hi_us=np.repeat(part["pure_hi_us"].to_numpy(float), n),
                source=PREDICTED,
            ))
            measured = float((part["measured_us"].to_numpy(float) * n).sum())
            for how in BAND_COMBINES:
                band = plan_band(launches, how=how)
                rows.append(dict(target=target, model=model, draw=draw, how=how, measured_us=measured,
                                 predicted_us=band["latency_us"], rel_lo=band["rel_lo"], rel_hi=band["rel_hi"],
                                 inside=bool(band["band_lo_us"] <= measured <= band["band_hi_us"])))
    return pd.DataFrame(rows)


def band_eval(records: pd.DataFrame, *, target=None, random_state: int = 0, never_held_out=NEVER_HELD_OUT,
              draws: int = 200, variants=None, prior: str | None = None) -> dict:
    """Leave one architecture (model family) out with nested band calibration, for every band variant.

    Returns
    -------
    dict
        ``"models"``, ``"units"`` (default variant, see :func:`leave_one_family_out` with ``bands=True``),
        ``"variants"`` (pooled kernel coverage and end-to-end coverage per variant and rule), ``"classes"``
        (kernel coverage per op class), ``"rules"`` (end-to-end and sub-plan coverage and width per rule),
        ``"subplans"`` (every random part).
    """
    results = {}
    chosen = list(BAND_VARIANTS) if not variants else [v for v in BAND_VARIANTS if v in variants]
    unknown = set(variants or ()) - set(BAND_VARIANTS)
    if unknown or not chosen:
        raise SystemExit(f"--band-variants: {sorted(unknown) or 'none'} unknown; choose from {list(BAND_VARIANTS)}")
    if chosen[0] != next(iter(BAND_VARIANTS)):
        chosen.insert(0, next(iter(BAND_VARIANTS)))  # the default variant is always evaluated
    for name in chosen:
        options = BAND_VARIANTS[name]
        results[name] = leave_one_family_out(
            records, "xgb", target=target, bands=True, band_options=options, never_held_out=never_held_out,
            random_state=random_state, **prior_params(prior),
        )
        print(f"  band variant {name!r}: {len(results[name]['models'])} held-out models")
    default = results[next(iter(BAND_VARIANTS))]
    models, units = default["models"].copy(), default["units"]
    variant_rows = []
    for name, res in results.items():
        m, u = res["models"], res["units"]
        known = u[u["in_band"].notna()]
        row = dict(variant=name, kernels=len(known), kernel_coverage=float(known["in_band"].astype(float).mean()),
                   median_kernel_width=float(np.median((known["pure_hi_us"] - known["pure_lo_us"])
                                                       / (2 * known["pure_us"]))))
        for how in BAND_COMBINES:
            col = f"e2e_in_band_{how}"
            if col in m:
                row[f"e2e_coverage_{how}"] = float(m[col].dropna().astype(float).mean())
        if f"e2e_band_lo_us_{BAND_COMBINE}" in m:
            half = (m[f"e2e_band_hi_us_{BAND_COMBINE}"] - m[f"e2e_band_lo_us_{BAND_COMBINE}"]) / (2 * m["e2e_pure_us"])
            row[f"median_e2e_half_width_{BAND_COMBINE}"] = float(half.median())
        variant_rows.append(row)
    classes = (units[units["in_band"].notna()].assign(inside=lambda d: d["in_band"].astype(float))
               .groupby(["target", "band_class"])
               .agg(kernels=("inside", "size"), coverage=("inside", "mean"),
                    median_lo=("pure_lo_us", lambda v: float(np.median(v / units.loc[v.index, "pure_us"]))),
                    median_hi=("pure_hi_us", lambda v: float(np.median(v / units.loc[v.index, "pure_us"]))))
               .reset_index())
    sub = subplan_coverage(units, draws=draws, seed=random_state)
    rule_rows = []
    for how in BAND_COMBINES:
        row = dict(rule=how, default=how == BAND_COMBINE)
        if f"e2e_in_band_{how}" in models:
            inside = models[f"e2e_in_band_{how}"].dropna().astype(float)
            row.update(models=len(inside), e2e_coverage=float(inside.mean()))
            half = (models[f"e2e_band_hi_us_{how}"] - models[f"e2e_band_lo_us_{how}"]) / (2 * models["e2e_pure_us"])
            row["median_e2e_half_width"] = float(half.median())
        if not sub.empty:
            s = sub[sub["how"] == how]
            row.update(subplans=len(s), subplan_coverage=float(s["inside"].mean()),
                       median_subplan_half_width=float(((s["rel_hi"] - s["rel_lo"]) / 2).median()))
        rule_rows.append(row)
    for how in BAND_COMBINES:
        if f"e2e_band_lo_us_{how}" in models:
            models[f"e2e_band_rel_lo_{how}"] = models[f"e2e_band_lo_us_{how}"] / models["e2e_pure_us"] - 1
            models[f"e2e_band_rel_hi_{how}"] = models[f"e2e_band_hi_us_{how}"] / models["e2e_pure_us"] - 1
    return dict(models=models, units=units, variants=pd.DataFrame(variant_rows), classes=classes,
                rules=pd.DataFrame(rule_rows), subplans=sub)


def band_check(bands: dict) -> dict:
    """Acceptance of the band evaluation per target (see :data:`BAND_E2E_MAX_ERR` and the two below)."""
    out = {}
    models, units = bands["models"], bands["units"]
    for target, m in models.groupby("target"):
        u = units[(units["target"] == target) & units["in_band"].notna()]
        ranked = m[m["distinct"] >= 3]
        coverage = float(u["in_band"].astype(float).mean()) if len(u) else float("nan")
        e2e = m["e2e_pure_err"] if "e2e_pure_err" in m else pd.Series(dtype=float)
        entry = dict(
            models=len(m),
            e2e_pure_err_max_abs=float(e2e.abs().max()) if len(e2e) else None,
            e2e_within_15pct=int((e2e.abs() <= BAND_E2E_MAX_ERR).sum()),
            e2e_failing=m.loc[e2e.abs() > BAND_E2E_MAX_ERR, "model"].tolist() if len(e2e) else [],
            spearman_min=float(ranked["spearman"].min()) if len(ranked) else None,
            spearman_failing=ranked.loc[ranked["spearman"] < BAND_SPEARMAN_MIN, "model"].tolist(),
            kernel_band_coverage=coverage,
            kernel_band_coverage_ok=bool(BAND_COVERAGE_RANGE[0] <= coverage <= BAND_COVERAGE_RANGE[1]),
        )
        col = f"e2e_in_band_{BAND_COMBINE}"
        if col in m:
            inside = m[col].dropna().astype(bool)
            entry[f"e2e_in_band_{BAND_COMBINE}"] = f"{int(inside.sum())} of {len(inside)}"
            entry["e2e_outside_band"] = m.loc[m[col].eq(False), "model"].tolist()
        entry["ok"] = bool(not entry["e2e_failing"] and not entry["spearman_failing"]
                           and entry["kernel_band_coverage_ok"])
        out[target] = entry
    return out


def band_markdown(bands: dict, checks: dict, never_held_out) -> str:
    """The band evaluation as Markdown (``cost_model_bands.md``)."""
    models, rules = bands["models"], bands["rules"]
    pct = lambda v: "n/a" if v is None or not np.isfinite(v) else f"{100 * v:+.1f}%"
    lines = [
        "### Cost model error bands: leave one architecture out",
        "",
        ("Every model family in the profile is held out in turn (a model with its size variants; "
         f"training-only families never held out: {', '.join(never_held_out)}). The cost model is trained on "
         "the other families' kernels and **calibrated on them alone** (nested leave-one-family-out residuals, "
         "`CostModel.calibrate`), then prices every kernel of the held-out models by prediction "
         "(`measure='never'`: none of the family's kernels measured). Kernel band: the nominal "
         f"{100 * BAND_NOMINAL:.0f}% band of each prediction; *coverage* = share of held-out kernels whose "
         "measured latency falls inside. End-to-end band: the kernels' bands combined by each rule of "
         "`autoplace.cost_model.table.BAND_COMBINES` plus the measured VM overheads, checked against the "
         "profile's end-to-end measurement of the model (which also holds effects no kernel band covers: "
         f"see `e2e_oracle_err`). Default rule: `{BAND_COMBINE}`."),
        "",
    ]
    cols = ["model", "distinct", "spearman", "e2e_measured_us", "e2e_pure_err", "e2e_oracle_err", "band_kernels",
            "band_coverage"]
    for target, m in models.groupby("target"):
        head = cols + [f"e2e band ({how})" for how in BAND_COMBINES]
        lines += [f"Target `{target}`:", "", "| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
        for _, r in m.iterrows():
            cells = [str(r["model"]), str(int(r["distinct"])), _fmt(r.get("spearman")),
                     "n/a" if pd.isna(r.get("e2e_measured_us")) else f"{r['e2e_measured_us']:.1f}",
                     pct(r.get("e2e_pure_err")), pct(r.get("e2e_oracle_err")), str(int(r.get("band_kernels", 0))),
                     _fmt(r.get("band_coverage"))]
            for how in BAND_COMBINES:
                lo, hi = r.get(f"e2e_band_rel_lo_{how}"), r.get(f"e2e_band_rel_hi_{how}")
                inside = r.get(f"e2e_in_band_{how}")
                mark = "" if pd.isna(inside) else (" in" if inside else " **out**")
                cells.append("n/a" if lo is None or pd.isna(lo) else f"{pct(lo)} / {pct(hi)}{mark}")
            lines.append("| " + " | ".join(cells) + " |")
        lines.append("")
    lines += [
        ("Combination rules (end to end: the held-out models above; sub-plans: random halves of each held-out "
        "model's distinct kernels, kernel time only, as a placement splits a model between devices; "
        "half width = (high - low) / 2 over the prediction):"),
        "",
        markdown_table(rules),
        "",
        "Band variants (kernel coverage pooled over held-out kernels; e2e coverage per rule):",
        "",
        markdown_table(bands["variants"]),
        "",
        "Kernel coverage per anchor op class (default variant; median_lo / median_hi: the band's factors):",
        "",
        markdown_table(bands["classes"]),
        "",
        ("Acceptance (pure prediction end to end within 15%, Spearman >= 0.95 per held-out model with >= 3 "
        "kernels, nominal 80% kernel band covering 70-90% of held-out kernels):"),
        "",
        "```",
        json.dumps(_clean(checks), indent=1),
        "```",
        "",
    ]
    return "\n".join(lines)


def _sha256(path: str) -> str:
    import hashlib

    with open(path, "rb") as f:
        return hashlib.sha256(f.read()).hexdigest()


def run_bands(records: pd.DataFrame, args, store) -> dict:
    """The band evaluation: print, write ``cost_model_bands.*``; returns the acceptance dict."""
    started = time.perf_counter()
    never = tuple(args.never_held_out)
    bands = band_eval(records, target=args.target, random_state=args.random_state, never_held_out=never,
                      draws=args.subplans, variants=args.band_variants, prior=args.prior)
    checks = band_check(bands)
    models = bands["models"]
    cols = [c for c in ("target", "model", "distinct", "spearman", "e2e_pure_err", "e2e_oracle_err", "band_kernels",
                        "band_coverage", f"e2e_band_rel_lo_{BAND_COMBINE}", f"e2e_band_rel_hi_{BAND_COMBINE}",
                        f"e2e_in_band_{BAND_COMBINE}") if c in models]
    print("\nLeave one architecture out, pure prediction, nested band calibration\n")
    print(models[cols].to_string(index=False, float_format=lambda v: f"{v:.3f}"))
    print("\nCombination rules\n")
    print(bands["rules"].to_string(index=False, float_format=lambda v: f"{v:.3f}"))
    print("\nBand variants\n")
    print(bands["variants"].to_string(index=False, float_format=lambda v: f"{v:.3f}"))
    print("\nKernel coverage per op class\n")
    print(bands["classes"].to_string(index=False, float_format=lambda v: f"{v:.3f}"))
    print("\nBand acceptance (e2e within 15%, Spearman >= 0.95, kernel band coverage 70-90%):")
    print(json.dumps(_clean(checks), indent=1))
    os.makedirs(args.out, exist_ok=True)
    models.to_csv(os.path.join(args.out, "cost_model_bands.csv"), index=False)
    bands["units"].to_csv(os.path.join(args.out, "cost_model_bands_units.csv"), index=False)
    meta = dict(
        date=datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        profile=os.path.abspath(args.profile), hardware_id=store.metadata.get("hardware_id"),
        records=len(records), seconds=round(time.perf_counter() - started, 1),
        cost_model=repr(XGBCostModel(random_state=args.random_state, **prior_params(args.prior))),
        feature_version=features.FEATURE_VERSION,
        features_sha256=_sha256(features.__file__)[:12],
    )
    with open(os.path.join(args.out, "cost_model_bands.md"), "w", encoding="utf-8") as f:
        f.write(band_markdown(bands, checks, never) + "\n")
        f.write(f"Run: {json.dumps(_clean(meta))}\n")
    print(f"\nwrote {args.out}/cost_model_bands.* in {meta['seconds']} s")
    return checks


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--profile", help="profile folder (default: profiles/<this machine's hardware id>)")
    parser.add_argument("--target", help="evaluate this target kind only")
    parser.add_argument("--random-state", type=int, default=0)
    parser.add_argument("--quick", action="store_true", help="skip the learning curve and the variants")
    parser.add_argument("--repeats", type=int, default=3, help="learning-curve repeats per size")
    parser.add_argument(
        "--remeasure",
        action="store_true",
        help="also time the zoo models end to end now and compare with those timings",
    )
    parser.add_argument(
        "--seeds",
        type=int,
        default=5,
        help="also repeat the default model with this many XGBoost seeds (end-to-end error spread)",
    )
    parser.add_argument("--bands-only", action="store_true",
                        help="only the error-band evaluation (leave one architecture out, nested calibration)")
    parser.add_argument("--no-bands", action="store_true", help="skip the error-band evaluation")
    parser.add_argument("--band-variants", nargs="*", metavar="VARIANT",
                        help=f"band variants to compare (default: all of {list(BAND_VARIANTS)}; the first is the "
                             "default and always runs; each is a nested leave-one-out, about 27 min on the Zen 3, "
                             "66 on the Xeon f6m207 one fit at a time; the fits now run in threads on every CPU, "
                             "and since session 40 two folds share each nested fit on the same records)")
    parser.add_argument("--subplans", type=int, default=200,
                        help="random parts per held-out model when checking how bands combine")
    parser.add_argument("--never-held-out", nargs="*", default=list(NEVER_HELD_OUT),
                        help=f"training-only families (default: {' '.join(NEVER_HELD_OUT)})")
    parser.add_argument("--prior", metavar="DIR",
                        help="another machine's profile folder as the cost model's prior (XGBCostModel(prior=DIR)); "
                             "each fold keeps its held-out family out of the donor too")
    parser.add_argument("--out", help="results folder (default: experiments/results/<the profile folder's name>)")
    args = parser.parse_args(argv)
    if args.profile is None:
        from autoplace.profile.hardware import hardware_metadata

        args.profile = os.path.join("profiles", hardware_metadata()["hardware_id"])
    args.out = args.out or os.path.join(RESULTS, os.path.basename(os.path.normpath(args.profile)))

    started = time.perf_counter()
    store = ProfileStore(args.profile)
    records = store.records()
    if records.empty:
        raise SystemExit(f"{args.profile}: no records")
    pd.set_option("display.width", 220)
    pd.set_option("display.max_columns", 30)
    warnings.simplefilter("ignore", category=UserWarning)
    if args.bands_only:
        run_bands(records, args, store)
        return 0

    results = {}
    variant_rows = []
    variants = {"xgb": VARIANTS["xgb"]} if args.quick else VARIANTS
    for name, (kind, params) in variants.items():
        if kind == "xgb":
            params = dict(params, random_state=args.random_state, **prior_params(args.prior))
        res = leave_one_family_out(records, kind, target=args.target, never_held_out=tuple(args.never_held_out),
                                   **params)
        results[name] = res
        for _, s in summarize(res).iterrows():
            variant_rows.append(dict(variant=name, **s.to_dict()))
    res = results["xgb"]
    models, units = res["models"], res["units"]
    if args.remeasure:
        fresh = remeasure(records, models["model"].tolist(), args.target or "llvm")
        models = models.merge(fresh[["target", "model", "e2e_fresh_us"]], on=["target", "model"], how="left")
        models["e2e_fresh_err"] = models["e2e_pure_us"] / models["e2e_fresh_us"] - 1
        models["e2e_oracle_vs_fresh_err"] = models["e2e_oracle_us"] / models["e2e_fresh_us"] - 1
    models = models.merge(retest_spearman(records, units), on=["target", "model"], how="left")
    seeds = seed_spread(records, args.seeds, args.target, args.prior) if args.seeds > 1 else pd.DataFrame()
    summary = summarize(res)
    classes = by_op_class(res)
    variants_df = pd.DataFrame(variant_rows)
    curve = pd.DataFrame()
    if not args.quick:
        curve = learning_curve(
            records, "xgb", repeats=args.repeats, random_state=args.random_state, target=args.target
        )

    cols = [
        "target",
        "model",
        "distinct",
        "kernels",
        "mape",
        "mdape",
        "spearman",
        "retest_spearman",
        "lookup_measured",
        "lookup_mdape",
        "e2e_measured_us",
        "e2e_pure_err",
        "e2e_lookup_err",
        "e2e_oracle_err",
        "e2e_pure_vs_oracle_err",
    ]
    cols += [c for c in ("e2e_fresh_us", "e2e_fresh_err", "e2e_oracle_vs_fresh_err") if c in models]
    cols = [c for c in cols if c in models]  # a profile without end-to-end model records (a GPU box's) has no e2e_*
    print("\nLeave-one-model-family-out (xgb; errors: predicted / measured - 1)\n")
    print(models[cols].to_string(index=False, float_format=lambda v: f"{v:.3f}"))
    print("\nPooled\n")
    print(summary.to_string(index=False, float_format=lambda v: f"{v:.3f}"))
    print("\nBy anchor op class\n")
    print(classes.to_string(index=False, float_format=lambda v: f"{v:.3f}"))
    print("\nVariants\n")
    print(variants_df.to_string(index=False, float_format=lambda v: f"{v:.3f}"))
    if not curve.empty:
        print("\nLearning curve\n")
        print(
            curve.groupby(["target", "fraction"])
            .mean(numeric_only=True)
            .to_string(float_format=lambda v: f"{v:.3f}")
        )
    if not seeds.empty:
        print(f"\nEnd-to-end error over {args.seeds} XGBoost seeds\n")
        print(seeds.to_string(index=False, float_format=lambda v: f"{v:+.3f}"))
    checks = check(models, seeds)
    print(f"\nAcceptance (Spearman >= {SPEARMAN_MIN} per model with >= 3 kernels; e2e within {E2E_MAX_ERR:.0%}):")
    print(json.dumps(checks, indent=1))

    os.makedirs(args.out, exist_ok=True)
    all_models = pd.concat([r["models"].assign(variant=n) for n, r in results.items()], ignore_index=True)
    all_models = all_models.merge(models[["target", "model", "retest_spearman"]], on=["target", "model"], how="left")
    if args.remeasure:
        all_models = all_models.merge(
            models[["target", "model", "e2e_fresh_us"]], on=["target", "model"], how="left"
        )
    all_models.to_csv(os.path.join(args.out, "cost_model_lofo_models.csv"), index=False)
    units.to_csv(os.path.join(args.out, "cost_model_lofo_units.csv"), index=False)
    classes.to_csv(os.path.join(args.out, "cost_model_by_op_class.csv"), index=False)
    if not curve.empty:
        curve.to_csv(os.path.join(args.out, "cost_model_learning_curve.csv"), index=False)
    if not seeds.empty:
        seeds.to_csv(os.path.join(args.out, "cost_model_seed_spread.csv"), index=False)
    model = XGBCostModel(random_state=args.random_state, **prior_params(args.prior))
    meta = dict(
        date=datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        profile=os.path.abspath(args.profile),
        profile_metadata=store.metadata,
        records=len(records),
        machine=platform.machine(),
        cost_model=repr(model),
        split="strict: model family held out (name before -/_)",
        seconds=round(time.perf_counter() - started, 1),
    )
    out = dict(
        meta=meta,
        acceptance=checks,
        pooled=summary.to_dict(orient="records"),
        models=models.to_dict(orient="records"),
        by_op_class=classes.to_dict(orient="records"),
        variants=variants_df.to_dict(orient="records"),
        learning_curve=curve.to_dict(orient="records"),
        seed_spread=seeds.to_dict(orient="records"),
    )
    with open(os.path.join(args.out, "cost_model_eval.json"), "w", encoding="utf-8") as f:
        json.dump(_clean(out), f, indent=1, default=str)
    with open(os.path.join(args.out, "cost_model_summary.md"), "w", encoding="utf-8") as f:
        f.write(markdown(models, summary, classes, curve, variants_df, seeds) + "\n")
    print(f"\nwrote {args.out}/cost_model_* in {meta['seconds']} s")
    if not args.no_bands:
        run_bands(records, args, store)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
