"""Build hook for the C accelerators: the record codec and the cleaner's offset map (the rest is
in pyproject.toml). Both include the headers of logcore/records/: crc32c.h, bigendian.h, varint.h (the
one C varint codec) and record.h (the one C record parser)."""
from setuptools import Extension, setup

HEADERS = [f"logcore/records/{name}.h" for name in ("bigendian", "crc32c", "varint", "record")]

setup(
    ext_modules=[
        Extension(
            "logcore.records._fastcodec",
            sources=["logcore/records/_fastcodec.c"],
            depends=HEADERS,
            extra_compile_args=["-O3"],
        ),
        Extension(
            "logcore.cleaner._offsetmap",
            sources=["logcore/cleaner/_offsetmap.c"],
            depends=HEADERS,
            extra_compile_args=["-O3"],
        ),
    ],
)
