"""The same work on two source trees, interleaved: ``python -m tools.bench.tree_ab OTHER``.

Whether a change kept the speed (issue 19: "speed unchanged"): OTHER is another checkout of
this repository (``git worktree add --detach /tmp/before REF``; build its extension there with
``python setup.py build_ext --inplace``). Every measurement runs in a child interpreter
(this one's, so the same torch, Pillow and numpy) whose ``PYTHONPATH`` starts with the tree
measured, and only through names both trees export (``dataprep.cli.main``,
``loaders.ShardDataset``, ``loaders.DataLoader``, ``loaders.RandomResizedCropDecode``):

- ``shard``: ``dataprep shard RAW OUT --workers W`` over one set of synthetic photos (made
  once, by this tree), seconds in the child (interpreter start left out);
- ``loader thread`` / ``loader process``: whole epochs of ``ShardDataset`` (over the shards
  that tree wrote: each reads its own manifest version) with ``RandomResizedCropDecode(224)``
  and flip, batches of 64, W workers of that type, shuffled; images/s of the epochs after the
  first (whose page faults and worker starts are left out).

Rounds alternate the trees, in a rotating order, so both see the same machine; the median
round is reported with the ratio this tree / OTHER (above 1: this tree is faster).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

from tools.common.report import ToolError, add_output_args, check_int, emit, format_table
from tools.common.synthetic import REPO_ROOT, make_uniform_images

_SHARD = """
import json, sys, time
from dataprep.cli import main
start = time.perf_counter()
code = main(["shard", sys.argv[1], sys.argv[2], "--workers", sys.argv[3], "--no-progress", "--shard-size", "32MB"])
print(json.dumps({"code": code, "seconds": time.perf_counter() - start}))
"""

_LOAD = """
import json, sys, time
from loaders import DataLoader, RandomResizedCropDecode, ShardDataset
shards, workers, worker_type, epochs = sys.argv[1], int(sys.argv[2]), sys.argv[3], int(sys.argv[4])
dataset = ShardDataset(shards, transform=RandomResizedCropDecode(224))
loader = DataLoader(dataset, batch_size=64, num_workers=workers, worker_type=worker_type, shuffle=True, seed=0)
rates = []
for epoch in range(epochs):
    start, images = time.perf_counter(), 0
    for batch in loader:
        images += len(batch["cls"])
    rates.append(images / (time.perf_counter() - start))
print(json.dumps({"images": images, "img_s": rates[1:]}))
"""


def _child(tree: Path, what: str, code: str, *args: str) -> dict[str, Any]:
    """``code`` (one of the snippets above, doing ``what``) run with ``tree`` first on the path; its last JSON line."""
    path = os.pathsep.join([str(tree), os.environ.get("PYTHONPATH", "")]).rstrip(os.pathsep)
    env = {**os.environ, "PYTHONPATH": path}
    done = subprocess.run([sys.executable, "-c", code, *args], cwd=tree, env=env, capture_output=True, text=True)
    lines = done.stdout.strip().splitlines()
    if done.returncode != 0 or not lines:
        raise ToolError(f"{tree}: {what} failed ({done.returncode}): {done.stderr[-400:]}")
    return json.loads(lines[-1])


def run(args: argparse.Namespace) -> dict[str, Any]:
    trees = {"this": REPO_ROOT, "other": args.other.resolve()}
    with tempfile.TemporaryDirectory(prefix="tree_ab-", dir=args.dir) as tmp:
        raw = make_uniform_images(Path(tmp) / "raw", args.images)
        seconds: dict[str, list[float]] = {name: [] for name in trees}
        rates: dict[str, dict[str, list[float]]] = {kind: {name: [] for name in trees}
                                                    for kind in ("thread", "process")}
        for r in range(args.rounds):
            order = list(trees) if r % 2 == 0 else list(reversed(trees))
            for name in order:
                out = Path(tmp) / f"shards-{name}"
                shutil.rmtree(out, ignore_errors=True)
                shard = _child(trees[name], "dataprep shard", _SHARD, str(raw), str(out), str(args.workers))
                if shard["code"] != 0:
                    raise ToolError(f"{trees[name]}: dataprep shard exited {shard['code']}")
                seconds[name].append(shard["seconds"])
            for kind in rates:
                for name in order:
                    loaded = _child(trees[name], f"loader ({kind} workers)", _LOAD, str(Path(tmp) / f"shards-{name}"),
                                    str(args.workers), kind, str(args.epochs + 1))
                    rates[kind][name].append(statistics.median(loaded["img_s"]))
    rows: dict[str, Any] = {"shard s": {name: statistics.median(v) for name, v in seconds.items()}}
    rows["shard s"]["this_over_other"] = rows["shard s"]["other"] / rows["shard s"]["this"]
    for kind, by_tree in rates.items():
        row = {name: statistics.median(v) for name, v in by_tree.items()}
        rows[f"loader {kind} img/s"] = {**row, "this_over_other": row["this"] / row["other"]}
    return {"other": str(trees["other"]), "images": args.images, "workers": args.workers, "rounds": args.rounds,
            "rows": rows, "raw": {"shard_s": seconds, "img_s": rates}}


def _render(results: dict[str, Any]) -> str:
    title = (f"{results['images']} photos, {results['workers']} workers, median of {results['rounds']} "
             f"interleaved rounds; other = {results['other']}")
    table = format_table(["measure", "this tree", "other tree", "speed this / other"],
                         [[name, row["this"], row["other"], row["this_over_other"]]
                          for name, row in results["rows"].items()], title=title)
    return table + "\n\nnote: a speed ratio above 1 means this tree is faster (seconds: other / this)."


def _arguments(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m tools.bench.tree_ab", description=__doc__.split("\n")[0])
    parser.add_argument("other", type=Path, help="another checkout of this repository (its extension built)")
    parser.add_argument("--images", type=int, default=1500, help="synthetic ~500x375 photos")
    parser.add_argument("--workers", type=int, default=2, help="dataprep shard's and the loader's workers")
    parser.add_argument("--epochs", type=int, default=2, help="timed loader epochs per round (after one untimed)")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--dir", type=Path, default=None, help="where the photos and shards go (default: a temp dir)")
    add_output_args(parser, plot=None)
    args = parser.parse_args(argv)
    for name in ("images", "workers", "epochs", "rounds"):
        check_int(f"--{name}", getattr(args, name), 1)
    if not (args.other / "loaders" / "__init__.py").is_file():
        raise ToolError(f"{args.other}: not a checkout of this repository (no loaders/__init__.py)")
    return args


def main(argv: list[str] | None = None) -> int:
    try:
        args = _arguments(argv)
        results = run(args)
    except ToolError as err:
        print(f"tree_ab: {err}", file=sys.stderr)
        return 2
    emit("tree_ab", _render(results), results, args.json, argv)
    return 0


if __name__ == "__main__":
    sys.exit(main())
