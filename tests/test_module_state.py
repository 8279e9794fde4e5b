"""No module of service/, profiles/ or knowledge/ keeps mutable state of its own: caches,
memos and locks live on objects an app (or the command that needs them) creates.

The test reads every module and finds, at module level: a mutable container or a stateful
object bound to a name (a dict or list literal bound to a lower-case name, a lock, an
ordered dict, an instance of a class), a module-level name the module changes in place, a
function memoised with ``functools.cache`` or ``lru_cache``, and ``global`` statements.
Each one found must be listed below with why it may stay; an entry no longer found fails
too, so the list stays true.
"""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("service", "profiles", "knowledge")
STATEFUL_CALLS = {
    "dict", "list", "set", "OrderedDict", "defaultdict", "deque", "Counter", "Lock", "RLock",
    "Condition", "Event", "Semaphore", "BoundedSemaphore", "local", "WeakKeyDictionary",
    "WeakValueDictionary", "WeakSet", "ContextVar", "Queue",
}  # fmt: skip
# calls that make values nobody changes
IMMUTABLE_CALLS = {"frozenset", "TypeVar", "ParamSpec", "NewType", "Path", "compile",
                   "getLogger", "namedtuple", "field", "Decimal", "Fraction", "tuple"}  # fmt: skip
# objects a module declares by the framework's design: routes registered on each app, and
# the command line's consoles (its standard output and error)
DECLARED = {"Blueprint", "Console"}
MUTABLE_LITERALS = (ast.Dict, ast.List, ast.Set, ast.DictComp, ast.ListComp, ast.SetComp)

# what may stay, and why
PURE = "a memo of a pure function of its (immutable) arguments: no I/O, nothing to own"
PACKAGE_DATA = "files of the package itself, read once: the same for every app"
ALLOWED = {
    "service/engine/deadline.py:_deadline": "a context variable: each request's own deadline",
    "service/infra/compute_child.py:_SEEN": "a compute child's profiles counted for one request",
    "service/infra/compute_child.py:global _APP": "a compute child's own app, set as it boots",
    "profiles/interrupt.py:_probe": "the compute child's question 'called off?': the process's",
    "service/engine/planning/work.py:busy_share": PURE,
    "service/engine/planning/collectives.py:_slowdown": PURE,
    "profiles/models/layers.py:_checked_parameters": PURE,
    "profiles/trace/kinds.py:classify_kernel": PURE,
    "service/api/base.py:schema_instance": "marshmallow schema instances, which hold no data",
    "service/quote.py:_template": PACKAGE_DATA,
    "profiles/trace/kinds.py:rules": PACKAGE_DATA,
    "profiles/model_catalog.py:_load": PACKAGE_DATA,
    "knowledge/loader.py:_load": "a knowledge directory loaded and validated: immutable records",
    "service/engine/rules.py:SYMBOLS": "a table the module fills as it loads, read only after",
    "profiles/trace/stream.py:_STEP": "a table the module fills as it loads, read only after",
    # one per process: the counting process owns them, whichever app asked for the count
    "profiles/profile.py:_COUNTING": "one count at a time per process: a count switches the "
    "process's garbage collector off and freezes its heap, whichever app asked for it",
    "profiles/profile.py:_LINES": "counted steps a process carries from one count to the next "
    "(profiles.batch): counts run as bare functions in the compute children, which hold no "
    "app, so the process is the owner, as for _COUNTING",
}


MUTATORS = {"append", "extend", "add", "update", "clear", "pop", "popitem", "remove",
            "discard", "insert", "setdefault", "move_to_end", "appendleft"}  # fmt: skip


def _mutated(tree: ast.Module) -> set[str]:
    """Module-level names the module's own code changes in place (whatever their case)."""
    names = {
        t.id
        for node in tree.body
        if isinstance(node, ast.Assign | ast.AnnAssign)
        for t in (node.targets if isinstance(node, ast.Assign) else [node.target])
        if isinstance(t, ast.Name)
    }
    found = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute):
            owner = node.func.value
            if isinstance(owner, ast.Name) and node.func.attr in MUTATORS:
                found.add(owner.id)
        targets = node.targets if isinstance(node, ast.Assign) else []
        if isinstance(node, ast.AugAssign):
            targets = [node.target]
        for t in targets:
            if isinstance(t, ast.Subscript) and isinstance(t.value, ast.Name):
                found.add(t.value.id)
    return found & names


def _found(path: Path) -> set[str]:
    tree = ast.parse(path.read_text(encoding="utf-8"))
    here = path.relative_to(ROOT).as_posix()
    out: set[str] = set()
    for node in tree.body:
        if isinstance(node, ast.FunctionDef):
            called = [d.func if isinstance(d, ast.Call) else d for d in node.decorator_list]
            memo = any(ast.unparse(d).split(".")[-1] in {"cache", "lru_cache"} for d in called)
            if memo:
                out.add(f"{here}:{node.name}")
        value = node.value if isinstance(node, ast.Assign | ast.AnnAssign) else None
        if value is None:
            continue
        targets = node.targets if isinstance(node, ast.Assign) else [node.target]
        names = [t.id for t in targets if isinstance(t, ast.Name) and not t.id.startswith("__")]
        for name in names:
            constant = name.lstrip("_").isupper()
            if isinstance(value, MUTABLE_LITERALS) and not constant:
                out.add(f"{here}:{name}")
            elif isinstance(value, ast.Call):
                callee = ast.unparse(value.func).split(".")[-1]
                instance = callee[:1].isupper() and callee not in IMMUTABLE_CALLS | DECLARED
                container = callee in {"dict", "list", "set"}  # like a literal: a table if CAPS
                held = callee in STATEFUL_CALLS and not container
                if held or ((container or instance) and not constant):
                    out.add(f"{here}:{name}")
    out |= {f"{here}:{name}" for name in _mutated(tree)}
    out |= {
        f"{here}:global {name}"
        for node in ast.walk(tree)
        if isinstance(node, ast.Global)
        for name in node.names
    }
    return out


def test_no_module_keeps_state_of_its_own() -> None:
    found = set().union(*(_found(p) for pkg in PACKAGES for p in (ROOT / pkg).rglob("*.py")))
    unexplained = sorted(found - set(ALLOWED))
    assert not unexplained, "module-level state: move it onto an object the app owns\n" + (
        "\n".join(unexplained)
    )
    stale = sorted(set(ALLOWED) - found)
    assert not stale, f"listed but no longer found: {stale}"
