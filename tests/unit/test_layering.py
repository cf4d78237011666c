"""Side effects stay at the edges, and the import graph runs one way (docs/ARCHITECTURE.md).

* which modules may import subprocess, paramiko, TensorFlow, ...;
* every module whose docstring claims to be pure imports nothing that touches the world;
* the code that runs on the hosts (``ringtrain.rank``) imports the standard library only;
* packages depend on each other only downwards (LAYERS), and no module imports itself back.
"""

from __future__ import annotations

import ast
import collections
import re
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2] / "ringtrain"

# module -> places allowed to import it (relative to ringtrain/; a trailing '/' means a directory)
ALLOWED = {
    "subprocess": (
        "remote/base.py",
        "remote/ssh.py",
        "remote/sshg.py",  # ssh -G: OpenSSH's own reading of the ssh config
        "remote/openssh.py",  # OpenSSH's ssh (--ssh-transport openssh)
        "launch/job/run.py",
        "hostfile/discover.py",
        "schedulers/calls.py",
        "rank/entry.py",  # runs the user's program (a wrapper, a binary) as the rank's child
        "rank/hub.py",  # the first rank of a host starts the host's hub (--control-hubs)
        "ringcheck/intraprog.py",  # nccl-tests' all_reduce_perf on a host
        "checkpoint/",
        "sim/",
        "bench/",
    ),
    "paramiko": ("remote/ssh.py", "remote/keys.py", "remote/targets.py", "sim/sshfarm.py"),
    "tensorflow": ("keras/", "models/", "bench/"),
    "horovod": ("keras/", "models/", "bench/", "hvd_driver.py"),
    "mpi4py": ("rank/entry.py", "models/", "bench/", "ringcheck/rankprog.py"),
}

# What a module that says it is pure must not import: anything that reaches processes, the
# network, the filesystem's remote backends, threads or the training stack.
IMPURE = {
    "subprocess", "socket", "psutil", "paramiko", "fabric", "invoke", "fsspec", "s3fs",
    "threading", "shutil", "urllib", "http", "grpc", "tensorflow", "horovod", "mpi4py",
    "concurrent", "select", "signal",
}

# ringtrain package -> the ringtrain packages it may import. Nothing imports upwards: cli and
# bench sit on top, rank and errors at the bottom.
LAYERS: dict[str, set[str]] = {
    "errors": set(),
    "version": set(),  # the release, named without the package's face
    "rank": set(),
    "trust": set(),
    "hostfile": {"errors", "trust"},
    "hvd_tuning": set(),
    "hvd_driver": set(),  # horovodrun under --elastic: Horovod's own code and one rule
    "slurm_options": {"errors"},  # the user's srun and sbatch options, read as they read them
    "spec": {"errors", "hostfile", "checkpoint", "hvd_tuning", "slurm_options"},
    "remote": {"errors", "hostfile"},
    "checkpoint": {"errors"},
    "schedulers": {"errors", "hostfile", "remote", "spec", "slurm_options"},
    # the pre-flight group: probe, verdict, network, names, the gate of an attempt
    "probe": {"errors", "hostfile", "remote", "rank", "spec", "version"},  # rank: its variables
    # trust: the run directory's way down judged (rundir.py)
    "launch": {"errors", "hostfile", "remote", "rank", "spec", "checkpoint", "schedulers",
               "probe", "trust", "slurm_options", "version"},
    "keras": {"errors", "checkpoint", "rank"},
    "models": {"errors", "checkpoint", "rank", "keras"},
    "sim": {"errors", "checkpoint", "rank"},
    "ringcheck": {"errors", "hostfile", "remote", "spec", "launch", "sim", "probe",
                  "rank"},  # rank: how ringtrain's own Python starts (isolated.py)
    "bench": {"errors", "hostfile", "remote", "rank", "checkpoint", "launch", "keras", "models",
              "sim", "spec", "ringcheck", "probe",
              "hvd_driver"},  # rendezvous_scale runs the driver as ringtrain runs it
    # the assembly of a launch, below both doors: the ring pre-check runs a ringcheck job
    # and the config layers both doors read (rank: the RINGTRAIN_ prefix)
    "assembly": {"errors", "hostfile", "remote", "spec", "launch", "ringcheck", "probe",
                 "checkpoint", "hvd_tuning", "trust", "rank", "slurm_options"},
    "cli": {"errors", "hostfile", "remote", "spec", "checkpoint", "schedulers", "launch",
            "bench", "sim", "rank", "ringcheck", "trust", "assembly", "probe", "version"},
    "api": {"errors", "remote", "spec", "launch", "assembly"},
    "__main__": {"cli"},
    # launch/'s rooms, from the ground floor up; every other package sees the wing as "launch".
    # The run's record: pure values, importing nothing of ringtrain
    "launch.record": set(),
    # what an attempt runs, decided before anything starts
    "launch.plan": {"errors", "hostfile", "remote", "rank", "spec", "slurm_options"},
    # the job's processes: the run directory, the secrets' delivery, the launcher process
    "launch.job": {"errors", "hostfile", "remote", "rank", "spec", "schedulers", "probe", "trust",
                   "launch.record", "launch.plan"},
    # the control channel's launcher end (errors: a launch it cannot hold, listener.py)
    "launch.control": {"errors", "rank", "version", "launch.record"},
    # watching an attempt: faults, stragglers, the teardown
    "launch.supervise": {"errors", "hostfile", "remote", "rank", "spec", "launch.record",
                         "launch.plan", "launch.control"},
    # --elastic: losses absorbed, the discovery list, spares
    "launch.elastic": {"errors", "hostfile", "remote", "rank", "spec", "probe", "launch.record",
                       "launch.plan", "launch.job"},
    # after an attempt: restart or not, the commit to resume from, the GPU re-check, rest
    "launch.recover": {"errors", "hostfile", "remote", "spec", "probe", "checkpoint",
                       "launch.record"},
}
# the top floor of launch/ (the loop, the reporter, the lifecycle) stands on every room
LAYERS["launch"] |= {room for room in LAYERS if room.startswith("launch.")}
ROOMS = {room.removeprefix("launch.") for room in LAYERS if room.startswith("launch.")}


def _imports(path: Path) -> set[str]:
    tree = ast.parse(path.read_text(), filename=str(path))
    names: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names.update(alias.name.split(".")[0] for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names.add(node.module.split(".")[0])
    return names


def _ringtrain_imports(path: Path, *, top_level_only: bool = False) -> set[str]:
    """Dotted ringtrain modules ``path`` imports: ``from ringtrain.x import y`` is the module
    ringtrain.x.y when that is one, else ringtrain.x."""
    tree = ast.parse(path.read_text(), filename=str(path))
    nodes = tree.body if top_level_only else list(ast.walk(tree))
    out: set[str] = set()
    for node in nodes:
        if isinstance(node, ast.Import):
            out.update(a.name for a in node.names if a.name.startswith("ringtrain"))
        elif (
            isinstance(node, ast.ImportFrom)
            and node.module
            and node.level == 0
            and node.module.startswith("ringtrain")
        ):
            for a in node.names:
                full = f"{node.module}.{a.name}"
                out.add(full if full in MODULES else node.module)
    return out


def _allowed(rel: str, places: tuple[str, ...]) -> bool:
    return any(rel == p or (p.endswith("/") and rel.startswith(p)) for p in places)


def _package(rel: str) -> str:
    """The layer of a module: its package, or for launch/ its room (launch/record/... is
    "launch.record"; launch/session.py, on the top floor, is "launch")."""
    parts = rel.split("/")
    if parts[0] == "launch" and len(parts) > 2:
        return f"launch.{parts[1]}"
    return parts[0].removesuffix(".py")


def _layer_of(module: str, importer: str) -> str:
    """The layer of a dotted ringtrain module as ``importer``'s layer sees it: launch/'s rooms
    apart from inside launch/, the wing as one from outside it."""
    parts = module.split(".")
    if len(parts) < 2:
        return ""
    if parts[1] == "launch" and importer.startswith("launch") and len(parts) > 2 \
            and parts[2] in ROOMS:
        return f"launch.{parts[2]}"
    return parts[1]


def _claims_pure(path: Path) -> bool:
    doc = ast.get_docstring(ast.parse(path.read_text())) or ""
    first = doc.split("\n\n")[0]
    return bool(re.search(r"\bPure\.|\bPURE\b", first)) or (
        path.parent.name == "hostfile" and path.name not in ("load.py", "discover.py")
    )


SOURCES = sorted(ROOT.rglob("*.py"))
MODULES = {
    ".".join(parts[:-1] if parts[-1] == "__init__" else parts)
    for parts in (p.relative_to(ROOT.parent).with_suffix("").parts for p in SOURCES)
}
IDS = {"ids": lambda p: str(p.relative_to(ROOT))}


@pytest.mark.parametrize("path", SOURCES, **IDS)
def test_imports_respect_layering(path: Path) -> None:
    rel = str(path.relative_to(ROOT))
    bad = [m for m in _imports(path) & ALLOWED.keys() if not _allowed(rel, ALLOWED[m])]
    assert not bad, f"{rel} imports {bad}; allowed only in {[ALLOWED[m] for m in bad]}"


@pytest.mark.parametrize("path", [p for p in SOURCES if _claims_pure(p)], **IDS)
def test_pure_modules_import_nothing_that_touches_the_world(path: Path) -> None:
    rel = str(path.relative_to(ROOT))
    bad = sorted(_imports(path) & IMPURE)
    if "urllib" in bad and _only_urllib_parse(path):
        bad.remove("urllib")  # urllib.parse splits a URL; urllib.request is the network
    assert not bad, f"{rel} says it is pure but imports {bad}"


def _only_urllib_parse(path: Path) -> bool:
    names = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            names.update(a.name for a in node.names if a.name.startswith("urllib"))
        elif isinstance(node, ast.ImportFrom) and (node.module or "").startswith("urllib"):
            names.add(node.module or "")
    return names == {"urllib.parse"}


@pytest.mark.parametrize("path", sorted((ROOT / "rank").glob("*.py")), **IDS)
def test_code_that_runs_on_the_hosts_is_standard_library_only(path: Path) -> None:
    rel = str(path.relative_to(ROOT))
    outside = sorted(
        m for m in _imports(path)
        if m not in sys.stdlib_module_names and m not in ("ringtrain", "__future__")
    )
    assert not outside, f"{rel} imports {outside}; ringtrain.rank must stay standard library"
    foreign = sorted(m for m in _ringtrain_imports(path) if not m.startswith("ringtrain.rank"))
    assert not foreign, f"{rel} imports {foreign}; ringtrain.rank imports only itself"


@pytest.mark.parametrize("path", SOURCES, **IDS)
def test_packages_import_only_downwards(path: Path) -> None:
    rel = str(path.relative_to(ROOT))
    own = _package(rel)
    if own == "__init__":
        return
    used = {_layer_of(m, own) for m in _ringtrain_imports(path)} & LAYERS.keys()
    upward = sorted(used - LAYERS[own] - {own})
    assert not upward, f"{rel} ({own}) imports {upward}; {own} may import {sorted(LAYERS[own])}"


def test_layers_have_no_cycle() -> None:
    seen: dict[str, int] = {}

    def visit(pkg: str, trail: tuple[str, ...]) -> None:
        assert seen.get(pkg) != 1, f"package cycle: {' -> '.join((*trail, pkg))}"
        if seen.get(pkg) == 2:
            return
        seen[pkg] = 1
        for dep in LAYERS[pkg]:
            visit(dep, (*trail, pkg))
        seen[pkg] = 2

    for pkg in LAYERS:
        visit(pkg, ())


def test_no_module_import_cycle() -> None:
    """Module-level imports only (a function may import lazily to stay light)."""
    names = {}
    for path in SOURCES:
        parts = path.relative_to(ROOT.parent).with_suffix("").parts
        names[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = path
    graph = collections.defaultdict(set)
    for name, path in names.items():
        for target in _ringtrain_imports(path, top_level_only=True):
            if target in names and target != name:
                graph[name].add(target)
    state: dict[str, int] = {}

    def visit(mod: str, trail: list[str]) -> None:
        state[mod] = 1
        for dep in graph[mod]:
            assert state.get(dep) != 1, f"import cycle: {' -> '.join([*trail, mod, dep])}"
            if dep not in state:
                visit(dep, [*trail, mod])
        state[mod] = 2

    for mod in names:
        if mod not in state:
            visit(mod, [])


def test_no_two_modules_share_a_name() -> None:
    counts = collections.Counter(p.name for p in SOURCES if p.name != "__init__.py")
    assert [n for n, c in counts.items() if c > 1] == []


def test_ringtrain_variables_are_declared_once() -> None:
    """Every RINGTRAIN_* the launcher hands the ranks is a name in ringtrain.rank.envvars;
    no other module spells one out as a string (the simulated cluster has its own)."""
    literal = re.compile(r"""["']RINGTRAIN_(?!SIM_|TEST_)[A-Z_]*(["'=]|\{)""")
    offenders = [
        str(p.relative_to(ROOT)) for p in SOURCES
        if p.name != "envvars.py" and literal.search(p.read_text())
    ]
    assert offenders == []


@pytest.mark.parametrize("path", SOURCES, **IDS)
def test_no_shell_true_no_print_outside_cli(path: Path) -> None:
    rel = str(path.relative_to(ROOT))
    tree = ast.parse(path.read_text())
    for node in ast.walk(tree):
        if isinstance(node, ast.keyword) and node.arg == "shell":
            assert not (isinstance(node.value, ast.Constant) and node.value.value is True), rel
        if (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Name)
            and node.func.id == "print"
        ):
            # cli/ prints; models/, bench/ and the sim helpers are programs whose output is read;
            # keras/ runs in the ranks, and its lines go to the rank's log; the ring check's
            # rank program prints its one result line, read from rank 0's log, and so does its
            # GPU-to-GPU program, read through the Remote seam
            assert rel.startswith(("cli/", "keras/", "models/", "bench/", "sim/fake_",
                                   "sim/_hostinit", "sim/sshfarm.py", "ringcheck/rankprog.py",
                                   "ringcheck/intraprog.py")), (
                f"print() in {rel}"
            )


def test_the_guard_sees_the_whole_package() -> None:
    assert len(SOURCES) > 10
    assert _imports(ROOT / "launch" / "job" / "run.py") >= {"subprocess"}
    assert _imports(ROOT / "keras" / "world.py") >= {"tensorflow"}  # the keras package is seen
    assert _claims_pure(ROOT / "launch" / "plan" / "make.py") and _claims_pure(ROOT / "spec.py")
    assert set(LAYERS) >= {_package(str(p.relative_to(ROOT))) for p in SOURCES} - {"__init__"}
    # a room importing a room above it is seen (the record may import no other room)
    assert _layer_of("ringtrain.launch.plan.make", "launch.record") == "launch.plan"
    assert _layer_of("ringtrain.launch.plan.make", "cli") == "launch"


def test_launch_is_rooms_with_a_short_top_floor() -> None:
    """launch/ keeps at most ~10 modules on its top floor (the loop, the reporter, the
    lifecycle); the rest live in rooms, and every room is a row of LAYERS."""
    top = sorted(p.name for p in (ROOT / "launch").glob("*.py") if p.name != "__init__.py")
    assert len(top) <= 10, top
    rooms = {p.name for p in (ROOT / "launch").iterdir() if (p / "__init__.py").is_file()}
    assert rooms == ROOMS


# What touches the outside world: processes, sockets, threads, signals, remote storage. The
# design names these places (docs/ARCHITECTURE.md, "Only these touch the outside world");
# everything else is computation on values.
WORLD = {"subprocess", "socket", "paramiko", "select", "selectors", "signal", "threading",
         "concurrent", "multiprocessing", "fsspec", "s3fs", "urllib", "http", "grpc", "psutil"}
EDGES = (
    "remote/", "launch/job/run.py", "launch/control/server.py",
    "launch/control/listener.py", "launch/control/conn.py", "launch/session.py",
    "probe/gate.py", "probe/names.py", "hostfile/discover.py", "schedulers/calls.py",
    "checkpoint/", "sim/", "bench/", "rank/", "models/", "keras/", "ringcheck/intraprog.py", "cli/",
    "launch/elastic/sparekeeper.py", "launch/elastic/warmspares.py", "launch/job/driverssh.py",
    "launch/lifecycle.py",
)
# Who builds a LaunchSpec: the user's launch through build_spec, a recorded one read back from
# plan.json, and the jobs ringtrain launches for itself (the ring check, the benchmarks).
SPEC_BUILDERS = ("assembly/launch_spec.py", "ringcheck/runner.py", "bench/")
ARCHITECTURE = ROOT.parent / "docs" / "ARCHITECTURE.md"


def _claim(opening: str) -> set[str]:
    """The backticked paths of the ARCHITECTURE.md bullet that starts with ``opening``."""
    text = ARCHITECTURE.read_text()
    start = text.index(opening)
    end = text.find("\n- ", start)
    return set(re.findall(r"`([\w/]+/|[\w/]+\.py)`", text[start:end if end != -1 else None]))


@pytest.mark.parametrize("path", SOURCES, **IDS)
def test_only_the_edges_touch_the_world(path: Path) -> None:
    rel = str(path.relative_to(ROOT))
    touched = sorted(_imports(path) & WORLD)
    assert not touched or _allowed(rel, EDGES), (
        f"{rel} imports {touched}; only {EDGES} touch the outside world (ARCHITECTURE.md)")


@pytest.mark.parametrize("path", SOURCES, **IDS)
def test_only_the_named_places_build_a_launch_spec(path: Path) -> None:
    rel = str(path.relative_to(ROOT))
    calls = [n for n in ast.walk(ast.parse(path.read_text()))
             if isinstance(n, ast.Call) and isinstance(n.func, ast.Name | ast.Attribute)
             and (n.func.id if isinstance(n.func, ast.Name) else n.func.attr) == "LaunchSpec"]
    assert not calls or _allowed(rel, SPEC_BUILDERS), (
        f"{rel} builds a LaunchSpec; only {SPEC_BUILDERS} do (ARCHITECTURE.md)")


def test_architecture_states_the_edges_and_the_spec_builders_the_tests_hold() -> None:
    assert _claim("Only these touch the outside world") == set(EDGES)
    assert _claim("A LaunchSpec is built by") == set(SPEC_BUILDERS)


@pytest.mark.parametrize("path", SOURCES, **IDS)
def test_no_module_outgrows_its_room(path: Path) -> None:
    """A module over 400 lines is a sign to split it (ARCHITECTURE.md, Conventions)."""
    lines = len(path.read_text().splitlines())
    assert lines <= 400, f"{path.relative_to(ROOT)} has {lines} lines; split it by concern"


def test_every_module_the_architecture_tree_names_exists() -> None:
    """docs/ARCHITECTURE.md's layout names each module where it lives: an entry (a name at the
    tree's own indentation) that moved or went is a false claim."""
    text = ARCHITECTURE.read_text()
    tree = text.split("## Layout", 1)[1].split("```")[1]
    stack: list[tuple[int, str]] = []
    named = []
    for line in tree.splitlines():
        entry = re.match(r"^( {0,8})(\S+?)(/|\.py)(?:\s|$)", line)
        if entry is None:
            continue
        indent, name, kind = len(entry.group(1)), entry.group(2), entry.group(3)
        stack = [(i, n) for i, n in stack if i < indent]
        if kind == "/":
            stack.append((indent, name))
        else:
            named.append(Path(*(n for _, n in stack), f"{name}.py"))
    assert len(named) > 60
    missing = [str(p) for p in named if not (ROOT.parent / p).is_file()]
    assert missing == []


def test_every_module_a_package_face_lists_exists() -> None:
    """A package's docstring that lists its modules (``    name.py   what it does``) names
    only modules it has."""
    missing = []
    for init in ROOT.rglob("__init__.py"):
        doc = ast.get_docstring(ast.parse(init.read_text())) or ""
        for name in re.findall(r"^ {4}(\w+\.py) {2,}", doc, re.M):
            if not (init.parent / name).is_file():
                missing.append(f"{init.parent.relative_to(ROOT)}/{name}")
    assert missing == []
