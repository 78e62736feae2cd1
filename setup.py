"""The one compiled piece: the trace reader's scans (workloads/_trace_scan.c). Optional: without a C compiler the
install goes on and the reader uses its numpy path instead (the same rows, slower on a first read)."""

from setuptools import Extension, setup

setup(ext_modules=[Extension("workloads._trace_scan", ["workloads/_trace_scan.c"], optional=True)])
