"""Build hook for the C accelerators: the record codec and the cleaner's offset map (the rest is
in pyproject.toml). Both include logcore/records/crc32c.h and bigendian.h."""
from setuptools import Extension, setup

setup(
    ext_modules=[
        Extension(
            "logcore.records._fastcodec",
            sources=["logcore/records/_fastcodec.c"],
            depends=["logcore/records/bigendian.h", "logcore/records/crc32c.h"],
            extra_compile_args=["-O3"],
        ),
        Extension(
            "logcore.cleaner._offsetmap",
            sources=["logcore/cleaner/_offsetmap.c"],
            depends=["logcore/records/bigendian.h", "logcore/records/crc32c.h"],
            extra_compile_args=["-O3"],
        ),
    ],
)
