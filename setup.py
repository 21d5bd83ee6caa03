"""Build hook for the C accelerators: the record codec, the cleaner's offset map (the rest is in
pyproject.toml) and the TLS record reader. The first two include the headers of logcore/records/:
crc32c.h, bigendian.h, varint.h (the one C varint codec) and record.h (the one C record parser).

Two additions to setuptools' defaults, both for running Spark from a checkout:

- Every build also leaves the compiled extensions next to their sources (as `build_ext
  --inplace` does). Spark starts its Python workers in the driver's working folder and they
  import from it first, so a script started in the checkout after `pip install .` gets the
  checkout's `logcore`; with the codec built there, that copy works.
- An editable install (`pip install -e .`) also puts `connector/` on sys.path with a .pth file.
  setuptools serves this project's packages through an import hook, which `pkgutil.iter_modules`
  does not list; Spark finds `format("seglog")` by listing top-level `pyspark_*` modules that way.
"""
import os

from setuptools import Extension, setup
from setuptools.command.build_ext import build_ext

try:
    from setuptools.command.editable_wheel import editable_wheel
except ImportError:                      # setuptools < 64: no PEP 660 editable wheels
    editable_wheel = None

HERE = os.path.dirname(os.path.abspath(__file__))


class build_ext_also_in_source(build_ext):
    """build_ext that copies the built extensions into the source tree after every build."""

    def run(self):
        super().run()
        if not self.inplace and os.path.isdir(os.path.join(HERE, "logcore")):
            # copy_extensions_to_source resolves each extension's package folder with build_py
            # (logcore/... from the project root), which is where the workers import it from.
            self.copy_extensions_to_source()


cmdclass = {"build_ext": build_ext_also_in_source}


if editable_wheel is not None:
    class _WithConnectorPath:
        """Wraps setuptools' editable strategy and adds a .pth file naming connector/."""

        def __init__(self, strategy, name: str):
            self.strategy = strategy
            self.name = name

        def __enter__(self):
            self.strategy.__enter__()
            return self

        def __exit__(self, *exc):
            return self.strategy.__exit__(*exc)

        def __call__(self, wheel, files, mapping):
            self.strategy(wheel, files, mapping)
            connector = os.path.join(HERE, "connector")
            wheel.writestr(f"__editable__.{self.name}.connector.pth",
                           (connector + "\n").encode("utf-8"))

    class editable_wheel_with_connector(editable_wheel):
        def _select_strategy(self, name, tag, build_lib):
            return _WithConnectorPath(super()._select_strategy(name, tag, build_lib), name)

    cmdclass["editable_wheel"] = editable_wheel_with_connector


HEADERS = [f"logcore/records/{name}.h" for name in ("bigendian", "crc32c", "varint", "record")]

setup(
    cmdclass=cmdclass,
    ext_modules=[
        Extension(
            "logcore.records._fastcodec",
            sources=["logcore/records/_fastcodec.c", "logcore/records/producewire.c",
                     "logcore/records/fetchwire.c"],
            depends=HEADERS + [f"logcore/records/{name}.h" for name in ("producewire", "fetchwire", "wirereader", "wirewriter")],
            extra_compile_args=["-O3"],
        ),
        Extension(
            "logcore.cleaner._offsetmap",
            sources=["logcore/cleaner/_offsetmap.c"],
            depends=HEADERS,
            extra_compile_args=["-O3"],
        ),
        # Needs no OpenSSL headers: it resolves the few functions it calls from the libssl
        # Python's _ssl module loaded (dlopen/dlsym; libdl for glibc before 2.34).
        Extension(
            "logcore.security._tlsrecords",
            sources=["logcore/security/_tlsrecords.c"],
            libraries=["dl"],
            extra_compile_args=["-O2"],
        ),
    ],
)
