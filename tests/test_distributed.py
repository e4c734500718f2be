"""ab.fit under torchrun: two CPU processes (Gloo) against one process with the same global batch.

Each process of a ``torchrun`` job gets the batch size it is given, so two processes with batch 8
take the steps of one process with batch 16: the loss curves must agree, and the two replicas
must end with the very same weights. Runs in the grader's xdist group, so that it never runs
beside the grader's heavy tests on a two-core machine.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(Path(__file__).resolve().parent))
import distributed_fit  # noqa: E402

PER_PROCESS = 8


def torchrun(script: Path, *args, tmp_path: Path) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items()
           if k not in ("WORLD_SIZE", "RANK", "LOCAL_RANK", "ATTENTION_BOOK_MAX_STEPS")}
    env.update(OMP_NUM_THREADS="1", ATTENTION_BOOK_SIZE="ci", ATTENTION_BOOK_EXPLORERS="static")
    cmd = [sys.executable, "-m", "torch.distributed.run", "--nproc_per_node=2", "--standalone", str(script),
           *map(str, args)]
    done = subprocess.run(cmd, env=env, cwd=tmp_path, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, f"torchrun failed:\n{done.stdout[-3000:]}\n{done.stderr[-3000:]}"
    return done


@pytest.fixture(scope="module")
def two_processes(tmp_path_factory):
    out = tmp_path_factory.mktemp("ddp")
    torchrun(Path(distributed_fit.__file__), out, PER_PROCESS, tmp_path=out)
    return {kind: [torch.load(out / f"{kind}-rank{r}.pt") for r in (0, 1)] for kind in ("loader", "list", "shuffled")}


@pytest.mark.slow
@pytest.mark.xdist_group("graded_class")
@pytest.mark.parametrize("kind", ["loader", "list"])
def test_two_processes_follow_one_with_the_same_global_batch(two_processes, kind, one_thread):
    ranks = two_processes[kind]
    history, model = distributed_fit.train(kind, 2 * PER_PROCESS)
    for r in ranks:
        assert r["world_size"] == 2 and r["steps"] == history.steps
        torch.testing.assert_close(torch.tensor(r["train_loss"]), torch.tensor(history.train_loss),
                                   rtol=1e-4, atol=1e-6)
        torch.testing.assert_close(torch.tensor(r["mse"]), torch.tensor(history.metrics["mse"]), rtol=1e-4, atol=1e-6)
    assert history.train_loss[-1] < history.train_loss[0]
    for name, single in model.state_dict().items():
        torch.testing.assert_close(ranks[0]["state"][name], single, rtol=1e-4, atol=1e-5)


@pytest.mark.slow
@pytest.mark.xdist_group("graded_class")
@pytest.mark.parametrize("kind", ["loader", "list", "shuffled"])
def test_replicas_end_with_identical_weights_and_histories(two_processes, kind):
    first, second = two_processes[kind]
    assert first["state"].keys() == second["state"].keys()
    for name in first["state"]:
        assert torch.equal(first["state"][name], second["state"][name]), name
    assert first["train_loss"] == second["train_loss"] and first["mse"] == second["mse"]
    torch.manual_seed(3)
    untouched = distributed_fit.Net().spare.weight  # a parameter no loss uses keeps its first value
    assert torch.equal(first["state"]["spare.weight"], untouched)


@pytest.mark.slow
@pytest.mark.xdist_group("graded_class")
def test_the_pretraining_script_runs_on_two_processes(tmp_path):
    done = torchrun(ROOT / "scripts" / "pretrain_distributed.py", "--model", "bert", "--synthetic",
                    "--num-hiddens", 16, "--num-heads", 2, "--num-blks", 1, "--ffn-num-hiddens", 32,
                    "--seq-len", 16, "--batch-size", 8, "--steps", 2, "--epochs", 1, "--out", tmp_path / "bert.pt",
                    tmp_path=tmp_path)
    assert done.stdout.count("2 process(es) of 4 sequences per step") == 1, done.stdout  # rank 0 alone prints
    assert "1 epochs, 2 steps" in done.stdout
    weights = torch.load(tmp_path / "bert.pt")
    assert "lm_head.weight" in weights


def test_the_gpu_page_shows_the_script_as_it_is_in_the_repository():
    page = (ROOT / "book" / "distributed.md").read_text(encoding="utf-8")
    script = (ROOT / "scripts" / "pretrain_distributed.py").read_text(encoding="utf-8")
    assert f"```python\n{script}```" in page, "book/distributed.md must show scripts/pretrain_distributed.py verbatim"
