"""The audit hook of the SWE verifier's test process (PEP 578).

pytest_child.py imports pytest, pluggy and the records plugin, then calls
`arm()` before any code of the repository is imported. `arm` installs one
audit hook, which cannot be removed, and keeps nothing anywhere else:

- The hook is the only writer of the records channel (a pipe to the
  runner). Each line carries a sequence number and a MAC under a per-run
  key that lives only in the hook's closure; the runner checks both, so
  bytes written to the pipe by anyone else are caught, not believed.
- The records plugin hands its records over with `sys.audit`; a record is
  written only when it comes from the plugin's own code, on the main
  thread, with nothing but trusted code and test code on the stack.
- Events tampering needs are reported the moment they happen, as
  `violation` records: frame and gc introspection, ctypes, another
  process's /proc files, compiling or running test code from the
  package's code, test files compiled from a source the verifier did not
  apply, writes to test files, re-running pytest, tracing hooks.
- At each test's call it checks that pytest's, pluggy's and the plugin's
  modules and classes still hold what they held at arming, that no hook
  implementation comes from the package's code, and that the test item
  calls the test function pytest collected from the test file.

The hook is reachable only through gc or frames (both reported) or
ctypes (reported). Inside it, only what `arm` captured runs: builtins and
C functions, never a module attribute looked up later nor a Python method
of any object the tests or the package made, so no code of the
repository ever runs while the hook is busy.

Code is classified by the file its code object came from: T trusted (the
standard library, the test venv, this folder), X test code (the files the
verifier protects and applied), P the package's files the diff left
alone, C files the diff changed or added, U anything else (code compiled
from a string). Whether a sensitive event is the package's doing is
decided by the C and U frames on the stack; a changed file that already
used an API family (gc, frames, ctypes...) before the change keeps it.

Standard library only.
"""

from __future__ import annotations

import _json
import _thread
import hashlib
import itertools
import operator
import os
import sys
import types
from typing import Any

# The child exits with this status when the records channel was tampered with.
GUARD_EXIT = 86
MAX_VIOLATIONS = 20
# Hooks whose implementations decide what a test run reports.
WATCHED_HOOKS = (
    "pytest_runtestloop",
    "pytest_runtest_protocol",
    "pytest_runtest_setup",
    "pytest_runtest_call",
    "pytest_runtest_teardown",
    "pytest_runtest_makereport",
    "pytest_runtest_logreport",
    "pytest_pyfunc_call",
    "pytest_report_teststatus",
    "pytest_collection_modifyitems",
    "pytest_collection_finish",
    "pytest_collectreport",
    "pytest_sessionfinish",
)
# Modules whose contents must not change while the tests run (class
# dicts included); a few globals pytest itself sets per session are not.
# (contextlib and warnings: pytest's hook wrappers run the test inside their
# context managers; one that swallowed exceptions would make any test pass.)
MACHINERY = (
    "_pytest",
    "pytest",
    "pluggy",
    "sandgym_swe_records",
    "unittest",
    "builtins",
    "iniconfig",
    "contextlib",
    "warnings",
    "functools",
)
# What runs between the plugin's check before a test's call and the test
# function, checked at every call; the rest of MACHINERY every FULL_EVERY calls.
HOT = ("_pytest.python", "_pytest.compat", "pluggy", "sandgym_swe_records", "builtins")
FULL_EVERY = 32
MUTABLE = {
    "_pytest.assertion.util": ("_reprcompare", "_assertion_pass", "_config"),
    "builtins": ("_",),
    # catch_warnings swaps these in and out around every test
    "warnings": ("showwarning", "_showwarnmsg_impl", "_showwarnmsg", "filters", "defaultaction", "_onceregistry"),
}
# Machinery entries a library of the test venv may swap while a test runs:
# freezegun replaces pytest's clock and datetime class with its own (they
# time the tests and stamp logs, and decide nothing). Only a function or
# class of trusted code, or the value of arming, is accepted there.
SWAPPABLE = {
    "_pytest.timing": ("perf_counter", "time"),
    "_pytest.logging": ("datetime",),
    "_pytest.junitxml": ("datetime",),
}
O_WRITE = os.O_WRONLY | os.O_RDWR | os.O_APPEND | os.O_CREAT | os.O_TRUNC
FS_EVENTS = {
    "os.chmod": (0,),
    "os.chown": (0,),
    "os.remove": (0,),
    "os.rmdir": (0,),
    "os.truncate": (0,),
    "os.utime": (0,),
    "os.rename": (0, 1),
    "os.link": (1,),
    "os.symlink": (1,),
    "shutil.copyfile": (1,),
    "shutil.move": (1,),
}
CTYPES_EVENTS = (
    "ctypes.dlopen",
    "ctypes.dlsym",
    "ctypes.dlsym/handle",
    "ctypes.cdata",
    "ctypes.cdata/buffer",
    "ctypes.string_at",
    "ctypes.wstring_at",
    "ctypes.addressof",
    "ctypes.call_function",
)
NATIVE_MODULES = ("_xxsubinterpreters", "_xxinterpchannels", "_testcapi", "_testinternalcapi", "_testmultiphase")


def slot_reader(cls, name):
    """A reader of attribute `name` of `cls`'s instances that runs no Python code
    of theirs: the slot's descriptor, or the instance dict (pluggy has both)."""
    desc = cls.__dict__.get(name)
    if type(desc) is types.MemberDescriptorType:
        return desc.__get__
    get_dict = object.__getattribute__

    def read(obj):
        return get_dict(obj, "__dict__")[name]

    return read


def arm(key, channel_fd, cfg, plugin):
    """Install the hook. `cfg`: {"repo", "tests": {abs path: sha256},
    "changed": {abs path: [API families it used before the change]}}.
    `plugin` is the records plugin's module (imported, not yet used)."""
    import _pytest.nodes
    import _pytest.python
    import _pytest.reports
    import _pytest.unittest
    import pluggy

    # -- captured callables: builtins and C functions only ----------------------------
    _type, _len, _str, _int, _bytes, _tuple, _list = type, len, str, int, bytes, tuple, list
    _is, _all, _map, _id, _zip, _dict, _object = operator.is_, all, map, id, zip, dict, object
    _enumerate, _set = enumerate, set
    _chain, _values, _repeat = itertools.chain.from_iterable, operator.methodcaller("values"), itertools.repeat
    _getattribute = object.__getattribute__
    _BaseException, _OSError = BaseException, OSError
    _type_name = type.__dict__["__name__"].__get__
    _sys = sys
    machinery_names, mutable, o_write, o_rdonly = MACHINERY, dict(MUTABLE), O_WRITE, os.O_RDONLY
    # (module, key) -> the value pytest put there, of the entries a venv library
    # may swap (plugins imported later are taken in when pytest is configured).
    swappable: dict[tuple[str, str], Any] = {}

    swappable_names = _tuple(SWAPPABLE.items())

    def note_swappable():
        for mod_name, keys in swappable_names:
            mod = _dict_get(sys_modules, mod_name)
            for k in keys:
                if (mod_name, k) not in swappable and _type(mod) is _ModuleType:
                    swappable[(mod_name, k)] = _dict_get(_module_dict(mod), k)

    guard_exit, max_violations, native_modules = GUARD_EXIT, MAX_VIOLATIONS, frozenset(NATIVE_MODULES)
    watched_hooks = WATCHED_HOOKS
    hot_names, full_every = frozenset(HOT), FULL_EVERY
    _str_str, _int_repr = str.__str__, int.__repr__
    _startswith, _endswith, _split, _join, _encode = str.startswith, str.endswith, str.split, str.join, str.encode
    _find, _isdigit, _decode = str.find, str.isdigit, bytes.decode
    _dict_get, _dict_items, _dict_values = dict.get, dict.items, dict.values
    _pvalues = types.MappingProxyType.values
    _set_add, _set_discard = set.add, set.discard
    _list_append = list.append
    _enc = _json.encode_basestring_ascii
    _write, _fstat, _getpid, _getcwd, _exit = os.write, os.fstat, os.getpid, os.getcwd, os._exit
    _set_blocking, _open, _read, _close = os.set_blocking, os.open, os.read, os.close
    _getframe, _get_ident = sys._getframe, _thread.get_ident
    _blake2b, _sha256 = hashlib.blake2b, hashlib.sha256
    _lock = _thread.allocate_lock()
    _FunctionType, _MethodType, _CodeType = types.FunctionType, types.MethodType, types.CodeType
    _FrameType, _ModuleType = types.FrameType, types.ModuleType
    _staticmethod, _classmethod, _property = staticmethod, classmethod, property
    _type_dict = type.__dict__["__dict__"].__get__
    _type_mro = type.__dict__["__mro__"].__get__
    _module_dict: Any = vars(_ModuleType)["__dict__"].__get__
    _func_code = _FunctionType.__dict__["__code__"].__get__
    _method_func = _MethodType.__dict__["__func__"].__get__
    _static_func = _staticmethod.__dict__["__func__"].__get__
    _class_func = _classmethod.__dict__["__func__"].__get__
    _prop_get = _property.__dict__["fget"].__get__
    _prop_set = _property.__dict__["fset"].__get__
    _prop_del = _property.__dict__["fdel"].__get__
    _HookImpl, _HookCaller = pluggy.HookImpl, pluggy.HookCaller
    _impl_function = slot_reader(_HookImpl, "function")
    _caller_impls = slot_reader(_HookCaller, "_hookimpls")
    _TestReport, _Item, _Function = _pytest.reports.TestReport, _pytest.nodes.Item, _pytest.python.Function
    _TestCaseFunction = _pytest.unittest.TestCaseFunction
    _node_id = slot_reader(_pytest.nodes.Node, "_nodeid")
    sys_modules = sys.modules
    main_tid, main_pid = _get_ident(), _getpid()

    st = _fstat(channel_fd)
    channel_id = (st.st_dev, st.st_ino)

    # -- where code comes from ------------------------------------------------------------
    repo = cfg["repo"].rstrip("/")
    repo_prefix = repo + "/"
    tests = dict(cfg.get("tests", {}))
    changed = {p: _tuple(f) for p, f in cfg.get("changed", {}).items()}
    stdlib = os.path.dirname(os.__file__) + "/"
    here = os.path.dirname(os.path.abspath(__file__)) + "/"
    trusted = (stdlib, sys.prefix.rstrip("/") + "/", sys.base_prefix.rstrip("/") + "/lib/", here, "<frozen ")
    machinery_files = (
        os.path.dirname(str(sys_modules["_pytest"].__file__)) + "/",
        os.path.dirname(str(sys_modules["pluggy"].__file__)) + "/",
        os.path.dirname(str(sys_modules["pytest"].__file__)) + "/",
        here,
    )

    import ast

    import _pytest.assertion.rewrite

    rewrite_file, ast_file = _pytest.assertion.rewrite.__file__, ast.__file__
    kinds: dict[int, tuple[types.CodeType, str]] = {}
    test_codes: set[types.CodeType] = set()  # code objects compiled from test files by trusted code
    compiled_tests: set[str] = set()  # test files compiled in this run
    # Code objects trusted code renamed after a test file (hypothesis's `given`
    # gives its wrapper the test's file name): a trusted wrapper, as if unrenamed.
    relabeled: set[types.CodeType] = set()
    busy: set[int] = set()
    reported: set[str] = set()
    state: dict[str, Any] = {
        "package_ran": False,
        "calls": 0,
        "current": None,
        "called": None,
        "seen": None,
        "inner": None,
        "seq": 0,
        "violations": 0,
        "hooks": (),
        "items": {},
        "modules": {},
    }

    def fname(code):
        """A code object's file name as an exact str (a str subclass could run code when compared)."""
        f = code.co_filename
        return f if _type(f) is _str else _str_str(f)

    def exact(s):
        """`s` when it is an exact str, else None: only those are compared or formatted here."""
        return s if _type(s) is _str else None

    def exact_keys(mapping):
        """`mapping` itself when all its keys are exact str, else a copy without the others: a
        lookup in a dict holding a str subclass key could call that subclass's __eq__."""
        keys = _list(mapping)
        if _all(_map(_is, _map(_type, keys), _repeat(_str))):
            return mapping
        return {k: v for k, v in _list(mapping.items()) if _type(k) is _str}

    def safe_get(mapping, key):
        return exact_keys(mapping).get(key)

    def is_sub(t, base):
        for c in _type_mro(t):
            if c is base:
                return True
        return False

    def classify(fn):
        if _type(fn) is not _str:
            fn = _str_str(fn)
        if fn in tests:
            return "X"
        if _startswith(fn, repo_prefix):
            return "C" if fn in changed else "P"
        if _startswith(fn, trusted):
            return "T"
        return "U"

    def kind(code):
        # Keyed by id (hashing a code object hashes its constants, every time);
        # the entry keeps the code object alive, so the id stays its own.
        entry = _dict_get(kinds, _id(code))
        if entry is None or entry[0] is not code:
            entry = kinds[_id(code)] = (code, classify(fname(code)))
        return entry[1]

    def bad_code(code, family):
        """Changed code that did not use `family` before the change, or code of unknown origin."""
        k = kind(code)
        return k == "U" or (k == "C" and family not in changed[fname(code)])

    def bad_frame(f, family):
        """The first frame on the stack from `f` out that is the package's
        changed code (not already using `family`) or code of unknown origin."""
        while f is not None:
            code = f.f_code
            k = kind(code)
            if k == "U" or (k == "C" and family not in changed[fname(code)]):
                return fname(code)
            f = f.f_back
        return None

    def norm(path):
        """An absolute, normalised form of `path` (str or bytes), or None."""
        if _type(path) is _bytes:
            path = _decode(path, "utf-8", "surrogateescape")
        elif _type(path) is not _str:
            if not is_sub(_type(path), _str):
                return None
            path = _str_str(path)
        if not _startswith(path, "/"):
            path = _getcwd() + "/" + path
        out: list[str] = []
        for part in _split(path, "/"):
            if part == "" or part == ".":
                continue
            if part == "..":
                if out:
                    out.pop()
                continue
            _list_append(out, part)
        return "/" + _join("/", out)

    # -- the channel -------------------------------------------------------------------------

    def dump(value):
        t = _type(value)
        if value is None:
            return "null"
        if value is True:
            return "true"
        if value is False:
            return "false"
        if t is _int:
            return _int_repr(value)
        if t is _str or is_sub(t, _str):
            return _enc(value)
        if t is _list or t is _tuple:
            return "[" + _join(",", [dump(v) for v in value]) + "]"
        if t is _dict:
            return "{" + _join(",", [_enc(k) + ":" + dump(v) for k, v in _dict_items(value) if _type(k) is _str]) + "}"
        return "null"

    def send(record):
        """Write one authenticated line; a channel that is not ours any more ends the process."""
        got = _lock.acquire(True, 10)
        try:
            seq = state["seq"]
            state["seq"] = seq + 1
            body = _int_repr(seq) + " " + dump(record)
            mac = _blake2b(_encode(body), key=key, digest_size=16).hexdigest()
            data = _encode(mac + " " + body + "\n")
            try:
                now = _fstat(channel_fd)
                if (now.st_dev, now.st_ino) != channel_id:
                    _exit(guard_exit)
                while data:  # (made non-blocking by someone else, a full pipe ends the process too)
                    data = data[_write(channel_fd, data) :]
            except _OSError:
                _exit(guard_exit)
        finally:
            if got:
                _lock.release()

    def violation(event, detail):
        if state["violations"] >= max_violations or detail in reported:
            return
        _set_add(reported, detail)
        state["violations"] += 1
        send({"kind": "violation", "event": event, "detail": detail})

    # -- what must not change ------------------------------------------------------------------

    def dicts_of(select):
        """(name, mapping, skip) of the modules `select(name)` accepts and of the
        classes they define."""
        out: list = []
        for name, mod in _list(_dict_items(sys_modules)):
            if _type(name) is not _str or _type(mod) is not _ModuleType or not select(name, mod):
                continue
            d = _module_dict(mod)
            _list_append(out, (name, d, mutable.get(name, ())))
            for v in _list(_dict_values(d)):
                t = _type(v)
                if t is _FunctionType or t is _str or t is _int:
                    continue
                if (t is _type or is_sub(t, _type)) and exact(safe_get(_type_dict(v), "__module__")) == name:
                    _list_append(out, (name + "." + _str_str(_type_name(v)), _type_dict(v), ()))
        return out

    def is_machinery(name, mod):
        return name in machinery_names or _startswith(name, ("_pytest.", "pluggy.", "unittest."))

    def is_hot(name, mod):
        return name in hot_names or _startswith(name, "pluggy.")

    def snapshot(select=is_machinery):
        """What the selected modules and classes hold: the mappings, their sizes
        and all their values in one flat list, so that one pass of C code
        compares them; per mapping its keys and values, for the detail. (pytest
        sets a few globals per test: those mappings are compared key by key.)"""
        mappings: list = []
        sizes: list = []
        flat: list = []
        per_mapping: list = []
        by_key: list = []
        for name, mapping, skip in dicts_of(select):
            keys, values = _list(mapping), _list(mapping.values())
            if skip:
                get = mapping.get
                watched = [k for k in keys if _type(k) is _str and k not in skip]
                _list_append(by_key, (name, mapping, watched, [get(k) for k in watched]))
                continue
            _list_append(mappings, mapping)
            _list_append(sizes, _len(keys))
            flat.extend(values)
            _list_append(per_mapping, (name, mapping, keys, values))
        return mappings, sizes, flat, per_mapping, by_key

    def unchanged(snap):
        mappings, sizes, flat, per_mapping, by_key = snap
        if _list(_map(_len, mappings)) != sizes or not _all(_map(_is, flat, _chain(_map(_values, mappings)))):
            return False
        for _name, mapping, keys, values in by_key:
            if not _all(_map(_is, values, _map(exact_keys(mapping).get, keys))):
                return False
        return True

    def changes(snap):
        """(name, key, new value) of every entry that is not what it was."""
        mappings, sizes, flat, per_mapping, by_key = snap
        for name, mapping, keys, values in per_mapping + by_key:
            get = exact_keys(mapping).get
            for k, v in _zip(keys, values):
                if _type(k) is _str and get(k) is not v:
                    yield name, k, get(k)

    def methods_of(cls):
        """The names of the functions an instance of `cls` gets from its classes."""
        names: set = _set()
        for c in _type_mro(cls):
            for k, v in _list(_type_dict(c).items()):
                if _type(k) is _str and _type(v) is _FunctionType:
                    _set_add(names, k)
        return names

    frozen = [snapshot(), snapshot(is_hot)]
    note_swappable()
    item_classes = {}
    pending: list[type] = [_Item]
    while pending:
        cls = pending.pop()
        if _id(cls) not in item_classes:
            item_classes[_id(cls)] = (cls, methods_of(cls))
            pending.extend(type.__subclasses__(cls))
    emit_code = _func_code(plugin._emit)
    per_test = frozenset(("call_start", "pyfunc_end", "call_end", "report"))
    multicall: set[object] = set()  # pluggy's caller of every hook implementation (its module moved between versions)
    for mod_name in ("pluggy._callers", "pluggy._execution"):
        fn = getattr(sys_modules.get(mod_name), "_multicall", None)
        if _type(fn) is _FunctionType:
            _set_add(multicall, _func_code(fn))
    # Frames of these functions are where a record's stack check may stop: what
    # called them was on the stack before any test module was imported
    # (`_main`), or is a hook implementation the call check vets (`runtestprotocol`).
    anchors: set = set()
    for mod_name, fn_name in (("_pytest.main", "_main"), ("_pytest.runner", "runtestprotocol")):
        fn = getattr(sys_modules.get(mod_name), fn_name, None)
        if _type(fn) is _FunctionType:
            _set_add(anchors, _func_code(fn))
    plugin_codes: set[types.CodeType] = set()
    for v in _dict_values(_module_dict(plugin)):
        if _type(v) is _FunctionType and v.__module__ == plugin.__name__:
            _set_add(plugin_codes, _func_code(v))

    def trusted_value(v):
        """Whether `v`, newly in a machinery module or class, can only be pytest's
        own doing: a function of trusted code (or a descriptor of such), or data."""
        t = _type(v)
        if t is _staticmethod:
            v, t = _static_func(v), _FunctionType
        elif t is _classmethod:
            v, t = _class_func(v), _FunctionType
        elif t is _property:
            return _all(x is None or trusted_value(x) for x in (_prop_get(v), _prop_set(v), _prop_del(v)))
        if t is _FunctionType:
            return _type(v) is _FunctionType and kind(_func_code(v)) == "T"
        for c in _type_mro(t):
            if safe_get(_type_dict(c), "__call__") is not None or safe_get(_type_dict(c), "__get__") is not None:
                return False
        return True

    def trusted_class(v):
        """Whether `v` is a class all of whose functions are trusted code (freezegun's FakeDatetime)."""
        if not is_sub(_type(v), _type):
            return False
        for c in _chain((_type_mro(v), _type_mro(_type(v)))):  # its metaclass's too
            for x in _list(_pvalues(_type_dict(c))):
                x = unwrap(x)
                if _type(x) is _FunctionType and kind(_func_code(x)) != "T":
                    return False
        return True

    def check_machinery(where, rebase=False, hot=False):
        """Everything frozen is still there (`hot`: the part that runs between
        a test's call check and its function: every call; the rest every
        few calls and at collection and the session's end). With `rebase`
        (once pytest is configured), changes its own plugins made are taken in."""
        snap = frozen[1] if hot else frozen[0]
        if rebase:
            note_swappable()
        if unchanged(snap):
            return True
        moved = False
        for name, k, now in changes(snap):
            swapped = _dict_get(swappable, (name, k), swappable)  # (the dict itself: not swappable)
            if swapped is not swappable and (now is swapped or trusted_value(now) or trusted_class(now)):
                moved = True
                continue
            if not (rebase and trusted_value(now)):
                violation("machinery", f"{name}.{k} was changed while the tests ran ({where})")
                return False
            moved = True
        if moved or rebase:
            frozen[:] = [snapshot(), snapshot(is_hot)]  # pytest's own changes, and its new modules
        else:
            frozen[:] = [refreshed(frozen[0]), refreshed(frozen[1])]  # only keys were added
        return True

    def refreshed(snap):
        """`snap` with the same mappings taken again (keys added to some: pytest marks classes)."""
        mappings, sizes, flat, per_mapping, by_key = snap
        per_mapping = [(name, m, _list(m), _list(m.values())) for name, m, _k, _v in per_mapping]
        flat = _list(_chain(_map(_values, mappings)))
        return mappings, _list(_map(_len, mappings)), flat, per_mapping, by_key

    def function_kind(fn):
        """T / X / P / C / U of a callable's code, or '?' when it is not a plain function."""
        if _type(fn) is _MethodType:
            fn = _method_func(fn)
        if _type(fn) is not _FunctionType:
            return "?", None
        code = _func_code(fn)
        return kind(code), code

    def check_hooks():
        for i, (name, relay_dict, caller, seen) in _enumerate(state["hooks"]):
            if safe_get(relay_dict, name) is not caller:
                violation("hooks", f"the hook caller {name} was replaced")
                return
            impls = _caller_impls(caller)
            if _type(impls) is not _list:
                violation("hooks", f"the implementations of {name} are not pluggy's list")
                return
            impls = _list(impls)
            if _len(impls) == _len(seen) and _all(_map(_is, impls, seen)):
                continue  # the same implementations as at the last check
            state["hooks"][i] = (name, relay_dict, caller, impls)
            for impl in impls:
                if _type(impl) is not _HookImpl:
                    violation("hooks", f"a foreign object among the implementations of {name}")
                    return
                k, code = function_kind(_impl_function(impl))
                if k not in ("T", "X"):
                    where = fname(code) if code is not None else "not a function"
                    violation("hooks", f"an implementation of {name} comes from {where}")
                    return

    def unwrap(v):
        t = _type(v)
        if t is _staticmethod:
            return _static_func(v)
        if t is _classmethod:
            return _class_func(v)
        if t is _property:
            return _prop_get(v) or _prop_set(v)
        return v

    def item_class(t):
        """(class, mro) when `t` is pytest's item class, or one whose code is all
        trusted or test code (a plugin's, a conftest's); else None."""
        entry = _dict_get(item_classes, _id(t))
        if entry is not None or not is_sub(t, _Item):
            return entry
        for c in _type_mro(t):
            if _dict_get(item_classes, _id(c)) is not None:
                continue
            for v in _list(_pvalues(_type_dict(c))):
                v = unwrap(v)
                if _type(v) is _FunctionType and kind(_func_code(v)) not in ("T", "X"):
                    return None
        entry = item_classes[_id(t)] = (t, methods_of(t))
        return entry

    def item_dict(item):
        t = _type(item)
        entry = item_class(t)
        if entry is None:
            violation("item", f"a test item of class {_str_str(_type_name(t))}, which comes from the package's code")
            return None, None
        d = _getattribute(item, "__dict__")
        if _type(d) is not _dict:
            violation("item", "a test item whose __dict__ is not a plain dict")
            return None, None
        return d, entry[1]

    def check_item(item, nodeid, where):
        if nodeid is None:
            violation("item", f"a test item whose node id is not a plain string ({where})")
            return
        d, methods = item_dict(item)
        if d is None:
            return
        known = _dict_get(state["items"], _id(item))
        now = exact(_node_id(item))
        if known is None or known[0] is not item or now is None or now != nodeid or known[1] != nodeid:
            violation("item", f"{nodeid}: not the item pytest collected under that id ({where})")
            return
        for k in _list(d):
            if _type(k) is not _str:
                violation("item", f"{nodeid}: a non-string attribute name on the item")
                return
            if k in methods:
                violation("item", f"{nodeid}: the item's method {k} was replaced on the instance")
                return
        if not is_sub(_type(item), _Function):
            return
        fn = _dict_get(d, "_obj")
        if fn is None:
            return  # resolved by pytest itself, from the test module, when called
        k, code = function_kind(fn)
        if k == "T" or (k == "X" and code in relabeled):
            return  # a decorator of the standard library or the venv wraps the test
        if k != "X" or code not in test_codes:
            where_from = fname(code) if code is not None else "not a function"
            violation("item", f"{nodeid}: the function it calls comes from {where_from}")
            return
        # The name, not the class or the file: test methods are inherited, and
        # test functions imported, from other test classes and modules.
        rest = nodeid.partition("::")[2]
        bracket = _find(rest, "[")  # parameters follow the name, and may hold anything
        if bracket >= 0:
            rest = rest[:bracket]
        name = _split(rest, "::")[-1]
        # A test the test file made in a function of its own (a metaclass, a
        # factory) has the name of that inner function, whatever it is collected as.
        generated = _find(exact(code.co_qualname) or "", "<locals>") >= 0
        if code.co_name != name and not generated:
            violation("item", f"{nodeid}: the function it calls is {_str_str(code.co_qualname)} of {fname(code)}")

    def is_trusted_module(name, mod):
        f = safe_get(_module_dict(mod), "__file__")
        return f is None or (_type(f) is _str and classify(f) == "T")

    def module_values():
        """{id of a trusted module's dict: (dict, its values)} for every such module."""
        out = {}
        for name, mod in _list(_dict_items(sys_modules)):
            if _type(name) is _str and _type(mod) is _ModuleType and is_trusted_module(name, mod):
                d = _module_dict(mod)
                out[_id(d)] = (name, d, _list(_dict_values(d)))
        return out

    def scan_modules(where):
        """No module of the standard library or the venv holds a function of
        the package's changed code as a global (classes: see the machinery
        check). What is as it was when pytest was configured is skipped."""
        base = state["modules"]
        for key, (name, d, values) in _list(_dict_items(module_values())):
            old = _dict_get(base, key)
            if old is not None and old[1] is d and _len(old[2]) == _len(values) and _all(_map(_is, old[2], values)):
                continue
            for attr, v in _list(_dict_items(d)):
                if _type(v) is _FunctionType and kind(_func_code(v)) == "C":
                    attr = attr if _type(attr) is _str else "?"
                    violation("patch", f"{name}.{attr} is now a function of {fname(_func_code(v))} ({where})")
                    return
        hooks = (_sys.meta_path, _sys.path_hooks)
        if _type(hooks[0]) is not _list or _type(hooks[1]) is not _list:
            violation("patch", f"sys.meta_path or sys.path_hooks is not a plain list ({where})")
            return
        for finder in _list(hooks[0]) + _list(hooks[1]):
            cls: Any = finder if is_sub(_type(finder), _type) else _type(finder)
            for v in _list(_pvalues(_type_dict(cls))):
                v = unwrap(v)
                if _type(v) is _FunctionType and bad_code(_func_code(v), "importhook"):
                    violation("patch", f"an import hook from {fname(_func_code(v))} ({where})")
                    return

    # -- the records the plugin hands over ----------------------------------------------------

    def on_record(args):
        caller = _getframe(2)
        if _get_ident() != main_tid or caller.f_code is not emit_code:
            violation("forged-record", f"a record was handed over by {fname(caller.f_code)}")
            return
        hook = caller.f_back
        if hook is None or hook.f_code not in plugin_codes:
            violation("forged-record", "the records plugin's emitter was called from outside its hooks")
            return
        rkind, fields, obj = args
        if _type(rkind) is not _str or _type(fields) is not _dict:
            violation("forged-record", "a record of an unknown shape")
            return
        # The records of every test come through pluggy, and the host believes
        # them only together (a report with the call records of its test, the
        # call records with the item and function the guard checks). The rare
        # ones (configuration, collection, the end) also get the whole stack
        # checked: no code of the package may be on it.
        caller_of_hook = hook.f_back
        if caller_of_hook is None or caller_of_hook.f_code not in multicall:
            where = fname(caller_of_hook.f_code) if caller_of_hook is not None else "nothing"
            violation("forged-record", f"a record handed to the plugin by {where}")
            return
        f = caller_of_hook if rkind not in per_test else None
        while f is not None:
            if f.f_code in anchors:
                break  # what called these was on the stack before any test module loaded, or is vetted
            k = kind(f.f_code)
            if k != "T" and k != "X":
                violation("forged-record", f"a record was emitted with {fname(f.f_code)} on the stack")
                return
            f = f.f_back
        if rkind == "configured":
            config_dict = _getattribute(obj, "__dict__")
            relay = safe_get(_getattribute(safe_get(config_dict, "pluginmanager"), "__dict__"), "hook")
            relay_dict = _getattribute(relay, "__dict__")
            hooks: list[tuple[str, Any, Any, Any]] = []
            for name in watched_hooks:
                caller_obj = safe_get(relay_dict, name)
                if _type(caller_obj) is _HookCaller:
                    _list_append(hooks, (name, relay_dict, caller_obj, ()))
            state["hooks"] = hooks
            check_machinery("configuration", rebase=True)
            if state["package_ran"]:  # a conftest imported the package already
                scan_modules("before collection")
            state["modules"] = module_values()
            return  # nothing to send
        if rkind == "collected":
            items = safe_get(_getattribute(obj, "__dict__"), "items")
            if _type(items) is not _list:
                violation("item", "the session's items are not a plain list")
                items = []
            ids: list[str] = []
            for item in _list(items):
                d, _ = item_dict(item)
                if d is None:
                    continue
                nodeid = _node_id(item)
                if _type(nodeid) is not _str:
                    violation("item", "a test item without a plain node id")
                    continue
                state["items"][_id(item)] = (item, nodeid)
                _list_append(ids, nodeid)
            fields = {"kind": "collected", "n": _len(ids), "ids": ids}
            check_machinery("collection")
        elif rkind == "call_start":
            state["calls"] += 1
            check_machinery("test call", hot=state["calls"] % full_every != 0)
            check_hooks()
            check_item(obj, exact(fields.get("nodeid")), "before its call")
            d, _ = item_dict(obj)
            state["current"], state["inner"] = obj, None
            state["called"] = safe_get(d, "_obj") if d is not None else None
            return  # checks only: the host needs call_end
        elif rkind == "pyfunc_end":
            # The innermost observer: the exception, if any, straight from the
            # test function (nothing of pytest's wrappers in between).
            if state["current"] is obj and state["inner"] is None:
                state["inner"] = fields.get("raised") is True
            else:
                violation("forged-record", "a test function call pytest's runner did not start")
            return  # merged into call_end
        elif rkind == "call_end":
            d, _ = item_dict(obj)
            if state["current"] is not obj or (d is not None and safe_get(d, "_obj") is not state["called"]):
                violation("item", f"{exact(fields.get('nodeid'))}: the item or its function changed during its call")
            # What the call did, as the plugin saw it: merged into the call's
            # report (the host believes a passing report only with it).
            raised = fields.get("raised") is True
            if d is not None and safe_get(d, "_excinfo") is not None:
                raised = True  # unittest: the failure was recorded, not raised
            plain = is_sub(_type(obj), _Function) and not is_sub(_type(obj), _TestCaseFunction)
            if plain and (state["current"] is not obj or state["inner"] is not False):
                raised = True  # the test function raised, or was not seen being called
            state["seen"] = (exact(fields.get("nodeid")), raised)
            state["current"] = state["inner"] = None
            return
        elif rkind == "report":
            if _type(obj) is not _TestReport:
                violation("forged-record", "a test report pytest did not make")
                return
            if fields.get("when") == "call":
                seen, state["seen"] = state["seen"], None
                nodeid = exact(fields.get("nodeid"))
                fields = _dict(fields, raised=seen[1] if seen is not None and seen[0] == nodeid else None)
        elif rkind == "finish":
            check_machinery("session end")
            scan_modules("at session end")
        record = {"kind": rkind}
        for k, v in _dict_items(fields):
            if k != "kind":
                record[k] = v
        send(record)

    # -- the events tampering needs -----------------------------------------------------------

    def on_getframe(args):
        target: Any = args[0] if args else None
        if _type(target) is not _FrameType or not _startswith(target.f_code.co_filename, machinery_files):
            return
        bad = bad_frame(_getframe(3), "frame")
        if bad:
            violation("sys._getframe", f"{bad} took a frame of the test machinery")

    def on_stack_event(family):
        def handler(args):
            bad = bad_frame(_getframe(3), family)
            if bad:
                violation(family, f"{bad} used {family} introspection while the tests ran")

        return handler

    def on_open(args):
        path = norm(args[0]) if args else None
        if path is None:
            return
        if _startswith(path, "/proc/"):
            parts = _split(path, "/")
            who = parts[2] if _len(parts) > 2 else ""
            what = parts[3] if _len(parts) > 3 else ""
            pid = _int_repr(_getpid())
            other = _isdigit(who) and who != pid
            if what == "mem" or (other and what not in ("stat", "status", "comm", "cmdline", "statm", "")):
                violation("open", f"{path} opened (another process's or its own memory)")
            return
        if path in tests:
            flags = args[2] if _len(args) > 2 and _type(args[2]) is _int else 0
            mode = args[1] if _len(args) > 1 and _type(args[1]) is _str else ""
            if flags & o_write or "w" in mode or "a" in mode or "+" in mode or "x" in mode:
                violation("open", f"test file {path} opened for writing")
            elif path in compiled_tests:
                bad = bad_frame(_getframe(3), "testread")
                if bad:
                    violation("open", f"{bad} read the test file {path}")

    def on_fs(positions):
        def handler(args):
            for i in positions:
                if i < _len(args) and norm(args[i]) in tests:
                    violation("fs", f"a test file was changed on disk ({norm(args[i])})")
                    return

        return handler

    def on_compile(args):
        source, filename = args[0], (args[1] if _len(args) > 1 else None)
        path = norm(filename) if filename is not None else None
        if path is None:
            return
        if path in tests:
            _set_add(compiled_tests, path)
            caller: Any = _getframe(3)
            if fname(caller.f_code) == ast_file:  # ast.parse
                caller = caller.f_back
            # Importing: the whole file, as read from disk. (pytest also compiles
            # pieces of test files to show tracebacks: not those.)
            where = fname(caller.f_code) if caller is not None else ""
            importing = where == rewrite_file or _startswith(where, "<frozen importlib")
            if _type(source) is _str:
                source = _encode(source, "utf-8", "surrogatepass")
            if importing and _type(source) is _bytes and _sha256(source).hexdigest() != tests[path]:
                violation("compile", f"the test file {path} was compiled from a source the verifier did not apply")
            bad = bad_frame(_getframe(3), "testexec")
            if bad:
                violation("compile", f"{bad} compiled the test file {path}")
        elif _startswith(path, trusted) and not _startswith(path, "<"):
            bad = bad_frame(_getframe(3), "fake")
            if bad is None:
                return
            if _type(source) is _str:
                source = _encode(source, "utf-8", "surrogatepass")
            if _type(source) is not _bytes or source != read_file(path):
                violation("compile", f"{bad} compiled code under the trusted name {path}")

    def read_file(path):
        try:
            fd = _open(path, o_rdonly)
        except _OSError:
            return None
        try:
            chunks: list[bytes] = []
            while True:
                chunk = _read(fd, 1 << 20)
                if not chunk:
                    return b"".join(chunks)
                _list_append(chunks, chunk)
        finally:
            _close(fd)

    def on_exec(args):
        code: Any = args[0] if args else None
        if _type(code) is not _CodeType:
            return
        path = fname(code)
        if path not in tests:
            if _type(path) is _str and _startswith(path, repo_prefix):
                state["package_ran"] = True
            return
        bad = bad_frame(_getframe(3), "testexec")
        if bad:
            violation("exec", f"{bad} ran the code of the test file {path}")
            return
        stack: list[Any] = [code]
        while stack:
            c = stack.pop()
            if c not in test_codes:
                _set_add(test_codes, c)
                stack.extend(x for x in c.co_consts if _type(x) is _CodeType)

    def on_code_new(args):
        path = norm(args[1]) if _len(args) > 1 else None
        if path is not None and (path in tests or _startswith(path, trusted) or _startswith(path, repo_prefix)):
            bad = bad_frame(_getframe(3), "code")
            if bad:
                violation("code.__new__", f"{bad} made a code object named after {path}")

    def on_setattr(args):
        if _len(args) < 3:
            return
        name, value = exact(args[1]), args[2]
        if name == "__code__":
            bad = bad_frame(_getframe(3), "code")
            if bad:
                violation("object.__setattr__", f"{bad} replaced the code of a function")
            elif _type(value) is _CodeType and fname(value) in tests:
                _set_add(relabeled, value)

    def on_exec_process(args):
        if _getpid() == main_pid:
            violation("os.exec", "the test process tried to replace itself (re-running pytest)")
            return
        on_spawn(args)

    def on_spawn(args):
        words: list[Any] = []
        for a in args:
            if _type(a) is _str or _type(a) is _bytes:
                _list_append(words, a)
            elif _type(a) is _list or _type(a) is _tuple:
                words.extend(w for w in a if _type(w) is _str or _type(w) is _bytes)
        text = _join(" ", [_decode(w, "utf-8", "replace") if _type(w) is _bytes else w for w in words])
        if "pytest" in text or here in text:
            bad = bad_frame(_getframe(3), "spawn")
            if bad:
                violation("spawn", f"{bad} started pytest again")

    def on_import(args):
        if args and _type(args[0]) is _str and args[0] in native_modules:
            bad = bad_frame(_getframe(3), "native")
            if bad:
                violation("import", f"{bad} imported {args[0]}")

    handlers = {
        "sandgym.swe.record": on_record,
        "sys._getframe": on_getframe,
        "sys._current_frames": on_stack_event("frame"),
        "gc.get_referrers": on_stack_event("gc"),
        "gc.get_referents": on_stack_event("gc"),
        "gc.get_objects": on_stack_event("gc"),
        "sys.settrace": on_stack_event("trace"),
        "sys.setprofile": on_stack_event("trace"),
        "sys.addaudithook": on_stack_event("audit"),
        "open": on_open,
        "compile": on_compile,
        "exec": on_exec,
        "code.__new__": on_code_new,
        "object.__setattr__": on_setattr,
        "os.exec": on_exec_process,
        "os.posix_spawn": on_spawn,
        "os.spawn": on_spawn,
        "os.system": on_spawn,
        "subprocess.Popen": on_spawn,
        "import": on_import,
    }
    for name in CTYPES_EVENTS:
        handlers[name] = on_stack_event("ctypes")
    for name, positions in FS_EVENTS.items():
        handlers[name] = on_fs(positions)
    _handler = handlers.get

    def guard(event, args):
        handler = _handler(event)
        if handler is None:
            return
        tid = _get_ident()
        if tid in busy:
            return
        _set_add(busy, tid)
        try:
            handler(args)
        except _BaseException as e:  # never let the tests see (or catch) the guard failing
            try:
                violation("guard", f"the guard could not check {exact(event)}: {_str_str(_type_name(_type(e)))}")
            except _BaseException:
                pass
        finally:
            _set_discard(busy, tid)

    sys.addaudithook(guard)
    send({"kind": "armed", "pid": main_pid, "tests": _len(tests), "changed": _len(changed)})
