"""On a CUDA GPU: both attention paths agree under autocast, training picks the hardware's precision,
generation gives the CPU's tokens, and --trainer.devices 1 works. Skipped where there is no CUDA device
(``python -m pytest -m gpu`` runs only these; ``bash bench/gpu.sh`` runs them first)."""

import pytest
import torch

from model import Transformer
from model.attention import MultiHeadAttention
from model.masks import causal_mask
from tests.conftest import PAD, read_events, tiny_config, train_tiny
from training.precision import choose_precision, probe_hardware

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA device"),
]

B, TQ, D, H = 4, 9, 64, 4
# Both paths round to the autocast dtype at different points: bf16 keeps 8 bits of mantissa, fp16 11.
TOLERANCE = {torch.bfloat16: {"atol": 3e-2, "rtol": 3e-2}, torch.float16: {"atol": 4e-3, "rtol": 4e-3}}


def key_padding(lengths, total, device):
    return (
        torch.arange(total, device=device)[None] < torch.tensor(lengths, device=device)[:, None]
    )[:, None, None, :]


def fused_and_explicit(dtype: torch.dtype, device: str = "cuda"):
    """Self-attention outputs of the fused kernel and of the weight-returning path under ``dtype``
    autocast."""
    torch.manual_seed(0)
    attn = MultiHeadAttention(D, H).to(device).eval()
    x = torch.randn(B, TQ, D, device=device)
    mask = key_padding([9, 7, 3, 1], TQ, device) & causal_mask(TQ, device=device)
    with torch.autocast(device_type=torch.device(device).type, dtype=dtype):
        fused, _ = attn(x, x, x, mask=mask)
        explicit, weights = attn(x, x, x, mask=mask, need_weights=True)
    return fused, explicit, weights


def supports(dtype: torch.dtype) -> bool:
    return dtype != torch.bfloat16 or torch.cuda.get_device_capability() >= (8, 0)


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16], ids=["bf16", "fp16"])
def test_fused_and_weight_returning_attention_agree_under_autocast(dtype):
    if not supports(dtype):
        pytest.skip("bf16 needs compute capability 8.0")
    fused, explicit, weights = fused_and_explicit(dtype)
    assert fused.dtype == explicit.dtype == dtype  # autocast really ran
    assert torch.isfinite(fused).all() and torch.isfinite(explicit).all()
    torch.testing.assert_close(fused.float(), explicit.float(), **TOLERANCE[dtype])
    torch.testing.assert_close(
        weights.float().sum(-1), torch.ones(B, H, TQ, device="cuda"), **TOLERANCE[dtype]
    )


def test_a_tiny_run_trains_on_the_gpu_in_the_hardware_precision(tmp_path):
    run = train_tiny(tmp_path, "--trainer.accelerator", "gpu", "--trainer.devices", "1",
                     "--trainer.max_epochs", "1", "--attention.every_n_epochs", "0")
    expected = choose_precision(probe_hardware("gpu")).precision
    assert expected in ("bf16-mixed", "16-mixed")
    assert f"precision: {expected}" in (run / "config.yaml").read_text()
    losses = [s.value for s in read_events(run).Scalars("train/loss")]
    assert losses and all(torch.isfinite(torch.tensor(losses)))
    assert losses[-1] < losses[0]
    state = torch.load(run / "checkpoints" / "last.ckpt", map_location="cpu", weights_only=True)
    assert state["global_step"] > 0


def test_devices_1_with_ddp_strategy_on_the_gpu(tmp_path):
    run = train_tiny(tmp_path, "--trainer.accelerator", "gpu", "--trainer.devices", "1",
                     "--trainer.strategy", "ddp", "--trainer.max_epochs", "1",
                     "--attention.every_n_epochs", "0")
    state = torch.load(run / "checkpoints" / "last.ckpt", map_location="cpu", weights_only=True)
    assert state["global_step"] > 0 and state["epoch"] == 0


def trained_copy_model(steps: int = 300) -> tuple[Transformer, torch.Tensor]:
    """A tiny model trained briefly (seeded, on the CPU) to copy sequences, and a batch of test sources."""
    torch.manual_seed(0)
    config = tiny_config(src_vocab_size=12, tgt_vocab_size=12, d_model=32, num_heads=4, d_ff=64)
    model = Transformer(config)
    optimizer = torch.optim.AdamW(model.parameters(), lr=3e-3)
    generator = torch.Generator().manual_seed(0)

    def batch(n: int) -> torch.Tensor:
        lengths = torch.randint(3, 8, (n,), generator=generator)
        ids = torch.randint(3, 12, (n, 7), generator=generator)
        return ids.masked_fill(torch.arange(7)[None] >= lengths[:, None], PAD)

    for _ in range(steps):
        src = batch(32)  # (32, 7)
        tgt_out = torch.cat([src, torch.full((32, 1), PAD)], 1)  # (32, 8): the tokens, EOS, padding
        tgt_out[torch.arange(32), (src != PAD).sum(1)] = config.eos_id
        tgt_in = torch.cat([torch.full((32, 1), config.bos_id), src], 1)  # (32, 8): BOS, the tokens, padding
        logits = model(src, tgt_in)  # (32, 8, 12)
        loss = torch.nn.functional.cross_entropy(
            logits.reshape(-1, 12), tgt_out.reshape(-1), ignore_index=PAD
        )
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
    return model.eval(), batch(16)


def generations_on(model: Transformer, src: torch.Tensor, device: str) -> dict:
    model = model.to(device)
    src = src.to(device)
    return {
        "greedy": model.generate(src, max_len=12).cpu(),
        "beam": model.generate(src, max_len=12, beam_size=4).cpu(),
    }


def test_greedy_and_beam_generation_on_cuda_equal_the_cpus():
    model, src = trained_copy_model()
    on_cpu = generations_on(model, src, "cpu")
    on_cuda = generations_on(model, src, "cuda")
    for name in ("greedy", "beam"):
        assert torch.equal(on_cuda[name], on_cpu[name]), name
    copied = model.generated_ids(on_cpu["greedy"])
    assert sum(row == [t for t in s if t != PAD] for row, s in zip(copied, src.tolist())) >= 8  # it learned
