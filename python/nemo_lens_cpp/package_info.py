"""The package's identity (NeMo Lens' ``nemo.lens.package_info``); the version is the compiled
library's, defined once in ``<nemo/lens/version.hpp>``::

    from nemo_lens_cpp import __version__
"""

from . import _core

__version__ = _core.__version__
VERSION = tuple(int(p) for p in __version__.split(".")) + ("",)
__shortversion__ = __version__
__package_name__ = "nemo_lens_cpp"
__contact_names__ = "lens developers"
__contact_emails__ = ""
# lens is not published anywhere yet: no addresses.
__homepage__ = ""
__repository_url__ = ""
__download_url__ = ""
__description__ = "lens: span-group tracing for Python and its C++ extensions, one pipeline"
__license__ = "Apache2"
__keywords__ = "tracing, opentelemetry, deep learning, distributed training, NeMo, Lens"
