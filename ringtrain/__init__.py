"""ringtrain: launch and supervise Horovod ring all-reduce training across GPU hosts."""

__version__ = "0.1.0"
