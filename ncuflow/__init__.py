"""ncuflow: profile the smallest decisive kernel cell under Nsight Compute and say which wall binds.

The package is layered so that each stage only imports the ones below it:

- ``metrics``   canonical fields and their alias chains (pure data)
- ``launch``    the ``Launch`` record one profiled kernel launch becomes
- ``extract``   ``.ncu-rep`` -> ``Launch`` records (the only module that imports ``ncu_report``)
- ``classify``  the critical-path max model over a ``Launch``
- ``export``    launches -> polars frames -> parquet (the only read-side module that needs polars)
- ``cli``       the click command line, a thin layer over all of the above
"""

__version__ = "0.1.0"
