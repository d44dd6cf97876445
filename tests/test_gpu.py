"""On a CUDA GPU: both attention paths agree under autocast, and so do the packed and padded passes;
training picks the hardware's precision, its ordinary steps never wait for the device, and it compiles whole;
generation gives the CPU's tokens, a GPU-trained checkpoint evaluates on the CPU, and --trainer.devices 1
works. Skipped where there is no CUDA device (``python -m pytest -m gpu`` runs only these; ``bash
bench/gpu.sh`` runs them first)."""

import math

import lightning as L
import pytest
import torch
import torch.nn.functional as F

from data.batching import Batch
from data.datamodule import TranslationDataModule
from data.reader import ToyOptions
from model import Transformer
from model.attention import MultiHeadAttention
from model.context import AttentionContext
from model.masks import causal_mask
from model.packing import Packing, TokenIndex, token_index
from model.positions import POSITIONAL
from tests.conftest import PAD, last_json, read_events, run_evaluate, tiny_config, train_tiny
from tests.helpers.tiny_batches import batch as compile_batch
from tests.helpers.tiny_batches import padded_batch, training_module
from training.module import TranslationModule
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
        fused, _ = attn(x, x, x, context=AttentionContext.of(mask))
        explicit, weights = attn(x, x, x, context=AttentionContext.of(mask), need_weights=True)
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


@pytest.fixture(scope="module")
def gpu_run(tmp_path_factory):
    """The tiny config trained on the GPU for two epochs (six steps each), its loss logged at every step."""
    return train_tiny(tmp_path_factory.mktemp("gpu"), "--trainer.accelerator", "gpu",
                      "--trainer.devices", "1", "--trainer.max_epochs", "2",
                      "--trainer.log_every_n_steps", "1", "--attention.every_n_epochs", "0")


def test_a_tiny_run_trains_on_the_gpu_in_the_hardware_precision(gpu_run):
    expected = choose_precision(probe_hardware("gpu")).precision
    assert expected in ("bf16-mixed", "16-mixed")
    assert f"precision: {expected}" in (gpu_run / "config.yaml").read_text()
    losses = [s.value for s in read_events(gpu_run).Scalars("train/loss")]
    assert len(losses) >= 10  # one per step: the first and the last are different steps
    assert all(math.isfinite(loss) for loss in losses)
    assert sum(losses[-3:]) < sum(losses[:3])  # it learns (on a CPU: 6.02 to 5.61 on average)
    state = torch.load(gpu_run / "checkpoints" / "last.ckpt", map_location="cpu", weights_only=True)
    assert state["global_step"] == len(losses)


def test_a_gpu_trained_checkpoint_is_evaluated_on_the_cpu(gpu_run, capsys):
    checkpoint = gpu_run / "checkpoints" / "last.ckpt"
    saved = torch.load(checkpoint, weights_only=True)  # no map_location: tensors go where they were saved
    assert all(t.is_cuda for t in saved["state_dict"].values())
    code, out, _ = run_evaluate(capsys, checkpoint, "--device", "cpu", "--quiet")
    assert code == 0
    result = last_json(out)
    assert result["num_sentences"] == 40  # the tiny config's test split
    assert 0.0 <= result["bleu"] <= 100.0


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


# -- the packed and padded training passes -------------------------------------------------------------------

# Relative error of a whole gradient (its norm): the two passes multiply matrices of different shapes, so
# autocast rounds at different points; a wrong gather or scatter would be off by the order of the gradient.
GRADIENT_TOLERANCE = {torch.bfloat16: 5e-2, torch.float16: 1e-2}


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16], ids=["bf16", "fp16"])
@pytest.mark.parametrize("positional", POSITIONAL)
def test_packed_and_padded_passes_agree_under_autocast(positional, dtype, monkeypatch):
    """tests/model/test_packing.py's comparison on the GPU, in each autocast dtype: the logits at the targets
    and every parameter's gradient."""
    if not supports(dtype):
        pytest.skip("bf16 needs compute capability 8.0")
    monkeypatch.setattr("model.transformer.PACK_DEVICES", ("cuda",))  # off on GPUs by default; on to compare
    pads = []  # every Packing.pad: the packed pass pads around each attention kernel
    pad = Packing.pad
    monkeypatch.setattr(Packing, "pad", lambda self, x: pads.append(x.shape) or pad(self, x))
    torch.manual_seed(0)
    model = Transformer(tiny_config(positional=positional, d_model=64, num_heads=4, d_ff=128)).cuda().train()
    src, tgt_in = (t.cuda() for t in padded_batch())
    keep = tgt_in != PAD
    tokens = TokenIndex(token_index(src != PAD), token_index(keep))
    targets = torch.randint(3, 11, (int(keep.sum()),), device="cuda")

    def logits_and_grads(packed: bool):
        model.zero_grad()
        with torch.autocast(device_type="cuda", dtype=dtype):
            logits = model(src, tgt_in, tokens=tokens) if packed else model(src, tgt_in)[keep]  # (N, V)
            F.cross_entropy(logits.float(), targets).backward()
        return logits, {n: p.grad.clone() for n, p in model.named_parameters() if p.grad is not None}

    packed_logits, packed_grads = logits_and_grads(packed=True)
    assert pads  # it really ran packed
    pads.clear()
    padded_logits, padded_grads = logits_and_grads(packed=False)
    assert not pads
    assert packed_logits.dtype == padded_logits.dtype == dtype  # autocast really ran
    torch.testing.assert_close(packed_logits.float(), padded_logits.float(), **TOLERANCE[dtype])
    assert packed_grads.keys() == padded_grads.keys()
    for name, grad in padded_grads.items():
        assert torch.isfinite(packed_grads[name]).all(), name
        error = (packed_grads[name] - grad).norm()
        assert error <= GRADIENT_TOLERANCE[dtype] * grad.norm() + 1e-6, f"{name}: {error} of {grad.norm()}"


# -- ordinary training steps never wait for the device -------------------------------------------------------


class SyncIsAnErrorOnOrdinarySteps(L.Callback):
    """Makes every host-device sync an error from the start of each ordinary training step until the next
    step starts: the step itself (forward, loss, backward, clipping, optimiser) and Lightning's bookkeeping
    after it, the progress bar included. Not the first step (its optimiser makes its state) nor a log step,
    which reads values back."""

    def __init__(self) -> None:
        self.steps: list[int] = []

    def on_train_batch_start(self, trainer, pl_module, batch, batch_idx) -> None:
        step = trainer.global_step
        ordinary = step > 0 and (step + 1) % trainer.log_every_n_steps != 0
        torch.cuda.set_sync_debug_mode("error" if ordinary else "default")
        if ordinary:
            self.steps.append(step)

    def on_train_end(self, trainer, pl_module) -> None:
        torch.cuda.set_sync_debug_mode("default")


def test_ordinary_training_steps_make_no_host_device_sync(tmp_path):
    # Not 16-mixed: torch's GradScaler reads back whether gradients overflowed at every step.
    precision = "bf16-mixed" if torch.cuda.is_bf16_supported() else "32-true"
    dm = TranslationDataModule(dataset="copy", shared_vocab=True, max_train_len=32, max_tokens=256,
                               toy=ToyOptions(train_size=400, val_size=12, test_size=2))
    torch.manual_seed(0)
    m = TranslationModule(src_vocab_size=dm.src_vocab_size, tgt_vocab_size=dm.tgt_vocab_size, d_model=64,
                          num_heads=4, num_encoder_layers=2, num_decoder_layers=2, d_ff=128, warmup_steps=4,
                          decode_every_n_epochs=0)
    watch = SyncIsAnErrorOnOrdinarySteps()
    # Eight steps, the last a log step: the epoch (cut at eight batches) ends where syncs are allowed.
    trainer = L.Trainer(accelerator="gpu", devices=1, precision=precision, max_steps=8, limit_train_batches=8,
                        limit_val_batches=0, log_every_n_steps=4, gradient_clip_val=1.0,
                        enable_checkpointing=False, enable_progress_bar=True, enable_model_summary=False,
                        default_root_dir=tmp_path, callbacks=[watch])
    try:
        trainer.fit(m, datamodule=dm)
    finally:
        torch.cuda.set_sync_debug_mode("default")
    assert watch.steps == [1, 2, 4, 5, 6]
    assert trainer.global_step == 8
    assert math.isfinite(float(trainer.logged_metrics["train/loss"]))


# -- the training step compiles whole ------------------------------------------------------------------------


@pytest.mark.parametrize("positional", POSITIONAL)
def test_the_training_loss_compiles_with_no_graph_break_on_the_gpu(positional):
    """``fullgraph=True`` makes any graph break an error; the compiled loss and its gradients are the eager
    ones (no dropout, so both draw nothing)."""
    m = training_module(positional, dropout=0.0).cuda()
    b = Batch(*(None if t is None else t.cuda() for t in compile_batch(6, 9, seed=0)))
    dtype = torch.bfloat16 if supports(torch.bfloat16) else torch.float16
    compiled = torch.compile(m._training_loss, fullgraph=True)
    results = []
    for loss_of in (compiled, m._training_loss):
        m.zero_grad()
        with torch.autocast(device_type="cuda", dtype=dtype):
            loss = loss_of(b)
        loss.backward()
        results.append((loss.detach(), [p.grad.clone() for p in m.parameters() if p.grad is not None]))
    (compiled_loss, compiled_grads), (eager_loss, eager_grads) = results
    torch.testing.assert_close(compiled_loss, eager_loss, **TOLERANCE[dtype])
    assert len(compiled_grads) == len(eager_grads)
    for compiled_grad, eager_grad in zip(compiled_grads, eager_grads):
        assert (compiled_grad - eager_grad).norm() <= GRADIENT_TOLERANCE[dtype] * eager_grad.norm() + 1e-6
