"""W3C Trace Context and Baggage across processes (NeMo Lens' ``nemo.lens.propagation``)::

    from nemo_lens_cpp.propagation import extract_context, inject_context
    headers = inject_context({})              # {"traceparent": "00-...-01"} inside a span
    with extract_context(request.headers):    # the remote parent of spans started meanwhile
        handle(request)
"""

from .spans import Context, extract_context, inject_context

__all__ = ["Context", "extract_context", "inject_context"]
