import os
import sys
import tempfile

import numpy as np
import pytest

os.environ.setdefault("TVM_NUM_THREADS", "1")
# What optimize(measure="auto") measures goes to a folder of this test session (subprocesses inherit it),
# never into the user's cache or the committed profiles.
os.environ["AUTOPLACE_CACHE"] = tempfile.mkdtemp(prefix="autoplace-measured-")
# Test helpers shared with the benchmarks (``experiments/synthetic.py``) import as ``experiments.*``.
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


@pytest.fixture(autouse=True, scope="session")
def short_in_context_patience():
    """optimize(measure="auto") waits out a slow phase of the host for 10 s a model when it times kernels in context
    (:data:`autoplace.profile.job.CONTEXT_PATIENCE_S`); the tests check what it builds, not how well it waits, and
    make some 60 such calls: 2 s each here."""
    from autoplace.profile import host_speed, job

    patience_s, job.CONTEXT_PATIENCE_S = job.CONTEXT_PATIENCE_S, 2.0
    # and a job waits for a slow host to calm down for 90 s in all (host_speed.CALM_WAIT_S): 1 s here
    wait_s, host_speed.CALM_WAIT_S = host_speed.CALM_WAIT_S, 1.0
    yield
    job.CONTEXT_PATIENCE_S = patience_s
    host_speed.CALM_WAIT_S = wait_s


@pytest.fixture(scope="session")
def zoo_models():
    """Every small zoo model, built once per test session."""
    from autoplace import zoo

    return {name: zoo.get(name) for name in zoo.ZOO}


@pytest.fixture(scope="session")
def reference_outputs(zoo_models):
    """Single-device (plain ``tvm.compile``) outputs of each zoo model on its seeded random inputs."""
    from autoplace.backend import Runner, single_device_build
    from autoplace.targets import TargetSet

    out = {}
    host = TargetSet({"cpu": "llvm"})
    for name, model in zoo_models.items():
        inputs = model.random_inputs(seed=0)
        runner = Runner(single_device_build(model.mod), host, model.params, ["cpu"] * len(model.params),
                        ["cpu"] * len(inputs))
        out[name] = (inputs, runner(*inputs))
    return out


def assert_outputs_close(actual, expected, rtol=1e-5, atol=1e-5):
    if isinstance(expected, tuple):
        assert isinstance(actual, tuple) and len(actual) == len(expected)
        for a, e in zip(actual, expected):
            assert_outputs_close(a, e, rtol, atol)
        return
    np.testing.assert_allclose(actual, expected, rtol=rtol, atol=atol)
