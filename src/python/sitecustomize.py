"""oomscope's sitecustomize, first on PYTHONPATH under `oomscope run` (or put there by
liboomscope.so in a Python process). It installs the PyTorch adapter, which does nothing
until the program imports torch, then runs the sitecustomize that this one shadows, so that
the program's own keeps working. It never raises into the program: a failure is one line on
stderr. OOMSCOPE_TORCH=0 (or OOMSCOPE_DISABLE=1) leaves the adapter out."""


def _oomscope_off(name, default):
    import os
    value = os.environ.get(name, default).strip().lower()
    return value in ("0", "false", "no", "off")


def _oomscope_package():
    """The oomscope package of this install: beside this file in an install tree (on PYTHONPATH
    already), or, in the wheel (site-packages/oomscope/_native/share/oomscope/python/), the package
    four folders up, loaded from there: the program's interpreter need not be the one the wheel
    was installed into, and another oomscope on its path is not ours."""
    import importlib.util
    import os
    import sys
    here = os.path.dirname(os.path.abspath(__file__))
    if "oomscope" in sys.modules or os.path.isfile(os.path.join(here, "oomscope", "__init__.py")):
        return
    package = os.path.normpath(os.path.join(here, os.pardir, os.pardir, os.pardir, os.pardir))
    init = os.path.join(package, "__init__.py")
    if os.path.basename(os.path.dirname(os.path.dirname(os.path.dirname(here)))) != "_native" or \
            not os.path.isfile(init):
        return
    spec = importlib.util.spec_from_file_location("oomscope", init, submodule_search_locations=[package])
    module = importlib.util.module_from_spec(spec)
    sys.modules["oomscope"] = module
    try:
        spec.loader.exec_module(module)
    except Exception:
        del sys.modules["oomscope"]
        raise


def _oomscope_install():
    import os
    import sys
    disabled = os.environ.get("OOMSCOPE_DISABLE", "").strip().lower() not in ("", "0", "false", "no", "off")
    if disabled or _oomscope_off("OOMSCOPE_TORCH", "1"):
        return
    try:
        _oomscope_package()
        from oomscope import _torch_adapter
        _torch_adapter.install()
    except Exception as e:  # never into the program
        sys.stderr.write(f"oomscope: the PyTorch adapter is off ({type(e).__name__}: {e})\n")


def _oomscope_chain():
    """Runs the next sitecustomize on sys.path, as Python would have without us."""
    import importlib.machinery
    import importlib.util
    import os
    import sys
    here = os.path.dirname(os.path.abspath(__file__))
    rest = [p for p in sys.path if os.path.abspath(p or os.getcwd()) != here]
    try:
        spec = importlib.machinery.PathFinder.find_spec("sitecustomize", rest)
    except Exception:
        return
    if spec is None or spec.loader is None or os.path.abspath(spec.origin or "") == os.path.abspath(__file__):
        return
    module = importlib.util.module_from_spec(spec)
    sys.modules["sitecustomize"] = module
    try:
        spec.loader.exec_module(module)
    except Exception as e:
        # What site.py says when a sitecustomize fails; the program goes on.
        sys.stderr.write(f"Error in sitecustomize; set PYTHONVERBOSE for traceback:\n{type(e).__name__}: {e}\n")


_oomscope_install()
_oomscope_chain()
