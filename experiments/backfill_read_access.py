"""Add ``read_strides`` and ``read_runs`` (how a data-movement kernel reads its inputs, :mod:`autoplace.profile.access`)
to the kernels of a profile timed before records carried them, and ``num_inputs`` (which of ``main``'s arguments are inputs) to its
end-to-end records. No kernel is timed: the models the records name are built and lowered again for the profile's
CPU, and the fields land in ``<profile>/unit_fields.json``.

    python experiments/backfill_read_access.py --profile profiles/amd-epyc-f25m1-2c

then retrain (``autoplace train --profile ...``): the cost model's ``read_*`` features use them.
"""

import argparse
import json

from autoplace.profile import ProfileStore
from autoplace.profile.access import backfill_model_inputs, backfill_read_access


def main(argv=None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--profile", required=True, help="profile folder (profiles/<hardware id>)")
    parser.add_argument("--target", default="llvm", help="target kind of the kernels (default llvm)")
    args = parser.parse_args(argv)
    store = ProfileStore(args.profile)
    report = backfill_read_access(store, target_kind=args.target)
    report["model_inputs"] = backfill_model_inputs(store)
    print(json.dumps(report, indent=1))
    return report


if __name__ == "__main__":
    main()
