"""The example service's per-request work (bench/serving_work.py) under valgrind, for
bench/instr_overhead.sh's `service` work. valgrind cannot run scipy's boost-based distributions
(scipy.stats._boost: their module initialisation fails under valgrind's floating point), which
scikit-learn imports but the service's requests never use (TF-IDF, logistic regression's
predict_proba): an import hook gives those modules as empty stand-ins, so the rest runs unchanged.
Usage: python3 bench/instr_service.py WRAP PASSTHROUGH_SO PASSES (serving_work.py's arguments).
"""
import importlib.abc
import importlib.machinery
import os
import runpy
import sys
import types


class _Stand_in(types.ModuleType):
    def __getattr__(self, name):
        if name.startswith("__"):
            raise AttributeError(name)
        return lambda *args, **kwargs: None


class _Boost(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    def find_spec(self, name, path, target=None):
        if name == "scipy.stats._boost" or name.startswith("scipy.stats._boost."):
            return importlib.machinery.ModuleSpec(name, self, is_package=True)
        return None

    def create_module(self, spec):
        return _Stand_in(spec.name)

    def exec_module(self, module):
        module.__path__ = []


sys.meta_path.insert(0, _Boost())
here = os.path.dirname(os.path.abspath(__file__))
sys.argv = [os.path.join(here, "serving_work.py")] + sys.argv[1:]
runpy.run_path(sys.argv[0], run_name="__main__")
