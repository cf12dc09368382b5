"""Evaluate a trained Transformer run (``peer_words``) with a word seen only alone read as one word.

With ``model.transformer.peer_words`` the syntax (the encoder's token embeddings, the decoder's
input embeddings, or both) reads a word seen only alone in training — add-jump's "jump" and
``I_JUMP`` — as the mean of its peers, the words seen alone and composed ("walk", "run", "look"),
a vector that no composed training input ever was (``peer_dropout`` shows it to the decoder now and
then). Read instead as one of its peers, the syntax of "jump twice after walk" is that of "walk
twice after walk", which training covered; what the word means stays its own where the values have
a table of their own (``semantic_embeddings: separate``). This copies ``RUN_DIR`` to ``OUT_DIR``
(its config, history and ``checkpoints/best.pt``; not its evaluation, ``last.pt`` or predictions),
sets in the copy's ``best.pt`` the syntax embedding of each ``--source WORD=PEER`` /
``--target TOKEN=PEER`` to that of ``PEER`` and records the word as composed, so that it is read as
that vector and not as the peers' mean, and evaluates the copy with ``attnlab evaluate OUT_DIR``
(its ``eval/`` as any run's). The run itself is not touched.

Usage: ``python scripts/transformer_peers_read_as.py RUN_DIR OUT_DIR [--source jump=walk]
[--target I_JUMP=I_WALK]`` (an add-jump evaluation takes about half a minute on one CPU thread).
"""

from __future__ import annotations

import argparse
from pathlib import Path

from relative_distances_read_at import evaluate_a_changed_copy  # scripts/ is on sys.path

SIDES = {
    "source": ("source_embedding.weight", "source_peers"),
    "target": ("target_embedding.weight", "target_peers"),
}


def read_as(checkpoint: dict, side: str, word: str, peer: str) -> None:
    """Set, in place, ``side``'s syntax embedding of ``word`` in ``checkpoint`` to that of ``peer``
    and mark ``word`` composed, so that the model reads it as ``peer``'s vector; a ``ValueError``
    naming what is missing if the run has no such peers or words."""
    table_name, peers = SIDES[side]
    state = checkpoint["model"]
    if f"{peers}.composed" not in state:
        raise ValueError(f"--{side}: the run reads no {side} peers (model.transformer.peer_words)")
    tokens = checkpoint["model_spec"]["vocabularies"][side]["tokens"]
    for token in (word, peer):
        if token not in tokens:
            raise ValueError(f"--{side} {word}={peer}: {token!r} is not in the {side} vocabulary")
    index, peer_index = tokens.index(word), tokens.index(peer)
    if not bool(state[f"{peers}.composed"][peer_index]):
        raise ValueError(f"--{side} {word}={peer}: {peer!r} was never seen composed in training")
    for name in (table_name, f"{peers}.embedding.weight"):  # one table, saved under both names
        state[name][index] = state[name][peer_index]
    state[f"{peers}.composed"][index] = True


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("run_dir", type=Path)
    parser.add_argument("out_dir", type=Path)
    for side in SIDES:
        parser.add_argument(f"--{side}", action="append", default=[], metavar="WORD=PEER")
    args = parser.parse_args()
    readings = [(side, *spec.partition("=")[::2]) for side in SIDES for spec in getattr(args, side)]
    if not readings:
        parser.error("give at least one --source WORD=PEER or --target TOKEN=PEER")
    if any(not word or not peer for _, word, peer in readings):
        parser.error("each reading is WORD=PEER")

    def change(checkpoint: dict) -> str:
        for side, word, peer in readings:
            read_as(checkpoint, side, word, peer)
        return "reads " + ", ".join(f"{side} {word} as {peer}" for side, word, peer in readings)

    evaluate_a_changed_copy(parser, args.run_dir, args.out_dir, change)


if __name__ == "__main__":
    main()
