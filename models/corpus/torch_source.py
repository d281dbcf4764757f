"""The corpus' PyTorch side: which constructor builds each model, how it is wrapped, its inputs.

One table (:data:`SPECS`) for both places that build a corpus model in PyTorch: ``export.py``
exports these modules to the stored ONNX graphs, and the bundle runner (on the GPU box, for its
PyTorch columns) builds the same modules, so both time and export one architecture.

:func:`build` makes a model as the export did: ``torch.manual_seed(0)``, the constructor string
evaluated as written, every float parameter and BatchNorm statistic drawn again
(:func:`randomize`), wrapped to one tensor output (:func:`wrap`), in eval mode. Its positional
inputs are :func:`input_names` in that order, which is also the ONNX graph's input order
(``torch.onnx.export(input_names=...)``); :func:`input_specs` gives their shapes and dtypes as the
corpus index records them, without torch.

Only the standard library at module level: torch and the model libraries are imported when a
model is built, so the table can be read where torch is not installed. Where the package is not
importable (``export.py`` run as a script, the bundle's runner) this file is loaded by path.
"""

from __future__ import annotations

import importlib

#: the sequence length of text inputs
SEQ = 128
#: a parameter with at most this many distinct values is a constant fill (zeros, ones): drawn again
MAX_DISTINCT = 16

_TV = "torchvision.models"
_SEG = "torchvision.models.segmentation"
_BART = ("d_model=768, encoder_layers=2, decoder_layers=2, encoder_ffn_dim=3072, decoder_ffn_dim=3072, "
         "encoder_attention_heads=12, decoder_attention_heads=12")
_LLAMA = ("hidden_size=512, intermediate_size=1376, num_hidden_layers=2, num_attention_heads=8, "
          "num_key_value_heads=4, vocab_size=32000, max_position_embeddings=512")

#: (name, family, library, constructor, inputs, notes). ``inputs`` is image224, image299, text
#: (input_ids + attention_mask) or causal (input_ids only). The constructor is evaluated as written.
SPECS = [
    ("resnet18", "resnet", "torchvision", f"{_TV}.resnet18(weights=None)", "image224", ""),
    ("resnet50", "resnet", "torchvision", f"{_TV}.resnet50(weights=None)", "image224", ""),
    ("wide_resnet50_2", "resnet", "torchvision", f"{_TV}.wide_resnet50_2(weights=None)", "image224", ""),
    ("resnext50_32x4d", "resnet", "torchvision", f"{_TV}.resnext50_32x4d(weights=None)", "image224",
     "grouped 3x3 convs (32 groups)"),
    ("regnet_x_400mf", "regnet", "torchvision", f"{_TV}.regnet_x_400mf(weights=None)", "image224",
     "grouped convs"),
    ("regnet_y_400mf", "regnet", "torchvision", f"{_TV}.regnet_y_400mf(weights=None)", "image224",
     "grouped convs, squeeze-and-excitation"),
    ("mobilenet_v2", "mobilenet", "torchvision", f"{_TV}.mobilenet_v2(weights=None)", "image224",
     "depthwise convs, ReLU6"),
    ("mobilenet_v3_large", "mobilenet", "torchvision", f"{_TV}.mobilenet_v3_large(weights=None)", "image224",
     "hardswish, squeeze-and-excitation"),
    ("mobilenet_v3_small", "mobilenet", "torchvision", f"{_TV}.mobilenet_v3_small(weights=None)", "image224",
     "hardswish, squeeze-and-excitation"),
    ("efficientnet_b0", "efficientnet", "torchvision", f"{_TV}.efficientnet_b0(weights=None)", "image224",
     "SiLU, squeeze-and-excitation"),
    ("efficientnet_v2_s", "efficientnet", "torchvision", f"{_TV}.efficientnet_v2_s(weights=None)", "image224",
     "fused MBConv, SiLU, squeeze-and-excitation"),
    ("densenet121", "densenet", "torchvision", f"{_TV}.densenet121(weights=None)", "image224",
     "dense concat, pre-activation BatchNorm"),
    ("googlenet", "inception", "torchvision",
     f"{_TV}.googlenet(weights=None, aux_logits=False, init_weights=False)", "image224", "branch concat"),
    ("inception_v3", "inception", "torchvision",
     f"{_TV}.inception_v3(weights=None, aux_logits=False, init_weights=False)", "image299",
     "asymmetric 1x7/7x1 kernels, branch concat"),
    ("shufflenet_v2_x1_0", "shufflenet", "torchvision", f"{_TV}.shufflenet_v2_x1_0(weights=None)", "image224",
     "channel shuffle (reshape-transpose-reshape), split"),
    ("squeezenet1_0", "squeezenet", "torchvision", f"{_TV}.squeezenet1_0(weights=None)", "image224",
     "fire modules, concat"),
    ("alexnet", "vgg", "torchvision", f"{_TV}.alexnet(weights=None)", "image224", "11x11 stride-4 conv, LRN-free"),
    ("vgg11_bn", "vgg", "torchvision", f"{_TV}.vgg11_bn(weights=None)", "image224", "large FC layers"),
    ("mnasnet1_0", "mnasnet", "torchvision", f"{_TV}.mnasnet1_0(weights=None)", "image224", "5x5 depthwise"),
    ("convnext_tiny", "convnext", "torchvision", f"{_TV}.convnext_tiny(weights=None)", "image224",
     "7x7 depthwise, channels-last LayerNorm, GELU MLP, layer scale"),
    ("vit_b_16", "vit", "torchvision", f"{_TV}.vit_b_16(weights=None)", "image224", "12 layers, M=197"),
    ("swin_t", "swin", "torchvision", f"{_TV}.swin_t(weights=None)", "image224",
     "shifted windows (roll, window partition reshapes)"),
    ("maxvit_t", "maxvit", "torchvision", f"{_TV}.maxvit_t(weights=None)", "image224",
     "MBConv + block/grid attention"),
    ("lraspp_mobilenet_v3_large", "segmentation", "torchvision",
     f"{_SEG}.lraspp_mobilenet_v3_large(weights=None, weights_backbone=None)", "image224",
     "bilinear upsampling; output['out']"),
    ("deeplabv3_mobilenet_v3_large", "segmentation", "torchvision",
     f"{_SEG}.deeplabv3_mobilenet_v3_large(weights=None, weights_backbone=None, aux_loss=False)", "image224",
     "ASPP (dilated convs, global pool), bilinear upsampling; output['out']"),
    ("fcn_resnet50", "segmentation", "torchvision",
     f"{_SEG}.fcn_resnet50(weights=None, weights_backbone=None, aux_loss=False)", "image224",
     "dilated ResNet-50, bilinear upsampling; output['out']"),
    ("deit_tiny", "vit", "timm", "timm.create_model('deit_tiny_patch16_224', pretrained=False)", "image224", ""),
    ("timm_resnet26d", "resnet", "timm", "timm.create_model('resnet26d', pretrained=False)", "image224",
     "deep stem, average-pool downsampling"),
    ("efficientnet_lite0", "efficientnet", "timm", "timm.create_model('efficientnet_lite0', pretrained=False)",
     "image224", "ReLU6, no SE"),
    ("mobilevit_xs", "mobilevit", "timm", "timm.create_model('mobilevit_xs', pretrained=False)", "image224",
     "conv + transformer, unfold/fold reshapes"),
    ("poolformer_s12", "metaformer", "timm", "timm.create_model('poolformer_s12', pretrained=False)", "image224",
     "average-pool token mixer, GroupNorm"),
    ("levit_128s", "levit", "timm", "timm.create_model('levit_128s', pretrained=False)", "image224",
     "attention with learned bias, hardswish, BatchNorm on linear layers"),
    ("mixer_b16", "mlp-mixer", "timm", "timm.create_model('mixer_b16_224', pretrained=False)", "image224",
     "token-mixing MLP (transposes)"),
    ("ghostnet_100", "ghostnet", "timm", "timm.create_model('ghostnet_100', pretrained=False)", "image224",
     "ghost modules (cheap depthwise + concat), SE"),
    ("hrnet_w18_small", "hrnet", "timm", "timm.create_model('hrnet_w18_small', pretrained=False)", "image224",
     "parallel resolutions, nearest upsampling + add"),
    ("dla34", "dla", "timm", "timm.create_model('dla34', pretrained=False)", "image224", "tree aggregation concat"),
    ("bert", "bert", "transformers",
     "transformers.BertModel(transformers.BertConfig(num_hidden_layers=2, attn_implementation='eager'))",
     "text", "BERT-base width, 2 layers; output last_hidden_state"),
    ("distilbert", "bert", "transformers",
     "transformers.DistilBertModel(transformers.DistilBertConfig(n_layers=2, attn_implementation='eager'))",
     "text", "2 layers; output last_hidden_state"),
    ("roberta", "bert", "transformers",
     "transformers.RobertaModel(transformers.RobertaConfig(num_hidden_layers=2, attn_implementation='eager'))",
     "text", "2 layers, position ids from input_ids (cumsum); output last_hidden_state"),
    ("gpt2", "gpt", "transformers",
     "transformers.GPT2Model(transformers.GPT2Config(n_layer=2, attn_implementation='eager'))",
     "causal", "GPT-2 small width, 2 layers, causal mask; output last_hidden_state"),
    ("llama", "llama", "transformers",
     f"transformers.LlamaModel(transformers.LlamaConfig({_LLAMA}, attn_implementation='eager'))",
     "causal", "RMSNorm, rotary embeddings, SwiGLU, grouped-query attention, causal mask"),
    ("t5_encoder", "t5", "transformers",
     ("transformers.T5EncoderModel(transformers.T5Config(num_layers=2, num_decoder_layers=2, "
      "attn_implementation='eager'))"), "text",
     "t5-small width, 2 layers, relative position buckets; output last_hidden_state"),
    ("bart_encoder", "bart", "transformers",
     f"transformers.BartModel(transformers.BartConfig({_BART}, attn_implementation='eager')).get_encoder()",
     "text", "bart-base width, 2 encoder layers; output last_hidden_state"),
]
SPEC = {spec[0]: spec for spec in SPECS}

#: input kind -> (name, per-sample shape, dtype) of each positional input, in order
_KINDS = {
    "image224": [("input", [3, 224, 224], "float32")],
    "image299": [("input", [3, 299, 299], "float32")],
    "text": [("input_ids", [SEQ], "int64"), ("attention_mask", [SEQ], "int64")],
    "causal": [("input_ids", [SEQ], "int64")],
}


def spec(name: str) -> tuple:
    """The SPECS row of ``name``; KeyError (naming the known models) if there is none."""
    if name not in SPEC:
        raise KeyError(f"no PyTorch constructor for corpus model {name!r}; known: {', '.join(SPEC)}")
    return SPEC[name]


def input_specs(name: str) -> list[dict]:
    """The model's inputs as the corpus index records them: name, shape (``batch`` first), dtype."""
    return [{"name": n, "shape": ["batch", *shape], "dtype": dtype} for n, shape, dtype in _KINDS[spec(name)[4]]]


def input_names(name: str) -> list[str]:
    """Names of the model's positional inputs, in order (the ONNX graph's input order)."""
    return [i["name"] for i in input_specs(name)]


def construct(name: str):
    """The library's module for ``name``: ``torch.manual_seed(0)``, then the constructor as written."""
    import torch  # pylint: disable=import-outside-toplevel

    library, ctor = spec(name)[2], spec(name)[3]
    torch.manual_seed(0)
    namespace = {library: importlib.import_module(library)}
    return eval(ctor, namespace)  # pylint: disable=eval-used


def _more_distinct_than(tensor, count: int) -> bool:
    """Whether ``tensor`` has more than ``count`` distinct values (a prefix decides most weights
    without sorting all of them: more there means more in the whole)."""
    import torch  # pylint: disable=import-outside-toplevel

    flat = tensor.reshape(-1)
    return len(torch.unique(flat[:4096])) > count or len(torch.unique(flat)) > count


def randomize(model) -> None:
    """Draw every float parameter and BatchNorm statistic again (seeded), so that none is constant."""
    import torch  # pylint: disable=import-outside-toplevel

    gen = torch.Generator().manual_seed(0)
    with torch.no_grad():
        for name, tensor in list(model.named_parameters()) + list(model.named_buffers()):
            if not tensor.is_floating_point() or tensor.numel() < 2:
                continue
            leaf = name.rsplit(".", 1)[-1]
            is_param = isinstance(tensor, torch.nn.Parameter)
            if leaf == "running_var":
                tensor.copy_(torch.rand(tensor.shape, generator=gen) + 0.5)
            elif leaf == "running_mean":
                tensor.copy_(torch.randn(tensor.shape, generator=gen) * 0.1)
            elif not is_param or _more_distinct_than(tensor, MAX_DISTINCT):
                continue  # a buffer (masks, tables) or an already random weight
            elif tensor.dim() == 1 and bool((tensor == 1).all()):  # norm scales, layer scale
                tensor.copy_(torch.rand(tensor.shape, generator=gen) + 0.5)
            else:  # zero biases and the like
                tensor.copy_(torch.randn(tensor.shape, generator=gen) * 0.02)


def wrap(model, kind: str):
    """``model`` in eval mode behind a module with one tensor output, whatever the library returns:
    HF models take their inputs by keyword (``return_dict=False``, first output), segmentation
    models give ``["out"]``."""
    import torch  # pylint: disable=import-outside-toplevel

    class Wrapped(torch.nn.Module):  # pylint: disable=missing-class-docstring
        def __init__(self, inner):
            super().__init__()
            self.inner = inner

        def forward(self, *args):  # pylint: disable=missing-function-docstring
            if kind in ("text", "causal"):
                names = ["input_ids", "attention_mask"][:len(args)]
                out = self.inner(**dict(zip(names, args)), return_dict=False)
                return out[0]
            out = self.inner(*args)
            if isinstance(out, dict):
                return out["out"]
            return out

    return Wrapped(model).eval()


def build(name: str):
    """Corpus model ``name`` as export.py exported it: constructed, randomized, wrapped, eval mode."""
    model = construct(name)
    randomize(model)
    return wrap(model, spec(name)[4])


def example_inputs(name: str, batch: int) -> list:
    """The export's inputs at ``batch``: (name, tensor) in order; images N(0, 1), token ids in
    [3, 1000), masks of ones with 16 padded positions in the last sample (so that no tracer path
    assumes "no padding")."""
    import torch  # pylint: disable=import-outside-toplevel

    gen = torch.Generator().manual_seed(1)
    out = []
    for n, shape, dtype in _KINDS[spec(name)[4]]:
        if dtype == "float32":
            out.append((n, torch.randn(batch, *shape, generator=gen)))
        elif n == "attention_mask":
            mask = torch.ones(batch, *shape, dtype=torch.int64)
            mask[-1, SEQ - 16:] = 0
            out.append((n, mask))
        else:
            out.append((n, torch.randint(3, 1000, (batch, *shape), generator=gen, dtype=torch.int64)))
    return out
