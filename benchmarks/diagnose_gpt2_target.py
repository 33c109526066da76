"""A diagnose target: a small GPT-2 from ``transformers`` (random weights, nothing downloaded) trained for a few
steps with AdamW. ``--wrong-eps N`` gives block N's first LayerNorm eps 0.1 (the fault diagnose should name).

Run under probe-tui as a script target (zero-code: the optimizer step counts steps); see diagnose_disk.py.
"""

import argparse

import torch
import transformers


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--wrong-eps", type=int, default=None)
    parser.add_argument("--steps", type=int, default=2)
    parser.add_argument("--layers", type=int, default=4)
    parser.add_argument("--embd", type=int, default=128)
    parser.add_argument("--seq", type=int, default=64)
    args = parser.parse_args()
    config = transformers.GPT2Config(n_layer=args.layers, n_embd=args.embd, n_head=4, vocab_size=1000,
                                     n_positions=args.seq, resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0)
    torch.manual_seed(0)
    model = transformers.GPT2LMHeadModel(config)
    if args.wrong_eps is not None:
        model.transformer.h[args.wrong_eps].ln_1.eps = 0.1
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    g = torch.Generator().manual_seed(1)
    for _ in range(args.steps):
        ids = torch.randint(0, 1000, (4, args.seq), generator=g)
        opt.zero_grad()
        model(ids, labels=ids).loss.backward()
        opt.step()


if __name__ == "__main__":
    main()
