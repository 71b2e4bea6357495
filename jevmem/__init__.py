"""The edge of the product: settings, the composition root (:mod:`jevmem.assembly`), the two
deployments (:mod:`jevmem.wiring`, :mod:`jevmem.distributed`), CLI and benchmarks. The only place
that reads the environment; everything below it takes explicit objects."""
