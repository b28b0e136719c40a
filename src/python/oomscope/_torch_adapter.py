"""The PyTorch adapter: tells the preload what PyTorch's caching allocator knows.

Installed by sitecustomize, it waits for `import torch` (an import hook: nothing is imported
and nothing runs before that), then:
  - registers, through torch.cuda._lazy_call (attaching before CUDA initialises silently does
    nothing), the out-of-memory observer: at an OOM it hands the preload memory_stats() and
    the segments and blocks of memory._snapshot(), and the preload writes the one report of
    that OOM, with the view at the first failed CUDA call (before PyTorch flushed its cache);
  - registers a global optimizer step post-hook: each step is a step event with a sample of
    the allocator's counters, and of the memory by role (_torch_roles: parameters, gradients,
    optimizer state, measured from the objects); a pre-hook makes each optimizer known before a
    closure runs its forward inside step().
backend:cudaMallocAsync refuses observers and snapshots: then only the steps are attached and
the preload reports OOMs from the failing CUDA calls, with the pool's statistics.
OOMSCOPE_TORCH_HISTORY=N turns on _record_memory_history(stacks="python", max_entries=N).
OOMSCOPE_FIT_TRACE=FILE (set by `oomscope fit` for its runs) turns it on without context and
writes the allocator's trace to FILE at exit (_write_fit_trace): what fit replays at other sizes.
Every callback swallows its own errors: a failure here never reaches the program."""

import importlib.abc
import os
import sys
import threading

from oomscope import _torch_retainers, _torch_roles

_torch = None
_history = False  # PyTorch records a Python stack per block (OOMSCOPE_TORCH_HISTORY)
_notices = set()


def _notice(key, message):
    if key not in _notices:
        _notices.add(key)
        sys.stderr.write(f"oomscope: {message}\n")


def _lib():
    import oomscope
    return oomscope._native()


class _Loader(importlib.abc.Loader):
    """Runs the real loader of `torch`, then attaches."""

    def __init__(self, loader):
        self._loader = loader

    def create_module(self, spec):
        return self._loader.create_module(spec)

    def exec_module(self, module):
        self._loader.exec_module(module)
        _on_torch_imported(module)

    def __getattr__(self, name):
        return getattr(self._loader, name)


class _TorchWatcher(importlib.abc.MetaPathFinder):
    """Waits for the import of `torch`; costs one string comparison per import until then."""

    def find_spec(self, name, path=None, target=None):
        if name != "torch":
            return None
        sys.meta_path.remove(self)
        for finder in sys.meta_path:
            find = getattr(finder, "find_spec", None)
            spec = find(name, path, target) if find else None
            if spec is not None:
                if spec.loader is not None:
                    spec.loader = _Loader(spec.loader)
                return spec
        return None


def install():
    if "torch" in sys.modules:
        _on_torch_imported(sys.modules["torch"])
    elif not any(isinstance(f, _TorchWatcher) for f in sys.meta_path):
        sys.meta_path.insert(0, _TorchWatcher())


def _on_torch_imported(torch):
    global _torch
    try:
        if _lib() is None:
            return  # the preload is not in this process: nothing to tell
        _torch = torch
        torch.cuda._lazy_call(_attach)
    except Exception as e:
        _notice("import", f"the PyTorch adapter could not attach ({type(e).__name__}: {e})")
    try:
        _watch_mem_pools(torch)
    except Exception as e:
        _notice("pools", f"OOMs inside use_mem_pool are not told apart ({type(e).__name__}: {e})")
    try:
        _watch_graphs(torch)
    except Exception as e:
        _notice("graphs", f"CUDA graphs' pools are not followed ({type(e).__name__}: {e})")


_pools = threading.local()  # the MemPool ids this thread allocates into (use_mem_pool), innermost last


def _active_pool():
    ids = getattr(_pools, "ids", None)
    return ids[-1] if ids else None


def _watch_mem_pools(torch):
    """torch.cuda.use_mem_pool, wrapped so that an OOM report can say which pool the failed
    request was made in (PyTorch has no getter for a thread's pool). The same context manager:
    the original runs inside, exceptions pass through."""
    import contextlib
    memory = torch.cuda.memory
    original = getattr(memory, "use_mem_pool", None)
    if original is None or getattr(original, "_oomscope", False):
        return

    @contextlib.contextmanager
    def use_mem_pool(pool, *args, **kwargs):
        ids = _pools.__dict__.setdefault("ids", [])
        pool_id = getattr(pool, "id", pool)
        ids.append(tuple(pool_id) if isinstance(pool_id, (tuple, list)) else None)
        try:
            with original(pool, *args, **kwargs):
                yield
        finally:
            ids.pop()

    use_mem_pool._oomscope = True
    use_mem_pool.__wrapped__ = original
    use_mem_pool.__doc__ = original.__doc__
    memory.use_mem_pool = use_mem_pool
    if getattr(torch.cuda, "use_mem_pool", None) is original:
        torch.cuda.use_mem_pool = use_mem_pool
    try:
        # torch.optim's submodules are imported lazily by recent PyTorch (2.11): ask for it.
        import importlib
        optimizer = importlib.import_module("torch.optim.optimizer")
        optimizer.register_optimizer_step_post_hook(_on_optimizer_step)
        optimizer.register_optimizer_step_pre_hook(_on_optimizer_step_begins)
    except Exception as e:
        _notice("steps", f"optimizer steps are not recorded ({type(e).__name__}: {e})")


class _Graphs:
    """What the CUDA graphs' captures did: a graph pool whose graphs are gone (dropped, or a
    capture that failed and keeps its pool: pytorch#190348) is told apart from one in use.
    PyTorch has no per-pool liveness: CUDAGraph's capture_begin/capture_end/reset are wrapped
    and the graphs whose capture ended are kept by weak reference (never kept alive here)."""

    def __init__(self):
        import weakref
        self.lock = threading.Lock()
        self.captures = 0
        self.aborted = 0
        self.holding = weakref.WeakSet()  # graphs whose capture ended and that were not reset
        self.handles = set()  # pools given to capture_begin (graph_pool_handle(), another graph's pool())
        self.blind = False

    def lines(self):
        """The protocol lines: none before the first capture."""
        with self.lock:
            if not self.captures or self.blind:
                return []
            graphs = list(self.holding)
            pools = dict.fromkeys(self.handles, 0)
            captures, aborted = self.captures, self.aborted
        for graph in graphs:
            try:
                pool = tuple(int(x) for x in graph.pool())
            except Exception:
                continue
            pools[pool] = pools.get(pool, 0) + 1
        return ([f"graphs captures {captures} aborted {aborted} live {len(graphs)}"] +
                [f"graph_pool {a} {b} {n}" for (a, b), n in sorted(pools.items())])


_graphs = None


def _watch_graphs(torch):
    """Wraps torch.cuda.CUDAGraph's capture_begin, capture_end and reset (torch.cuda.graph,
    make_graphed_callables and torch.compile's CUDA graph trees all go through them): each runs
    the original, exceptions pass through unchanged."""
    global _graphs
    import functools
    cls = getattr(torch.cuda, "CUDAGraph", None)
    if cls is None or getattr(cls.capture_begin, "_oomscope", False):
        return
    state = _Graphs()
    begin, end, reset = cls.capture_begin, cls.capture_end, cls.reset

    @functools.wraps(begin)
    def capture_begin(self, *args, **kwargs):
        result = begin(self, *args, **kwargs)
        try:
            pool = kwargs.get("pool", args[0] if args else None)
            with state.lock:
                state.captures += 1
                if isinstance(pool, (tuple, list)) and len(pool) == 2:
                    state.handles.add((int(pool[0]), int(pool[1])))
        except Exception:
            pass
        return result

    @functools.wraps(end)
    def capture_end(self, *args, **kwargs):
        try:
            result = end(self, *args, **kwargs)
        except BaseException:
            with state.lock:
                state.aborted += 1
            raise
        try:
            with state.lock:
                state.holding.add(self)
        except Exception:
            state.blind = True  # a graph not followed would look gone: say nothing of any
        return result

    @functools.wraps(reset)
    def reset_(self, *args, **kwargs):
        result = reset(self, *args, **kwargs)
        with state.lock:
            state.holding.discard(self)
        return result

    for wrapper in (capture_begin, capture_end, reset_):
        wrapper._oomscope = True
    cls.capture_begin, cls.capture_end, cls.reset = capture_begin, capture_end, reset_
    _graphs = state


def _graph_lines():
    try:
        return _graphs.lines() if _graphs is not None else []
    except Exception:
        return []


def _attach():
    global _history
    torch = _torch
    try:
        backend = torch.cuda.get_allocator_backend()
        observes = backend == "native"
        if observes:
            torch._C._cuda_attach_out_of_memory_observer(_on_oom)
            history = os.environ.get("OOMSCOPE_TORCH_HISTORY", "").strip()
            if history and history != "0":
                # Never stacks="all" here: symbolizing C++ frames at an OOM takes minutes.
                torch.cuda.memory._record_memory_history(stacks="python", max_entries=int(history))
                _history = True
            if os.environ.get("OOMSCOPE_FIT_TRACE"):
                _start_fit_trace(torch, os.environ["OOMSCOPE_FIT_TRACE"], history=_history)
        _lib().oomscope_framework_attach(b"torch", 1 if observes else 0)
    except Exception as e:
        _notice("attach", f"the PyTorch adapter could not attach ({type(e).__name__}: {e})")


_FIT_TRACE_MAX = 4_000_000  # events kept (PyTorch's ring drops the oldest past it)
_FIT_TRACE_ACTIONS = {"alloc": "a", "free_completed": "f", "segment_alloc": "s", "segment_free": "S", "oom": "o",
                      "segment_map": "m", "segment_unmap": "M"}


def _start_fit_trace(torch, path, history):
    """fit's runs: PyTorch records its allocator's actions (only them: no stack is gathered per
    allocation, unless OOMSCOPE_TORCH_HISTORY already asked for stacks) and they are written at
    exit. Its own failure is said and leaves the rest of the adapter attached."""
    try:
        if not history:
            torch.cuda.memory._record_memory_history(context=None, stacks="python", max_entries=_FIT_TRACE_MAX)
        import atexit
        atexit.register(_write_fit_trace, path)
    except Exception as e:
        _notice("fit-trace", f"could not trace the allocator for fit ({type(e).__name__}: {e})")


def _write_fit_trace(path):
    """The caching allocator's actions, one per line: `a|f|s|S|m|M|o DEVICE ADDRESS SIZE STREAM`
    (alloc: the size asked; free_completed; segment_alloc/free; segment_map/unmap of expandable
    segments, whatever turned them on; oom), after a header naming the
    allocator's settings and whether the ring dropped events. Written to a temporary file
    renamed over FILE: fit never reads half a trace."""
    torch = _torch
    try:
        snapshot = torch.cuda.memory._snapshot()
        conf = (os.environ.get("PYTORCH_CUDA_ALLOC_CONF", "") + "," + os.environ.get("PYTORCH_ALLOC_CONF", "")).strip(",")
        count = sum(len(t) for t in snapshot.get("device_traces") or [])
        lines = [f"oomscope-torch-trace 1 events {count} max {_FIT_TRACE_MAX} "
                 f"conf {conf.replace(' ', '') or '-'} backend {torch.cuda.get_allocator_backend()}"]
        for device, trace in enumerate(snapshot.get("device_traces") or []):
            for e in trace:
                code = _FIT_TRACE_ACTIONS.get(e.get("action"))
                if code:
                    lines.append(f"{code} {device} {int(e.get('addr') or 0)} {int(e.get('size') or 0)} "
                                 f"{int(e.get('stream') or 0)}")
        tmp = f"{path}.{os.getpid()}.tmp"
        with open(tmp, "w") as f:
            f.write("\n".join(lines) + "\n")
        os.replace(tmp, path)
    except Exception as e:
        _notice("fit-trace", f"could not write the allocator's trace ({type(e).__name__}: {e})")


def _expandable():
    conf = os.environ.get("PYTORCH_CUDA_ALLOC_CONF", "") + "," + os.environ.get("PYTORCH_ALLOC_CONF", "")
    return "expandable_segments:true" in conf.replace(" ", "").lower()


def _device_line(torch, device, rescan=False):
    s = torch.cuda.memory_stats(device)
    return (f"device {device} allocated {s.get('allocated_bytes.all.current', 0)} "
            f"reserved {s.get('reserved_bytes.all.current', 0)} active {s.get('active_bytes.all.current', 0)} "
            f"inactive_split {s.get('inactive_split_bytes.all.current', 0)} segments {s.get('segment.all.current', 0)} "
            + (f"allocated_peak {s['allocated_bytes.all.peak']} " if "allocated_bytes.all.peak" in s else "")
            + f"expandable {1 if _expandable() else 0}"
            + _torch_roles.line_keys(torch, device, rescan))


def _history_lines(snapshot, device):
    """With OOMSCOPE_TORCH_HISTORY: the Python stack that made each segment (PyTorch records
    it; its bindings release the GIL before allocating, so the preload cannot read it then)."""
    traces = snapshot.get("device_traces") or []
    if device >= len(traces):
        return []
    latest = {}
    for entry in traces[device]:
        if entry.get("action") in ("segment_alloc", "segment_map") and entry.get("frames"):
            latest[entry["addr"]] = entry["frames"]
    return [f"frames {address} " + _frame_fields(frames) for address, frames in latest.items()]


def _frame_fields(frames):
    """PyTorch's recorded frames as the preload's tab-separated file, line, function."""
    fields = []
    for f in frames[:64]:
        fields += [str(f.get("filename", "?")).replace("\t", " ").replace("\n", " "), str(f.get("line", 0)),
                   str(f.get("name", "?")).replace("\t", " ").replace("\n", " ")]
    return "\t".join(fields)


def allocator_state(device):
    """memory_stats() and the snapshot's segments and blocks, in the preload's line protocol."""
    torch = _torch
    lines = [_device_line(torch, device, rescan=True)]
    snapshot = torch.cuda.memory._snapshot()
    lines += _history_lines(snapshot, device)
    for seg in snapshot.get("segments", []):
        if seg.get("device") != device:
            continue
        # The report knows PyTorch's pools as "large" and "small" and grown-in-place segments
        # as "expandable"; anything else a later PyTorch may name is kept, as large.
        kind = "expandable" if seg.get("is_expandable") else seg.get("segment_type")
        kind = kind if kind in ("expandable", "large", "small") else "large"
        base = seg["address"]
        line = f"segment {seg['device']} {base} {seg['total_size']} {seg.get('stream', 0)} {kind}"
        pool = seg.get("segment_pool_id")  # (0, 0) the default pool, (0, n) a MemPool, (n, 0) a graph's
        if isinstance(pool, (tuple, list)) and len(pool) == 2:
            line += f" pool {int(pool[0])} {int(pool[1])}"
        lines.append(line)
        for block in seg.get("blocks", []):
            line = f"block {block['address'] - base} {block['size']} {block['state']}"
            frames = block.get("frames") if block["state"].startswith("active") else None
            if frames:
                line += "\t" + _frame_fields(frames)
            lines.append(line)
    return "\n".join(lines + _graph_lines())


def dump_state():
    """The allocator's view of the current device for a report on request (oomscope.dump()),
    or None when CUDA is not in use or the backend keeps no segments (cudaMallocAsync)."""
    torch = _torch
    try:
        if torch is None or not torch.cuda.is_initialized() or torch.cuda.get_allocator_backend() != "native":
            return None
        return allocator_state(torch.cuda.current_device())
    except Exception as e:
        _notice("dump", f"the report has no PyTorch view ({type(e).__name__}: {e})")
        return None


def _on_oom(device, alloc, device_allocated, device_free):
    try:
        lib = _lib()
        if lib is not None:
            # Past OOMSCOPE_MAX_OOM_REPORTS (a program that catches OOMs on purpose) the episode is
            # only counted: PyTorch's snapshot, the costly part, is not taken.
            state = allocator_state(int(device)) if lib.oomscope_oom_report_wanted() else None
            pool = _active_pool()
            if state is not None and pool and len(pool) == 2:
                state += f"\noom_pool {int(pool[0])} {int(pool[1])}"
            state = state.encode() if state is not None else None
            path = lib.oomscope_framework_oom(b"torch", int(device), int(alloc), state)
            if path:
                _name_report_in_the_exception(os.fsdecode(path))
    except Exception as e:
        _notice("oom", f"could not hand PyTorch's state to the report ({type(e).__name__}: {e})")


_pending = threading.local()  # the report of the OutOfMemoryError this thread is about to raise
_base_init = None


def _name_report_in_the_exception(path):
    """PyTorch raises OutOfMemoryError right after its observers ran, on the same thread: the
    exception gets a note "oomscope report: PATH", shown under its message wherever the
    traceback is printed (the program's stderr, torchrun's error file and failure summary),
    its message itself unchanged. Without notes (Python < 3.11) the line goes to stderr now."""
    global _base_init
    oom = getattr(_torch, "OutOfMemoryError", None)
    if oom is None or not hasattr(BaseException, "add_note"):
        sys.stderr.write(f"oomscope report: {path}\n")
        return
    if _base_init is None:
        _base_init = oom.__init__

        def __init__(self, *args, **kwargs):
            _base_init(self, *args, **kwargs)
            try:
                pending = getattr(_pending, "path", None)
                if pending:
                    _pending.path = None
                    self.add_note(f"oomscope report: {pending}")
            except Exception:
                pass

        oom.__init__ = __init__
    _pending.path = path


def _step_tensors(torch, device, frames_by_address=None):
    """With history: the live blocks grouped by the Python stack of their allocation (the
    leak analysis follows each group across steps), the largest free block, as protocol lines;
    each live block's frames into frames_by_address (address -> protocol fields) when given."""
    snapshot = torch.cuda.memory._snapshot()
    groups = {}
    largest = 0
    for seg in snapshot.get("segments", []):
        if seg.get("device") != device:
            continue
        for block in seg.get("blocks", []):
            state = block.get("state", "")
            if state == "inactive":
                largest = max(largest, block["size"])
                continue
            frames = block.get("frames")
            if not state.startswith("active") or not frames:
                continue
            key = _frame_fields(frames[:24])
            groups[key] = groups.get(key, 0) + block["size"]
            if frames_by_address is not None:
                frames_by_address[block["address"]] = key
    top = sorted(groups.items(), key=lambda kv: -kv[1])[:32]
    return largest, [f"tensors {device} {size}\t{fields}" for fields, size in top]


def step_state():
    """The allocator's counters of the current device (with history, also its tensors by
    Python stack), or None when CUDA is not in use."""
    torch = _torch
    try:
        if torch is None or not torch.cuda.is_initialized() or torch.cuda.get_allocator_backend() != "native":
            return None
        device = torch.cuda.current_device()
        line = _device_line(torch, device)
        census = _torch_retainers.due(torch.cuda.memory_allocated(device))
        frames = {} if census and _history else None
        lines = [line]
        if _history:
            largest, tensors = _step_tensors(torch, device, frames)
            lines = [f"{line} largest_free {largest}"] + tensors
        if census:
            lines += _retainer_lines(torch, device, frames)
        return "\n".join(lines)
    except Exception:
        return None


def _retainer_lines(torch, device, frames):
    """A census of what keeps tensors alive (_torch_retainers); [] when it fails."""
    try:
        return _torch_retainers.census(torch, torch.cuda.memory_allocated(device),
                                       frames.get if frames is not None else None)
    except Exception as e:
        _notice("retainers", f"could not take a census of what keeps tensors alive ({type(e).__name__}: {e})")
        return []


def _on_optimizer_step_begins(optimizer, args, kwargs):
    try:
        _torch_roles.register_optimizer(optimizer)
    except Exception:
        pass


def _on_optimizer_step(optimizer, args, kwargs):
    try:
        _torch_roles.register_optimizer(optimizer)
        lib = _lib()
        if lib is not None:
            state = step_state()
            lib.oomscope_step(state.encode() if state else None)
    except Exception as e:
        _notice("step", f"could not record a step ({type(e).__name__}: {e})")
