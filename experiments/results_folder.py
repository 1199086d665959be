"""Where an experiment writes its tables: ``experiments/results/<this machine's hardware id>/``.

Every machine keeps its own folder (a Zen 3's figures are not a Xeon's); experiments run as
``python experiments/<name>.py`` import this beside them, as they do :mod:`kernel_timing`.
"""

from __future__ import annotations

import os

HERE = os.path.dirname(os.path.abspath(__file__))


def results_folder(hardware_id: str | None = None) -> str:
    """``experiments/results/<hardware id>`` (this machine's, or the profile's an experiment read), made if
    missing."""
    if hardware_id is None:
        from autoplace.profile.hardware import hardware_metadata

        hardware_id = hardware_metadata()["hardware_id"]
    folder = os.path.join(HERE, "results", hardware_id)
    os.makedirs(folder, exist_ok=True)
    return folder


def write_csv(table, name: str, hardware_id: str | None = None) -> str:
    """Write ``table`` (a DataFrame, or rows pandas can make one of) as ``<results folder>/<name>``; its path."""
    import pandas as pd

    path = os.path.join(results_folder(hardware_id), name)
    pd.DataFrame(table).to_csv(path, index=False)
    print(f"wrote {path}")
    return path
