"""Build hook for the C accelerator of the record codec (the rest is in pyproject.toml)."""
from setuptools import Extension, setup

setup(
    ext_modules=[
        Extension(
            "logcore.records._fastcodec",
            sources=["logcore/records/_fastcodec.c"],
            extra_compile_args=["-O3"],
        ),
        Extension(
            "logcore.cleaner._offsetmap",
            sources=["logcore/cleaner/_offsetmap.c"],
            extra_compile_args=["-O3"],
        ),
    ],
)
