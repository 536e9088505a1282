"""A Python training loop whose hot part is a C++ extension, traced as one trace.

    PYTHONPATH=build/python:build/examples/python_extension \
      NEMO_LENS_ENABLED=1 NEMO_LENS_EXPORTER=console NEMO_LENS_SPAN_GROUPS=all \
      python3 examples/python_extension/train.py
"""

import nemo_lens_cpp as lens
import lens_demo

handle = lens.setup_telemetry(lens.NemoLensConfig.from_env(span_group_cls=lens.MegatronSpanGroup))
with lens.span_cm("pretrain"):
    for step in range(3):
        with lens.managed_span(lens.SpanGroup.STEP, "train_step", iteration=step):
            lens_demo.forward(4)  # C++ spans, children of train_step

            def reduce_callback():
                with lens.managed_span(lens.MegatronSpanGroup.DATA_LOADING, "next_batch"):
                    pass  # a Python span inside the C++ all_reduce span

            lens_demo.all_reduce(reduce_callback)
handle.shutdown()
