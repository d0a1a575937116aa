#!/usr/bin/env python3
"""Plots of `kvtier bench study --report DIR`: runs python/kvtier/bench/plots.py
(one implementation for the study runner and the Python engine benchmark),
loaded by path so that no built native module is needed.

Usage: plot_study.py RESULTS_JSON OUT_DIR
"""
import importlib.util
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
spec = importlib.util.spec_from_file_location(
    "kvtier_plots", os.path.join(HERE, "..", "python", "kvtier", "bench", "plots.py"))
plots = importlib.util.module_from_spec(spec)
spec.loader.exec_module(plots)
sys.exit(plots.main())
