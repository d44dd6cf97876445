# The source of notebooks/tour.ipynb: python notebooks/build.py rebuilds the notebook from this file.
# Over 500 lines on purpose: it is one notebook, read top to bottom, each cell building on the last.

# %% [markdown]
# # A guided tour: from scaled dot-product attention to a trained model's heads
#
# This notebook walks from the formulas of attention to the heads of a Transformer you train yourself, using
# this project's own code at every step. It runs top to bottom on a CPU in a few minutes, one of them
# training.
#
# 1. Scaled dot-product attention by hand, then with the project's code; masks, and why no NaN appears.
# 2. Splitting a vector into heads with `view` and `transpose`, and merging them back; the project's
#    `MultiHeadAttention` against `torch.nn.MultiheadAttention`.
# 3. The encoder–decoder on one batch of the built-in toy language pair, with every mask drawn.
# 4. Training a tiny model for a minute; its heads; the head that aligns best; silencing a head.
# 5. The ATTENTION tab of TensorBoard, inside this notebook.
#
# **Set-up.** From the repository root: `pip install -r requirements.txt` installs everything this notebook
# needs except a notebook app (`pip install jupyterlab`, or open it in VS Code). Then run the cells in order.
# Every cell checks what it claims with `assert`, so a cell that runs without error has shown you something
# true.

# %%
# %matplotlib inline
import os
import sys
from pathlib import Path

# Use the code of the repository this notebook sits in, whether or not the project is installed.
ROOT = Path.cwd().resolve()
while not (ROOT / "model" / "attention.py").is_file():
    if ROOT == ROOT.parent:
        raise RuntimeError("start the notebook from inside the repository (its notebooks/ folder)")
    ROOT = ROOT.parent
sys.path.insert(0, str(ROOT))

# Training writes its runs here: "runs" beside this notebook (ignored by git). The tests point it elsewhere.
RUNS = os.environ.get("TOUR_RUNS", "runs")

import torch
import torch.nn.functional as F
from IPython.display import display

torch.manual_seed(0)
torch.set_printoptions(precision=3, sci_mode=False)
print(f"repository: {ROOT}\nruns: {Path(RUNS).resolve()}\ntorch {torch.__version__}")

# %% [markdown]
# ## 1. Scaled dot-product attention
#
# Attention lets each **query** look at a set of **keys** and take a weighted mix of their **values**
# ("Attention Is All You Need", §3.2.1):
#
# $$\mathrm{Attention}(Q, K, V) = \mathrm{softmax}\!\left(\frac{Q K^\top}{\sqrt{d_k}}\right) V$$
#
# Two queries and four keys, each a vector of $d_k = 4$ numbers. Each value here is a one-hot vector, so an
# output row shows exactly how much of each value it took.

# %%
q = torch.tensor([[2.0, 0.0, 2.0, 0.0],  # query 1
                  [0.0, 2.0, 0.0, 2.0]])  # query 2      (2, 4): 2 queries, d_k = 4
k = torch.tensor([[1.0, 0.0, 1.0, 0.0],  # key 1, like query 1
                  [0.0, 1.0, 0.0, 1.0],  # key 2, like query 2
                  [1.0, 1.0, 0.0, 0.0],  # key 3, a bit of both
                  [0.0, 0.0, 1.0, 1.0]])  # key 4, a bit of both   (4, 4): 4 keys
v = torch.eye(4)  # (4, 4): value i is the i-th unit vector

scores = q @ k.T / 4**0.5  # (2, 4): one score per (query, key), scaled by sqrt(d_k) = 2
print("scores = q kᵀ / √d_k\n", scores)
weights = scores.softmax(dim=-1)  # each row: exp(score) / sum of exp(scores) of that row
print("weights = softmax(scores) along each row\n", weights)
print("row sums:", weights.sum(dim=-1))
out = weights @ v  # (2, 4): each query's weighted mix of the values
print("output = weights v\n", out)

assert torch.allclose(weights.sum(dim=-1), torch.ones(2))
assert weights[0].argmax() == 0 and weights[1].argmax() == 1  # each query looks most at the key most like it

# %% [markdown]
# Why divide by $\sqrt{d_k}$? A dot product of $d_k$ random unit-variance numbers has variance $d_k$: without
# the scaling, wide heads would get large scores and a softmax so peaked that its gradients vanish.
#
# **The project's code.** `model/attention.py` holds `MultiHeadAttention`: it first projects queries, keys and
# values with learned matrices, splits them into heads, attends, merges the heads and projects the result.
# With **one head and identity projections** it is exactly the formula above. It has two paths: the fused
# kernel `F.scaled_dot_product_attention` (fast, used in training, returns no weights) and an explicit path
# that also returns the weights (`need_weights=True`, for looking inside). Both must agree with our numbers.

# %%
from model import MultiHeadAttention

identity = MultiHeadAttention(d_model=4, num_heads=1)
with torch.no_grad():
    identity.in_proj.weight.copy_(torch.eye(4).repeat(3, 1))  # (3D, D): W_q = W_k = W_v = I
    identity.in_proj.bias.zero_()
    identity.out_proj.weight.copy_(torch.eye(4))
    identity.out_proj.bias.zero_()

with torch.no_grad():
    out_explicit, weights_explicit = identity(q[None], k[None], v[None], need_weights=True)  # a batch of 1
    out_fused, no_weights = identity(q[None], k[None], v[None])  # the fused kernel returns no weights
print("project, explicit path, weights (B, H, Tq, Tk):\n", weights_explicit)
print("project, fused path, output:\n", out_fused)

assert torch.allclose(weights_explicit[0, 0], weights, atol=1e-6)
assert torch.allclose(out_explicit[0], out, atol=1e-6) and torch.allclose(out_fused[0], out, atol=1e-6)
assert no_weights is None
assert torch.allclose(F.scaled_dot_product_attention(q, k, v), out, atol=1e-6)  # PyTorch's own function

# %% [markdown]
# ### Masked softmax: padding
#
# Sentences in a batch have different lengths, so the shorter ones are **padded** with a `<pad>` token.
# No query may look at padding. A **mask** says which keys each query may attend. This project uses one
# convention everywhere: masks are boolean and **`True` = may attend** (the convention of
# `F.scaled_dot_product_attention`); all masks are built in `model/masks.py`.
#
# Say the four keys are the tokens `7 9 4 <pad>` (id 0 is `<pad>`). The masked scores are set to the lowest
# number the dtype holds; `exp` of it is exactly 0, so the padding key gets weight 0 and the other three share
# the whole weight.

# %%
from data.special import SPECIALS
from model import AttentionContext, causal_mask, decoder_self_mask, padding_mask

PAD = SPECIALS.pad_id
key_ids = torch.tensor([[7, 9, 4, PAD]])  # (B=1, Tk=4)
attend = padding_mask(key_ids, pad_id=PAD)  # (B, 1, 1, Tk): broadcasts over heads and queries
print("padding mask, shape", tuple(attend.shape), "\n", attend)

masked_scores = scores.masked_fill(~attend[0, 0], torch.finfo(scores.dtype).min)  # (2, 4)
print("masked scores\n", masked_scores.tolist())
masked_weights = masked_scores.softmax(dim=-1)
print("masked weights\n", masked_weights)

with torch.no_grad():
    padded = AttentionContext.of(attend)  # a call's mask travels in its context, made safe once there
    _, project_weights = identity(q[None], k[None], v[None], context=padded, need_weights=True)
assert torch.equal(masked_weights[:, 3], torch.zeros(2))  # the padding key gets exactly nothing
assert torch.allclose(masked_weights, project_weights[0, 0], atol=1e-6)
assert torch.allclose(masked_weights[:, :3], scores[:, :3].softmax(dim=-1))  # softmax over the real keys only

# %% [markdown]
# ### Why no NaN: a query with nothing to attend
#
# Tutorials often fill masked scores with `-inf` (or `-1e9`). Both go wrong when a query's **whole row** is
# masked, which happens to a query that may see no key at all (a sentence that is all padding, or a custom
# mask): with `-inf`, softmax computes 0/0 = **NaN**, and one NaN spreads through every later layer and into
# the loss. The lowest finite number avoids the NaN but spreads the weight evenly over keys that were all
# forbidden. (And `-1e9` overflows in float16.)
#
# The project's guard (`guard_empty_rows` in `model/masks.py`, applied once when a mask enters an
# `AttentionContext`, the one argument that carries a call's mask into `MultiHeadAttention.forward`): a row
# with no key may attend everything, so softmax is finite, and its weights, and so its output, are then
# multiplied by 0.

# %%
no_key = torch.tensor([[True, True, False, False],   # query 1 may see keys 1 and 2
                       [False, False, False, False]])  # query 2 may see nothing   (Tq, Tk)
naive = scores.masked_fill(~no_key, float("-inf")).softmax(dim=-1)
finite = scores.masked_fill(~no_key, torch.finfo(scores.dtype).min).softmax(dim=-1)
with torch.no_grad():
    guarded_out, guarded = identity(q[None], k[None], v[None], context=AttentionContext.of(no_key),
                                    need_weights=True)
    fused_out, _ = identity(q[None], k[None], v[None], context=AttentionContext.of(no_key))
print("-inf fill:\n", naive)
print("lowest-float fill:\n", finite)
print("the project:\n", guarded[0, 0])
print("the project's output (fused path):\n", fused_out[0])

assert torch.isnan(naive[1]).all()  # 0/0
assert torch.allclose(finite[1], torch.full((4,), 0.25))  # uniform over forbidden keys
assert torch.equal(guarded[0, 0, 1], torch.zeros(4)) and torch.equal(fused_out[0, 1], torch.zeros(4))
assert torch.allclose(guarded[0, 0, 0], naive[0])  # rows with keys are untouched
assert not guarded_out.isnan().any() and not fused_out.isnan().any()

# %% [markdown]
# ### Masked softmax: causal
#
# A decoder generates one token at a time, so in training, position $t$ may only look at positions $\le t$:
# the **causal** mask, a lower triangle with its diagonal. Here four tokens attend to each other
# (self-attention: queries, keys and values are the same tokens).

# %%
causal = causal_mask(4)  # (1, 1, T, T)
print("causal mask (1 = may attend)\n", causal[0, 0].int())
with torch.no_grad():
    _, self_weights = identity(k[None], k[None], k[None], context=AttentionContext.of(causal),
                               need_weights=True)
print("weights\n", self_weights[0, 0])
assert torch.equal(self_weights[0, 0].triu(diagonal=1), torch.zeros(4, 4))  # nothing from the future
assert self_weights[0, 0, 0, 0] == 1.0  # the first token can only see itself

# The decoder combines both: causal, and no padding. Decoder input "<s> 7 9 <pad>" (<s> is id 1):
print("decoder self-attention mask\n", decoder_self_mask(torch.tensor([[1, 7, 9, PAD]]), PAD)[0, 0].int())

# %% [markdown]
# The padded query (last row) may still see the real tokens before it: its row is not empty, so it gets
# ordinary weights, and the loss ignores its output anyway.
#
# ## 2. Splitting into heads
#
# **Multi-head** attention runs several attentions side by side, each on its own slice of the features:
# with model width $D = 8$ and $H = 2$ heads, each head sees $D_h = D / H = 4$ features. No data moves:
# `view` reinterprets the last dimension as (heads, features), and `transpose` brings the head dimension
# forward so that each head is a separate (tokens × features) matrix for the matrix products.
#
# Shapes: B batch, T tokens, D model width, H heads, Dh head width.

# %%
B, T, D, H = 2, 4, 8, 2
Dh = D // H
x = torch.arange(B * T * D, dtype=torch.float32).view(B, T, D)  # (B, T, D)
print("x            ", tuple(x.shape), "           (B, T, D)")
x_split = x.view(B, T, H, Dh)  # (B, T, H, Dh)
print("x.view       ", tuple(x_split.shape), "        (B, T, H, Dh)")
heads = x_split.transpose(1, 2)  # (B, H, T, Dh)
print(".transpose(1, 2)", tuple(heads.shape), "     (B, H, T, Dh)")
print("\nsentence 1, head 2: every token's features 4..7\n", heads[0, 1])

assert heads.shape == (2, 2, 4, 4)
assert torch.equal(heads[0, 1, 0], x[0, 0, 4:8])  # head 2 of token 1 = the second half of its features
assert heads.data_ptr() == x.data_ptr()  # same memory: nothing was copied

# %% [markdown]
# Each head now attends on its own. Attention returns a new tensor, laid out head by head in memory
# (`heads.contiguous()` stands for it here). Merging reverses the steps: `transpose(1, 2)` to (B, T, H, Dh),
# then flatten the last two dimensions. But the transposed tensor is no longer laid out row by row in memory
# (not *contiguous*), and `view` refuses it; `reshape` (or `.contiguous().view`) copies it into order first.

# %%
attended = heads.contiguous()  # (B, H, T, Dh), as attention returns it
back = attended.transpose(1, 2)  # (B, T, H, Dh), not contiguous
print("after transpose:", tuple(back.shape), "contiguous:", back.is_contiguous())
try:
    back.view(B, T, D)
except RuntimeError as error:
    print("view refuses:", str(error).split(".")[0])
merged = back.reshape(B, T, D)  # (B, T, D)
print("reshape:", tuple(merged.shape))
assert torch.equal(merged, x)

# The project does exactly these steps in MultiHeadAttention._split_heads and _merge_heads:
mha = MultiHeadAttention(d_model=D, num_heads=H)
assert torch.equal(mha._split_heads(x), heads)
assert torch.equal(mha._merge_heads(heads), x)

# %% [markdown]
# ### The project's `MultiHeadAttention` is `torch.nn.MultiheadAttention`
#
# Both keep the query, key and value projections in one (3D, D) matrix, in that order, so the same weights
# can be copied across. Give both the same inputs and masks and compare. PyTorch's module takes masks in the
# *opposite* polarity (`True` = **may not** attend), so we convert at the boundary with `~`.

# %%
from torch import nn

torch.manual_seed(0)
ours = MultiHeadAttention(d_model=D, num_heads=H).eval()
with torch.no_grad():  # its biases start at zero; random ones make the comparison a real one
    ours.in_proj.bias.normal_()
    ours.out_proj.bias.normal_()
theirs = nn.MultiheadAttention(D, H, batch_first=True).eval()
with torch.no_grad():
    theirs.in_proj_weight.copy_(ours.in_proj.weight)
    theirs.in_proj_bias.copy_(ours.in_proj.bias)
    theirs.out_proj.weight.copy_(ours.out_proj.weight)
    theirs.out_proj.bias.copy_(ours.out_proj.bias)

queries = torch.randn(B, 3, D)  # (B, Tq, D)
memory = torch.randn(B, 5, D)  # (B, Tk, D)
memory_ids = torch.tensor([[5, 6, 7, 8, 9], [5, 6, 7, PAD, PAD]])  # sentence 2 has two padding keys
attend = padding_mask(memory_ids, PAD)  # (B, 1, 1, Tk), True = may attend
with torch.no_grad():
    out_ours, w_ours = ours(queries, memory, memory, context=AttentionContext.of(attend), need_weights=True)
    out_theirs, w_theirs = theirs(queries, memory, memory, key_padding_mask=~attend[:, 0, 0],
                                  average_attn_weights=False)
print("cross-attention, largest difference:", (out_ours - out_theirs).abs().max().item())
assert torch.allclose(out_ours, out_theirs, atol=1e-5) and torch.allclose(w_ours, w_theirs, atol=1e-6)

with torch.no_grad():  # self-attention with the causal mask
    out_ours, w_ours = ours(queries, queries, queries, context=AttentionContext.of(causal_mask(3)),
                            need_weights=True)
    out_theirs, w_theirs = theirs(queries, queries, queries, attn_mask=~causal_mask(3)[0, 0],
                                  average_attn_weights=False)
print("causal self-attention, largest difference:", (out_ours - out_theirs).abs().max().item())
assert torch.allclose(out_ours, out_theirs, atol=1e-5) and torch.allclose(w_ours, w_theirs, atol=1e-6)

# %% [markdown]
# ## 3. The encoder–decoder on one batch of toy data
#
# The project brings a synthetic language pair that needs no download (`data/toy.py`): an English-like source
# and an invented target language with another word order (adjectives after the noun, the verb last) and
# agreement. Every target word translates exactly one source word, so each pair comes with its **gold
# alignment**: which source word each target word comes from. That lets us check later whether a head
# has learned to look at the right word.

# %%
from data import translate

sentence = "the big cats saw a dog"
target_words, alignment = translate(sentence.split())
print(" ".join(target_words))
print("gold alignment (source word, target word):", alignment)
assert target_words == ["li", "kati", "grandes", "un", "hundo", "vidan"]

# %% [markdown]
# The data module (`data/datamodule.py`) generates the splits, trains a word-level tokenizer for each side and
# serves padded batches. We keep sentences to at most 8 words, so that the pictures stay readable and a minute
# of training goes further (`split="length"` would put longer sentences into the test split, unused here).
# The same settings go to the training run in part 4.

# %%
import yaml

from data import TranslationDataModule
from data.reader import ToyOptions

TOY = {"train_size": 5000, "val_size": 100, "test_size": 20, "split": "length", "max_train_words": 8}
data = TranslationDataModule(dataset="toy", toy=ToyOptions(**TOY))
src_tok, tgt_tok = data.src_tokenizer, data.tgt_tokenizer
print(f"vocabulary: {src_tok.vocab_size} source and {tgt_tok.vocab_size} target tokens")
val_pairs = data.pairs("val")
for pair in val_pairs[:3]:
    print(f"{pair.source}  →  {pair.target}")

# %% [markdown]
# A batch of three sentences of different lengths. The decoder reads `<s>` followed by the target
# (`tgt_in`) and is trained to produce the target followed by `</s>` (`tgt_out`): the same tokens shifted by
# one, so that position $t$ predicts token $t+1$. Shorter sentences are padded at the end.

# %%
by_length = sorted(val_pairs[:20], key=lambda p: len(p.source.split()))
chosen = [by_length[0], by_length[len(by_length) // 2], by_length[-1]]
batch = next(iter(data.dataloader_for_pairs(chosen)))
print("src", tuple(batch.src.shape), "tgt_in", tuple(batch.tgt_in.shape),
      "tgt_out", tuple(batch.tgt_out.shape))
for i in range(batch.src.size(0)):
    print(f"\nsentence {i + 1}")
    print("  src    ", " ".join(src_tok.tokens(batch.src[i].tolist())))
    print("  tgt_in ", " ".join(tgt_tok.tokens(batch.tgt_in[i].tolist())))
    print("  tgt_out", " ".join(tgt_tok.tokens(batch.tgt_out[i].tolist())))
assert len(batch.index) == 3
for i, pair in enumerate(chosen[j] for j in batch.index.tolist()):
    n = len(pair.target.split())  # target words; the rows hold n + 1 tokens before any padding
    assert torch.equal(batch.tgt_in[i, 1 : n + 1], batch.tgt_out[i, :n])  # the same words, shifted by one
    assert batch.tgt_in[i, 0] == data.bos_id and batch.tgt_out[i, n] == data.eos_id

# %% [markdown]
# ### Every mask of the batch
#
# The model builds three masks from the token ids alone (`model/transformer.py`):
#
# * **encoder self-attention**: every source token may see every real source token (the padding mask);
# * **decoder self-attention**: causal, and no padding (`decoder_self_mask`);
# * **cross-attention**: every decoder position may see every real source token (the same padding mask).
#
# Rows are queries, columns keys. Decoder and cross rows are labelled with the token produced at that
# position, decoder columns with the tokens the decoder reads (`analysis/axes.py` sets this once for every
# view of the project).

# %%
from matplotlib.colors import ListedColormap

from analysis.axes import KIND_LABELS, KINDS, attention_axes
from viz.plots import attention_grid, attention_heatmap, layer_head_matrix, new_figure

src_attend = padding_mask(batch.src, PAD)  # (B, 1, 1, S)
masks = {
    "encoder": src_attend.expand(-1, -1, batch.src.size(1), -1),  # (B, 1, S, S)
    "decoder": decoder_self_mask(batch.tgt_in, PAD),  # (B, 1, T, T)
    "cross": src_attend.expand(-1, -1, batch.tgt_in.size(1), -1),  # (B, 1, T, S)
}


def batch_axes(i: int) -> dict[str, tuple[list[str], list[str]]]:
    """The row and column tokens of each attention kind for sentence i of the batch."""
    return attention_axes(src_tok.tokens(batch.src[i].tolist()), tgt_tok.tokens(batch.tgt_in[i].tolist()),
                          tgt_tok.tokens(batch.tgt_out[i].tolist()))


def draw_masks():
    """Sentences down, kinds across: dark cells may attend, light ones may not."""
    rows = batch.src.size(0)
    figure = new_figure(11, 3.6 * rows, dpi=72)
    for i in range(rows):
        for j, kind in enumerate(KINDS):
            ax = figure.add_subplot(rows, 3, 3 * i + j + 1)
            row_tokens, column_tokens = batch_axes(i)[kind]
            ax.imshow(masks[kind][i, 0], cmap=ListedColormap(["#eeeeee", "#2b5d9b"]), vmin=0, vmax=1)
            ax.set_xticks(range(len(column_tokens)), column_tokens, rotation=90, fontsize=7)
            ax.set_yticks(range(len(row_tokens)), row_tokens, fontsize=7)
            ax.set_title(f"sentence {i + 1}: {KIND_LABELS[kind]}", fontsize=9)
    figure.suptitle("dark: may attend (True)    light: masked (False)", fontsize=10)
    return figure


display(draw_masks())
assert masks["decoder"][0, 0].sum() < masks["decoder"][0, 0].numel()  # the causal triangle hides something

# %% [markdown]
# ### Through an untrained model
#
# The model of `configs/tiny.yaml`: 2 encoder and 2 decoder layers of 2 heads, width 32. Token ids go in,
# one score per target-vocabulary word comes out at every target position (the *logits*), and with
# `return_attention=True` every layer's weights too: 2 layers × 2 heads of each kind, 12 heads in all.
# Untrained, it knows nothing: its loss is that of a uniform guess over the target vocabulary, or a little
# worse, as its random scores are not all equal.

# %%
from model import Transformer, TransformerConfig

tiny = yaml.safe_load((ROOT / "configs" / "tiny.yaml").read_text())["model"]
architecture = ("d_model", "num_heads", "num_encoder_layers", "num_decoder_layers", "d_ff")
config = TransformerConfig(src_vocab_size=src_tok.vocab_size, tgt_vocab_size=tgt_tok.vocab_size,
                           **SPECIALS.ids, **{name: tiny[name] for name in architecture})
torch.manual_seed(0)
untrained = Transformer(config).eval()
with torch.no_grad():
    logits, maps = untrained(batch.src, batch.tgt_in, return_attention=True)
print("logits", tuple(logits.shape), "(B, T, V)")
for kind, layers in zip(KINDS, maps):
    print(f"{kind:8} {len(layers)} layers of", tuple(layers[0].shape), "(B, H, queries, keys)")

initial_loss = F.cross_entropy(logits.flatten(0, 1), batch.tgt_out.flatten(), ignore_index=PAD).item()
uniform = torch.log(torch.tensor(float(tgt_tok.vocab_size))).item()  # cross-entropy of a uniform guess
print(f"loss {initial_loss:.2f}; guessing uniformly over {tgt_tok.vocab_size} words: {uniform:.2f}")

for kind, layers in zip(KINDS, maps):
    for weights in layers:
        assert torch.equal(weights.masked_fill(masks[kind], 0.0), torch.zeros_like(weights))  # masked = 0
        assert torch.allclose(weights.sum(dim=-1), torch.ones(()), atol=1e-5)  # every row sums to 1
assert initial_loss > uniform - 0.5  # an untrained model knows no more than a uniform guess

# %% [markdown]
# Before training, attention is spread evenly over whatever each query may see; only the masks give it shape.
# The cross-attention of the longest sentence (each small map is one head):

# %%
longest = batch.src.size(0) - 1
display(attention_grid([layer[longest] for layer in maps.cross], *batch_axes(longest)["cross"],
                       title="untrained: cross-attention"))

# %% [markdown]
# ## 4. Training for a minute, then looking inside
#
# `train.py` is a LightningCLI: every option is an argument, and `configs/tiny.yaml` sets a tiny model. We
# call its `main` with that config and a few changes for a one-minute run: the data above, no dropout, a
# higher learning rate that decays to zero when the time is up (`cosine_time`), the time limit, and fewer
# images (less time spent drawing, more training).
# Lightning prints its summary; at each epoch's end it validates and logs attention for TensorBoard (part 5).
#
# How far a minute gets depends on the machine; the cell prints the number of steps. After a few hundred
# steps the best cross-attention head points at the right source word for most target words; after a few
# dozen, the pictures below show heads that are only starting to take shape, and translations that stutter.
# To train longer, set `TOUR_TRAIN_SECONDS` (say 300) before starting the notebook.

# %%
import warnings

from train import main as train

# Inside a notebook, the kernel's own command line is in sys.argv; LightningCLI warns that it is not used.
warnings.filterwarnings("ignore", message="LightningCLI's args parameter")
seconds = int(os.environ.get("TOUR_TRAIN_SECONDS", "60"))
cli = train([
    "--config", str(ROOT / "configs" / "tiny.yaml"),
    "--trainer.logger.init_args.save_dir", RUNS, "--trainer.default_root_dir", RUNS,
    "--trainer.max_time", f"00:00:{seconds // 60:02d}:{seconds % 60:02d}", "--trainer.max_epochs", "100",
    "--model.schedule", "cosine_time", "--model.lr", "0.01", "--model.dropout", "0",
    "--attention.per_head", "false",  # no image per head: the ATTENTION tab shows every head anyway
    "--data.dataset", "toy", *(f"--data.toy.{name}={value}" for name, value in TOY.items()),
])
run_dir = Path(cli.trainer.logger.log_dir)
print(f"{cli.trainer.global_step} training steps in {cli.trainer.current_epoch} epochs; run: {run_dir}")
assert (run_dir / "checkpoints" / "last.ckpt").is_file()

# %% [markdown]
# The run's event file holds what TensorBoard shows. The validation loss, and how well the best
# cross-attention head agrees with the gold alignment (the share of target words whose strongest attention
# falls on the source word they translate), at each validation. Step 0 is the untrained model of part 3,
# measured the same way: its loss per target token on the validation sentences, and its best head on the
# first 20 of them (the sentences the run's head statistics use).

# %%
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

from evaluation.ablation import ablation_losses
from evaluation.alignment import cross_attention_alignment
from evaluation.translate import pair_batches

stats_sentences = yaml.safe_load((ROOT / "configs" / "tiny.yaml").read_text())["attention"]["stats_sentences"]
start_loss = ablation_losses(untrained, pair_batches(val_pairs, src_tok, tgt_tok, 64), [()])[0]
start_alignment = cross_attention_alignment(untrained, src_tok, tgt_tok, val_pairs[:stats_sentences])
events = EventAccumulator(str(run_dir), size_guidance={"scalars": 0})
events.Reload()
val_loss, best_alignment = events.Scalars("val/loss"), events.Scalars("heads/best_alignment")
losses = [(0, start_loss)] + [(e.step, e.value) for e in val_loss]
alignments = [(0, start_alignment.agreement.max().item())] + [(e.step, e.value) for e in best_alignment]
figure = new_figure(8, 2.8, dpi=80)
left, right = figure.subplots(1, 2)
left.plot(*zip(*losses), marker="o")
left.set(xlabel="training step", ylabel="nats per token", ylim=(0, None), title="validation loss")
right.plot(*zip(*alignments), marker="o", color="C2")
right.set(xlabel="training step", ylim=(0, 1), title="best head: agreement with gold alignment")
display(figure)
print(f"validation loss {start_loss:.2f} untrained → {val_loss[-1].value:.2f} at step {val_loss[-1].step}")
assert val_loss[-1].value < start_loss

# %% [markdown]
# ### The trained heads
#
# `training/checkpoints.py` loads a run back from its checkpoint, with its tokenizers (this is how
# `evaluate.py` starts). `evaluation/forced.py` runs one sentence pair teacher-forced through the
# weight-returning path, the one pass that the logger, the tab and `evaluate.py` all take their maps from, and
# labels every map with its tokens. Each small map is one head; rows are queries, columns keys.

# %%
from evaluation.forced import sentence_pass
from training.checkpoints import load_run

run = load_run(run_dir / "checkpoints" / "last.ckpt")
model, src_tok, tgt_tok = run.module.model, run.datamodule.src_tokenizer, run.datamodule.tgt_tokenizer
pair = chosen[-1]
seen = sentence_pass(model, src_tok.encode(pair.source), tgt_tok.encode(pair.target))
maps, axes = seen.sentence_maps(), seen.tokens(src_tok, tgt_tok).axes
print(f"{pair.source}  →  {pair.target}")
for kind in KINDS:
    display(attention_grid(maps[kind], *axes[kind], title=f"trained: {KIND_LABELS[kind]}"))
    assert len(maps[kind]) == 2 and maps[kind][0].shape[0] == 2  # 2 layers of 2 heads

# %% [markdown]
# ### The best-aligned head
#
# `evaluation/alignment.py` scores every cross-attention head on all validation sentences, teacher-forced on
# the references: for each target word, does the head's strongest attention fall on its gold source word?
# (`analysis/heads.py` does the counting.) The **agreement** is the share of words where it does; the
# **alignment error rate** (AER) is its complement here, since every toy target word has exactly one gold
# source word.

# %%
from evaluation.alignment import cross_attention_alignment

report = cross_attention_alignment(model, src_tok, tgt_tok, val_pairs)
display(layer_head_matrix(report.agreement, "cross-attention: agreement with gold", vmin=0, vmax=1))
best = report.best
print(f"best-aligned head: {best}, agreement {report.agreement[best.layer, best.head]:.1%}; "
      f"all heads averaged: {report.average_agreement:.1%}")

assert torch.allclose(report.aer, 1 - report.agreement)  # one gold word per target word
assert report.agreement[best.layer, best.head] == report.agreement.max()
assert ((0 <= report.agreement) & (report.agreement <= 1)).all()

# %% [markdown]
# That head on our sentence, with the gold links as red squares. Where the bright cell of a row sits in its
# square, the head looks at the word being translated, even where the word order differs.

# %%
best_map = maps["cross"][best.layer][best.head]  # (T, S)
figure = attention_heatmap(best_map, *axes["cross"], title=f"{best}, with the gold alignment")
gold_source, gold_target = zip(*pair.alignment)
figure.axes[0].scatter(gold_source, gold_target, marker="s", s=160, facecolors="none", edgecolors="red")
display(figure)
hits = sum(int(best_map[t].argmax()) == s for s, t in pair.alignment)
print(f"on this sentence it points at the gold word for {hits} of {len(pair.alignment)} target words")

# %% [markdown]
# ### Silencing a head
#
# A head mask multiplies each head's output by 1 (keep) or 0 (silence) before the heads are merged
# (`evaluation/head_masks.py`). What happens to the translations when the best-aligned head is silenced?

# %%
from evaluation.head_masks import head_mask
from evaluation.translate import translate as translate_sentences

sources = [p.source for p in val_pairs[:5]]
intact = translate_sentences(model, src_tok, tgt_tok, sources)
without = translate_sentences(model, src_tok, tgt_tok, sources, head_mask=head_mask(model.config, [best]))
for p, a, b in zip(val_pairs[:5], intact, without):
    print(f"source     {p.source}\nreference  {p.target}\nintact     {tgt_tok.decode(a)}\n"
          f"without it {tgt_tok.decode(b)}\n")
changed = sum(a != b for a, b in zip(intact, without))
print(f"silencing {best} changed {changed} of {len(sources)} translations")

# %% [markdown]
# One head at a time, every head: `evaluation/importance.py` silences each head alone and measures how much
# the loss per target token grows (Michel et al. 2019, "Are Sixteen Heads Really Better than One?"). Red
# heads are the ones the model leans on; heads near 0 could go.

# %%
from evaluation.importance import measure_head_importance

importance = measure_head_importance(model, src_tok, tgt_tok, val_pairs)  # teacher-forced losses only
print(importance.table())
deltas = importance.delta_loss()
limit = max(abs(d) for d in deltas)
for kind in KINDS:
    display(layer_head_matrix(importance.matrix(kind, deltas), f"{KIND_LABELS[kind]}: Δloss",
                              vmin=-limit, vmax=limit, fmt=".3f", cmap="RdBu_r"))
most = importance.ranking()[-1]
print(f"the model needs {most} most: silenced, the loss grows by {max(deltas):.3f} nats per token")
assert max(deltas) > 0
assert deltas[importance.heads.index(best)] != 0  # silencing the best-aligned head changed the model

# %% [markdown]
# A head that aligns well is not always one the model needs most: another head may do the same job, and
# silencing one then costs little. `evaluate.py --head-importance` does the same measurement on a whole test
# set, and `--prune-heads K` silences the K least important heads together (the README shows both for the
# default model).

# %% [markdown]
# ## 5. The ATTENTION tab in TensorBoard
#
# Training logged every head at every validation. TensorBoard's **ATTENTION** tab (this project's plugin)
# shows them: pick the step and watch the heads specialise, hover a token to light up what it looks at, sort
# the heads by their statistics, type your own sentence. `RUNS` is `runs`, beside this notebook.
#
# The cell starts TensorBoard in the background and shows it in an iframe below. If the frame stays blank
# (some hosted notebooks and VS Code block iframes), run `tensorboard --logdir notebooks/runs` in a terminal
# and open http://localhost:6006. (The tests skip the launch: they set `TOUR_SKIP_TENSORBOARD=1`.)

# %%
from importlib.metadata import entry_points

# %load_ext tensorboard
if not any(e.name == "attention" for e in entry_points(group="tensorboard_plugins")):
    print("The project is not installed, so plain TensorBoard has no ATTENTION tab: run "
          "`pip install -e .` in the repository, or `python -m viz.tab --logdir notebooks/runs`.")
if os.environ.get("TOUR_SKIP_TENSORBOARD") == "1":
    print("TOUR_SKIP_TENSORBOARD=1: TensorBoard not started.")
else:
    # %tensorboard --logdir $RUNS
    print("Blank frame? In a terminal: tensorboard --logdir notebooks/runs, then open http://localhost:6006")

# %% [markdown]
# ## Where next
#
# * `python train.py` trains the default model (6 epochs; in the README's run its best head agreed with the
#   gold alignment for 98.6% of target words), and
#   `python evaluate.py RUN/checkpoints/last.ckpt --head-importance --alignment` measures it; the README
#   explains both.
# * `model/attention.py`, `model/masks.py` and `model/transformer.py` are written to be read next.
