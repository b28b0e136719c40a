"""What keeps PyTorch's tensors alive: a census, at some step samples, of the CUDA tensors
reachable from the program's named roots, each credited to the thing that holds it:

  global           a variable of the program's modules (train.history)
  local            a local variable of a running function of the program (main().val_losses)
  module attribute an attribute of an nn.Module reached from there (net[1].seen)
  closure cell     a variable captured by a function (a forward hook's closure)
  attribute        an attribute of another object
  autograd graph   the saved tensors of the graph behind a kept tensor that requires grad

The walk goes from the roots down (never up through gc.get_referrers: that scans the whole
heap), counts each storage once, skips parameters, buffers and optimizers (their memory is a
role, not a leak), and stops at a budget of the thread's CPU time (OOMSCOPE_RETAINER_MS, 5 ms by
default: what the census may cost the program, which a loaded machine's preemption does not
spend) or 200 000 objects. A census is taken at the first step sample and then, at most every fifth
sample, when PyTorch's allocated memory grew since the last one; the preload keeps the largest
retainers of each, and the leak analysis names the one that grew with a leak.
OOMSCOPE_TORCH_RETAINERS=0 turns it off."""

import collections
import os
import sys
import sysconfig
import time
import types

ENABLED = os.environ.get("OOMSCOPE_TORCH_RETAINERS", "1").strip() != "0"
EVERY = 5
MAX_OBJECTS = 200_000
TOP = 8


def _budget():
    try:
        return float(os.environ.get("OOMSCOPE_RETAINER_MS", "5")) / 1000.0
    except ValueError:
        return 0.005


_samples = 0
_last_sample = None
_last_allocated = 0
_library_dirs = None
_saved_names = {}  # autograd node type -> its _saved_* attributes
_SEQUENCES = (list, tuple, set, frozenset, collections.deque)


def due(allocated):
    """Whether this step sample takes a census (counts the sample)."""
    global _samples
    _samples += 1
    if not ENABLED:
        return False
    if _last_sample is None:
        return True
    return _samples - _last_sample >= EVERY and allocated > _last_allocated + (1 << 20)


def _libraries():
    global _library_dirs
    if _library_dirs is None:
        dirs = set()
        for key in ("stdlib", "platstdlib", "purelib", "platlib"):
            try:
                dirs.add(os.path.realpath(sysconfig.get_paths()[key]))
            except Exception:
                pass
        for p in sys.path:
            if "site-packages" in p or "dist-packages" in p:
                dirs.add(os.path.realpath(p))
        # Our own package (and the sitecustomize beside it), and PyTorch's wherever it is
        # installed: by their folders, never by a name in the path (the installed examples
        # live in share/oomscope/examples/torch/, and a user's project may be called torch).
        dirs.add(os.path.realpath(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
        torch = sys.modules.get("torch")
        if getattr(torch, "__file__", None):
            dirs.add(os.path.realpath(os.path.dirname(torch.__file__)))
        _library_dirs = tuple(d.rstrip(os.sep) + os.sep for d in dirs if d)
    return _library_dirs


_is_program_file = {}  # file name -> whether it is the program's (not a library's): realpath once


def _program_file(path):
    known = _is_program_file.get(path)
    if known is None:
        known = _is_program_file[path] = bool(path) and not path.startswith("<") and \
            not os.path.realpath(path).startswith(_libraries())
    return known


def _program_modules():
    """(name, module) of the program's own modules: __main__ (named by its file) and those
    whose file is outside the interpreter's and site-packages' folders."""
    out = []
    for name, module in list(sys.modules.items()):
        if module is None or name.split(".")[0] in ("torch", "oomscope"):
            continue
        path = getattr(module, "__file__", None)
        if name == "__main__":
            out.append((os.path.splitext(os.path.basename(path))[0] if path else "__main__", module))
        elif path and _program_file(path):
            out.append((name, module))
    return out


class _Elements:
    """A container's elements still to walk."""
    __slots__ = ("iterator",)

    def __init__(self, iterator):
        self.iterator = iterator


class _Census:
    def __init__(self, torch):
        self.torch = torch
        self.tensor = torch.Tensor
        self.parameter = getattr(getattr(torch, "nn", None), "Parameter", None)
        self.module = getattr(getattr(torch, "nn", None), "Module", None)
        optim = getattr(torch, "optim", None)
        self.optimizer = getattr(optim, "Optimizer", None) if optim else None
        self.seen_objects = set()
        self.seen_storages = set()
        self.holders = {}  # name -> [kind, container, device, bytes, tensors, sample data_ptr]
        self.visited = 0
        # CPU time of this thread, not the wall clock: on a loaded machine the census is not cut
        # short by the time other processes run.
        self.deadline = time.thread_time() + _budget()
        self.partial = False

    def over(self):
        self.visited += 1
        if self.visited >= MAX_OBJECTS or (self.visited & 63 == 0 and time.thread_time() > self.deadline):
            self.partial = True
        return self.partial

    def credit(self, name, kind, container, t):
        try:
            if not t.is_cuda:
                return
            storage = t.untyped_storage()
            key = storage.data_ptr()
            if key == 0 or key in self.seen_storages:
                return
            self.seen_storages.add(key)
            h = self.holders.get(name)
            if h is None:
                h = self.holders[name] = [kind, container, t.device.index or 0, 0, 0, key]
            h[3] += storage.nbytes()
            h[4] += 1
        except Exception:
            pass

    def graph(self, name, t):
        """The saved tensors of the autograd graph behind t (bounded)."""
        node = getattr(t, "grad_fn", None)
        todo = [node] if node is not None else []
        nodes = set()
        while todo and not self.over():
            node = todo.pop()
            if node is None or id(node) in nodes:
                continue
            nodes.add(id(node))
            names = _saved_names.get(type(node))
            if names is None:  # dir() of a node is slow: once per node type
                names = _saved_names[type(node)] = [a for a in dir(node) if a.startswith("_saved_")]
            for attr in names:
                try:
                    saved = getattr(node, attr)
                except Exception:  # freed by a backward pass
                    continue
                for s in saved if isinstance(saved, (list, tuple)) else (saved,):
                    if isinstance(s, self.tensor) and not (self.parameter and isinstance(s, self.parameter)):
                        self.credit(name + " (autograd graph)", "autograd graph", type(t.grad_fn).__name__, s)
            for nxt in getattr(node, "next_functions", ()) or ():
                if nxt and nxt[0] is not None:
                    todo.append(nxt[0])

    def walk(self, roots):
        # From the roots; an entry: (object, its name, its root's kind, the holder a
        # tensor found there is credited to: (name, kind, container type), depth). A variable or
        # attribute that is a tensor holds it itself; a list, dict or set holds its elements.
        # Below an element of a container, everything is credited to that container (a list
        # of records that hold tensors is one retainer, not one per record): `inner`.
        # Breadth first, and a container's elements taken one at a time in turn with everything
        # else: shallow holders (net[1].seen) are found before a large structure is walked
        # through, and the shortest path names each object.
        todo = collections.deque((obj, name, kind, (name, kind, "Tensor"), 0, False) for obj, name, kind in roots)
        while todo and not self.over():
            obj, name, kind, holder, depth, inner = todo.popleft()
            if type(obj) is _Elements:  # the next element of a container, the rest after it
                try:
                    child, child_name = next(obj.iterator)
                except Exception:  # the end, or the container changed size under the walk
                    continue
                todo.append((obj, name, kind, holder, depth, inner))
                todo.append((child, child_name, kind, holder, depth, inner))
                continue
            if id(obj) in self.seen_objects:
                continue
            self.seen_objects.add(id(obj))
            if isinstance(obj, self.tensor):
                if self.parameter is None or not isinstance(obj, self.parameter):
                    self.credit(holder[0], holder[1], holder[2], obj)
                    if getattr(obj, "grad_fn", None) is not None:
                        self.graph(holder[0], obj)
                continue
            if depth > 8 or obj is None or isinstance(obj, (str, bytes, int, float, complex, bool, type,
                                                            types.ModuleType)) or \
                    (self.optimizer is not None and isinstance(obj, self.optimizer)):
                continue
            named = []   # (child, name, kind): held by a name of its own
            held = None  # (child, name) of obj's elements, which it holds: an iterator
            if self.module is not None and isinstance(obj, self.module):
                for key, child in dict.items(object.__getattribute__(obj, "__dict__").get("_modules") or {}):
                    named.append((child, f"{name}[{key}]" if str(key).isdigit() else f"{name}.{key}",
                                  "module attribute"))
                for attr, value in list(dict.items(object.__getattribute__(obj, "__dict__"))):
                    if attr in ("_parameters", "_buffers", "_modules") or attr.startswith("_non_persistent"):
                        continue
                    if attr.endswith("_hooks") and isinstance(value, dict):
                        for i, hook in enumerate(list(value.values())):
                            named.append((hook, f"{name}.{attr}[{i}]", "closure cell"))
                        continue
                    named.append((value, f"{name}.{attr}", "module attribute"))
            elif isinstance(obj, dict):
                # The base type's own iteration: never a subclass's code (a walk runs nothing of
                # the program's). Elements are taken one at a time as the walk goes (a list of
                # a million costs what the budget allows, not a copy of it).
                held = ((value, f"{name}[{key!r}]") for key, value in dict.items(obj))
            elif isinstance(obj, _SEQUENCES):
                base = next(b for b in _SEQUENCES if isinstance(obj, b))
                held = ((value, f"{name}[{i}]") for i, value in enumerate(base.__iter__(obj)))
            elif isinstance(obj, (types.FunctionType, types.MethodType)):
                fn = getattr(obj, "__func__", obj)
                for var, cell in zip(fn.__code__.co_freevars, fn.__closure__ or ()):
                    try:
                        named.append((cell.cell_contents, f"{name}.<closure>.{var}", "closure cell"))
                    except ValueError:  # an empty cell
                        pass
            elif not type(obj).__module__.startswith("torch"):
                try:  # the instance dict itself: no __getattr__ of the program's runs
                    attrs = object.__getattribute__(obj, "__dict__")
                except Exception:
                    attrs = None
                if isinstance(attrs, dict):
                    for attr, value in list(dict.items(attrs)):
                        named.append((value, f"{name}.{attr}", "attribute" if kind == "global" else kind))
            container = holder if inner else (name, kind, type(obj).__name__)
            if held:
                todo.append((_Elements(held), name, kind, container, depth + 1, True))
            for child, child_name, child_kind in named:
                todo.append((child, child_name, child_kind, holder if inner else (child_name, child_kind, "Tensor"),
                             depth + 1, inner))

    def lines(self, frames_of):
        per_device = {}
        for name, (kind, container, device, nbytes, count, sample) in self.holders.items():
            per_device.setdefault(device, []).append((nbytes, count, kind, container, name, sample))
        out = []
        for device, rows in sorted(per_device.items()):
            out.append(f"census {device}")
            for nbytes, count, kind, container, name, sample in sorted(rows, key=lambda r: -r[0])[:TOP]:
                clean = [str(x).replace("\t", " ").replace("\n", " ") for x in (kind, container, name)]
                line = f"retainer {device} {nbytes} {count}\t" + "\t".join(clean)
                frames = frames_of(sample) if frames_of else None
                if frames:
                    line += "\t" + frames
                out.append(line)
        return out


def census(torch, allocated, frames_of=None):
    """Protocol lines (census/retainer) of one census; [] when off or nothing to say."""
    global _last_sample, _last_allocated
    _last_sample, _last_allocated = _samples, allocated
    roots = []
    for module_name, module in _program_modules():
        for var, value in list(vars(module).items()):
            if var.startswith("__") or isinstance(value, (types.ModuleType, type)):
                continue
            roots.append((value, f"{module_name}.{var}", "global"))
    # The locals of the program's frames on this thread (the step hook runs inside the loop's
    # optimizer.step()): innermost first.
    frame = sys._getframe(1)
    while frame is not None:
        if _program_file(frame.f_code.co_filename):
            for var, value in list(frame.f_locals.items()):
                if not isinstance(value, (types.ModuleType, type)):
                    roots.append((value, f"{frame.f_code.co_name}().{var}", "local"))
        frame = frame.f_back
    c = _Census(torch)
    c.walk(roots)
    lines = c.lines(frames_of)
    return lines or ["census 0"]
