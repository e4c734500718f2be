r"""Pretrain one of chapter 9's models (GPT, BERT or T5) on one GPU, or on several with torchrun.

The chapter's full size, on however many GPUs ``torchrun`` starts::

    python scripts/pretrain_distributed.py --model gpt                      # one GPU (or the CPU)
    torchrun --standalone --nproc_per_node=4 scripts/pretrain_distributed.py --model gpt

Two machines with 4 GPUs each (run the same line on both; HOST is the first machine's address)::

    torchrun --nnodes=2 --nproc_per_node=4 --rdzv-backend=c10d --rdzv-endpoint=HOST:29500 \
        --rdzv-id=ch09 scripts/pretrain_distributed.py --model gpt

``--batch-size`` is the batch of one optimisation step over all processes together: each of
the ``WORLD_SIZE`` processes gets ``batch_size / WORLD_SIZE`` sequences per step, so the
recipe (steps, batch, learning rate) is the chapter's whatever the number of GPUs, and the work
of each step is shared by the processes. Rank 0 prints the progress and saves the weights.
"""

from __future__ import annotations

import argparse
from pathlib import Path

import torch

import attention_book as ab

# model name -> (class, batch maker, loss)
MODELS = {
    "gpt": (ab.DecoderOnlyLM, ab.clm_batch, ab.clm_loss),
    "bert": (ab.EncoderOnlyLM, ab.mlm_batch, ab.mlm_loss),
    "t5": (ab.EncoderDecoderLM, ab.span_batch, ab.seq2seq_loss),
}


def parse_args(argv=None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--model", choices=sorted(MODELS), default="gpt")
    # Defaults: chapter 9's full size.
    p.add_argument("--num-hiddens", type=int, default=256)
    p.add_argument("--num-heads", type=int, default=8)
    p.add_argument("--num-blks", type=int, default=4)
    p.add_argument("--ffn-num-hiddens", type=int, default=1024)
    p.add_argument("--seq-len", type=int, default=64)
    p.add_argument("--batch-size", type=int, default=128, help="sequences per step, all processes together")
    p.add_argument("--steps", type=int, default=4000, help="optimisation steps in all")
    p.add_argument("--epochs", type=int, default=10, help="validation points (the steps are split evenly)")
    p.add_argument("--lr", type=float, default=1e-3)
    p.add_argument("--precision", choices=ab.PRECISIONS, default="auto")
    p.add_argument("--synthetic", action="store_true", help="the generated corpus instead of The Time Machine")
    p.add_argument("--out", type=Path, default=Path("pretrained.pt"), help="where rank 0 saves the weights")
    return p.parse_args(argv)


def main(argv=None) -> None:
    args = parse_args(argv)
    run = ab.distributed_run()
    world = run.world_size if run is not None else 1
    if args.batch_size % world or args.steps % args.epochs:
        raise SystemExit(f"--batch-size ({args.batch_size}) must be divisible by the {world} processes and "
                         f"--steps ({args.steps}) by --epochs ({args.epochs})")
    ab.seed_everything()
    main_process = ab.is_main_process()
    text = ab.synthetic_corpus() if args.synthetic else None
    corpus = ab.load_corpus(level="word", min_freq=3, text=text, verbose=main_process)
    tok = corpus.tokenizer
    cls, make_batch, loss = MODELS[args.model]
    extra = 8 if args.model == "t5" else 0  # room for T5's sentinels, as in the chapter
    model = cls(tok.vocab_size, num_hiddens=args.num_hiddens, num_heads=args.num_heads, num_blks=args.num_blks,
                ffn_num_hiddens=args.ffn_num_hiddens, dropout=0.1, max_len=args.seq_len + extra, pad_id=tok.pad_id)
    per_process = args.batch_size // world
    seed = ab.book_seed()
    # Every process draws the same batches from the same seed; fit gives each its every WORLD_SIZE-th
    # one, so there are WORLD_SIZE times as many, each WORLD_SIZE times smaller.
    train = ab.Batches(lambda g: make_batch(corpus.train_ids, tok, per_process, args.seq_len, g),
                       args.steps // args.epochs * world, seed=seed)
    val = ab.Batches(lambda g: make_batch(corpus.val_ids, tok, args.batch_size, args.seq_len, g), 8,
                     seed=seed + 1, fixed=True)
    if main_process:
        print(f"{args.model}: {sum(p.numel() for p in model.parameters()):,} parameters, {world} process(es) "
              f"of {per_process} sequences per step, {args.steps} steps, device {ab.device(verbose=False)}")
    history = ab.fit(model, train, loss, epochs=args.epochs, lr=args.lr, clip_grad=1.0, precision=args.precision,
                     evaluate=lambda m: {"val loss": ab.evaluate_loss(m, loss, val)}, desc=args.model)
    if main_process:
        print(history.summary())
        torch.save(model.state_dict(), args.out)
        print(f"saved the weights to {args.out}")


if __name__ == "__main__":
    main()
