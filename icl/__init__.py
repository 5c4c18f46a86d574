"""icl-dynamics: in-context-learning training dynamics, measured against LDL and ZFB theory."""
__version__ = "0.1.0"


def load(path: str):
    """The tables of results/<experiment> for a notebook (an icl.notebook.Experiment)."""
    from icl.notebook import Experiment
    return Experiment(path)
