"""Tables over an alphabet of awkward path spellings, and the VACUUM property checks over them (run
in memory and through the partitioned path)."""

from __future__ import annotations

import json
import os
import tempfile
from pathlib import Path
from urllib.parse import quote

import pytest
from hypothesis import HealthCheck, assume, event, given, settings
from hypothesis import strategies as st

from delta_ops.errors import UnsafeDeletionError
from delta_ops.maintenance.vacuum import vacuum
from delta_ops.protocol.path_identity import canonical_path
from delta_ops_tests.support.spark_fixtures import spark_engine  # noqa: F401  (the fixture)

DAY_MS = 86_400_000
OLD_MS = 1_700_000_000_000
NOW_MS = OLD_MS + 30 * DAY_MS
IN_RETENTION_MS = NOW_MS - DAY_MS  # tombstones newer than the 7-day default retention
EXPIRED_MS = NOW_MS - 20 * DAY_MS
SCHEMA = json.dumps({"type": "struct", "fields": [
    {"name": "x", "type": "long", "nullable": True, "metadata": {}}]})


# Pieces of names: each is a valid file-name fragment on POSIX.
PIECES = ["a", "B", "x1", ":", "%", "%25", "%41", "%3A", "%2F", " ", "=", "é", "ü", "日",
          "k=v", "file:", "C:", "T03:06:40Z", "+", "-", "."]


names = st.lists(st.sampled_from(PIECES), min_size=1, max_size=4).map("".join).filter(
    lambda n: n not in (".", "..") and not n.startswith((".", "_"))
)


rel_paths = st.lists(names, min_size=1, max_size=3).map(lambda parts: "/".join(parts))
SPELLINGS = ["rel_encoded", "rel_raw", "abs_path", "file_one", "file_three", "file_localhost",
             "file_double_slash", "rel_double_slash", "encoded_keep_colon",
             "abs_via_root_link", "file_via_ancestor_link", "abs_dotdot_after_link",
             "rel_via_inner_link"]


ROLES = ["live", "live", "removed_recent", "removed_expired", "orphan", "staged_add",
         "staged_removed"]


#: Versions of staged commits: at and below the latest published one (1), and above it.
STAGED_VERSIONS = [0, 1, 2, 7]


#: Links beside the root (`base/tables/<root>`): to the root, to its parent, and to its
#: `_delta_log` (so that `deep/..` is the root to the file system).
ROOT_LINK, ANCESTOR_LINK, DEEP_LINK = "rootlink", "tableslink", "deep"


def spell(kind: str, rel: str, root: Path) -> str:
    """`rel` (a path on disk below `root`) as a writer might put it in an add."""
    enc_root = quote(str(root))
    enc = quote(rel)
    base = root.parent.parent
    if kind == "abs_via_root_link":
        return f"{quote(str(base / ROOT_LINK))}/{enc}"
    if kind == "file_via_ancestor_link":
        return f"file://{quote(str(base / ANCESTOR_LINK))}/{quote(root.name)}/{enc}"
    if kind == "abs_dotdot_after_link":
        return f"{quote(str(base / DEEP_LINK))}/../{enc}"
    if kind == "rel_via_inner_link":
        head, _, tail = rel.partition("/")
        return f"_in_{quote(head)}/{quote(tail)}" if tail else enc
    return {
        "rel_encoded": enc,
        "rel_raw": rel,
        "encoded_keep_colon": quote(rel, safe="/:="),
        "rel_double_slash": enc.replace("/", "//", 1) if "/" in enc else enc,
        "abs_path": f"{enc_root}/{enc}",
        "file_one": f"file:{enc_root}/{enc}",
        "file_three": f"file://{enc_root}/{enc}",
        "file_localhost": f"file://localhost{enc_root}/{enc}",
        "file_double_slash": f"file://{enc_root}//{enc}",
    }[kind]


@st.composite
def tables(draw):
    root_name = draw(names)
    paths = draw(st.lists(rel_paths, min_size=2, max_size=9, unique=True))
    # No path may be a directory of another.
    dirs = {"/".join(p.split("/")[:i]) for p in paths for i in range(1, p.count("/") + 1)}
    paths = [p for p in paths if p not in dirs]
    roles = draw(st.lists(st.sampled_from(ROLES), min_size=len(paths), max_size=len(paths)))
    kinds = draw(st.lists(st.sampled_from(SPELLINGS), min_size=len(paths), max_size=len(paths)))
    staged = draw(st.lists(st.sampled_from(STAGED_VERSIONS), min_size=len(paths),
                           max_size=len(paths)))
    link = draw(st.booleans())
    extra = {
        "root_via_ancestor_link": draw(st.booleans()),
        "catalog": draw(st.booleans()),
        "broken_staged": draw(st.integers(0, 9)) == 0,
    }
    return root_name, list(zip(paths, roles, kinds, staged, strict=True)), link, extra


def vacuum_root(base: Path, spec) -> Path:
    """The root as VACUUM is given it: the real path, or through a link to its parent."""
    root_name, _entries, _link, extra = spec
    parent = ANCESTOR_LINK if extra["root_via_ancestor_link"] else "tables"
    return base / parent / root_name


def refuses(spec) -> bool:
    """Whether VACUUM must refuse the table (a malformed staged commit)."""
    return spec[3]["broken_staged"]


def build(base: Path, spec) -> tuple[Path, set[str], set[str], dict[str, bytes]]:
    """The table; (root, files that must survive, files that may go, outside files)."""
    root_name, entries, link, extra = spec
    root = base / "tables" / root_name
    (root / "_delta_log").mkdir(parents=True)
    (base / ROOT_LINK).symlink_to(root, target_is_directory=True)
    (base / ANCESTOR_LINK).symlink_to(base / "tables", target_is_directory=True)
    (base / DEEP_LINK).symlink_to(root / "_delta_log", target_is_directory=True)
    protocol = {"minReaderVersion": 1, "minWriterVersion": 2}
    if extra["catalog"]:
        protocol = {"minReaderVersion": 3, "minWriterVersion": 7,
                    "readerFeatures": ["catalogManaged"],
                    "writerFeatures": ["catalogManaged", "inCommitTimestamp"]}
    staged: dict[int, list[dict]] = {}
    commit0 = [
        {"protocol": protocol},
        {"metaData": {"id": "t", "format": {"provider": "parquet", "options": {}},
                      "schemaString": SCHEMA, "partitionColumns": [], "configuration": {},
                      "createdTime": OLD_MS}},
    ]
    # A commit holds at least its commitInfo (no writer publishes an empty one; an empty
    # file is refused as content lost).
    commit1: list[dict] = [{"commitInfo": {"operation": "DELETE", "timestamp": OLD_MS}}]
    must_stay: set[str] = set()
    may_go: set[str] = set()
    # Two files whose paths in the log have one identity (e.g. `:` written raw and `%3A`
    # written raw: the spec decodes the second to the first) are one file to the spec's
    # reconciliation, while deltalake reconciles the text: no table to judge by.
    written_keys = {canonical_path(spell(k, r, root), f"file://{root}")
                    for r, role, k, _v in entries if role != "orphan"}
    assume(len(written_keys) == sum(role != "orphan" for _r, role, _k, _v in entries))
    for rel, role, kind, version in entries:
        path = root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(b"data")
        os.utime(path, ns=(OLD_MS * 1_000_000,) * 2)
        if role == "orphan":
            may_go.add(rel)
            continue
        written = spell(kind, rel, root)
        if kind == "rel_via_inner_link" and "/" in rel:
            inner = root / f"_in_{rel.split('/', 1)[0]}"
            if not inner.is_symlink():
                inner.symlink_to(root / rel.split("/", 1)[0], target_is_directory=True)
        add = {"add": {"path": written, "partitionValues": {}, "size": 4,
                       "modificationTime": OLD_MS, "dataChange": True}}
        if role == "staged_add":
            must_stay.add(rel)
            staged.setdefault(version, []).append(add)
            continue
        commit0.append(add)
        if role == "staged_removed":
            must_stay.add(rel)
            staged.setdefault(version, []).append(
                {"remove": {"path": written, "deletionTimestamp": EXPIRED_MS,
                            "dataChange": True}})
        elif role == "live":
            must_stay.add(rel)
        elif role == "removed_recent":
            must_stay.add(rel)
            commit1.append({"remove": {"path": written, "deletionTimestamp": IN_RETENTION_MS,
                                       "dataChange": True}})
        else:
            may_go.add(rel)  # no version inside the retention references it
            commit1.append({"remove": {"path": written, "deletionTimestamp": EXPIRED_MS,
                                       "dataChange": True}})
    log = root / "_delta_log"
    (log / f"{0:020}.json").write_text("".join(json.dumps(a) + "\n" for a in commit0))
    (log / f"{1:020}.json").write_text("".join(json.dumps(a) + "\n" for a in commit1))
    if staged or extra["broken_staged"]:
        (log / "_staged_commits").mkdir()
    for version, actions in staged.items():
        (log / "_staged_commits" / f"{version:020}.{version}a1b2.json").write_text(
            "".join(json.dumps(a) + "\n" for a in actions))
    if extra["broken_staged"]:
        (log / "_staged_commits" / f"{3:020}.partial.json").write_text('{"add": {"path": ')
    outside = base / "outside"
    for rel in ("x.parquet", "d/y.parquet", "part=1/z.parquet"):
        (outside / rel).parent.mkdir(parents=True, exist_ok=True)
        (outside / rel).write_bytes(b"keep me")
        os.utime(outside / rel, ns=(OLD_MS * 1_000_000,) * 2)
    (base / "tables" / "sentinel.parquet").write_bytes(b"beside the root")
    os.utime(base / "tables" / "sentinel.parquet", ns=(OLD_MS * 1_000_000,) * 2)
    if link:
        (root / "linked").symlink_to(outside, target_is_directory=True)
        (root / "file.parquet").symlink_to(outside / "x.parquet")
    return root, must_stay, may_go, snapshot(base, root)


def snapshot(base: Path, root: Path) -> dict[str, bytes]:
    """Every file below `base` but outside `root` (links not followed), with content."""
    out = {}
    for dirpath, dirs, files in os.walk(base):
        here = Path(dirpath)
        if here == root or root in here.parents:
            dirs[:] = []
            continue
        for f in files:
            p = here / f
            out[p.relative_to(base).as_posix()] = p.read_bytes() if not p.is_symlink() else b"@"
    return out


def files_below(root: Path) -> set[str]:
    out = set()
    for dirpath, _dirs, files in os.walk(root):
        for f in files:
            out.add((Path(dirpath) / f).relative_to(root).as_posix())
    return out


def deltalake_files(root: Path) -> set[str]:
    """Files (relative to root) deltalake would open for the latest version that exist;
    empty when it cannot open the table (it cannot when the root's name holds `%XX`)."""
    import deltalake

    try:
        uris = deltalake.DeltaTable(str(root)).file_uris()
    except Exception:  # noqa: BLE001 - deltalake cannot tell: nothing to compare
        return set()
    out = set()
    real_root = root.resolve()
    for uri in uris:
        # The file it reaches, whatever links it goes through (an alias of the root too).
        path = Path(uri.removeprefix("file://")).resolve()
        if path.is_file() and real_root in path.parents:
            out.add(path.relative_to(real_root).as_posix())
    return out


def check(spec, engine=None, *, with_deltalake: bool = False) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        base = Path(tmp)
        root, must_stay, may_go, outside_before = build(base, spec)
        if with_deltalake:
            read = deltalake_files(root)
            event("deltalake opened files" if read else "deltalake opened none")
            must_stay = must_stay | read
            may_go = may_go - read
        before = files_below(root)
        given = str(vacuum_root(base, spec))
        args = {"now_ms": NOW_MS, "engine": engine, "allow_catalog_managed": True}
        try:
            dry = vacuum(given, dry_run=True, **args)
        except UnsafeDeletionError:
            event("refused")
            with pytest.raises(UnsafeDeletionError):
                vacuum(given, **args, dry_run=False)
            if refuses(spec):
                with pytest.raises(UnsafeDeletionError):
                    vacuum(given, lite=True, dry_run=True, **args)
            assert files_below(root) == before
            assert snapshot(base, root) == outside_before
            return
        assert not refuses(spec), "a malformed staged commit did not make VACUUM refuse"
        assert not set(dry.files) & must_stay, "a referenced file was listed for deletion"
        try:
            lite = vacuum(given, dry_run=True, lite=True, **args)
            assert not set(lite.files) & must_stay, "lite mode listed a referenced file"
        except UnsafeDeletionError:
            event("lite refused")
        result = vacuum(given, **args, dry_run=False)
        assert result.files == dry.files
        after = files_below(root)
        assert must_stay <= after
        assert before - after == set(result.files)
        assert set(result.files) <= may_go | {p for p in before if p.startswith("_")}
        assert snapshot(base, root) == outside_before
        event("all unreferenced deleted" if may_go <= set(result.files) else "some kept")


@settings(max_examples=500, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(tables())
def vacuum_never_lists_a_referenced_file_nor_touches_outside_the_root(spec):
    check(spec)


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(tables())
def files_deltalake_reads_survive_vacuum(spec):
    """What deltalake opens for the latest version (where it can open the table) is never
    a candidate and exists afterwards."""
    check(spec, with_deltalake=True)
