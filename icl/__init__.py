"""icl-dynamics: in-context-learning training dynamics, measured against LDL and ZFB theory."""
from icl.jobs.provenance import __version__  # noqa: F401  (defined where the tables' stamps read it)


def load(path: str):
    """The tables of results/<experiment> for a notebook (an icl.notebook.Experiment)."""
    from icl.notebook import Experiment
    return Experiment(path)
