"""Row reductions over short rows: schedule version 11 against 12, on every kernel of the models it changes.

Until version 11 ``cpu_schedules.RowReduction`` accumulated a row reduction in a full vector (16 lanes with
AVX-512, 32 with two accumulators) as soon as the row held two, then added the lanes up one scalar at a time: a
max over rows of 32 took 2 vector steps and 16 dependent scalar steps. Rows no width divides took vectors only
from four (a Swin window's 49 stayed scalar), and the elementwise blocks of a kernel over rows of one vector or
less (softmax's exp over a decode step's 8 keys) were left to LLVM, which vectorised across rows with gathers.
Version 12 accumulates in at most as many lanes as the row has vector steps (``LANES_UP_TO_STEPS``,
``ODD_LANES_UP_TO_STEPS``: 4 lanes for rows of 16-63, 8 for 64-255) and vectorises those short rows
(``SHORT_ROW_VECTORS``).

* kernels: every kernel of the models whose scheduled TIR differs between the versions, built both ways with the
  same random inputs, outputs compared, timed in interleaved rounds (about 1 ms of calls per sample);
* models: each model placed all-CPU and built both ways, outputs compared, timed in interleaved rounds.

    python experiments/short_rows.py [--models roberta t5-encoder ...] [--time-models bert-base ...] [--rounds 5]

Writes ``experiments/results/<hardware id>/short_rows_kernels.csv`` (per kernel: min over rounds both ways,
speedup = version 11's time / version 12's) and ``short_rows_models.csv``.
"""

from __future__ import annotations

import argparse
import contextlib

from results_folder import results_folder

#: Schedule flags of version 12, all False in version 11.
FLAGS = ("LANES_UP_TO_STEPS", "ODD_LANES_UP_TO_STEPS", "SHORT_ROW_VECTORS")
DEFAULT_MODELS = [f"{m}{s}" for s in ("", "-base") for m in (
    "mlp", "cnn", "bert", "seed003", "inception", "llama", "qwen2", "mistral", "gpt2", "opt", "roberta", "t5-encoder",
    "whisper-encoder", "vit", "swin", "convnext", "resnet", "mobilenetv2")]
DEFAULT_TIMED_MODELS = ["roberta", "t5-encoder", "llama", "bert-base", "vit-base", "swin-base", "whisper-encoder-base"]


@contextlib.contextmanager
def schedule_version(version: int):
    """The CPU rules as they were in schedule version 11 or are in 12."""
    from autoplace.backend import cpu_schedules as cs

    saved = {f: getattr(cs, f) for f in FLAGS}
    for f in FLAGS:
        setattr(cs, f, version >= 12)
    try:
        yield
    finally:
        for f, value in saved.items():
            setattr(cs, f, value)


def main(argv=None):
    from kernel_timing import report_two_versions, two_versions

    from autoplace import zoo

    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--models", nargs="+", default=DEFAULT_MODELS, help="models whose changed kernels are timed")
    parser.add_argument("--time-models", nargs="*", default=DEFAULT_TIMED_MODELS, help="models timed whole both ways")
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args(argv)
    kernels, models = two_versions(
        [zoo.parse(spec) for spec in args.models], schedule_version, (11, 12), args.rounds,
        lambda model, old, new: dict(shape="x".join(map(str, new.arg_shapes[0]))),
        time_models=[zoo.parse(spec) for spec in args.time_models])
    report_two_versions(kernels, models, (11, 12), results_folder(), "short_rows")


if __name__ == "__main__":
    main()
