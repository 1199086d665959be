"""The architecture suite: common model families built locally from ``transformers`` configs.

Every model is a HuggingFace ``transformers`` class built from a config with seeded random weights
(nothing is downloaded), wrapped so that it takes one tensor and returns the model's first output
tensor (``logits`` for the causal language models, ``last_hidden_state`` for the encoders), and read
through :func:`autoplace.load_model` (``torch.export`` -> TVM's PyTorch frontend -> the repairs of
:mod:`autoplace.repairs` -> normalisation) like a user's model would be.

``size="small"`` (1-2 layers, hidden 32, sequences of 8, images of 32 px) keeps the property tests
fast on two cores; ``size="base"`` (4 layers, hidden 256, sequences of 128, images of 64 px) is for
experiments. Names are zoo names: ``autoplace.zoo.get("llama")``, ``autoplace.zoo.parse("t5-encoder-base")``,
``autoplace optimize --zoo llama``.

=====================  =========================================================================
name                   what it is (input)
=====================  =========================================================================
``llama``              ``LlamaForCausalLM``, grouped-query attention, RoPE, RMSNorm (``input_ids``)
``qwen2``              ``Qwen2ForCausalLM``: Llama layout with biased q/k/v projections (``input_ids``)
``mistral``            ``MistralForCausalLM`` with a sliding window shorter than the sequence (``input_ids``)
``gpt2``               ``GPT2LMHeadModel``: learned positions, Conv1D projections, GELU (``input_ids``)
``opt``                ``OPTForCausalLM``: learned positions offset by the attention mask (``input_ids``)
``roberta``            ``RobertaModel`` encoder, positions from the padding mask (``input_ids``)
``t5-encoder``         ``T5EncoderModel``: relative position buckets, RMS layer norm (``input_ids``)
``whisper-encoder``    Whisper's audio encoder: two Conv1d + transformer (``input_features``, log-mel)
``vit``                ``ViTModel``: patch embedding + transformer encoder (``pixel_values``)
``swin``               ``SwinModel``: shifted-window attention, patch merging (``pixel_values``)
``convnext``           ``ConvNextModel``: depthwise 7x7 convolutions, channels-last layer norm
``resnet``             ``ResNetModel`` with basic blocks and batch norm (``pixel_values``)
``mobilenetv2``        ``MobileNetV2Model``: inverted residuals, depthwise convs, ReLU6 (``pixel_values``)
=====================  =========================================================================
"""

from __future__ import annotations

import contextlib
import os
import sys
from collections.abc import Callable
from dataclasses import dataclass

from .errors import ModelError
from .frontend import Model, load_model

#: The decoder-only language models (causal masks; the family TVM 0.27's torch frontend broke).
DECODERS = ("llama", "qwen2", "mistral", "gpt2", "opt")
#: Every architecture of the suite, in the order reports list them.
SUITE = DECODERS + ("roberta", "t5-encoder", "whisper-encoder", "vit", "swin", "convnext", "resnet",
                    "mobilenetv2")
SIZES = ("small", "base")

# Text geometry per size: hidden, layers, heads, key/value heads, feed-forward, vocabulary, sequence length.
_TEXT = {
    "small": dict(hidden=32, layers=2, heads=2, kv_heads=1, ffn=64, vocab=128, seq=8),
    "base": dict(hidden=256, layers=4, heads=4, kv_heads=2, ffn=1024, vocab=1000, seq=128),
}


@dataclass(frozen=True)
class Architecture:
    """One entry of the suite.

    Attributes
    ----------
    name : str
        The zoo name.
    family : str
        ``"decoder"``, ``"encoder"``, ``"audio"`` or ``"vision"``.
    build : callable
        ``build(size) -> (torch.nn.Module in eval mode, example inputs)``, seeded.
    """

    name: str
    family: str
    build: Callable


def _torch():
    try:
        import torch
        import transformers  # noqa: F401
    except ImportError:
        raise ImportError(
            "the architecture suite needs torch and transformers: pip install 'autoplace[frontends]'"
        ) from None
    return torch


def _wrap(net, input_name: str, output: str, **kwargs):
    """``net`` as a module of one tensor argument named ``input_name`` (the name TVM gives the input)
    returning the tensor ``output`` of the model's output."""
    torch = _torch()

    class TextModel(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.net = net

        def forward(self, input_ids):
            return getattr(self.net(input_ids=input_ids, **kwargs), output)

    class ImageModel(TextModel):
        def forward(self, pixel_values):
            return getattr(self.net(pixel_values=pixel_values, **kwargs), output)

    class AudioModel(TextModel):
        def forward(self, input_features):
            return getattr(self.net(input_features=input_features, **kwargs), output)

    cls = {"input_ids": TextModel, "pixel_values": ImageModel, "input_features": AudioModel}[input_name]
    return cls().eval()


def _ids(size: str):
    torch = _torch()
    g = _TEXT[size]
    return (torch.randint(0, g["vocab"], (1, g["seq"]), generator=torch.Generator().manual_seed(1)),)


def _image(size: str, channels: int = 3):
    torch = _torch()
    px = 32 if size == "small" else 64
    return (torch.randn(1, channels, px, px, generator=torch.Generator().manual_seed(1)),)


def _causal_lm(config_cls, model_cls, size: str, **extra):
    g = _TEXT[size]
    config = config_cls(vocab_size=g["vocab"], hidden_size=g["hidden"], intermediate_size=g["ffn"],
                        num_hidden_layers=g["layers"], num_attention_heads=g["heads"],
                        num_key_value_heads=g["kv_heads"], max_position_embeddings=max(64, 2 * g["seq"]),
                        attn_implementation="eager", **extra)
    return _wrap(model_cls(config), "input_ids", "logits", use_cache=False), _ids(size)


def _llama(size):
    from transformers import LlamaConfig, LlamaForCausalLM

    return _causal_lm(LlamaConfig, LlamaForCausalLM, size)


def _qwen2(size):
    from transformers import Qwen2Config, Qwen2ForCausalLM

    return _causal_lm(Qwen2Config, Qwen2ForCausalLM, size)


def _mistral(size):
    from transformers import MistralConfig, MistralForCausalLM

    # A window shorter than the sequence, so that the sliding-window part of the mask is exercised.
    return _causal_lm(MistralConfig, MistralForCausalLM, size, sliding_window=_TEXT[size]["seq"] // 2)


def _gpt2(size):
    from transformers import GPT2Config, GPT2LMHeadModel

    g = _TEXT[size]
    config = GPT2Config(vocab_size=g["vocab"], n_positions=max(64, 2 * g["seq"]), n_embd=g["hidden"],
                        n_layer=g["layers"], n_head=g["heads"], n_inner=g["ffn"], bos_token_id=0,
                        eos_token_id=0, attn_implementation="eager")
    return _wrap(GPT2LMHeadModel(config), "input_ids", "logits", use_cache=False), _ids(size)


def _opt(size):
    from transformers import OPTConfig, OPTForCausalLM

    g = _TEXT[size]
    config = OPTConfig(vocab_size=g["vocab"], hidden_size=g["hidden"], num_hidden_layers=g["layers"],
                       ffn_dim=g["ffn"], num_attention_heads=g["heads"], word_embed_proj_dim=g["hidden"],
                       max_position_embeddings=max(64, 2 * g["seq"]), attn_implementation="eager")
    return _wrap(OPTForCausalLM(config), "input_ids", "logits", use_cache=False), _ids(size)


def _roberta(size):
    from transformers import RobertaConfig, RobertaModel

    g = _TEXT[size]
    config = RobertaConfig(vocab_size=g["vocab"], hidden_size=g["hidden"], num_hidden_layers=g["layers"],
                           num_attention_heads=g["heads"], intermediate_size=g["ffn"],
                           max_position_embeddings=max(64, 2 * g["seq"]) + 2, attn_implementation="eager")
    return _wrap(RobertaModel(config, add_pooling_layer=False), "input_ids", "last_hidden_state"), _ids(size)


def _t5_encoder(size):
    from transformers import T5Config, T5EncoderModel

    g = _TEXT[size]
    small = size == "small"
    config = T5Config(vocab_size=g["vocab"], d_model=g["hidden"], d_kv=g["hidden"] // g["heads"],
                      d_ff=g["ffn"], num_layers=g["layers"], num_heads=g["heads"],
                      relative_attention_num_buckets=8 if small else 32,
                      relative_attention_max_distance=16 if small else 128, attn_implementation="eager")
    return _wrap(T5EncoderModel(config), "input_ids", "last_hidden_state"), _ids(size)


def _whisper_encoder(size):
    torch = _torch()
    from transformers import WhisperConfig
    from transformers.models.whisper.modeling_whisper import WhisperEncoder

    g = _TEXT[size]
    mels, positions = (16, 16) if size == "small" else (80, 250)  # frames = 2 * positions (stride-2 conv)
    config = WhisperConfig(vocab_size=g["vocab"], num_mel_bins=mels, max_source_positions=positions,
                           d_model=g["hidden"], encoder_layers=g["layers"],
                           encoder_attention_heads=g["heads"],
                           encoder_ffn_dim=g["ffn"], decoder_layers=1, decoder_attention_heads=g["heads"],
                           decoder_ffn_dim=g["ffn"], pad_token_id=0, bos_token_id=0, eos_token_id=0,
                           decoder_start_token_id=1, attn_implementation="eager")
    features = torch.randn(1, mels, 2 * positions, generator=torch.Generator().manual_seed(1))
    return _wrap(WhisperEncoder(config), "input_features", "last_hidden_state"), (features,)


def _vit(size):
    from transformers import ViTConfig, ViTModel

    g = _TEXT[size]
    config = ViTConfig(image_size=32 if size == "small" else 64, patch_size=8, hidden_size=g["hidden"],
                       num_hidden_layers=g["layers"], num_attention_heads=g["heads"],
                       intermediate_size=g["ffn"],
                       attn_implementation="eager")
    return _wrap(ViTModel(config, add_pooling_layer=False), "pixel_values", "last_hidden_state"), _image(size)


def _swin(size):
    from transformers import SwinConfig, SwinModel

    if size == "small":
        geometry = dict(image_size=32, patch_size=4, embed_dim=16, depths=[1, 1], num_heads=[1, 2],
                        window_size=4)
    else:
        geometry = dict(image_size=64, patch_size=4, embed_dim=48, depths=[2, 2, 2], num_heads=[3, 6, 12],
                        window_size=4)
    config = SwinConfig(**geometry, attn_implementation="eager")
    net = SwinModel(config, add_pooling_layer=False)
    return _wrap(net, "pixel_values", "last_hidden_state"), _image(size)


def _convnext(size):
    from transformers import ConvNextConfig, ConvNextModel

    if size == "small":
        geometry = dict(hidden_sizes=[8, 16], depths=[1, 1], num_stages=2)
    else:
        geometry = dict(hidden_sizes=[32, 64, 128, 256], depths=[1, 1, 3, 1], num_stages=4)
    config = ConvNextConfig(image_size=32 if size == "small" else 64, patch_size=4, **geometry)
    return _wrap(ConvNextModel(config), "pixel_values", "last_hidden_state"), _image(size)


def _resnet(size):
    from transformers import ResNetConfig, ResNetModel

    if size == "small":
        geometry = dict(embedding_size=8, hidden_sizes=[8, 16], depths=[1, 1])
    else:  # ResNet-18's layout at a quarter of its width
        geometry = dict(embedding_size=16, hidden_sizes=[16, 32, 64, 128], depths=[2, 2, 2, 2])
    config = ResNetConfig(layer_type="basic", **geometry)
    return _wrap(ResNetModel(config), "pixel_values", "last_hidden_state"), _image(size)


def _mobilenetv2(size):
    from transformers import MobileNetV2Config, MobileNetV2Model

    config = MobileNetV2Config(image_size=32 if size == "small" else 64,
                               depth_multiplier=0.25 if size == "small" else 1.0, min_depth=8)
    return _wrap(_fan_in_init(MobileNetV2Model(config)), "pixel_values", "last_hidden_state"), _image(size)


def _fan_in_init(net):
    """He-normal convolutions and random batch-norm statistics. ``transformers`` initialises MobileNetV2's
    convolutions with std 0.02, so 50 random layers shrink the output to about 1e-30: nothing to compare."""
    torch = _torch()
    with torch.no_grad():
        for module in net.modules():
            if isinstance(module, torch.nn.Conv2d):
                torch.nn.init.kaiming_normal_(module.weight, nonlinearity="relu")
            elif isinstance(module, torch.nn.BatchNorm2d):
                module.running_mean.normal_(0.0, 0.1)
                module.running_var.uniform_(0.5, 1.5)
                module.weight.uniform_(0.5, 1.5)
                module.bias.normal_(0.0, 0.1)
    return net


ARCHITECTURES = {a.name: a for a in (
    Architecture("llama", "decoder", _llama),
    Architecture("qwen2", "decoder", _qwen2),
    Architecture("mistral", "decoder", _mistral),
    Architecture("gpt2", "decoder", _gpt2),
    Architecture("opt", "decoder", _opt),
    Architecture("roberta", "encoder", _roberta),
    Architecture("t5-encoder", "encoder", _t5_encoder),
    Architecture("whisper-encoder", "audio", _whisper_encoder),
    Architecture("vit", "vision", _vit),
    Architecture("swin", "vision", _swin),
    Architecture("convnext", "vision", _convnext),
    Architecture("resnet", "vision", _resnet),
    Architecture("mobilenetv2", "vision", _mobilenetv2),
)}
assert tuple(ARCHITECTURES) == SUITE


def torch_model(name: str, size: str = "small"):
    """``(module, example_inputs)``: the PyTorch model of a suite entry (eval mode, seeded random weights).

    The reference every test compares TVM's output with, and what the ONNX path exports.
    """
    torch = _torch()
    if name not in ARCHITECTURES:
        raise ModelError(f"no architecture {name!r}; the suite has {list(SUITE)}")
    if size not in SIZES:
        raise ModelError(f"architecture size must be one of {list(SIZES)}, not {size!r}")
    torch.manual_seed(0)
    return ARCHITECTURES[name].build(size)


def get(name: str, size: str = "small") -> Model:
    """A suite entry read through :func:`autoplace.load_model`, named ``name`` or ``name-base``."""
    net, inputs = torch_model(name, size)
    return load_model(net, example_inputs=inputs, name=name if size == "small" else f"{name}-{size}")


def split_spec(spec: str) -> tuple[str, str] | None:
    """``"t5-encoder-base"`` -> ``("t5-encoder", "base")``, ``"llama"`` -> ``("llama", "small")``; None for
    a name that is not in the suite (names hold dashes, so a zoo spec cannot simply split at the first)."""
    if spec in ARCHITECTURES:
        return spec, "small"
    for size in SIZES:
        if spec.endswith(f"-{size}") and spec[: -len(size) - 1] in ARCHITECTURES:
            return spec[: -len(size) - 1], size
    return None


def parse(spec: str) -> Model:
    """``"llama"``, ``"llama-base"``, ``"whisper-encoder-small"`` -> the model."""
    split = split_spec(spec)
    if split is None:
        raise ModelError(
            f"no architecture {spec!r}; the suite has {list(SUITE)} (add -base for the larger size)")
    return get(*split)


# ---------------------------------------------------------------------------------------------------- ONNX

#: PyTorch's two ONNX exporters: ``"dynamo"`` (``torch.onnx.export(..., dynamo=True)``, the default, needs
#: ``onnxscript``) and ``"torchscript"`` (``dynamo=False``, the legacy tracer).
EXPORTERS = ("dynamo", "torchscript")

_DIFF = "the torchscript exporter has no ONNX form of aten::diff (transformers 5's causal-mask code)"
#: ``{architecture: {exporter: None if the ONNX path works, else why not}}`` as measured on torch 2.13,
#: transformers 5.23, TVM 0.27.0.post1 (``python experiments/architectures.py`` checks every entry;
#: ``tests/test_architectures.py`` marks each failing one with its reason).
ONNX_PATHS = {
    "llama": {"dynamo": None, "torchscript": _DIFF},
    "qwen2": {"dynamo": None, "torchscript": _DIFF},
    "mistral": {"dynamo": None, "torchscript": _DIFF},
    "gpt2": {"dynamo": None, "torchscript": _DIFF},
    "opt": {"dynamo": None, "torchscript": None},
    "roberta": {"dynamo": None, "torchscript": None},
    "t5-encoder": {"dynamo": None, "torchscript": None},
    "whisper-encoder": {"dynamo": None, "torchscript": None},
    "vit": {"dynamo": None, "torchscript": None},
    "swin": {"dynamo": None,
             "torchscript": "TVM's ONNX importer cannot infer a Reshape whose shape the tracer computes from "
                            "Shape ops (\"Reshape expects the input tensor to have known shape\")"},
    "convnext": {"dynamo": None, "torchscript": None},
    "resnet": {"dynamo": None, "torchscript": None},
    "mobilenetv2": {"dynamo": None,
                    "torchscript": "TVM's ONNX importer: \"Dynamic pads are not supported yet\" (the tracer "
                                   "computes MobileNetV2's TF-style padding at run time)"},
}
assert set(ONNX_PATHS) == set(SUITE)


def has_dynamo_exporter() -> bool:
    """Whether ``torch.onnx.export(..., dynamo=True)`` can run here (it needs ``onnxscript``)."""
    import importlib.util

    return importlib.util.find_spec("onnxscript") is not None


def onnx_model(name: str, size: str = "small", exporter: str = "dynamo"):
    """The suite entry exported to ONNX by PyTorch's ``exporter`` (an ``onnx.ModelProto``), from a freshly
    built model (tracing can leave state behind in a ``transformers`` model: export one model once).

    Raises whatever the exporter raises (``torch.onnx`` errors, ``ModuleNotFoundError`` without onnxscript).
    """
    import inspect
    import io
    import warnings

    import onnx

    torch = _torch()
    if exporter not in EXPORTERS:
        raise ValueError(f"exporter must be one of {list(EXPORTERS)}, not {exporter!r}")
    net, inputs = torch_model(name, size)
    input_names = [next(iter(inspect.signature(net.forward).parameters))]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        if exporter == "dynamo":
            program = torch.onnx.export(net, inputs, dynamo=True, opset_version=18, input_names=input_names,
                                        output_names=["output"], verbose=False)
            return program.model_proto
        buffer = io.BytesIO()
        # On failure the tracer prints the whole TorchScript graph (from C++) before raising: keep it quiet.
        with _quiet_file_descriptors():
            torch.onnx.export(net, inputs, buffer, dynamo=False, opset_version=17, input_names=input_names,
                              output_names=["output"])
    return onnx.load_from_string(buffer.getvalue())


@contextlib.contextmanager
def _quiet_file_descriptors():
    """Send what C++ code writes to stdout and stderr to /dev/null for the duration."""
    sys.stdout.flush()
    sys.stderr.flush()
    saved = [os.dup(1), os.dup(2)]
    devnull = os.open(os.devnull, os.O_WRONLY)
    try:
        os.dup2(devnull, 1)
        os.dup2(devnull, 2)
        yield
    finally:
        sys.stdout.flush()
        sys.stderr.flush()
        os.dup2(saved[0], 1)
        os.dup2(saved[1], 2)
        for fd in saved + [devnull]:
            os.close(fd)
