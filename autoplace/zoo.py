"""Model zoo for tests, experiments and the demo: real architectures, random weights, built locally.

Nothing is downloaded: each model is a small PyTorch module (or a Relax graph) with seeded random
weights, imported through TVM's PyTorch frontend like a user's model would be. ``size="small"`` keeps
tests fast on two cores; ``size="base"`` is what experiments measure.

====================  ==============================================================================
name                  what it is
====================  ==============================================================================
``mlp``               three Linear+ReLU layers
``cnn``               ResNet-style CNN: conv/batch-norm/ReLU stem, residual basic blocks, pooling, FC
``bert``              BERT-style encoder (HuggingFace ``transformers`` BertModel from a config)
``seed003``           ``(a+b)-(b+c)``, the shared-input graph TVM's device planner fails on
``inception``         Inception-style CNN: parallel conv branches, channel concat, split, depthwise conv
``bert_base``         BERT-base-size encoder (hidden 768, 12 layers, seq 128), for the profiler benchmark
``detect``            a one-stage detector with its pre- and post-processing in the model: a uint8 HWC
                      image normalised, a conv backbone, per-anchor class scores and boxes, then the
                      best class per anchor, top-k anchors (``topk``: a sort), gathered and decoded boxes
====================  ==============================================================================

``detect`` is not in :data:`ZOO` (which tests and zoo-wide experiments iterate): it is for CPU+GPU comparisons,
where a sort may run better on the host than the backbone does.
"""

from __future__ import annotations

from .errors import ModelError
from .frontend import Model, load_model

ZOO = ("mlp", "cnn", "bert", "seed003", "inception")
#: Zoo models outside :data:`ZOO`, named like them (``detect``, ``detect-base``).
EXTRA = ("detect",)


def _torch():
    try:
        import torch
    except ImportError:
        raise ImportError("the model zoo needs torch: pip install 'autoplace[frontends]'") from None
    return torch


def mlp(size: str = "small") -> Model:
    torch = _torch()
    torch.manual_seed(0)
    width, batch = (64, 8) if size == "small" else (1024, 64)
    net = torch.nn.Sequential(
        torch.nn.Linear(width, width * 2), torch.nn.ReLU(),
        torch.nn.Linear(width * 2, width * 2), torch.nn.ReLU(),
        torch.nn.Linear(width * 2, 10),
    )
    return load_model(net, example_inputs=(torch.randn(batch, width),), name="mlp")


def cnn(size: str = "small") -> Model:
    torch = _torch()
    nn = torch.nn
    torch.manual_seed(0)

    class Block(nn.Module):
        def __init__(self, cin, cout, stride):
            super().__init__()
            self.conv1 = nn.Conv2d(cin, cout, 3, stride, 1, bias=False)
            self.bn1 = nn.BatchNorm2d(cout)
            self.conv2 = nn.Conv2d(cout, cout, 3, 1, 1, bias=False)
            self.bn2 = nn.BatchNorm2d(cout)
            self.down = None
            if stride != 1 or cin != cout:
                self.down = nn.Sequential(nn.Conv2d(cin, cout, 1, stride, bias=False), nn.BatchNorm2d(cout))

        def forward(self, x):
            y = torch.relu(self.bn1(self.conv1(x)))
            y = self.bn2(self.conv2(y))
            return torch.relu(y + (x if self.down is None else self.down(x)))

    class ResNet(nn.Module):
        def __init__(self, width, blocks):
            super().__init__()
            self.stem = nn.Sequential(nn.Conv2d(3, width, 3, 1, 1, bias=False), nn.BatchNorm2d(width), nn.ReLU())
            layers, cin = [], width
            for i, n in enumerate(blocks):
                for j in range(n):
                    cout = width * 2**i
                    layers.append(Block(cin, cout, 2 if (j == 0 and i > 0) else 1))
                    cin = cout
            self.layers = nn.Sequential(*layers)
            self.fc = nn.Linear(cin, 10)

        def forward(self, x):
            y = self.layers(self.stem(x))
            return self.fc(torch.flatten(torch.nn.functional.adaptive_avg_pool2d(y, 1), 1))

    if size == "small":
        net, shape = ResNet(8, [1, 1]), (1, 3, 16, 16)
    else:
        net, shape = ResNet(32, [2, 2, 2]), (1, 3, 64, 64)
    return load_model(net.eval(), example_inputs=(torch.randn(*shape),), name="cnn")


def bert(size: str = "small") -> Model:
    torch = _torch()
    try:
        from transformers import BertConfig, BertModel
    except ImportError:
        raise ImportError("the bert zoo model needs transformers: pip install 'autoplace[frontends]'") from None
    torch.manual_seed(0)
    if size == "small":
        cfg = dict(hidden_size=64, num_hidden_layers=2, num_attention_heads=2, intermediate_size=128, seq=16)
    elif size == "base":
        cfg = dict(hidden_size=256, num_hidden_layers=4, num_attention_heads=4, intermediate_size=1024, seq=128)
    else:  # "bert_base": BERT-base geometry
        cfg = dict(hidden_size=768, num_hidden_layers=12, num_attention_heads=12, intermediate_size=3072, seq=128)
    seq = cfg.pop("seq")
    config = BertConfig(vocab_size=1000, max_position_embeddings=max(512, seq), attn_implementation="eager", **cfg)
    net = BertModel(config, add_pooling_layer=False).eval()

    class Encoder(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.bert = net

        def forward(self, input_ids):
            return self.bert(input_ids=input_ids).last_hidden_state

    ids = torch.randint(0, 1000, (1, seq))
    return load_model(Encoder().eval(), example_inputs=(ids,), name="bert" if size != "bert_base" else "bert_base")


def inception(size: str = "small") -> Model:
    torch = _torch()
    nn = torch.nn
    torch.manual_seed(0)

    class Mixed(nn.Module):
        def __init__(self, cin, c):
            super().__init__()
            self.b1 = nn.Conv2d(cin, c, 1)
            self.b3 = nn.Sequential(nn.Conv2d(cin, c, 1), nn.ReLU(), nn.Conv2d(c, c, 3, padding=1))
            self.dw = nn.Sequential(nn.Conv2d(cin, cin, 3, padding=1, groups=cin), nn.Conv2d(cin, c, 1))
            self.pool = nn.Sequential(nn.MaxPool2d(3, 1, 1), nn.Conv2d(cin, c, 1))

        def forward(self, x):
            return torch.relu(torch.cat([self.b1(x), self.b3(x), self.dw(x), self.pool(x)], dim=1))

    class Net(nn.Module):
        def __init__(self, c):
            super().__init__()
            self.stem = nn.Conv2d(3, c, 3, padding=1)
            self.m1 = Mixed(c, c)
            self.m2 = Mixed(4 * c, c)
            self.head = nn.Linear(2 * c, 10)

        def forward(self, x):
            y = self.m2(self.m1(torch.relu(self.stem(x))))
            a, b = torch.split(y, y.shape[1] // 2, dim=1)
            z = torch.maximum(a, b).mean(dim=(2, 3))
            return self.head(z)

    net, shape = (Net(8), (1, 3, 16, 16)) if size == "small" else (Net(32), (1, 3, 56, 56))
    return load_model(net.eval(), example_inputs=(torch.randn(*shape),), name="inception")


def detect(size: str = "small") -> Model:
    """A one-stage detector, pre- and post-processing included (see the module docstring): small, a 32x32 image,
    8 classes, the best 10 of 64 anchors; base, a 256x256 image, 80 classes, the best 100 of 4096 anchors."""
    torch = _torch()
    nn = torch.nn
    torch.manual_seed(0)

    class Detector(nn.Module):
        def __init__(self, c, classes, k):
            super().__init__()
            self.k = k
            self.register_buffer("mean", torch.tensor([0.485, 0.456, 0.406]).view(1, 3, 1, 1) * 255)
            self.register_buffer("std", torch.tensor([0.229, 0.224, 0.225]).view(1, 3, 1, 1) * 255)
            self.backbone = nn.Sequential(nn.Conv2d(3, c, 3, 2, 1), nn.ReLU(), nn.Conv2d(c, 2 * c, 3, 2, 1), nn.ReLU(),
                                          nn.Conv2d(2 * c, 2 * c, 3, 1, 1), nn.ReLU())
            self.cls = nn.Conv2d(2 * c, classes, 1)
            self.box = nn.Conv2d(2 * c, 4, 1)

        def forward(self, image):  # (1, H, W, 3) uint8
            x = (image.permute(0, 3, 1, 2).float() - self.mean) / self.std
            features = self.backbone(x)
            scores = torch.sigmoid(self.cls(features)).flatten(2).transpose(1, 2)  # (1, anchors, classes)
            boxes = self.box(features).flatten(2).transpose(1, 2)  # (1, anchors, 4)
            best, _ = scores.max(dim=2)
            top, index = torch.topk(best, self.k, dim=1)
            chosen = torch.gather(boxes, 1, index.unsqueeze(-1).expand(-1, -1, 4))
            centre, size = chosen[..., :2], torch.exp(chosen[..., 2:])
            return torch.cat([centre - size / 2, centre + size / 2, top.unsqueeze(-1)], dim=-1)

    net, pixels = (Detector(8, 8, 10), 32) if size == "small" else (Detector(32, 80, 100), 256)
    image = torch.randint(0, 256, (1, pixels, pixels, 3), dtype=torch.uint8)
    return load_model(net.eval(), example_inputs=(image,), name="detect")


def seed003(size: str = "small") -> Model:
    """``(a+b)-(b+c)`` on (5, 7) float32 tensors (seed 003), built with ``relax.BlockBuilder``."""
    from tvm import relax

    shape = (5, 7) if size == "small" else (1024, 1024)
    bb = relax.BlockBuilder()
    a, b, c = [relax.Var(n, relax.TensorType(shape, "float32")) for n in "abc"]
    with bb.function("main", [a, b, c]):
        with bb.dataflow():
            x = bb.emit(relax.op.add(a, b))
            y = bb.emit(relax.op.add(b, c))
            z = bb.emit_output(relax.op.subtract(x, y))
        bb.emit_func_output(z)
    return load_model(bb.get(), name="seed003")


#: Sizes :func:`get` builds (``"bert_base"`` is a name of its own: BERT-base geometry).
SIZES = ("small", "base")


def _unknown(name: str) -> ModelError:
    import difflib

    choices = list(ZOO) + list(EXTRA) + ["bert_base"]
    close = difflib.get_close_matches(str(name), choices, n=1)
    hint = f" (did you mean {close[0]!r}?)" if close else ""
    return ModelError(f"no zoo model {name!r}{hint}; the zoo has {choices} (add -base for the base size)")


def check_spec(spec: str) -> tuple[str, str]:
    """``(name, size)`` of a zoo spec (``"cnn"``, ``"cnn-base"``, ``"bert_base"``) without building it.

    Raises
    ------
    ModelError
        On a name or size the zoo does not have (naming the closest one).
    """
    if not isinstance(spec, str) or not spec.strip():
        raise ModelError(f"a zoo model is named by a string like 'cnn' or 'cnn-base', got {spec!r}")
    from . import architectures

    suite = architectures.split_spec(spec.strip())  # names of the architecture suite hold dashes
    if suite is not None:
        return suite
    name, dash, size = spec.strip().partition("-")
    if name == "bert_base":
        if dash:
            raise ModelError(f"zoo model {spec!r}: 'bert_base' has one size; write bert_base (or bert-base for the "
                             "base-size BERT)")
        return name, "small"
    if name not in ZOO + EXTRA:
        raise _unknown(name)
    size = size or "small"
    if size not in SIZES:
        raise ModelError(f"zoo model {spec!r}: no size {size!r}; write {name} (small) or {name}-base")
    return name, size


def get(name: str, size: str = "small") -> Model:
    """A zoo model by name (see the module docstring).

    Raises
    ------
    ModelError
        On a name or size the zoo does not have.
    """
    from . import architectures

    if name in architectures.ARCHITECTURES:  # the architecture suite: llama, gpt2, t5-encoder, ...
        return architectures.get(name, size)
    makers = {"mlp": mlp, "cnn": cnn, "bert": bert, "seed003": seed003, "inception": inception, "detect": detect}
    if name == "bert_base":
        return bert("bert_base")
    if name not in makers:
        raise _unknown(name)
    if size not in SIZES:
        raise ModelError(f"zoo size must be 'small' or 'base', not {size!r}")
    model = makers[name](size)
    model.name = name if size == "small" else f"{name}-base"
    return model


def parse(spec: str) -> Model:
    """``"cnn"``, ``"cnn-base"`` or ``"bert_base"`` -> the zoo model (:func:`check_spec` says what is refused)."""
    return get(*check_spec(spec))


#: Sizes (K and N) of the regime grid: powers of two (which crowd few cache sets when they are strides) and
#: 3 * 2^k (which do not), 64 to 4096.
GRID_SIZES = (64, 192, 256, 768, 1024, 3072, 4096, 128, 512, 2048)


def matmul_module(m: int, k: int, n: int, bias_relu: bool = False):
    """``main(x, w) = x @ w`` for float32 ``(m, k) @ (k, n)``, both operands inputs (``bias_relu``: then
    ``+ 1`` and ReLU): the stride grid's matmuls (:func:`regime_grid`), the host-speed canary's kernel
    (:mod:`autoplace.profile.host_speed`) and ``experiments/vs_pytorch.py``'s ``matmul:MxKxN``."""
    import numpy as np
    from tvm import relax

    bb = relax.BlockBuilder()
    x = relax.Var("x", relax.TensorType((m, k), "float32"))
    w = relax.Var("w", relax.TensorType((k, n), "float32"))
    with bb.function("main", [x, w]):
        with bb.dataflow():
            y = bb.emit(relax.op.matmul(x, w))
            if bias_relu:
                y = bb.emit(relax.op.nn.relu(relax.op.add(y, relax.const(np.ones((n,), "float32")))))
            out = bb.emit_output(y)
        bb.emit_func_output(out)
    return bb.get()


def regime_grid(max_fmas: float = 6.8e7, max_fmas_large_m: float = 3e8) -> list[Model]:
    """Single-kernel models on a fixed grid of strides: what a naive CPU kernel costs per access.

    TVM's unscheduled CPU kernels walk one operand with a large stride (``matmul`` reads ``B[k, j]``
    down a column of ``K`` rows ``N * 4`` bytes apart; a convolution walks input channels). Their time
    per FLOP swings more than 10x with that stride and the number of rows (cache-set conflicts,
    TLB reach, prefetchers stopping at page boundaries), and no model family visits every regime. The
    grid measures each regime once, cheaply:

    * ``grid-matmul-MxK-N``: ``(M, K) @ (K, N)`` (+ bias + ReLU on every third) for every ``K, N`` in
      :data:`GRID_SIZES`, with ``M`` cycling over 2, 8 and 32 (time per FLOP depends on ``M`` only
      a little: a row of ``A`` stays cached) and lowered where ``M * K * N`` would pass ``max_fmas``,
      so that even ``K = N = 4096`` stays under about a second; and every fourth ``K, N`` again with
      ``M = 128`` (lowered where ``M * K * N`` would pass ``max_fmas_large_m``), the row count of real
      batches and sequences (without it, the model priced a BERT-base FFN matmul 36% high);
    * ``grid-conv2d-CxS-16-kK``: an NCHW convolution of a ``(1, C, S, S)`` image with 16 filters of
      ``K x K`` (the reduction walks input channels ``S * S`` elements apart), ``C`` in 16/64/256,
      ``S`` in 7/14/28/56, ``K`` in 1/3.

    The grid is a property of the hardware, not of any model: it is the same list on every machine,
    and the cost model's evaluation never holds it out (family ``grid``). Measured on the 2-core EPYC
    profile, adding the grid brought every held-out zoo model's predicted end-to-end latency within
    11% (mlp-base from -45% to about -1%) and BERT-base's (never profiled) within 2%; a grid of
    transposes as well made seed003-base and bert-base worse, so transposes are not in it (experiments/RESULTS.md,
    experiments/results/cost_model_summary.md).
    """
    from tvm import relax

    shapes, long_rows = [], []  # (M, K, N, with bias + ReLU)
    for index, (k, n) in enumerate((k, n) for k in GRID_SIZES for n in GRID_SIZES):
        shapes.append((min((2, 8, 32)[index % 3], max(1, int(max_fmas // (k * n)))), k, n, index % 3 == 2))
        if index % 4 == 3:
            long_rows.append((min(128, max(1, int(max_fmas_large_m // (k * n)))), k, n, False))
    shapes += long_rows
    models = []
    for m, k, n, bias_relu in shapes:
        models.append(load_model(matmul_module(m, k, n, bias_relu), name=f"grid-matmul-{m}x{k}-{n}"))
    for c_in in (16, 64, 256):
        for size in (7, 14, 28, 56):
            for kernel in (1, 3):
                bb = relax.BlockBuilder()
                x = relax.Var("x", relax.TensorType((1, c_in, size, size), "float32"))
                w = relax.Var("w", relax.TensorType((16, c_in, kernel, kernel), "float32"))
                with bb.function("main", [x, w]):
                    with bb.dataflow():
                        out = bb.emit_output(relax.op.nn.conv2d(x, w, padding=kernel // 2))
                    bb.emit_func_output(out)
                models.append(load_model(bb.get(), name=f"grid-conv2d-{c_in}x{size}-16-k{kernel}"))
    return models
