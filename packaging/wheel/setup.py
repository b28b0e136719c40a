"""The oomscope wheel, built by tools/make_wheel.sh from a staged install tree (never from the
source tree directly): the `oomscope` package with the native tree inside it (oomscope/_native:
bin/oomscope, lib/oomscope/liboomscope.so with the libunwind it loads, the adapter's
sitecustomize). No Python extension is compiled; the tag says what the binaries need:
py3-none-manylinux_2_N_x86_64, N from the newest glibc symbol version they use."""
import os

from setuptools import setup
from setuptools.dist import Distribution
from wheel.bdist_wheel import bdist_wheel

PLATFORM = os.environ["OOMSCOPE_WHEEL_PLATFORM"]


class NativeDistribution(Distribution):
    def has_ext_modules(self):
        return True  # a platform wheel: the binaries inside are x86-64 Linux programs


class NativeWheel(bdist_wheel):
    def get_tag(self):
        return "py3", "none", PLATFORM  # any CPython 3: no extension module, the binaries are programs


setup(
    name="oomscope",
    version=os.environ["OOMSCOPE_VERSION"],
    description="GPU memory profiler and out-of-memory forensics for CUDA programs and PyTorch",
    long_description=open("README.md", encoding="utf-8").read(),
    long_description_content_type="text/markdown",
    license="see the project's repository",
    python_requires=">=3.8",
    packages=["oomscope"],
    package_data={"oomscope": ["_native/*", "_native/*/*", "_native/*/*/*", "_native/*/*/*/*", "_native/*/*/*/*/*"]},
    distclass=NativeDistribution,
    cmdclass={"bdist_wheel": NativeWheel},
    zip_safe=False,
    entry_points={
        "console_scripts": ["oomscope = oomscope.__main__:main"],
        # The name pytest registers it under is the module's, as `oomscope run` (PYTEST_PLUGINS) and
        # `pytest -p oomscope.pytest_plugin` name it: registered once, however many ask.
        "pytest11": ["oomscope.pytest_plugin = oomscope.pytest_plugin"],
    },
    classifiers=[
        "Environment :: GPU :: NVIDIA CUDA",
        "Framework :: Pytest",
        "Operating System :: POSIX :: Linux",
        "Programming Language :: Python :: 3",
        "Topic :: Software Development :: Debuggers",
    ],
)
