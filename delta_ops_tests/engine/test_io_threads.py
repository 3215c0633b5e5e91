"""The process's one I/O pool (`delta_ops.engine.threads`): results in order, errors raised,
one sizing rule set at the edge, nested fan-out that completes on a pool of one or two
threads, and no other thread pool outside `engine/`."""

from __future__ import annotations

import ast
import threading
import time

import pytest

from delta_ops.engine import threads
from delta_ops.engine.threads import (
    default_io_threads,
    io_map,
    io_submit,
    io_threads,
    set_io_threads,
)
from delta_ops_tests.support.corpus import REPO_ROOT


@pytest.fixture
def pool_size():
    """Sets the pool's size for one test, then puts the default back."""
    yield set_io_threads
    set_io_threads(None)


def _finishes(fn, timeout_s: float = 20.0):
    """`fn()`'s result, failing (not hanging) when it does not return in `timeout_s`."""
    out: list = []
    errors: list[BaseException] = []

    def run() -> None:
        try:
            out.append(fn())
        except BaseException as exc:  # handed to the test below
            errors.append(exc)

    t = threading.Thread(target=run, daemon=True)
    t.start()
    t.join(timeout_s)
    assert not t.is_alive(), "the fan-out did not finish: the pool deadlocked"
    if errors:
        raise errors[0]
    return out[0]


def test_results_come_in_order():
    assert io_map(lambda i: i * i, range(50)) == [i * i for i in range(50)]
    assert io_map(str, []) == []
    assert io_map(str, [7]) == ["7"]


def test_the_first_error_is_raised():
    def fn(i: int) -> int:
        if i == 3:
            raise KeyError(i)
        return i

    with pytest.raises(KeyError):
        io_map(fn, range(10))


@pytest.mark.parametrize("size", [1, 2])
def test_nested_fan_out_completes_on_a_small_pool(pool_size, size):
    pool_size(size)
    assert io_threads() == size

    def leaf(i: int) -> int:
        time.sleep(0.001)
        return i

    def middle(i: int) -> int:
        return sum(io_map(leaf, range(i, i + 5)))

    def top(i: int) -> int:
        # Every pool thread ends up waiting here on children queued behind it.
        return sum(io_map(middle, range(i, i + 4)))

    got = _finishes(lambda: io_map(top, range(6)))
    want = [sum(sum(range(m, m + 5)) for m in range(i, i + 4)) for i in range(6)]
    assert got == want


@pytest.mark.parametrize("size", [1, 2])
def test_a_task_waiting_on_its_own_submissions_completes(pool_size, size):
    pool_size(size)

    def outer(n: int) -> list[int]:
        tasks = [io_submit(lambda k: k + 1, k) for k in range(n)]
        return [t.result() for t in tasks]

    got = _finishes(lambda: [t.result() for t in [io_submit(outer, 3) for _ in range(4)]])
    assert got == [[1, 2, 3]] * 4


def test_one_sizing_rule_set_at_the_edge(pool_size):
    assert default_io_threads() >= 16
    assert io_threads() == default_io_threads()
    pool_size(3)
    assert io_threads() == 3
    names = io_map(lambda _: threading.current_thread().name, range(64))
    assert {n for n in names if n.startswith("delta_ops-io")}  # the pool did the work
    assert threads._pool()._max_workers == 3
    pool_size(None)
    assert io_threads() == default_io_threads()
    with pytest.raises(ValueError, match="at least one thread"):
        set_io_threads(0)


def _pools_outside_engine(package) -> list[str]:
    found = []
    for path in sorted(package.rglob("*.py")):
        rel = path.relative_to(package.parent).as_posix()
        if rel.startswith("delta_ops/engine/"):
            continue
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            name = node.id if isinstance(node, ast.Name) else (
                node.attr if isinstance(node, ast.Attribute) else None)
            if name in ("ThreadPoolExecutor", "ProcessPoolExecutor"):
                found.append(f"{rel}:{node.lineno}")
    return found


def test_no_thread_pool_outside_the_engine():
    assert _pools_outside_engine(REPO_ROOT / "delta_ops") == []


def test_the_pool_check_finds_a_planted_pool(tmp_path):
    planted = tmp_path / "delta_ops" / "log" / "x.py"
    planted.parent.mkdir(parents=True)
    planted.write_text(
        "from concurrent.futures import ThreadPoolExecutor\n"
        "with ThreadPoolExecutor(4) as pool:\n    pass\n"
    )
    assert _pools_outside_engine(tmp_path / "delta_ops") == ["delta_ops/log/x.py:2"]


def test_local_map_tasks_raises_the_earliest_failure_after_the_running_items_end(tmp_path):
    """`LocalEngine.map_tasks`: after a failure no item starts; the items already running
    end before the call returns; the error raised is the earliest failed item's."""
    from delta_ops.engine.local import LocalEngine
    from delta_ops.storage import Storage

    started: list[int] = []
    ended: list[int] = []
    gate = threading.Event()

    def task(_storage, item: int) -> int:
        started.append(item)
        if item == 0:
            gate.wait(10)  # still running when item 1 fails; fails itself later
            time.sleep(0.05)
            ended.append(item)
            raise ValueError(f"item {item}")
        if item == 1:
            gate.set()
            raise ValueError(f"item {item}")
        ended.append(item)
        return item

    engine = LocalEngine(max_workers=2)
    # Item 1 fails first; item 0, earlier in the input, fails after it: its error is the one.
    with pytest.raises(ValueError, match="item 0"):
        engine.map_tasks(Storage.for_uri(str(tmp_path)), task, range(50), parallel=2)

    assert 0 in ended  # the running item ended before the call returned
    # A thread freed before the failure was seen may have taken one more item; the rest
    # never started.
    assert len(started) <= 4, started
