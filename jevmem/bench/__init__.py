"""Benchmarks, training and evaluation: what ``jevmem bench ...`` runs and the scripts that fit
the ``local`` System One's models, apart from the product. One module per benchmark (``locomo``,
``users``, ``updates``, ``kafka``, ``serve``, ``scale``, ``chaos`` with ``poison``, ``edges``),
the cost meter (``meter``), the generators of synthetic data (``*_data``), training (``train``,
``train_relations``) and the paired comparison of two runs (``paired``)."""
