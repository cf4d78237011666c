"""ringtrain's release, in a module of its own: code anywhere in the package names it without
importing the package's face (``ringtrain/__init__.py``), which would make a circle."""

__version__ = "0.1.0"
