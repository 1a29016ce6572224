"""Train a small causal language model from dataprep token shards: the loaders token path in one script.

    python examples/train_lm.py lm-tokens --demo                        # make the demo shards, train 300 steps
    python examples/train_lm.py lm-tokens --steps 120 --checkpoint lm.pt              # stop mid-epoch, save
    python examples/train_lm.py lm-tokens --checkpoint lm.pt --resume --workers 3     # go on, on 3 workers

``--demo`` makes SHARDS first when it is not there (``make_token_shards``): the synthetic text
corpus (``dataprep.synthetic``: realistic document lengths, duplicates, broken files) and a
small BPE trained on it, tokenized by ``dataprep shard RAW SHARDS --tokenizer tokenizer.json``.

Data path: ``loaders.TokenDataset`` packs the documents (permuted per epoch) into windows of
--seq-len + 1 tokens; ``loaders.DataLoader`` reads them on thread workers, collates them
(``input_ids`` / ``labels`` uint16 [B, S], ``position_ids`` and ``document_ids`` int32,
``cu_seqlens``) and copies them to --device, where they are cast (``.long()``). The model
attends within each document only (a causal mask where ``document_ids`` match) and counts
positions from each document's start (``position_ids``). The loader's state holds the global
position (sequences consumed), so a checkpoint resumes on another number of workers, or of
ranks, with the same batches. Every --log-every steps it prints the loss, tokens/s and the
data wait (time blocked in ``next()`` / time: near 0, the model is the bottleneck).
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

from dataprep.cli import main as dataprep_main
from dataprep.synthetic import SyntheticSpec, make_dataset
from loaders import DataLoader, TokenDataset, cpus_available
from loaders.state_keys import KEY_GLOBAL_POSITION


def make_token_shards(out: Path, *, documents: int = 2000, seed: int = 0) -> Path:
    """Token shards of the demo text in ``out``: the synthetic corpus (in ``out``-raw) tokenized by ``dataprep shard
    --tokenizer`` with the BPE trained on it. Replace this function to train on your own shards."""
    raw = out.with_name(out.name + "-raw")
    make_dataset(raw, SyntheticSpec(images=1, classes=1, seed=seed, broken=False, tables=False, text=False,
                                    sidecars=False, documents=documents))
    corpus = raw / "corpus"
    code = dataprep_main(["shard", str(corpus / "text"), str(out), "--tokenizer", str(corpus / "tokenizer.json")])
    if code != 0:
        raise SystemExit(f"error: dataprep shard exited {code}")
    return out


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("shards", type=Path, help="dataprep token-shard directory (dataprep shard --tokenizer)")
    parser.add_argument("--demo", action="store_true", help="make SHARDS from the demo text first, if missing")
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu", choices=["cpu", "cuda"])
    parser.add_argument("--steps", type=int, default=300, help="train until this many steps in all")
    parser.add_argument("--seq-len", type=int, default=64, help="tokens per sequence (S)")
    parser.add_argument("--batch-size", type=int, default=16, help="sequences per step (B)")
    parser.add_argument("--workers", type=int, default=1, help="thread workers reading sequences")
    parser.add_argument("--threads", type=int, help="the model's intra-op threads on the CPU (default: the "
                                                         "cores the workers leave, at least 1)")
    parser.add_argument("--dim", type=int, default=64, help="model width")
    parser.add_argument("--layers", type=int, default=2, help="transformer blocks")
    parser.add_argument("--heads", type=int, default=4, help="attention heads (must divide --dim)")
    parser.add_argument("--lr", type=float, default=3e-3)
    parser.add_argument("--seed", type=int, default=0, help="seed of the weights and of the document order")
    parser.add_argument("--log-every", type=int, default=50, help="print every this many steps")
    parser.add_argument("--checkpoint", type=Path, help="where to save model, optimizer and loader state")
    parser.add_argument("--resume", action="store_true", help="continue from --checkpoint where it stopped")
    args = parser.parse_args(argv)
    for name in ("steps", "seq_len", "batch_size", "dim", "layers", "heads", "log_every", "threads"):
        if getattr(args, name) is not None and getattr(args, name) < 1:
            parser.error(f"--{name.replace('_', '-')} must be a positive integer (got {getattr(args, name)})")
    if args.resume and (args.checkpoint is None or not args.checkpoint.is_file()):
        parser.error(f"--resume needs an existing --checkpoint (got {args.checkpoint})")
    if args.dim % args.heads:
        parser.error(f"--heads {args.heads} must divide --dim {args.dim}")
    if args.device == "cuda" and not torch.cuda.is_available():
        parser.error("--device cuda: CUDA is not available")
    return args


class Block(nn.Module):
    """Pre-norm transformer block: masked multi-head self-attention, then an MLP."""

    def __init__(self, dim: int, heads: int) -> None:
        super().__init__()
        self.heads = heads
        self.norm1, self.norm2 = nn.LayerNorm(dim), nn.LayerNorm(dim)
        self.qkv, self.proj = nn.Linear(dim, 3 * dim), nn.Linear(dim, dim)
        self.mlp = nn.Sequential(nn.Linear(dim, 4 * dim), nn.GELU(), nn.Linear(4 * dim, dim))

    def forward(self, x: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        batch, seq, dim = x.shape
        q, k, v = self.qkv(self.norm1(x)).view(batch, seq, 3, self.heads, dim // self.heads).permute(2, 0, 3, 1, 4)
        attended = F.scaled_dot_product_attention(q, k, v, attn_mask=mask)
        x = x + self.proj(attended.transpose(1, 2).reshape(batch, seq, dim))
        return x + self.mlp(self.norm2(x))


class TinyLM(nn.Module):
    """Token + position embeddings, ``layers`` blocks, a tied output head: float32 logits [B, S, vocab]."""

    def __init__(self, vocab_size: int, seq_len: int, dim: int, layers: int, heads: int) -> None:
        super().__init__()
        self.tokens = nn.Embedding(vocab_size, dim)
        self.positions = nn.Embedding(seq_len, dim)
        self.blocks = nn.ModuleList(Block(dim, heads) for _ in range(layers))
        self.norm = nn.LayerNorm(dim)
        self.head = nn.Linear(dim, vocab_size, bias=False)
        self.head.weight = self.tokens.weight  # tied: the output layer is the embedding
        for table in (self.tokens, self.positions):
            nn.init.normal_(table.weight, std=0.02)  # N(0, 1) tied logits would start the loss far above log(vocab)

    def forward(self, input_ids: torch.Tensor, position_ids: torch.Tensor, document_ids: torch.Tensor) -> torch.Tensor:
        x = self.tokens(input_ids) + self.positions(position_ids)
        mask = document_mask(document_ids)
        for block in self.blocks:
            x = block(x, mask)
        return self.head(self.norm(x))


def document_mask(document_ids: torch.Tensor) -> torch.Tensor:
    """bool [B, 1, S, S]: token i attends to token j <= i of its own document (``document_ids`` int32 [B, S])."""
    seq = document_ids.shape[1]
    causal = torch.ones(seq, seq, dtype=torch.bool, device=document_ids.device).tril()
    same = document_ids[:, :, None] == document_ids[:, None, :]
    return (same & causal)[:, None]


class Trainer:
    """Model, optimizer and loader; counts steps and saves/restores all three."""

    def __init__(self, args: argparse.Namespace) -> None:
        self.args = args
        self.dataset = TokenDataset(args.shards, seq_len=args.seq_len, seed=args.seed, mask_across_documents=True)
        self.loader: DataLoader[Any] = DataLoader(self.dataset, batch_size=args.batch_size, num_workers=args.workers,
                                                  seed=args.seed, device=args.device)
        torch.manual_seed(args.seed)  # the same initial weights in every run
        self.model = TinyLM(self.dataset.tokenizer.vocab_size, args.seq_len, args.dim, args.layers,
                            args.heads).to(args.device)
        self.optimizer = torch.optim.AdamW(self.model.parameters(), lr=args.lr, weight_decay=0.01)
        self.step = 0

    def train_step(self, batch: dict[str, Any]) -> float:
        """One optimizer step on a batch already on the device; the loss (nats per predicted token)."""
        logits = self.model(batch["input_ids"].long(), batch["position_ids"], batch["document_ids"])
        loss = F.cross_entropy(logits.flatten(0, 1), batch["labels"].long().flatten(), ignore_index=-100)
        self.optimizer.zero_grad(set_to_none=True)
        loss.backward()
        self.optimizer.step()
        self.step += 1
        return float(loss.item())  # waits for the device: time in next() is then real waiting

    def train(self) -> None:
        """Train until --steps, over as many epochs as it takes, printing every --log-every steps."""
        args, loader = self.args, self.loader
        losses: list[float] = []
        wait_s, start = 0.0, time.perf_counter()
        while self.step < args.steps:
            iterator = iter(loader)
            while self.step < args.steps:
                waited = time.perf_counter()
                batch = next(iterator, None)
                wait_s += time.perf_counter() - waited
                if batch is None:
                    break  # the epoch is over; the loader is on the next one
                losses.append(self.train_step(batch))
                if self.step % args.log_every == 0 or self.step == args.steps:
                    elapsed = time.perf_counter() - start
                    tokens = len(losses) * args.batch_size * args.seq_len
                    print(f"step {self.step}/{args.steps}: loss {sum(losses) / len(losses):.4f}  "
                          f"{tokens / elapsed:,.0f} tokens/s  data wait {wait_s / elapsed:.1%}  "
                          f"(epoch {loader.epoch}, batch {loader.batches_consumed} of {len(loader)})", flush=True)
                    losses, wait_s, start = [], 0.0, time.perf_counter()

    def save(self, path: Path) -> None:
        state = {"model": self.model.state_dict(), "optimizer": self.optimizer.state_dict(),
                 "loader": self.loader.state_dict(), "step": self.step}
        partial = path.with_name(path.name + ".partial")
        torch.save(state, partial)
        os.replace(partial, path)  # a crash mid-save leaves the previous checkpoint intact

    def load(self, path: Path) -> None:
        state = torch.load(path, map_location=self.args.device, weights_only=True)
        self.model.load_state_dict(state["model"])
        self.optimizer.load_state_dict(state["optimizer"])
        self.loader.load_state_dict(state["loader"])
        self.step = int(state["step"])


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    if args.demo and not (args.shards / "manifest.json").is_file():
        make_token_shards(args.shards, seed=args.seed)
    if args.device == "cpu":  # an oversubscribed intra-op pool waits on its slowest thread at every op
        torch.set_num_threads(args.threads or max(1, cpus_available() - args.workers))
    trainer = Trainer(args)
    loader, dataset = trainer.loader, trainer.dataset
    if args.resume:
        trainer.load(args.checkpoint)
        print(f"resumed from {args.checkpoint}: step {trainer.step}, epoch {loader.epoch}, batch "
              f"{loader.batches_consumed}", flush=True)
    parameters = sum(p.numel() for p in trainer.model.parameters())
    print(f"{len(dataset)} sequences of {args.seq_len} tokens ({dataset.corpus.num_tokens:,} tokens, "
          f"{dataset.tokenizer.vocab_size} ids), {len(loader)} batches of {args.batch_size}, {loader.num_workers} "
          f"{loader.worker_type} workers, device {args.device} ({torch.get_num_threads()} threads), "
          f"{parameters / 1e6:.2f} M parameters", flush=True)
    trainer.train()
    sequence = loader.state_dict()["tokens"][KEY_GLOBAL_POSITION]  # packed sequences all ranks consumed
    print(f"stopped at step {trainer.step}: epoch {loader.epoch}, batch {loader.batches_consumed} of {len(loader)} "
          f"(global sequence {sequence}; order digest of [0, {sequence}): "
          f"{loader.order_digest(0, sequence)[:16]})", flush=True)
    if args.checkpoint is not None:
        trainer.save(args.checkpoint)
        print(f"checkpoint saved to {args.checkpoint} (step {trainer.step})", flush=True)
    loader.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
