"""The one home of forward hooks on a model's layers (:mod:`lab.models.hooks`).

Fault class: a hook left registered after its ``with`` block (on an error inside it, or when one
module of several refuses its hook), which then runs on every later pass of the model.
"""

from __future__ import annotations

import pytest
import torch

from lab.models.hooks import attention_modules, decoder_layers, forward_hooks
from tests import support

pytestmark = pytest.mark.unit


def test_forward_hooks_error_inside_block_removes_every_hook():
    layers = [torch.nn.Identity(), torch.nn.Identity()]
    seen = []
    with pytest.raises(RuntimeError, match="inside"):
        with forward_hooks(layers, lambda module, args, output: seen.append(module)):
            layers[0](torch.zeros(1))
            raise RuntimeError("inside")
    for layer in layers:
        layer(torch.zeros(1))
    assert seen == [layers[0]]
    assert all(not layer._forward_hooks for layer in layers)


def test_forward_hooks_module_refusing_its_hook_removes_those_registered():
    class Refuses(torch.nn.Identity):
        def register_forward_hook(self, hook):
            raise RuntimeError("refused")

    first = torch.nn.Identity()
    with pytest.raises(RuntimeError, match="refused"):
        with forward_hooks([first, Refuses()], lambda module, args, output: None):
            pass
    assert not first._forward_hooks


def test_attention_modules_tiny_llama_one_per_layer_in_order(one_torch_thread):
    model = support.tiny_llama(attn_implementation="eager")
    assert attention_modules(model) == [layer.self_attn for layer in model.model.layers]


def test_decoder_layers_model_without_layers_names_it():
    with pytest.raises(ValueError, match=r"^Identity has no decoder layers at \.model\.layers; cannot read its "
                                         r"attention$"):
        decoder_layers(torch.nn.Identity())
