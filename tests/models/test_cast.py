"""``cast_model``: a copy in another dtype, cast straight from the original's tensors, is what a
whole deep copy cast with ``.to`` is (with the RoPE inverse frequencies left in float32), shares no
storage with the original, and keeps tied weights tied."""
import copy

import pytest
import torch
from transformers import Gemma3ForCausalLM, Gemma3TextConfig, LlamaConfig, LlamaForCausalLM

from playground.models.dtypes import cast_model

SIZES = dict(vocab_size=96, hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4,
             num_key_value_heads=2, head_dim=16, tie_word_embeddings=True)


def tiny(arch: str) -> torch.nn.Module:
    torch.manual_seed(0)
    if arch == "llama":
        return LlamaForCausalLM(LlamaConfig(**SIZES)).eval()
    return Gemma3ForCausalLM(Gemma3TextConfig(**SIZES, sliding_window=4)).eval()


def whole_copy_cast(model: torch.nn.Module, dtype: torch.dtype) -> torch.nn.Module:
    """The plain definition: the whole model deep-copied, cast, its inverse frequencies put back."""
    cast = copy.deepcopy(model).to(dtype)
    originals = dict(model.named_buffers())
    for name, buffer in cast.named_buffers():
        if name.endswith("inv_freq"):
            buffer.data = originals[name].data.clone()
    return cast


def tensors(model: torch.nn.Module) -> dict[str, torch.Tensor]:
    """Parameters, buffers and plain tensor attributes (transformers keeps ``original_inv_freq`` as one)."""
    found = dict(model.named_parameters(remove_duplicate=False))
    found.update(model.named_buffers(remove_duplicate=False))
    for prefix, module in model.named_modules():
        found.update((f"{prefix}.{k}", v) for k, v in vars(module).items() if isinstance(v, torch.Tensor))
    return found


@pytest.mark.parametrize("arch", ["llama", "gemma3"])
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16, torch.float32])
def test_the_cast_is_the_whole_copy_cast(arch, dtype):
    model = tiny(arch)
    before = {k: v.clone() for k, v in tensors(model).items()}
    cast, reference = cast_model(model, dtype), whole_copy_cast(model, dtype)
    ours, theirs = tensors(cast), tensors(reference)
    assert ours.keys() == theirs.keys() and len(ours) > 20
    for name, tensor in ours.items():
        assert tensor.dtype == theirs[name].dtype and torch.equal(tensor, theirs[name]), name
        assert type(tensor) is type(theirs[name]), name
    frequencies = [name for name in ours if name.endswith("inv_freq")]
    assert frequencies and all(ours[name].dtype == torch.float32 for name in frequencies)
    assert sum(t.dtype == dtype for t in ours.values()) > len(ours) // 2
    ids = torch.tensor([[1, 5, 9, 2, 7, 3]])
    with torch.no_grad():
        assert torch.equal(cast(ids).logits, reference(ids).logits)
    # the original is as it was, and no tensor of the copy is one of its storages
    after = tensors(model)
    assert all(torch.equal(after[k], v) and after[k].dtype == v.dtype for k, v in before.items())
    pointers = {t.untyped_storage().data_ptr() for t in after.values()}
    assert not pointers & {t.untyped_storage().data_ptr() for t in ours.values()}


def test_tied_weights_stay_one_tensor():
    model = tiny("llama")
    assert model.get_output_embeddings().weight is model.get_input_embeddings().weight
    cast = cast_model(model, torch.bfloat16)
    assert cast.get_output_embeddings().weight is cast.get_input_embeddings().weight
    assert isinstance(cast.get_input_embeddings().weight, torch.nn.Parameter)
