"""The one compiled part: ``loaders.read._jpeg_region`` (libjpeg-turbo's partial JPEG decode).

Everything else is declared in pyproject.toml. The extension is optional: without a C
compiler or libjpeg-turbo's headers (Debian: libjpeg62-turbo-dev) the build skips it and
``loaders.read.decode`` decodes whole images with Pillow instead (same pixels, slower). It
needs the headers only and links no libjpeg: at import it takes the jpeg_* functions of the
libjpeg Pillow decodes with (``loaders.read.region``), hence ``dl`` (dlopen, dlsym, dladdr).
"""

from setuptools import Extension, setup

setup(ext_modules=[Extension("loaders.read._jpeg_region", ["loaders/read/_jpeg_region.c"], libraries=["dl"],
                             extra_compile_args=["-O2"], optional=True)])
