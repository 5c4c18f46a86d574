"""icl-dynamics: in-context-learning training dynamics, measured against LDL and ZFB theory."""
__version__ = "0.1.0"
